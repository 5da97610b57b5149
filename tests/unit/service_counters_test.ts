import assert from "node:assert/strict";
import { nftCounterSamples, parseCountedSet } from "../../backends/nftables/counters.ts";
import {
  isFamilyNfacct,
  nfacctName,
  nfacctRestoreInput,
  nfacctSamples,
  parseNfacctList,
  serviceNfacctNames,
} from "../../backends/iptables/counters.ts";
import { ipvsSamples, parseIpvsStats } from "../../backends/ipvs/stats.ts";
import type { ServiceCounterSample } from "../../lib/core/service_counters.ts";
import {
  exposeServiceCounters,
  serviceCounterExposition,
  ServiceCounterReader,
} from "../../lib/shell/service_counters.ts";
import { commandRefusal, KPROXY_COMMAND_POLICY } from "../../lib/shell/command_policy.ts";
import { plan, servicePort } from "../golden/nftables/fixtures.ts";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { CountersUnavailableError } from "../../lib/core/backend.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { CommandError } from "../../lib/shell/exec.ts";
import { FakeExecutor } from "../support/fake_executor.ts";
import { ManualSource, startKproxy, waitFor } from "../../scripts/testbed/kproxy.ts";
import { serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";

const web = servicePort("ns1", "web", {
  nodePort: 30080,
  counters: ["connections", "no-endpoints"],
});
const unnamed = servicePort("ns1", "dns", {
  portName: "",
  protocol: "UDP",
  port: 53,
  clusterIPs: ["172.30.0.53"],
  counters: ["connections", "no-endpoints"],
});
const counted = plan([web, unnamed], { counters: true });

Deno.test("parseCountedSet() reads the element counters of a set or a verdict map", () => {
  const meta = { metainfo: { version: "1.0.6" } };
  const set = JSON.stringify({
    nftables: [meta, {
      set: {
        name: "connection-counters",
        elem: [
          {
            elem: {
              val: { concat: ["172.30.0.10", "tcp", 80] },
              counter: { packets: 7, bytes: 1 },
            },
          },
          { elem: { val: { concat: ["fd00::1", "udp", 53] }, counter: { packets: 2, bytes: 1 } } },
          { elem: { val: { concat: ["172.30.0.11", "tcp", 80] } } },
        ],
      },
    }],
  });
  assert.deepEqual([...parseCountedSet(set)], [["172.30.0.10 . tcp . 80", 7], [
    "fd00::1 . udp . 53",
    2,
  ]]);
  const map = JSON.stringify({
    nftables: [meta, {
      map: {
        name: "no-endpoint-nodeports",
        elem: [[
          { elem: { val: { concat: ["tcp", 30080] }, counter: { packets: 3, bytes: 1 } } },
          { goto: { target: "reject-chain" } },
        ]],
      },
    }],
  });
  assert.deepEqual([...parseCountedSet(map)], [["tcp . 30080", 3]]);
  assert.throws(() => parseCountedSet("{}"), SyntaxError);
});

Deno.test("nftCounterSamples() sums each planned counter over the port's keys, 0 without elements", () => {
  const lb = servicePort("ns1", "lb", {
    clusterIPs: ["172.30.0.20"],
    nodePort: 30090,
    loadBalancerIPs: ["1.2.3.4"],
    sourceRanges: ["10.0.0.0/8"],
    counters: ["connections", "no-endpoints", "source-range"],
  });
  const empty = servicePort("ns1", "empty", {
    clusterIPs: ["172.30.0.30"],
    nodePort: 30091,
    internal: { endpoints: [], whenEmpty: "reject", reason: "" },
    external: { endpoints: [], whenEmpty: "reject", reason: "" },
    counters: ["connections", "no-endpoints"],
  });
  const elements = new Map(
    [
      ["connection-counters", new Map([["172.30.0.20 . tcp . 80", 5], ["1.2.3.4 . tcp . 80", 2]])],
      ["nodeport-connection-counters", new Map([["tcp . 30090", 1]])],
      ["no-endpoint-services", new Map([["172.30.0.30 . tcp . 80", 4]])],
      ["no-endpoint-nodeports", new Map([["tcp . 30091", 6]])],
      ["firewall-ips", new Map([["1.2.3.4 . tcp . 80", 9]])],
    ] as const,
  );
  const plans = [plan([lb, empty], { counters: true })];
  const samples = nftCounterSamples(plans, () => elements as never);
  assert.deepEqual(samples.map((s) => [s.service.name, s.counter, s.packets]), [
    ["empty", "connections", 0],
    ["empty", "no-endpoints", 10],
    ["lb", "connections", 8],
    ["lb", "no-endpoints", 0],
    ["lb", "source-range", 9],
  ]);
  assert.deepEqual(
    nftCounterSamples([{ ...plans[0]!, serviceCounters: undefined }], () => elements as never),
    [],
  );
});

Deno.test("nfacctName() is per counter, port and family, within nfacct's 31 characters", () => {
  const names = ["IPv4", "IPv6"].flatMap((family) =>
    (["connections", "no-endpoints", "no-local-endpoints", "source-range"] as const).map((c) =>
      nfacctName(c, web, family as "IPv4" | "IPv6")
    )
  );
  assert.equal(new Set(names).size, 8);
  for (const name of names) assert.ok(name.length <= 31, name);
  assert.ok(isFamilyNfacct(nfacctName("connections", web, "IPv4"), "IPv4"));
  assert.ok(!isFamilyNfacct(nfacctName("connections", web, "IPv6"), "IPv4"));
  assert.ok(!isFamilyNfacct("ct_state_invalid_dropped_pkts", "IPv4"));
});

Deno.test("parseNfacctList() reads nfacct list output, and restore input round-trips", () => {
  const name = nfacctName("connections", web, "IPv4");
  const listed = `{ pkts = 00000000000000000012, bytes = 00000000000000000720 } = ${name};\n` +
    "{ pkts = 00000000000000000001, bytes = 00000000000000000060 } = ct_state_invalid_dropped_pkts;\n";
  const packets = parseNfacctList(listed);
  assert.equal(packets.get(name), 12);
  assert.equal(packets.get("ct_state_invalid_dropped_pkts"), 1);
  assert.deepEqual([...parseNfacctList(nfacctRestoreInput([name]))], [[name, 0]]);
  assert.equal(
    commandRefusal(
      { program: "nfacct", args: ["restore"], stdin: nfacctRestoreInput([name]) },
      KPROXY_COMMAND_POLICY,
    ),
    undefined,
  );
  const samples = nfacctSamples([counted], packets);
  // Every planned counter has a series; one without an object now reads 0.
  assert.deepEqual(samples.map((s) => [s.service.id, s.counter, s.packets]), [
    ["ns1/dns:/UDP", "connections", 0],
    ["ns1/dns:/UDP", "no-endpoints", 0],
    ["ns1/web:http/TCP", "connections", 12],
    ["ns1/web:http/TCP", "no-endpoints", 0],
  ]);
  // Objects exist only where a rule names them: web has endpoints, so no no-endpoints object.
  assert.deepEqual([...serviceNfacctNames(counted, web).keys()], ["connections"]);
});

Deno.test("ipvsSamples() sums the connections of a port's virtual servers (renderer-level: no IPVS here)", () => {
  const listing = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  172.30.0.10:80                      4       20       16     1200     1800
  -> 10.180.0.1:8080                     4       20       16     1200     1800
TCP  192.168.0.2:30080                   3       10        8      600      900
UDP  172.30.0.53:53                      9        9        9      500      600
TCP  [fd00::1]:80                        1        1        1       60       60
`;
  const connections = parseIpvsStats(listing);
  assert.equal(connections.get("TCP/fd00::1/80"), 1);
  const samples = ipvsSamples([counted], connections);
  assert.deepEqual(samples.map((s) => [s.service.id, s.counter, s.packets]), [
    ["ns1/dns:/UDP", "connections", 9],
    ["ns1/web:http/TCP", "connections", 7],
  ]);
  assert.equal(
    commandRefusal(
      { program: "ipvsadm", args: ["-Ln", "--stats", "--exact"] },
      KPROXY_COMMAND_POLICY,
    ),
    undefined,
  );
});

function sample(
  name: string,
  counter: ServiceCounterSample["counter"],
  packets: number,
  portName = "http",
): ServiceCounterSample {
  return {
    service: {
      id: `ns1/${name}:${portName}/TCP`,
      namespace: "ns1",
      name,
      portName,
      port: 80,
      protocol: "TCP",
    },
    family: "IPv4",
    counter,
    packets,
  };
}

Deno.test("exposeServiceCounters() writes both metrics with their labels; the port is its name or number", async () => {
  const text = await exposeServiceCounters([
    sample("dns", "connections", 3, ""),
    sample("web", "connections", 7),
    sample("web", "source-range", 2),
  ]);
  assert.equal(
    text,
    `# HELP kproxy_service_connections_total Connections kproxy's rules sent to an endpoint of the Service port
# TYPE kproxy_service_connections_total counter
kproxy_service_connections_total{namespace="ns1",service="dns",port="80",protocol="TCP",ip_family="IPv4"} 3
kproxy_service_connections_total{namespace="ns1",service="web",port="http",protocol="TCP",ip_family="IPv4"} 7

# HELP kproxy_service_refused_packets_total Packets to the Service port that kproxy's rules refused, by reason
# TYPE kproxy_service_refused_packets_total counter
kproxy_service_refused_packets_total{namespace="ns1",service="web",port="http",protocol="TCP",ip_family="IPv4",reason="source-range"} 2
`,
  );
});

Deno.test("ServiceCounterReader reads the kernel once per interval, in the background, whoever asks", async () => {
  let now = 0;
  let reads = 0;
  let release = () => {};
  const reader = new ServiceCounterReader({
    read: async () => {
      reads++;
      await new Promise<void>((resolve) => (release = resolve));
      return [sample("web", "connections", reads * 60)];
    },
    clock: { now: () => now },
    maxAgeMs: 5_000,
  });
  const concurrent = [reader.samples(), reader.samples(), reader.samples()];
  release();
  await Promise.all(concurrent);
  assert.equal(reads, 1, "the first callers share one read and wait for it");
  now = 4_999;
  await reader.samples();
  assert.equal(reads, 1, "a fresh reading is reused");
  now = 60_000;
  const stale = await reader.samples();
  assert.equal(stale[0]!.packets, 60, "a stale reading is served at once");
  await reader.samples();
  assert.equal(reads, 2, "one background read, however many callers meanwhile");
  release();
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal((await reader.samples())[0]!.packets, 120, "the next caller gets the new reading");
  const [traffic] = reader.traffic();
  assert.equal(traffic!.key, "ns1/web:http/TCP IPv4");
  assert.equal(traffic!.connectionsPerSecond, 1, "60 more connections over 60 s");
});

Deno.test("iptables preflight() says counting needs nfacct when nfacct is missing, and kproxy can run on without it", async () => {
  const missing = new CommandError(
    { program: "nfacct", args: ["list"] },
    undefined,
    'Cannot run "nfacct list": program not found in PATH',
  );
  const config = defaultConfig("node-a");
  const backend = createIptablesBackend({ executor: new FakeExecutor().reply(missing), config });
  await assert.rejects(() => backend.preflight!(), (error: Error) => {
    assert.ok(error instanceof CountersUnavailableError);
    assert.match(error.message, /nfacct is not installed.*--service-counters=false/);
    return true;
  });
  const off = new FakeExecutor().reply(missing);
  await createIptablesBackend({ executor: off, config: { ...config, serviceCounters: false } })
    .preflight!();
  assert.equal(off.calls.length, 0, "nothing runs nfacct with counters off");
});

Deno.test("serviceCounterExposition() shows exactly the last reading: a deleted Service's series are gone", async () => {
  let samples = [sample("web", "connections", 7), sample("dns", "no-endpoints", 2, "")];
  const expose = serviceCounterExposition({ samples: () => Promise.resolve(samples) });
  const first = await expose();
  assert.match(first, /kproxy_service_connections_total\{[^}]*service="web"[^}]*\} 7/);
  assert.match(
    first,
    /kproxy_service_refused_packets_total\{[^}]*service="dns"[^}]*reason="no-endpoints"\} 2/,
  );
  samples = [sample("web", "connections", 9)];
  const second = await expose();
  assert.match(second, /kproxy_service_connections_total\{[^}]*service="web"[^}]*\} 9/);
  assert.doesNotMatch(second, /service="dns"/);
});

Deno.test("serviceCounterExposition() renders a reading once, however many scrapes serve it", async () => {
  let reads = 0;
  const counted = sample("web", "connections", 7);
  const reading = [{
    ...counted,
    get packets() {
      reads++;
      return 7;
    },
  }];
  const expose = serviceCounterExposition({ samples: () => Promise.resolve(reading) });
  const first = await expose();
  assert.equal(await expose(), first);
  assert.equal(
    reads,
    1,
    "at 10k Services a rendering is 20k series: 150-250 ms of the sync thread",
  );
});

Deno.test("serviceCounterExposition() escapes label values as the text format requires", async () => {
  const odd = sample("web", "connections", 1);
  const expose = serviceCounterExposition({
    samples: () =>
      Promise.resolve([{
        ...odd,
        service: { ...odd.service, portName: 'a"b\\c\nd' },
      }]),
  });
  assert.match(await expose(), /port="a\\"b\\\\c\\nd"/);
});

Deno.test("serviceCounterExposition() serves no series, not an error, when the kernel read fails", async () => {
  const expose = serviceCounterExposition({
    samples: () => Promise.reject(new Error("nft failed")),
  });
  const text = await expose();
  assert.doesNotMatch(text, /^kproxy_service/m);
  assert.match(text, /# TYPE kproxy_service_connections_total counter/);
});

Deno.test("main() in iptables mode without nfacct serves its Services without counters", async () => {
  const executor = new FakeExecutor((command) => {
    if (command.program === "nfacct") {
      throw new CommandError(
        command,
        undefined,
        `Cannot run "nfacct ${command.args.join(" ")}": program not found in PATH`,
      );
    }
    if (command.program === "ip") return { code: 1, stdout: "", stderr: "no kube-ipvs0" };
    return { code: 0, stdout: "", stderr: "" };
  });
  const kproxy = await startKproxy({
    source: ManualSource.listed([
      serviceObject({ name: "web", clusterIP: "10.96.0.10" }),
      sliceObject("web", ["10.244.1.10"]),
    ]),
    executor,
    args: ["--proxy-mode=iptables", "--iptables-backend=nft"],
  });
  try {
    await waitFor(
      "the first restore",
      () => executor.calls.some((call) => call.program === "iptables-nft-restore"),
    );
  } finally {
    await kproxy.stop();
  }
  const restores = executor.calls.filter((call) => call.program === "iptables-nft-restore");
  assert.ok(restores.some((call) => /KUBE-SVC-/.test(call.stdin ?? "")), "web is served");
  assert.ok(restores.every((call) => !/nfacct/.test(call.stdin ?? "")), "no rule counts");
});
