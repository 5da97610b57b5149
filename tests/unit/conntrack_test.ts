import assert from "node:assert/strict";
import {
  type ConntrackFlow,
  deleteLine,
  listArgs,
  mayLeaveStaleFlows,
  parseConntrackLine,
  ServiceFrontends,
} from "../../lib/core/conntrack.ts";
import type { Protocol } from "../../lib/core/model.ts";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { endpoint, plan, servicePort } from "../golden/nftables/fixtures.ts";

// The addresses of upstream's TestCleanStaleEntries (pkg/proxy/conntrack/cleanup_test.go).
const CLUSTER_IP = "172.30.1.1";
const EXTERNAL_IP = "192.168.99.100";
const LOAD_BALANCER_IP = "1.2.3.4";
const SERVING = "10.240.0.4";
const NOT_SERVING = "10.240.1.5";
const DELETED = "10.240.2.6";
const OLD_PORT = 8080;
const ENDPOINT_PORT = 9090;
const SERVICE_PORT = 8000;
const NODE_PORT = 32000;
const NON_SERVICE_PORT = 3000;

function at(ip: string, port = ENDPOINT_PORT): PlanEndpoint {
  return endpoint(ip, { port });
}

/** A port of upstream's test Service: every frontend, one serving and one non-serving endpoint. */
function cleanupTest(
  protocol: Protocol,
  overrides: Partial<ServicePortPlan> = {},
): ServicePortPlan {
  const endpoints = [at(SERVING)];
  return servicePort("test", "cleanup-test", {
    protocol,
    portName: protocol.toLowerCase(),
    port: SERVICE_PORT,
    clusterIPs: [CLUSTER_IP],
    externalIPs: [EXTERNAL_IP],
    loadBalancerIPs: [LOAD_BALANCER_IP],
    nodePort: NODE_PORT,
    internal: { endpoints, whenEmpty: "reject", reason: "" },
    external: { endpoints, whenEmpty: "reject", reason: "" },
    servingEndpoints: endpoints,
    ...overrides,
  });
}

function flow(
  protocol: "UDP" | "SCTP",
  orig: [string, number],
  reply: [string, number],
): ConntrackFlow {
  return {
    protocol,
    origDst: orig[0],
    origPortDst: orig[1],
    replySrc: reply[0],
    replyPortSrc: reply[1],
  };
}

Deno.test("parseConntrackLine() reads conntrack -L lines of UDP and SCTP entries", async (t) => {
  const cases: [string, string, ConntrackFlow | undefined][] = [
    [
      "a DNATed UDP entry",
      "udp      17 29 src=10.201.0.2 dst=10.96.0.10 sport=40053 dport=53 [UNREPLIED] " +
      "src=10.244.1.10 dst=10.201.0.1 sport=8080 dport=40053 mark=0 use=1",
      flow("UDP", ["10.96.0.10", 53], ["10.244.1.10", 8080]),
    ],
    [
      "an assured entry with a zone",
      "udp      17 117 src=10.0.0.2 dst=10.0.0.9 sport=5 dport=6 src=10.0.0.9 dst=10.0.0.2 " +
      "sport=6 dport=5 [ASSURED] mark=0 zone=3 use=1",
      flow("UDP", ["10.0.0.9", 6], ["10.0.0.9", 6]),
    ],
    [
      "an SCTP entry with its state",
      "sctp     132 99 ESTABLISHED src=10.0.0.3 dst=10.96.0.10 sport=1001 dport=53 [UNREPLIED] " +
      "src=10.244.0.6 dst=10.0.0.3 sport=53 dport=1001 mark=0 use=1",
      flow("SCTP", ["10.96.0.10", 53], ["10.244.0.6", 53]),
    ],
    [
      "IPv6",
      "udp      17 99 src=fd00::2 dst=fd00:96::a sport=1001 dport=53 [UNREPLIED] " +
      "src=fd00:244::6 dst=fd00::2 sport=53 dport=1001 mark=0 use=1",
      flow("UDP", ["fd00:96::a", 53], ["fd00:244::6", 53]),
    ],
    [
      "TCP",
      "tcp      6 431999 ESTABLISHED src=10.0.0.2 dst=10.96.0.1 sport=1 dport=443 " +
      "src=10.244.0.1 dst=10.0.0.2 sport=6443 dport=1 [ASSURED] mark=0 use=1",
      undefined,
    ],
    [
      "the summary",
      "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.",
      undefined,
    ],
    ["an empty line", "", undefined],
    [
      "no reply tuple",
      "udp      17 29 src=10.0.0.2 dst=10.96.0.10 sport=1 dport=53 mark=0 use=1",
      undefined,
    ],
    [
      "a port out of range",
      "udp      17 29 src=10.0.0.2 dst=10.96.0.10 sport=1 dport=53 src=10.244.0.5 dst=10.0.0.2 " +
      "sport=65536 dport=1",
      undefined,
    ],
    [
      "a port that is not a number",
      "udp      17 29 src=10.0.0.2 dst=10.96.0.10 sport=1 dport=5x src=10.244.0.5 dst=10.0.0.2 " +
      "sport=53 dport=1",
      undefined,
    ],
  ];
  for (const [name, line, expected] of cases) {
    await t.step(name, () => assert.deepEqual(parseConntrackLine(line), expected));
  }
});

Deno.test("ServiceFrontends.isStale() decides as upstream's CleanStaleEntries", async (t) => {
  const frontends = new ServiceFrontends(
    plan([cleanupTest("TCP"), cleanupTest("UDP"), cleanupTest("SCTP")]),
  );
  assert.deepEqual([...frontends.protocols].sort(), ["SCTP", "UDP"]);
  const cases: [string, ConntrackFlow, boolean][] = [];
  for (const protocol of ["UDP", "SCTP"] as const) {
    for (const ip of [CLUSTER_IP, LOAD_BALANCER_IP, EXTERNAL_IP]) {
      const to = (port: number): [string, number] => [ip, port];
      cases.push(
        [
          `${protocol} ${ip}: a serving endpoint`,
          flow(protocol, to(SERVICE_PORT), [SERVING, ENDPOINT_PORT]),
          false,
        ],
        [
          `${protocol} ${ip}: the endpoint's old port`,
          flow(protocol, to(SERVICE_PORT), [SERVING, OLD_PORT]),
          true,
        ],
        [
          `${protocol} ${ip}: a non-serving endpoint`,
          flow(protocol, to(SERVICE_PORT), [NOT_SERVING, ENDPOINT_PORT]),
          true,
        ],
        [
          `${protocol} ${ip}: a deleted endpoint`,
          flow(protocol, to(SERVICE_PORT), [DELETED, ENDPOINT_PORT]),
          true,
        ],
        [
          `${protocol} ${ip}: not NATed (from before the Service)`,
          flow(protocol, to(SERVICE_PORT), to(SERVICE_PORT)),
          true,
        ],
        [
          `${protocol} ${ip}: another port`,
          flow(protocol, to(NON_SERVICE_PORT), [DELETED, ENDPOINT_PORT]),
          false,
        ],
        [
          `${protocol} ${ip}: another port, not NATed`,
          flow(protocol, to(NON_SERVICE_PORT), to(NON_SERVICE_PORT)),
          false,
        ],
      );
    }
    for (const ip of ["10.0.0.1", "192.168.0.10"]) {
      cases.push(
        [
          `${protocol} node port on ${ip}: serving`,
          flow(protocol, [ip, NODE_PORT], [SERVING, ENDPOINT_PORT]),
          false,
        ],
        [
          `${protocol} node port on ${ip}: old port`,
          flow(protocol, [ip, NODE_PORT], [SERVING, OLD_PORT]),
          true,
        ],
        [
          `${protocol} node port on ${ip}: deleted`,
          flow(protocol, [ip, NODE_PORT], [DELETED, ENDPOINT_PORT]),
          true,
        ],
        [
          `${protocol} node port on ${ip}: not NATed`,
          flow(protocol, [ip, NODE_PORT], [ip, NODE_PORT]),
          true,
        ],
      );
    }
  }
  cases.push([
    "an address that is no frontend",
    flow("UDP", ["10.9.9.9", 53], [DELETED, 53]),
    false,
  ]);
  for (const [name, entry, stale] of cases) {
    await t.step(name, () => assert.equal(frontends.isStale(entry), stale));
  }
});

Deno.test("ServiceFrontends leaves Services without serving endpoints alone", () => {
  const empty = cleanupTest("UDP", { servingEndpoints: [] });
  const frontends = new ServiceFrontends(plan([empty]));
  assert.equal(frontends.protocols.size, 0, "nothing to list");
  assert.equal(frontends.isStale(flow("UDP", [CLUSTER_IP, SERVICE_PORT], [DELETED, 1])), false);
  assert.equal(frontends.isStale(flow("UDP", ["10.0.0.1", NODE_PORT], [DELETED, 1])), false);
  // A terminating endpoint that still serves keeps its flows; one that stopped serving does not.
  const terminating = { ...at(NOT_SERVING), ready: false, terminating: true };
  const draining = new ServiceFrontends(plan([
    cleanupTest("UDP", { servingEndpoints: [at(SERVING), terminating] }),
  ]));
  assert.equal(
    draining.isStale(flow("UDP", [CLUSTER_IP, SERVICE_PORT], [NOT_SERVING, ENDPOINT_PORT])),
    false,
  );
});

Deno.test("ServiceFrontends judges a flow to a Service address by that Service only", () => {
  // dns listens on 10.96.0.10:32000, which is also web's node port.
  const dns = servicePort("kube-system", "dns", {
    protocol: "UDP",
    port: NODE_PORT,
    clusterIPs: ["10.96.0.10"],
    servingEndpoints: [at("10.244.0.53", 53)],
  });
  const idle = servicePort("kube-system", "idle", {
    protocol: "UDP",
    port: NODE_PORT,
    clusterIPs: ["10.96.0.11"],
    servingEndpoints: [],
  });
  const web = cleanupTest("UDP");
  const frontends = new ServiceFrontends(plan([dns, idle, web]));
  assert.equal(
    frontends.isStale(flow("UDP", ["10.96.0.10", NODE_PORT], ["10.244.0.53", 53])),
    false,
  );
  assert.equal(
    frontends.isStale(flow("UDP", ["10.96.0.11", NODE_PORT], ["10.244.0.99", 53])),
    false,
  );
  assert.equal(frontends.isStale(flow("UDP", ["10.0.0.1", NODE_PORT], ["10.244.0.53", 53])), true);
  // Any address on a node port, but only an address: nothing else reaches a delete line.
  assert.equal(
    frontends.isStale(flow("UDP", ["10.0.0.1;x", NODE_PORT], ["10.244.0.53", 53])),
    false,
  );
});

Deno.test("ServiceFrontends joins the endpoints of Services that share an external IP", () => {
  const one = servicePort("default", "one", {
    protocol: "UDP",
    port: 53,
    clusterIPs: ["10.96.0.1"],
    externalIPs: ["192.0.2.1"],
    servingEndpoints: [at("10.244.0.1", 53)],
  });
  const two = {
    ...one,
    id: "default/two:http/UDP",
    clusterIPs: ["10.96.0.2"],
    servingEndpoints: [at("10.244.0.2", 53)],
  };
  const frontends = new ServiceFrontends(plan([one, two]));
  for (const ip of ["10.244.0.1", "10.244.0.2"]) {
    assert.equal(frontends.isStale(flow("UDP", ["192.0.2.1", 53], [ip, 53])), false, ip);
  }
  assert.equal(frontends.isStale(flow("UDP", ["10.96.0.1", 53], ["10.244.0.2", 53])), true);
});

Deno.test("ServiceFrontends reads IPv6 plans", () => {
  const v6 = servicePort("default", "dns6", {
    protocol: "UDP",
    port: 53,
    clusterIPs: ["fd00:96::a"],
    servingEndpoints: [at("fd00:244:1::10", 8080)],
  });
  const frontends = new ServiceFrontends(plan([v6], { family: "IPv6" }));
  const line = (replySrc: string) =>
    parseConntrackLine(
      `udp      17 29 src=fd00:201::2 dst=fd00:96::a sport=40053 dport=53 [UNREPLIED] ` +
        `src=${replySrc} dst=fd00:201::2 sport=8080 dport=40053 mark=0 use=1`,
    )!;
  assert.equal(frontends.isStale(line("fd00:244:1::10")), false);
  assert.equal(frontends.isStale(line("fd00:244:1::11")), true);
  // conntrack prints canonical text; anything else cannot be named in a delete line.
  assert.equal(frontends.isStale(line("fd00:244:1:0:0:0:0:11")), false);
  assert.equal(frontends.isStale(line("fd00:244:1::11;x")), false);
});

Deno.test("listArgs() and deleteLine() spell conntrack's arguments", () => {
  assert.deepEqual(listArgs("IPv4", "UDP"), ["-L", "-f", "ipv4", "-p", "udp"]);
  assert.deepEqual(listArgs("IPv6", "SCTP"), ["-L", "-f", "ipv6", "-p", "sctp"]);
  assert.equal(
    deleteLine("IPv4", flow("UDP", ["10.96.0.10", 53], ["10.244.1.5", 5353])),
    "-D -f ipv4 -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 " +
      "--reply-src 10.244.1.5 --reply-port-src 5353\n",
  );
  assert.equal(
    deleteLine("IPv6", flow("SCTP", ["fd00:96::a", 3868], ["fd00:244::5", 3868])),
    "-D -f ipv6 -p sctp --orig-dst fd00:96::a --orig-port-dst 3868 " +
      "--reply-src fd00:244::5 --reply-port-src 3868\n",
  );
});

Deno.test("mayLeaveStaleFlows() skips syncs that changed only TCP services", async (t) => {
  const dns = cleanupTest("UDP");
  const web = cleanupTest("TCP");
  const sctp = cleanupTest("SCTP");
  const before: Plan[] = [plan([dns, web, sctp]), plan([], { family: "IPv6" })];
  const cases: [string, Parameters<typeof mayLeaveStaleFlows>[0], boolean][] = [
    ["the first sync", { previous: [], plans: before, changed: new Set(), full: false }, true],
    ["a full sync", { previous: before, plans: before, changed: new Set(), full: true }, true],
    ["a UDP port changed", {
      previous: before,
      plans: before,
      changed: new Set([dns.id]),
      full: false,
    }, true],
    ["an SCTP port changed", {
      previous: before,
      plans: before,
      changed: new Set([sctp.id]),
      full: false,
    }, true],
    ["a UDP port removed", {
      previous: before,
      plans: [plan([web]), before[1]!],
      changed: new Set([dns.id]),
      full: false,
    }, true],
    ["only a TCP port changed", {
      previous: before,
      plans: before,
      changed: new Set([web.id]),
      full: false,
    }, false],
  ];
  for (const [name, sync, expected] of cases) {
    await t.step(name, () => assert.equal(mayLeaveStaleFlows(sync), expected));
  }
});
