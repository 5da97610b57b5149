import { deepStrictEqual as assertEquals, ok, rejects } from "node:assert/strict";
import { createIpvsBackend, IpvsUnavailableError } from "../../backends/ipvs/applier.ts";
import type { SyncRequest } from "../../lib/core/backend.ts";
import type { Command, CommandResult } from "../../lib/core/executor.ts";
import { FakeExecutor } from "../support/fake_executor.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { endpoint, planOf, SCENARIOS, servicePort, testConfig } from "../golden/ipvs/plans.ts";

/** A scripted kernel: answers the listing commands from mutable text. */
class FakeKernel {
  save = "";
  list = "";
  dummy: string | undefined;
  jumpsPresent = false;
  readonly executor: FakeExecutor;

  constructor() {
    this.executor = new FakeExecutor((command) => this.#answer(command));
  }

  #answer(command: Command): CommandResult {
    const line = [command.program, ...command.args].join(" ");
    if (line === "ipvsadm -Sn") return ok0(this.save);
    if (line === "ipvsadm -Ln") return ok0(this.list);
    if (line.startsWith("ip -o address show dev kube-ipvs0")) {
      return this.dummy === undefined
        ? { code: 1, stdout: "", stderr: 'Device "kube-ipvs0" does not exist.' }
        : ok0(this.dummy);
    }
    if (command.args.includes("-C")) {
      return { code: this.jumpsPresent ? 0 : 1, stdout: "", stderr: "" };
    }
    return ok0("");
  }

  /** The commands since the last call, as `program args` lines plus stdin. */
  take(): { line: string; stdin?: string }[] {
    const calls = this.executor.calls.splice(0);
    return calls.map((c) => ({ line: [c.program, ...c.args].join(" "), stdin: c.stdin }));
  }
}

function ok0(stdout: string): CommandResult {
  return { code: 0, stdout, stderr: "" };
}

function request(plan: Plan, full: boolean): SyncRequest {
  return { plans: [plan], changed: new Set(), full };
}

function ipvsRestores(calls: { line: string; stdin?: string }[]): string[] {
  return calls.filter((c) => c.line === "ipvsadm --restore").map((c) => c.stdin ?? "");
}

Deno.test("createIpvsBackend() throws a clear error when IPVS is missing", async () => {
  const executor = new FakeExecutor().reply({
    code: 2,
    stderr: "Can't initialize ipvs: Protocol not available\n",
  });
  const backend = createIpvsBackend({ executor, config: testConfig() });
  await rejects(backend.sync(request(SCENARIOS.clusterip!, true)), (error: Error) => {
    ok(error instanceof IpvsUnavailableError);
    ok(error.message.includes("Protocol not available"));
    return true;
  });
});

Deno.test("createIpvsBackend() rejects an unknown scheduler", () => {
  const config = testConfig();
  config.ipvs.scheduler = "fastest";
  let thrown: unknown;
  try {
    createIpvsBackend({ executor: new FakeExecutor(), config });
  } catch (error) {
    thrown = error;
  }
  ok(thrown instanceof TypeError);
});

Deno.test("IpvsBackend.sync() full: sysctls, timeouts, sets, rules, jumps, VIPs, servers", async () => {
  const kernel = new FakeKernel();
  const config = testConfig();
  config.ipvs.strictARP = true;
  config.ipvs.tcpTimeoutMs = 900_000;
  config.ipvs.tcpFinTimeoutMs = 120_000;
  config.ipvs.udpTimeoutMs = 300_000;
  const backend = createIpvsBackend({ executor: kernel.executor, config });
  const result = await backend.sync(request(SCENARIOS.nodeport!, true));
  assertEquals(result.full, true);
  const lines = kernel.take().map((c) => c.line);
  assertEquals(lines.slice(0, 11), [
    "ipvsadm -Ln",
    "ipset version",
    "sysctl -w net.ipv4.vs.conntrack=1",
    "sysctl -w net.ipv4.vs.expire_nodest_conn=1",
    "sysctl -w net.ipv4.vs.expire_quiescent_template=1",
    "sysctl -w net.ipv4.ip_forward=1",
    "sysctl -w net.ipv4.conf.all.arp_ignore=1",
    "sysctl -w net.ipv4.conf.all.arp_announce=2",
    "ipvsadm --set 900 120 300",
    "ipvsadm -Sn",
    "ip -o address show dev kube-ipvs0",
  ]);
  assertEquals(lines.slice(11, 15), [
    "ip link add kube-ipvs0 type dummy",
    "ipset restore -exist",
    "iptables-restore -w --noflush",
    "iptables -w -t nat -C PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES",
  ]);
  ok(
    lines.includes(
      "iptables -w -t filter -I FORWARD -m comment --comment kubernetes forwarding rules -j KUBE-FORWARD",
    ),
  );
  assertEquals(lines.slice(-2), ["ip -batch -", "ipvsadm --restore"]);
});

Deno.test("IpvsBackend.sync() full reconciles: deletes stale owned servers, keeps foreign ones", async () => {
  const kernel = new FakeKernel();
  kernel.dummy =
    "7: kube-ipvs0    inet 10.96.0.99/32 scope global kube-ipvs0\\       valid_lft forever\n";
  kernel.save = [
    "-A -t 10.96.0.99:443 -s rr", // stale kproxy VIP (bound to kube-ipvs0)
    "-a -t 10.96.0.99:443 -r 10.244.3.3:6443 -m -w 1",
    "-A -t 172.16.0.1:80 -s wlc", // someone else's virtual server
    "-A -t 10.96.0.10:80 -s rr", // ours, one real server missing, one extra
    "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
    "-a -t 10.96.0.10:80 -r 10.244.9.9:8080 -m -w 1",
    "",
  ].join("\n");
  kernel.list = "TCP  10.96.0.10:80 rr\n  -> 10.244.9.9:8080 Masq 0 4 0\n";
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  await backend.sync(request(SCENARIOS.clusterip!, true));
  const calls = kernel.take();
  assertEquals(ipvsRestores(calls), [
    "-D -t 10.96.0.99:443\n" +
    "-a -t 10.96.0.10:80 -r 10.244.2.7:8080 -m -w 1\n" +
    "-e -t 10.96.0.10:80 -r 10.244.9.9:8080 -m -w 0\n",
  ]);
  const batches = calls.filter((c) => c.line === "ip -batch -").map((c) => c.stdin);
  assertEquals(batches, [
    "address replace 10.96.0.10/32 dev kube-ipvs0\n",
    "address del 10.96.0.99/32 dev kube-ipvs0\n",
  ]);
  ok(!calls.some((c) => c.line.startsWith("ip link add")), "interface exists already");
});

Deno.test("IpvsBackend.sync() incremental applies only the diff", async () => {
  const kernel = new FakeKernel();
  kernel.jumpsPresent = true;
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  const web = servicePort();
  const api = servicePort({
    id: "default/api:/TCP",
    name: "api",
    portName: "",
    clusterIPs: ["10.96.0.20"],
    port: 443,
  });
  await backend.sync(request(planOf([web, api]), true));
  kernel.take();

  const moved = servicePort({
    internal: {
      ...web.internal,
      endpoints: [endpoint("10.244.1.5", 8080, true), endpoint("10.244.3.1", 8080)],
    },
  });
  kernel.list = "TCP  10.96.0.10:80 rr\n  -> 10.244.2.7:8080 Masq 0 1 0\n";
  const result = await backend.sync(request(planOf([moved, api]), false));
  assertEquals(result.full, false);
  const calls = kernel.take();
  assertEquals(calls.map((c) => c.line), ["ipvsadm --restore", "ipvsadm -Ln"]);
  assertEquals(
    calls[0]!.stdin,
    "-a -t 10.96.0.10:80 -r 10.244.3.1:8080 -m -w 1\n-e -t 10.96.0.10:80 -r 10.244.2.7:8080 -m -w 0\n",
  );

  // A new service: its ipset entries, its VIP and its virtual server; nothing else.
  const dns = servicePort({
    id: "kube-system/dns:dns/UDP",
    protocol: "UDP",
    port: 53,
    clusterIPs: ["10.96.0.53"],
    internal: { ...web.internal, endpoints: [endpoint("10.244.2.9", 53)] },
    external: { ...web.internal, endpoints: [endpoint("10.244.2.9", 53)] },
  });
  kernel.list = "TCP  10.96.0.10:80 rr\n  -> 10.244.2.7:8080 Masq 0 1 0\n";
  await backend.sync(request(planOf([moved, api, dns]), false));
  const next = kernel.take();
  assertEquals(next.map((c) => c.line), [
    "ipset restore -exist",
    "ip -batch -",
    "ipvsadm --restore",
    "ipvsadm -Ln",
  ]);
  assertEquals(
    next[0]!.stdin,
    "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\nadd KUBE-CLUSTER-IP 10.96.0.53,udp:53\n",
  );
  assertEquals(next[1]!.stdin, "address replace 10.96.0.53/32 dev kube-ipvs0\n");
  assertEquals(
    next[2]!.stdin,
    "-A -u 10.96.0.53:53 -s rr\n-a -u 10.96.0.53:53 -r 10.244.2.9:53 -m -w 1\n",
  );

  // Removing the service deletes its virtual server, then unbinds its VIP.
  await backend.sync(request(planOf([moved, api]), false));
  const removed = kernel.take();
  assertEquals(removed.map((c) => c.line), [
    "ipset restore -exist",
    "ipvsadm --restore",
    "ip -batch -",
    "ipvsadm -Ln",
  ]);
  assertEquals(removed[1]!.stdin, "-D -u 10.96.0.53:53\n");
  assertEquals(removed[2]!.stdin, "address del 10.96.0.53/32 dev kube-ipvs0\n");
});

Deno.test("IpvsBackend.sync() drains a removed TCP real server: weight 0, deleted once idle", async () => {
  const kernel = new FakeKernel();
  kernel.jumpsPresent = true;
  let now = 1_000_000;
  const backend = createIpvsBackend({
    executor: kernel.executor,
    config: testConfig(),
    clock: { now: () => now },
  });
  await backend.sync(request(SCENARIOS.clusterip!, true));
  kernel.take();
  const gone = planOf([
    servicePort({
      internal: {
        endpoints: [endpoint("10.244.1.5", 8080, true)],
        whenEmpty: "reject",
        reason: "",
      },
    }),
  ]);

  kernel.list =
    "TCP  10.96.0.10:80 rr\n  -> 10.244.1.5:8080 Masq 1 0 0\n  -> 10.244.2.7:8080 Masq 0 2 5\n";
  await backend.sync(request(gone, false));
  assertEquals(ipvsRestores(kernel.take()), ["-e -t 10.96.0.10:80 -r 10.244.2.7:8080 -m -w 0\n"]);

  now += 30_000;
  kernel.list =
    "TCP  10.96.0.10:80 rr\n  -> 10.244.1.5:8080 Masq 1 0 0\n  -> 10.244.2.7:8080 Masq 0 0 1\n";
  await backend.sync(request(gone, false));
  assertEquals(ipvsRestores(kernel.take()), [], "still one inactive connection");

  now += 30_000;
  kernel.list =
    "TCP  10.96.0.10:80 rr\n  -> 10.244.1.5:8080 Masq 1 0 0\n  -> 10.244.2.7:8080 Masq 0 0 0\n";
  await backend.sync(request(gone, false));
  assertEquals(ipvsRestores(kernel.take()), ["-d -t 10.96.0.10:80 -r 10.244.2.7:8080\n"]);

  await backend.sync(request(gone, false));
  assertEquals(kernel.take().map((c) => c.line), [], "nothing left to drain or change");
});

Deno.test("IpvsBackend.sync() deletes a draining real server after the timeout", async () => {
  const kernel = new FakeKernel();
  kernel.jumpsPresent = true;
  let now = 0;
  const backend = createIpvsBackend({
    executor: kernel.executor,
    config: testConfig(),
    clock: { now: () => now },
    drainTimeoutMs: 60_000,
  });
  await backend.sync(request(SCENARIOS.clusterip!, true));
  const gone = planOf([
    servicePort({
      internal: {
        endpoints: [endpoint("10.244.1.5", 8080, true)],
        whenEmpty: "reject",
        reason: "",
      },
    }),
  ]);
  kernel.list = "TCP  10.96.0.10:80 rr\n  -> 10.244.2.7:8080 Masq 0 9 9\n";
  await backend.sync(request(gone, false));
  kernel.take();
  now = 59_999;
  await backend.sync(request(gone, false));
  assertEquals(ipvsRestores(kernel.take()), []);
  now = 60_000;
  await backend.sync(request(gone, false));
  assertEquals(ipvsRestores(kernel.take()), ["-d -t 10.96.0.10:80 -r 10.244.2.7:8080\n"]);
});

Deno.test("IpvsBackend.sync() deletes removed UDP real servers at once and revives draining ones", async () => {
  const kernel = new FakeKernel();
  kernel.jumpsPresent = true;
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  const udp = servicePort({ id: "kube-system/dns:dns/UDP", protocol: "UDP", port: 53 });
  await backend.sync(request(planOf([udp, servicePort()]), true));
  kernel.take();
  const one = {
    endpoints: [endpoint("10.244.1.5", 8080, true)],
    whenEmpty: "reject" as const,
    reason: "",
  };
  kernel.list = "TCP  10.96.0.10:80 rr\n  -> 10.244.2.7:8080 Masq 0 1 0\n";
  await backend.sync(
    request(planOf([{ ...udp, internal: one }, { ...servicePort(), internal: one }]), false),
  );
  assertEquals(ipvsRestores(kernel.take()), [
    "-e -t 10.96.0.10:80 -r 10.244.2.7:8080 -m -w 0\n-d -u 10.96.0.10:53 -r 10.244.2.7:8080\n",
  ]);
  await backend.sync(request(planOf([{ ...udp, internal: one }, servicePort()]), false));
  assertEquals(ipvsRestores(kernel.take()), ["-e -t 10.96.0.10:80 -r 10.244.2.7:8080 -m -w 1\n"]);
});

Deno.test("IpvsBackend.sync() after a failed apply does a full resync", async () => {
  const kernel = new FakeKernel();
  kernel.jumpsPresent = true;
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  await backend.sync(request(SCENARIOS.clusterip!, true));
  kernel.take();
  kernel.executor.reply({ code: 1, stderr: "Memory allocation problem" });
  const changed = planOf([servicePort({ port: 8080 })]);
  await rejects(backend.sync(request(changed, false)));
  kernel.take();
  const result = await backend.sync(request(changed, false));
  assertEquals(result.full, true);
  ok(kernel.take().some((c) => c.line === "ipvsadm -Sn"));
});

Deno.test("IpvsBackend.checkDrift() reports a virtual server removed behind its back", async () => {
  const kernel = new FakeKernel();
  kernel.jumpsPresent = true;
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  await backend.sync(request(SCENARIOS.clusterip!, true));
  kernel.save = "-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1\n" +
    "-a -t 10.96.0.10:80 -r 10.244.2.7:8080 -m -w 1\n";
  kernel.dummy = "7: kube-ipvs0    inet 10.96.0.10/32 scope global kube-ipvs0\n";
  assertEquals(await backend.checkDrift!(), false);
  kernel.save = "-A -t 10.96.0.10:80 -s rr\n";
  assertEquals(await backend.checkDrift!(), true);
});

/** `ipvsadm -Sn` of a node where keepalived's virtual server sits beside kproxy's. */
const FOREIGN_AND_OWN = [
  "-A -t 192.0.2.10:80 -s wlc", // keepalived
  "-a -t 192.0.2.10:80 -r 192.0.2.21:80 -g -w 1",
  "-A -t 10.96.0.10:80 -s rr", // kproxy's, its address bound to kube-ipvs0
  "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
  "",
].join("\n");

Deno.test("IpvsBackend.cleanup() deletes only the virtual servers bound to kube-ipvs0, never -C", async () => {
  const kernel = new FakeKernel();
  kernel.save = FOREIGN_AND_OWN;
  kernel.dummy = "7: kube-ipvs0    inet 10.96.0.10/32 scope global kube-ipvs0\n";
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  await backend.cleanup();
  const calls = kernel.take();
  ok(!calls.some((c) => c.line.startsWith("ipvsadm -C")), "no ipvsadm -C");
  assertEquals(ipvsRestores(calls), ["-D -t 10.96.0.10:80\n"]);
  ok(calls.some((c) => c.line === "ip link del kube-ipvs0"));
});

Deno.test("IpvsBackend.cleanup() without kube-ipvs0 changes no IPVS state and no interface", async () => {
  const kernel = new FakeKernel();
  kernel.save = FOREIGN_AND_OWN;
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  await backend.cleanup();
  const lines = kernel.take().map((c) => c.line);
  ok(!lines.some((line) => line.startsWith("ipvsadm")), lines.join("\n"));
  ok(!lines.some((line) => line.startsWith("ip link")), lines.join("\n"));
});

Deno.test("IpvsBackend.cleanup() destroys only the mode's ipsets, after its iptables chains", async () => {
  const kernel = new FakeKernel();
  kernel.executor.setHandler((command) => {
    const line = [command.program, ...command.args].join(" ");
    if (line === "ipset list -n") {
      return ok0("KUBE-CLUSTER-IP\nKUBE-6-LOOP-BACK\nKUBE6-NODE-PORT-TCP\ncali40masq-ipam-pools\n");
    }
    if (line === "iptables-nft-save") {
      return ok0(
        "*nat\n:POSTROUTING ACCEPT [0:0]\n:KUBE-POSTROUTING - [0:0]\n" +
          '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING\n' +
          "COMMIT\n",
      );
    }
    if (line.startsWith("ip -o address")) return { code: 1, stdout: "", stderr: "no device" };
    return ok0("");
  });
  const backend = createIpvsBackend({ executor: kernel.executor, config: testConfig() });
  await backend.cleanup();
  const lines = kernel.take().map((c) => c.line);
  const destroyed = lines.filter((line) => line.startsWith("ipset destroy"));
  assertEquals(destroyed, [
    "ipset destroy KUBE-CLUSTER-IP",
    "ipset destroy KUBE-6-LOOP-BACK",
    "ipset destroy KUBE6-NODE-PORT-TCP",
  ]);
  ok(lines.indexOf("iptables-nft-restore -w 5 --noflush") < lines.indexOf(destroyed[0]!));
});

Deno.test("IpvsBackend.preflight() names what the node lacks in one line", async (t) => {
  const cases: [string, (command: Command) => CommandResult, RegExp][] = [
    [
      "no IPVS in the kernel",
      (command) =>
        command.program === "ipvsadm"
          ? {
            code: 2,
            stdout: "",
            stderr: "Can't initialize ipvs: Protocol not available\n" +
              "Are you sure that IP Virtual Server is built in the kernel or as module?\n",
          }
          : ok0(""),
      /^Cannot use the ipvs proxy mode: the kernel has no IPVS support \(ipvsadm -Ln: Can't initialize ipvs: Protocol not available\)$/,
    ],
    [
      "no ipvsadm",
      (command) => {
        if (command.program === "ipvsadm") {
          throw new Error('Cannot run "ipvsadm": program not found in PATH');
        }
        return ok0("");
      },
      /^Cannot use the ipvs proxy mode: ipvsadm is not available \(program not found in PATH\)$/,
    ],
  ];
  for (const [name, answer, message] of cases) {
    await t.step(name, async () => {
      const executor = new FakeExecutor(answer);
      const backend = createIpvsBackend({ executor, config: testConfig() });
      await rejects(backend.preflight!(), (error: Error) => {
        ok(error instanceof IpvsUnavailableError);
        ok(message.test(error.message), error.message);
        return true;
      });
    });
  }
  const backend = createIpvsBackend({ executor: new FakeExecutor(), config: testConfig() });
  await backend.preflight!();
});
