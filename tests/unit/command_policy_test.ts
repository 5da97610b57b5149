import assert from "node:assert/strict";
import { createBackend, modeOf, PROXY_MODES } from "../../backends/registry.ts";
import { planOnce } from "../../lib/commands/app.ts";
import {
  ANY_ARGUMENTS,
  commandRefusal,
  KPROXY_COMMAND_POLICY,
} from "../../lib/shell/command_policy.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { type ConntrackFlow, deleteLine, listArgs } from "../../lib/core/conntrack.ts";
import { kernelDiff } from "../../lib/commands/diff.ts";
import { DenoExecutor } from "../../lib/shell/exec.ts";
import type { Command } from "../../lib/core/executor.ts";
import { FakeExecutor } from "../support/fake_executor.ts";
import { LINUX_PROGRAMS, MODE_PROGRAMS } from "../../lib/shell/permissions.ts";

const manifests = new URL("../../scripts/manifests", import.meta.url).pathname;

const FLOW: ConntrackFlow = {
  protocol: "UDP",
  origDst: "10.96.0.10",
  origPortDst: 53,
  replySrc: "10.244.1.5",
  replyPortSrc: 5353,
};

function refusal(command: Command): string | undefined {
  return commandRefusal(command, KPROXY_COMMAND_POLICY);
}

Deno.test("KPROXY_COMMAND_POLICY names every program a mode may run", () => {
  for (const program of new Set(Object.values(MODE_PROGRAMS).flat())) {
    assert.ok(Object.hasOwn(KPROXY_COMMAND_POLICY, program), program);
  }
});

Deno.test("commandRefusal() refuses arguments and scripts that name a file or run a program", async (t) => {
  const refused: [string, Command, RegExp][] = [
    ["nft -f FILE", { program: "nft", args: ["-f", "/etc/shadow"] }, /stdin only/],
    ["nft --file FILE", { program: "nft", args: ["--file", "/etc/shadow"] }, /stdin only/],
    ["nft -f - extra", { program: "nft", args: ["-f", "-", "-f", "/x"] }, /stdin only/],
    ["nft -I DIR", { program: "nft", args: ["-I", "/etc", "-f", "-"] }, /not "-I"/],
    ["nft -D", { program: "nft", args: ["-D", "x=1", "-f", "-"] }, /not "-D"/],
    ["nft list with a path", { program: "nft", args: ["list", "table", "/x"] }, /named objects/],
    [
      "nft include at a line start",
      { program: "nft", args: ["-f", "-"], stdin: 'add table ip t\ninclude "/etc/shadow"\n' },
      /include statement/,
    ],
    [
      "nft include after ;",
      { program: "nft", args: ["-f", "-"], stdin: 'add table ip t; include "/etc/shadow"\n' },
      /include statement/,
    ],
    [
      "nft include inside a block",
      { program: "nft", args: ["-f", "-"], stdin: 'table ip t {\n\tinclude "/etc/shadow"\n}\n' },
      /include statement/,
    ],
    [
      "nft include split across stdin chunks",
      { program: "nft", args: ["-f", "-"], stdin: ["add table ip t\n  inc", 'lude "/x"\n'] },
      /include statement/,
    ],
    [
      "iptables-restore FILE",
      { program: "iptables-restore", args: ["--noflush", "/etc/shadow"] },
      /stdin only/,
    ],
    [
      "iptables-restore --modprobe",
      { program: "iptables-nft-restore", args: ["--modprobe=/bin/sh"] },
      /stdin only/,
    ],
    [
      "iptables-restore script with -M",
      {
        program: "iptables-restore",
        args: ["-w", "5", "--noflush"],
        stdin: "*filter\n-A X -M /tmp/x -m foo -j ACCEPT\nCOMMIT\n",
      },
      /--modprobe/,
    ],
    ["iptables-save -f FILE", { program: "iptables-save", args: ["-f", "/etc/x"] }, /not "-f"/],
    ["iptables -M", { program: "ip6tables-legacy", args: ["-M", "/bin/sh", "-L"] }, /"-M"/],
    [
      "iptables bpf object",
      { program: "iptables", args: ["-A", "X", "--object-pinned", "/sys/fs/bpf/x"] },
      /--object-pinned/,
    ],
    ["ip -batch FILE", { program: "ip", args: ["-batch", "/etc/shadow"] }, /dummy interface/],
    [
      "ip netns exec sh",
      { program: "ip", args: ["netns", "exec", "ns", "sh", "-c", "id"] },
      /kproxy's programs only/,
    ],
    [
      "ip netns exec ip netns exec",
      { program: "ip", args: ["netns", "exec", "a", "ip", "netns", "exec", "b", "nft", "-f", "-"] },
      /kproxy's programs only/,
    ],
    [
      "ip netns exec nft -f FILE",
      { program: "ip", args: ["netns", "exec", "ns", "nft", "-f", "/etc/shadow"] },
      /stdin only/,
    ],
    ["ip vrf exec", { program: "ip", args: ["vrf", "exec", "x", "sh"] }, /dummy interface/],
    [
      "ip link xdp object",
      { program: "ip", args: ["link", "set", "eth0", "xdp", "obj", "/x.o"] },
      /dummy interface/,
    ],
    [
      "ip batch line running a program",
      { program: "ip", args: ["-batch", "-"], stdin: "netns exec x sh\n" },
      /not an address change/,
    ],
    ["ipset -file", { program: "ipset", args: ["save", "-file", "/etc/x"] }, /"-file"/],
    ["ipset restore -f", { program: "ipset", args: ["restore", "-f", "/etc/x"] }, /"-f"/],
    [
      "nfacct flush (deletes every unused object)",
      { program: "nfacct", args: ["flush"] },
      /nfacct/,
    ],
    [
      "nfacct restore of a line that is not an object",
      { program: "nfacct", args: ["restore"], stdin: "include /etc/shadow\n" },
      /nfacct object/,
    ],
    ["ipvsadm sync daemon", { program: "ipvsadm", args: ["--start-daemon", "master"] }, /ipvsadm/],
    [
      "ipvsadm -C (clears every virtual server on the host)",
      { program: "ipvsadm", args: ["-C"] },
      /ipvsadm/,
    ],
    [
      "choom on another process",
      { program: "choom", args: ["-n", "-1000", "-p", "1"] },
      /own OOM score/,
    ],
    [
      "choom running a command",
      { program: "choom", args: ["-n", "0", "--", "sh", "-c", "id"] },
      /own OOM score/,
    ],
    [
      "choom out of range",
      { program: "choom", args: ["-n", "-5000", "-p", String(Deno.pid)] },
      /own OOM score/,
    ],
    ["sysctl -p FILE", { program: "sysctl", args: ["-p", "/etc/shadow"] }, /net\.\* key/],
    [
      "sysctl kernel.core_pattern",
      { program: "sysctl", args: ["-w", "kernel.core_pattern=|/bin/sh"] },
      /net\.\* key/,
    ],
    [
      "sysctl key as a path",
      { program: "sysctl", args: ["-w", "net/../kernel/core_pattern=x"] },
      /net\.\* key/,
    ],
    ["sysctl value with a newline", { program: "sysctl", args: ["-w", "net.x=1\n2"] }, /net\.\*/],
    [
      "conntrack unknown option",
      { program: "conntrack", args: ["-E", "-o", "xml"] },
      /"-E -o xml"/,
    ],
    ["conntrack flush", { program: "conntrack", args: ["-F"] }, /not "-F"/],
    ["conntrack load file", { program: "conntrack", args: ["-R", "/etc/x"] }, /not "-R \/etc\/x"/],
    ["conntrack tcp listing", {
      program: "conntrack",
      args: listArgs("IPv4", "UDP").map((a) => a === "udp" ? "tcp" : a),
    }, /not "-L -f ipv4 -p tcp"/],
    [
      "conntrack batch flush",
      { program: "conntrack", args: ["-R", "-"], stdin: "-F\n" },
      /script holds "-F"/,
    ],
    [
      "conntrack batch delete by a looser filter",
      {
        program: "conntrack",
        args: ["-R", "-"],
        stdin: "-D -f ipv4 -p udp --orig-dst 10.96.0.10\n",
      },
      /not a delete of one UDP or SCTP pair/,
    ],
    [
      "conntrack batch with a second command on a line",
      {
        program: "conntrack",
        args: ["-R", "-"],
        stdin: deleteLine("IPv4", FLOW).replace("\n", " -R /etc/x\n"),
      },
      /not a delete/,
    ],
    ["powershell -File", { program: "pwsh", args: ["-File", "C:\\x.ps1"] }, /"-File"/],
    ["an unknown program", { program: "sh", args: ["-c", "id"] }, /no argument policy/],
  ];
  for (const [name, command, pattern] of refused) {
    await t.step(name, () => assert.match(refusal(command) ?? "(allowed)", pattern));
  }
});

Deno.test("commandRefusal() allows the command shapes kproxy uses", () => {
  const allowed: Command[] = [
    { program: "choom", args: ["-n", "-999", "-p", String(Deno.pid)] },
    { program: "nft", args: ["-f", "-"], stdin: "add table ip kproxy\n" },
    { program: "nft", args: ["-c", "-f", "-"], stdin: ["add table ip t\n", "add chain ip t c\n"] },
    { program: "nft", args: ["list", "set", "ip", "kproxy", "canary"] },
    { program: "nft", args: ["list", "table", "ip6", "kproxy"] },
    { program: "nft", args: ["list", "chain", "ip6", "kube-proxy", "kproxy-table-probe"] },
    { program: "nft", args: ["-f", "-"], stdin: 'add rule ip t c comment "include me"\n' },
    { program: "iptables-restore", args: ["-w", "5", "--noflush", "--counters"], stdin: "*nat\n" },
    { program: "ip6tables-legacy-save", args: ["-t", "nat"] },
    { program: "iptables-nft-save", args: [] },
    { program: "iptables", args: ["-w", "5", "-t", "nat", "-C", "PREROUTING", "-j", "KPROXY"] },
    { program: "iptables-nft", args: ["-w", "5", "-t", "nat", "-S", "KUBE-LOAD-BALANCER"] },
    { program: "ip", args: ["link", "del", "kube-ipvs0"] },
    { program: "ip", args: ["link", "add", "kube-ipvs0", "type", "dummy"] },
    { program: "ip", args: ["-o", "address", "show", "dev", "kube-ipvs0"] },
    {
      program: "ip",
      args: ["-batch", "-"],
      stdin:
        "address replace 10.96.0.1/32 dev kube-ipvs0\naddress del fd00::1/128 dev kube-ipvs0\n",
    },
    { program: "ip", args: ["netns", "add", "kproxy-diff-0a1b2c3d"] },
    { program: "ip", args: ["netns", "exec", "kproxy-diff-0a1b2c3d", "nft", "-f", "-"] },
    { program: "ip", args: ["netns", "del", "kproxy-diff-0a1b2c3d"] },
    { program: "ipset", args: ["restore", "-exist"], stdin: "create X hash:ip\n" },
    { program: "ipset", args: ["destroy", "KUBE-CLUSTER-IP"] },
    { program: "ipvsadm", args: ["--set", "900", "120", "300"] },
    { program: "ipvsadm", args: ["--restore"], stdin: "-A -t 10.96.0.1:80 -s rr\n" },
    { program: "sysctl", args: ["-w", "net.bridge.bridge-nf-call-iptables=1"] },
    { program: "sysctl", args: ["-n", "net.ipv4.conf.all.route_localnet"] },
    { program: "nfacct", args: ["list"] },
    { program: "nfacct", args: ["del", "KP-CONN4-ABCDEFGHIJKLMNOP"] },
    {
      program: "nfacct",
      args: ["restore"],
      stdin: "{ pkts = 00000000000000000000, bytes = 00000000000000000000 } = KP-NOEP6-A;\n",
    },
  ];
  for (const command of allowed) assert.equal(refusal(command), undefined, JSON.stringify(command));
});

Deno.test("every command of every Linux backend passes the policy", async (t) => {
  for (const mode of PROXY_MODES.filter((mode) => modeOf(mode).platform === "linux")) {
    await t.step(mode, async () => {
      const config = {
        ...defaultConfig("node-a"),
        proxyMode: mode,
        manifests,
        clusterCIDRs: ["10.244.0.0/16"],
        conntrack: { ...defaultConfig("node-a").conntrack, tcpBeLiberal: true },
      };
      config.ipvs = { ...config.ipvs, tcpTimeoutMs: 900_000, strictARP: true };
      const plans = await planOnce(config);
      const executor = new FakeExecutor();
      const backend = await createBackend(mode, { executor, config });
      const all = [plans.ipv4, plans.ipv6];
      await backend.sync({ plans: all, changed: new Set(), full: true });
      const changed = new Set(plans.ipv4.services.slice(0, 3).map((service) => service.id));
      await backend.sync({ plans: all, changed, full: false });
      await backend.checkDrift?.();
      await kernelDiff({ backend, executor, plans: all, scratchNamespace: "kp-policy-test" })
        .catch(() => {});
      await backend.cleanup();
      assert.ok(executor.calls.length > 0);
      for (const command of executor.calls) {
        assert.equal(refusal(command), undefined, `${command.program} ${command.args.join(" ")}`);
      }
      // Stale conntrack entries are the shell's post-sync step (lib/shell/conntrack_reconciler.ts).
      assert.deepEqual(executor.calls.filter((command) => command.program === "conntrack"), []);
    });
  }
  await t.step("conntrack listings and deletes", () => {
    for (const family of ["IPv4", "IPv6"] as const) {
      for (const protocol of ["UDP", "SCTP"] as const) {
        assert.equal(
          refusal({ program: "conntrack", args: listArgs(family, protocol) }),
          undefined,
        );
      }
    }
    const v6: ConntrackFlow = {
      protocol: "SCTP",
      origDst: "fd00:96::a",
      origPortDst: 3868,
      replySrc: "fd00:244:1::10",
      replyPortSrc: 3868,
    };
    const stdin = [deleteLine("IPv4", FLOW), deleteLine("IPv6", v6)];
    assert.equal(refusal({ program: "conntrack", args: ["-R", "-"], stdin }), undefined);
    assert.equal(
      refusal({
        program: "ip",
        args: ["netns", "exec", "kp-f-ct1a2b-node", "conntrack", "-R", "-"],
        stdin,
      }),
      undefined,
    );
  });
});

Deno.test("DenoExecutor refuses a command its policy refuses without spawning", async () => {
  const executor = new DenoExecutor({ allowedPrograms: ["nft"] });
  await assert.rejects(
    executor.run({ program: "nft", args: ["-f", "/etc/shadow"] }),
    /Cannot run "nft -f \/etc\/shadow": nft reads scripts from stdin only/,
  );
  const permissive = new DenoExecutor({ allowedPrograms: ["sh"], policy: { sh: ANY_ARGUMENTS } });
  assert.equal((await permissive.run({ program: "sh", args: ["-c", "echo ok"] })).stdout, "ok\n");
  assert.ok(LINUX_PROGRAMS.includes("ip"));
});

Deno.test("DenoExecutor checks a one-shot stdin iterator and still writes all of it", async () => {
  const executor = new DenoExecutor({
    allowedPrograms: ["cat"],
    policy: { cat: () => ({ script: (text) => text.includes("evil") ? "evil" : undefined }) },
  });
  function* pieces(last: string) {
    yield "a\n";
    yield last;
  }
  const result = await executor.run({ program: "cat", args: [], stdin: pieces("b\n") });
  assert.equal(result.stdout, "a\nb\n");
  await assert.rejects(executor.run({ program: "cat", args: [], stdin: pieces("evil\n") }), /evil/);
});
