import assert from "node:assert/strict";
import {
  conntrackCommand,
  flushStaleUdp,
  staleUdpEntries,
  type StaleUdpEntry,
} from "../../lib/conntrack.ts";
import { FakeExecutor } from "../../lib/exec.ts";
import type { Plan, ServicePortPlan } from "../../lib/plan.ts";
import { endpoint, plan, servicePort } from "../golden/nftables/fixtures.ts";

const a = endpoint("10.180.0.1");
const b = endpoint("10.180.0.2");

function udp(overrides: Partial<ServicePortPlan> = {}): ServicePortPlan {
  return servicePort("kube-system", "dns", {
    protocol: "UDP",
    portName: "dns",
    port: 53,
    clusterIPs: ["172.30.0.53"],
    ...overrides,
  });
}

function traffic(...endpoints: typeof a[]) {
  return { endpoints, whenEmpty: "reject" as const, reason: "" };
}

function stale(
  before: ServicePortPlan[],
  after: ServicePortPlan[],
  changed?: string[],
): StaleUdpEntry[] {
  const ids = changed ?? [...new Set([...before, ...after].map((s) => s.id))];
  return staleUdpEntries(plan(before), plan(after), new Set(ids));
}

Deno.test("staleUdpEntries() decides what each change leaves stale", async (t) => {
  const both = udp({ internal: traffic(a, b), external: traffic(a, b) });
  const onlyA = udp({ internal: traffic(a), external: traffic(a) });
  const none = udp({ internal: traffic(), external: traffic() });
  const cases: [string, ServicePortPlan[], ServicePortPlan[], StaleUdpEntry[]][] = [
    ["endpoint removed from a cluster IP", [both], [onlyA], [
      { kind: "endpoint", family: "IPv4", origDst: "172.30.0.53", dstNat: "10.180.0.2" },
    ]],
    ["endpoint added", [onlyA], [both], []],
    ["service gets its first endpoint", [none], [onlyA], [
      { kind: "service", family: "IPv4", origDst: "172.30.0.53", origPortDst: 53 },
    ]],
    ["new service with endpoints", [], [onlyA], [
      { kind: "service", family: "IPv4", origDst: "172.30.0.53", origPortDst: 53 },
    ]],
    ["service removed", [onlyA], [], [
      { kind: "endpoint", family: "IPv4", origDst: "172.30.0.53", dstNat: "10.180.0.1" },
      { kind: "service", family: "IPv4", origDst: "172.30.0.53", origPortDst: 53 },
    ]],
    [
      "load-balancer IP and node port removed, endpoints kept",
      [udp({
        internal: traffic(a),
        external: traffic(a),
        loadBalancerIPs: ["1.2.3.4"],
        nodePort: 30053,
      })],
      [udp({ internal: traffic(a), external: traffic(a) })],
      [
        { kind: "service", family: "IPv4", origDst: "1.2.3.4", origPortDst: 53 },
        { kind: "service", family: "IPv4", origPortDst: 30053 },
      ],
    ],
    ["TCP is never flushed", [servicePort("ns", "tcp")], [], []],
    [
      "external addresses and node port",
      [udp({
        internal: traffic(a, b),
        external: traffic(a, b),
        loadBalancerIPs: ["1.2.3.4"],
        nodePort: 30053,
      })],
      [udp({
        internal: traffic(a, b),
        external: traffic(a),
        loadBalancerIPs: ["1.2.3.4"],
        nodePort: 30053,
      })],
      [
        { kind: "endpoint", family: "IPv4", origDst: "1.2.3.4", dstNat: "10.180.0.2" },
        { kind: "endpoint", family: "IPv4", origPortDst: 30053, dstNat: "10.180.0.2" },
      ],
    ],
    [
      "node port gets its first endpoint",
      [udp({ internal: traffic(a), external: traffic(), nodePort: 30053 })],
      [udp({ internal: traffic(a), external: traffic(a), nodePort: 30053 })],
      [{ kind: "service", family: "IPv4", origPortDst: 30053 }],
    ],
  ];
  for (const [name, before, after, expected] of cases) {
    await t.step(name, () => assert.deepEqual(stale(before, after), expected));
  }
});

Deno.test("staleUdpEntries() looks only at changed ids", () => {
  const before = udp({ internal: traffic(a, b), external: traffic(a, b) });
  const after = udp({ internal: traffic(a), external: traffic(a) });
  assert.deepEqual(stale([before], [after], []), []);
});

Deno.test("conntrackCommand() builds conntrack -D arguments", () => {
  assert.deepEqual(
    conntrackCommand({
      kind: "endpoint",
      family: "IPv4",
      origDst: "172.30.0.53",
      dstNat: "10.180.0.2",
    }).args,
    ["-D", "-p", "udp", "--orig-dst", "172.30.0.53", "--dst-nat", "10.180.0.2"],
  );
  assert.deepEqual(
    conntrackCommand({ kind: "service", family: "IPv6", origDst: "fd00::1", origPortDst: 53 }).args,
    ["-D", "-p", "udp", "-f", "ipv6", "--orig-dst", "fd00::1", "--orig-port-dst", "53"],
  );
  assert.deepEqual(
    conntrackCommand({ kind: "service", family: "IPv4", origPortDst: 30053 }).args,
    ["-D", "-p", "udp", "--orig-port-dst", "30053"],
  );
});

Deno.test("flushStaleUdp() treats '0 flow entries' as success and keeps going after failures", async () => {
  const executor = new FakeExecutor().reply(
    { code: 1, stderr: "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted." },
    { code: 1, stderr: "Operation not permitted" },
    new Error("spawn failed"),
    { code: 0 },
  );
  const entry: StaleUdpEntry = { kind: "service", family: "IPv4", origPortDst: 30053 };
  const result = await flushStaleUdp(executor, [entry, entry, entry, entry]);
  assert.deepEqual(result, { succeeded: 2, failed: 2 });
  assert.equal(executor.calls.length, 4);
  assert.ok(executor.calls.every((c) => c.program === "conntrack"));
});

Deno.test("staleUdpEntries() uses the plan family", () => {
  const six: Plan = plan([
    udp({
      clusterIPs: ["fd00:10:96::53"],
      internal: traffic(endpoint("fd00:10::1")),
      external: traffic(endpoint("fd00:10::1")),
    }),
  ], { family: "IPv6" });
  const entries = staleUdpEntries(
    plan([], { family: "IPv6" }),
    six,
    new Set([six.services[0]!.id]),
  );
  assert.deepEqual(entries, [{
    kind: "service",
    family: "IPv6",
    origDst: "fd00:10:96::53",
    origPortDst: 53,
  }]);
});
