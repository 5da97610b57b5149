/**
 * One list of traffic cases that every kernel backend must pass: each case is
 * a Plan built directly from the topology's addresses (no planner), optional
 * later steps, and expectations checked with real packets.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Backend } from "../../lib/core/backend.ts";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { servicePortId } from "../../lib/core/plan.ts";
import { type PlannerOptions, planNode } from "../../lib/core/planner.ts";
import type { ObjectKind } from "../../lib/core/source.ts";
import { Tracker } from "../../lib/core/tracker.ts";
import { endpointOf, plans, servicePort, TARGET_PORT } from "../../scripts/testbed/plans.ts";
import { ADDRESSES, type Pod, type Reply, type RequestSpec, type Topology } from "./netns.ts";

/** A proxy mode as the kernel tests run it. */
export type KernelMode = "nftables" | "iptables-nft" | "iptables-legacy" | "ipvs";

/** Every mode a case may name. */
export const ALL_MODES: readonly KernelMode[] = [
  "nftables",
  "iptables-nft",
  "iptables-legacy",
  "ipvs",
];

/** What a case's checks may use. */
export interface CaseContext {
  topology: Topology;
  backend: Backend;
  mode: KernelMode;
  /** Syncs `plans` (IPv4 then IPv6) and records them as the previous plans. */
  sync(plans: Plan[], options?: { changed?: string[]; full?: boolean }): Promise<void>;
  /** Wipes this mode's rules from the node behind the backend's back. */
  wipeRules(): Promise<void>;
  /** Flushes the node's conntrack table. */
  flushConntrack(): Promise<void>;
}

/** A later step of a case: an optional new plan, then checks. */
export interface CaseStep {
  name: string;
  /** Plans to sync before checking; none keeps the current rules. */
  plans?: (topology: Topology) => Plan[];
  /** Service ids passed as `changed`; with a partial sync (`full` false). */
  changed?: string[];
  /** @default {false} when `changed` is given, else true */
  full?: boolean;
  /** Runs before the plans are synced. */
  before?: (context: CaseContext) => Promise<void>;
  expect: (context: CaseContext) => Promise<void>;
}

/** One traffic case. */
export interface KernelCase {
  name: string;
  /** Modes the case applies to. @default {ALL_MODES} */
  modes?: readonly KernelMode[];
  /** A reason the case cannot run yet in `mode`, or undefined. */
  pending?: (mode: KernelMode) => Promise<string | undefined> | string | undefined;
  /** The plans of the first (full) sync, IPv4 then IPv6. */
  plans: (topology: Topology) => Plan[];
  expect: (context: CaseContext) => Promise<void>;
  steps?: CaseStep[];
}

/**
 * Plans for both families made the way kproxy makes them, from API objects
 * through the parsers, the tracker and the planner, with the topology's node,
 * pod and service addresses: for cases about what the parsers refuse.
 */
export function plannedFromObjects(
  objects: Record<string, unknown>[],
  options: Partial<PlannerOptions> = {},
): Plan[] {
  const tracker = new Tracker({ nodeName: "node-a", clock: { now: () => 0 } });
  for (const object of objects) {
    tracker.apply({ type: "upsert", kind: object.kind as ObjectKind, object });
  }
  tracker.apply({ type: "synced" });
  const plans = planNode({
    state: tracker.drain().state,
    options: {
      nodeName: "node-a",
      nodePortAddresses: ["primary"],
      localAddresses: [ADDRESSES.nodeV4, ADDRESSES.nodeV6],
      clusterCIDRs: [ADDRESSES.clusterCIDRV4, ADDRESSES.clusterCIDRV6],
      detectLocalMode: "ClusterCIDR",
      bridgeInterface: "",
      interfaceNamePrefix: "",
      masqueradeAll: false,
      serviceClusterIPRange: [ADDRESSES.serviceCIDRV4, ADDRESSES.serviceCIDRV6],
      externalIPAllowedCIDRs: [],
      featureGates: {},
      ...options,
    },
  });
  return [plans.ipv4, plans.ipv6];
}

/** The pods that answered, in order; throws with the failures when any request failed. */
export function answeredPods(replies: Reply[]): string[] {
  const failures = replies.filter((reply) => !reply.ok);
  assert.equal(
    failures.length,
    0,
    `${failures.length}/${replies.length} requests failed: ${JSON.stringify(failures.slice(0, 3))}`,
  );
  return replies.map((reply) => (reply.ok ? reply.pod : ""));
}

/** Asserts every request succeeded and only `allowed` pods answered; returns the distinct pods. */
export function assertAnsweredBy(replies: Reply[], allowed: string[]): Set<string> {
  const pods = new Set(answeredPods(replies));
  for (const pod of pods) {
    assert.ok(allowed.includes(pod), `${pod} answered, expected only ${allowed.join(", ")}`);
  }
  return pods;
}

/** Asserts every request failed with `error`. */
export function assertFailed(replies: Reply[], error: "refused" | "timeout"): void {
  replies.forEach((reply, index) => {
    assert.ok(
      !reply.ok && reply.error === error,
      `request ${index + 1}/${replies.length}: expected ${error}, got ${JSON.stringify(reply)}`,
    );
  });
}

/** Asserts every reply came from a backend that saw one of `peers` as the source. */
export function assertPeers(replies: Reply[], peers: string[], what: string): void {
  for (const reply of replies) {
    assert.ok(
      reply.ok && peers.includes(reply.peer),
      `${what}: expected the backend to see ${peers.join(" or ")}, got ${JSON.stringify(reply)}`,
    );
  }
}

function repeat(count: number, spec: RequestSpec): RequestSpec[] {
  return Array.from({ length: count }, () => ({ ...spec }));
}

const tcp = (ip: string, port = 80, extra: Partial<RequestSpec> = {}): RequestSpec => ({
  protocol: "TCP",
  ip,
  port,
  ...extra,
});
const udp = (ip: string, port = 80, extra: Partial<RequestSpec> = {}): RequestSpec => ({
  protocol: "UDP",
  ip,
  port,
  ...extra,
});

const A = ADDRESSES;
const NODE_ADDRESSES_V4: string[] = [A.nodeV4, A.nodeToRemoteV4, A.podGatewayV4];
const DROP_MS = 700;

const SEND_SYN_FIN = `
import socket, struct, sys
src, dst, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def checksum(data):
    if len(data) % 2:
        data += b"\\0"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
header = struct.pack("!HHIIBBHHH", 40999, port, 1, 0, 5 << 4, 0x03, 64240, 0, 0)
pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(header))
header = header[:16] + struct.pack("!H", checksum(pseudo + header)) + header[18:]
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
for _ in range(3):
    s.sendto(header, (dst, 0))
`;

/** Sends three TCP SYN+FIN packets (conntrack-invalid) from namespace `fromNs`. */
export async function sendSynFin(
  topology: Topology,
  options: { fromNs: string; sourceIp: string; ip: string; port: number },
): Promise<void> {
  await topology.exec(options.fromNs, "python3", [
    "-c",
    SEND_SYN_FIN,
    options.sourceIp,
    options.ip,
    String(options.port),
  ]);
}

/** Counts TCP SYN+FIN packets reaching `pod` (before its own conntrack) from now on. */
export async function countSynFin(topology: Topology, pod: Pod): Promise<() => Promise<number>> {
  await topology.exec(pod.ns, "nft", [
    "add table inet kp_probe; " +
    "add chain inet kp_probe input { type filter hook input priority -300; }; " +
    "add rule inet kp_probe input tcp flags & (syn | fin) == (syn | fin) counter",
  ]);
  return async () => {
    const listing = await topology.exec(pod.ns, "nft", [
      "list",
      "chain",
      "inet",
      "kp_probe",
      "input",
    ]);
    return Number(/packets (\d+)/.exec(listing)?.[1] ?? "0");
  };
}

function local(topology: Topology, index: number): Pod {
  return topology.localPods[index]!;
}

function remote(topology: Topology, index: number): Pod {
  return topology.remotePods[index]!;
}

function names(pods: Pod[]): string[] {
  return pods.map((pod) => pod.name);
}

const UDP_FLOW_IP = "10.96.1.30";
const UDP_FLOW_NODE_PORT = 30530;
const UDP_FLOW_EXTERNAL_IP = "10.203.0.30";
const UDP_FLOW_ID = servicePortId("kernel", "udp-flow", "", "UDP");

/** The UDP Service the conntrack cases keep flows to: port 53 on a cluster IP, a node port and
 * an external IP; endpoints `pods` (or `pod`) at `port`. */
function udpFlowService(
  t: Topology,
  options: { pod?: Pod; pods?: Pod[]; port?: number; serving?: PlanEndpoint[] },
): ServicePortPlan {
  const pods = options.pods ?? [options.pod ?? local(t, 0)];
  return servicePort({
    name: "udp-flow",
    protocol: "UDP",
    port: 53,
    clusterIP: UDP_FLOW_IP,
    nodePort: UDP_FLOW_NODE_PORT,
    externalIPs: [UDP_FLOW_EXTERNAL_IP],
    endpoints: pods.map((pod) => endpointOf(pod, { port: options.port })),
    servingEndpoints: options.serving,
  });
}

/** A second UDP Service, on pod `index`, for changes that must not touch udp-flow's flows. */
function udpOther(t: Topology, index: number): ServicePortPlan {
  return servicePort({
    name: "udp-other",
    protocol: "UDP",
    port: 53,
    clusterIP: "10.96.1.31",
    endpoints: [endpointOf(local(t, index))],
  });
}

/** One request on each kept UDP flow: the client's fixed source port per frontend. */
function udpFlows(options: { externalIP?: boolean } = {}): RequestSpec[] {
  return [
    udp(UDP_FLOW_IP, 53, { sourcePort: 40301 }),
    udp(A.nodeV4, UDP_FLOW_NODE_PORT, { sourcePort: 40302 }),
    ...(options.externalIP ? [udp(UDP_FLOW_EXTERNAL_IP, 53, { sourcePort: 40303 })] : []),
  ];
}

/** Asserts every flow was answered by `pod` (on `port`, when given). */
function assertFlowsReach(replies: Reply[], pod: Pod, port?: number): void {
  replies.forEach((reply, i) => {
    assert.ok(
      reply.ok && reply.pod === pod.name && (port === undefined || reply.port === port),
      `flow ${i + 1}: expected ${pod.name}${port ? `:${port}` : ""}, got ${JSON.stringify(reply)}`,
    );
  });
}

/** Every kernel traffic case, in the order they run. */
/** A Service with externalIP 10.203.0.14 and one endpoint, as API objects. */
function sharedExternalIPObjects(
  name: string,
  clusterIP: string,
  pod: Pod,
): Record<string, unknown>[] {
  return [
    {
      kind: "Service",
      metadata: { namespace: "kernel", name },
      spec: {
        clusterIP,
        ports: [{ name: "http", port: 80, targetPort: TARGET_PORT }],
        externalIPs: ["10.203.0.14"],
      },
    },
    {
      kind: "EndpointSlice",
      metadata: {
        namespace: "kernel",
        name: `${name}-1`,
        labels: { "kubernetes.io/service-name": name },
      },
      addressType: "IPv4",
      ports: [{ name: "http", port: TARGET_PORT }],
      endpoints: [{ addresses: [pod.ipv4], nodeName: "node-a" }],
    },
  ];
}

export const KERNEL_CASES: readonly KernelCase[] = [
  {
    name: "ClusterIP TCP spreads over local and remote endpoints from client, node and pod",
    plans: (t) =>
      plans([servicePort({
        name: "tcp",
        clusterIP: "10.96.1.1",
        endpoints: [local(t, 0), local(t, 1), remote(t, 0)].map((p) => endpointOf(p)),
      })]),
    async expect({ topology: t }) {
      const allowed = names([local(t, 0), local(t, 1), remote(t, 0)]);
      const clientReplies = await t.requests(t.client, repeat(30, tcp("10.96.1.1")));
      const fromClient = assertAnsweredBy(clientReplies, allowed);
      assert.ok(fromClient.size >= 2, `only ${[...fromClient]} answered 30 requests`);
      // clusterIPMasquerade "non-local": the client is outside the cluster CIDR.
      assertPeers(clientReplies, NODE_ADDRESSES_V4, "client traffic masqueraded");
      assertAnsweredBy(await t.requests(t.node, repeat(5, tcp("10.96.1.1"))), allowed);
      const podReplies = await t.requests(local(t, 2).ns, repeat(10, tcp("10.96.1.1")));
      assertAnsweredBy(podReplies, allowed);
      assertPeers(podReplies, [local(t, 2).ipv4], "pod traffic keeps its source");
    },
  },
  {
    name: "ClusterIP UDP reaches the endpoints",
    plans: (t) =>
      plans([servicePort({
        name: "udp",
        protocol: "UDP",
        port: 53,
        clusterIP: "10.96.1.2",
        endpoints: [local(t, 0), local(t, 1)].map((p) => endpointOf(p)),
      })]),
    async expect({ topology: t }) {
      const pods = assertAnsweredBy(
        await t.requests(t.client, repeat(20, udp("10.96.1.2", 53))),
        names([local(t, 0), local(t, 1)]),
      );
      assert.ok(pods.size >= 1);
      assertAnsweredBy(
        await t.requests(local(t, 2).ns, repeat(5, udp("10.96.1.2", 53))),
        names([local(t, 0), local(t, 1)]),
      );
    },
  },
  {
    name: "NodePort on the node address answers client and node, masqueraded; not on localhost",
    plans: (t) =>
      plans([servicePort({
        name: "nodeport",
        clusterIP: "10.96.1.3",
        nodePort: 30080,
        endpoints: [local(t, 0), remote(t, 0)].map((p) => endpointOf(p)),
      })]),
    async expect({ topology: t }) {
      const replies = await t.requests(t.client, repeat(20, tcp(A.nodeV4, 30080)));
      const pods = assertAnsweredBy(replies, names([local(t, 0), remote(t, 0)]));
      assert.ok(pods.size === 2, `only ${[...pods]} answered 20 requests`);
      assertPeers(replies, NODE_ADDRESSES_V4, "node port traffic masqueraded");
      const unused = await t.requests(t.client, [tcp(A.nodeV4, 30099, { timeoutMs: DROP_MS })]);
      assert.ok(!unused[0]!.ok, "an unused node port must not answer");
      // From the node itself: its address works, localhost does not (CVE-2020-8558).
      assertAnsweredBy(
        await t.requests(t.node, repeat(3, tcp(A.nodeV4, 30080))),
        names([local(t, 0), remote(t, 0)]),
      );
      const localhost = await t.requests(t.node, [tcp("127.0.0.1", 30080, { timeoutMs: DROP_MS })]);
      assert.ok(!localhost[0]!.ok, `node port answered on localhost: ${JSON.stringify(localhost)}`);
    },
  },
  {
    name: "external IP answers the client",
    plans: (t) =>
      plans([servicePort({
        name: "external-ip",
        clusterIP: "10.96.1.4",
        externalIPs: ["10.203.0.10"],
        endpoints: [local(t, 0), local(t, 1)].map((p) => endpointOf(p)),
      })]),
    async expect({ topology: t }) {
      assertAnsweredBy(
        await t.requests(t.client, repeat(10, tcp("10.203.0.10"))),
        names([local(t, 0), local(t, 1)]),
      );
    },
  },
  {
    name: "LoadBalancer IP without source ranges answers any client",
    plans: (t) =>
      plans([servicePort({
        name: "lb-open",
        clusterIP: "10.96.1.5",
        loadBalancerIPs: ["10.204.0.10"],
        endpoints: [endpointOf(local(t, 0))],
      })]),
    async expect({ topology: t }) {
      assertAnsweredBy(
        await t.requests(t.client, [
          tcp("10.204.0.10"),
          tcp("10.204.0.10", 80, { sourceIp: A.clientV4Other }),
        ]),
        names([local(t, 0)]),
      );
    },
  },
  {
    name: "LoadBalancer IP with source ranges drops other sources",
    plans: (t) =>
      plans([servicePort({
        name: "lb-ranges",
        clusterIP: "10.96.1.6",
        loadBalancerIPs: ["10.204.0.11"],
        sourceRanges: [`${A.clientV4}/32`],
        endpoints: [endpointOf(local(t, 0))],
      })]),
    async expect({ topology: t }) {
      assertAnsweredBy(await t.requests(t.client, [tcp("10.204.0.11")]), names([local(t, 0)]));
      assertFailed(
        await t.requests(t.client, [
          tcp("10.204.0.11", 80, { sourceIp: A.clientV4Other, timeoutMs: DROP_MS }),
        ]),
        "timeout",
      );
    },
  },
  {
    name: "session affinity keeps one client on one backend; none spreads",
    plans: (t) => {
      const endpoints = t.localPods.map((p) => endpointOf(p));
      return plans([
        servicePort({
          name: "sticky",
          clusterIP: "10.96.1.7",
          endpoints,
          affinityTimeoutSeconds: 60,
        }),
        servicePort({ name: "spread", clusterIP: "10.96.1.8", endpoints }),
      ]);
    },
    async expect({ topology: t }) {
      const sticky = assertAnsweredBy(
        await t.requests(t.client, repeat(20, tcp("10.96.1.7"))),
        names(t.localPods),
      );
      assert.equal(sticky.size, 1, `affinity broken: ${[...sticky]} answered`);
      const spread = assertAnsweredBy(
        await t.requests(t.client, repeat(20, tcp("10.96.1.8"))),
        names(t.localPods),
      );
      assert.ok(spread.size >= 2, `no spread without affinity: ${[...spread]}`);
    },
  },
  {
    name:
      "externalTrafficPolicy Local: client reaches only local endpoints with its own IP; pods and node use all",
    plans: (t) =>
      plans([
        servicePort({
          name: "etp-local",
          clusterIP: "10.96.1.9",
          nodePort: 30081,
          internalEndpoints: [local(t, 0), remote(t, 0)].map((p) => endpointOf(p)),
          externalEndpoints: [endpointOf(local(t, 0))],
          externalLocal: true,
        }),
        servicePort({
          name: "etp-local-none",
          clusterIP: "10.96.1.10",
          nodePort: 30082,
          internalEndpoints: [endpointOf(remote(t, 0))],
          externalEndpoints: [],
          externalWhenEmpty: "drop",
          externalLocal: true,
        }),
      ]),
    async expect({ topology: t }) {
      const replies = await t.requests(t.client, repeat(20, tcp(A.nodeV4, 30081)));
      assertAnsweredBy(replies, names([local(t, 0)]));
      assertPeers(replies, [A.clientV4], "ETP Local keeps the client address");
      assertFailed(
        await t.requests(t.client, [tcp(A.nodeV4, 30082, { timeoutMs: DROP_MS })]),
        "timeout",
      );
      // Pods and the node itself short-circuit to the internal endpoints.
      assertAnsweredBy(
        await t.requests(local(t, 2).ns, repeat(3, tcp(A.nodeV4, 30082))),
        names([remote(t, 0)]),
      );
      assertAnsweredBy(
        await t.requests(t.node, repeat(3, tcp(A.nodeV4, 30082))),
        names([remote(t, 0)]),
      );
      // The cluster IP still uses every endpoint.
      assertAnsweredBy(
        await t.requests(t.client, repeat(5, tcp("10.96.1.10"))),
        names([remote(t, 0)]),
      );
    },
  },
  {
    name:
      "special addresses from the API are not programmed: externalIP 127.0.0.1, endpoint 169.254.169.254",
    plans: (t) =>
      plannedFromObjects([
        {
          kind: "Service",
          metadata: { namespace: "kernel", name: "special" },
          spec: {
            clusterIP: "10.96.1.23",
            ports: [{ name: "http", port: 80, targetPort: TARGET_PORT }],
            externalIPs: ["127.0.0.1", "10.203.0.13"],
          },
        },
        {
          kind: "EndpointSlice",
          metadata: {
            namespace: "kernel",
            name: "special-1",
            labels: { "kubernetes.io/service-name": "special" },
          },
          addressType: "IPv4",
          ports: [{ name: "http", port: TARGET_PORT }],
          endpoints: [
            { addresses: ["169.254.169.254"], nodeName: "node-a" },
            { addresses: [local(t, 0).ipv4], nodeName: "node-a" },
          ],
        },
      ]),
    async expect({ topology: t }) {
      // The rest of the Service works, through its one ordinary endpoint only.
      assertAnsweredBy(
        await t.requests(t.client, [
          ...repeat(10, tcp("10.203.0.13")),
          ...repeat(10, tcp("10.96.1.23")),
        ]),
        names([local(t, 0)]),
      );
      // The node's own 127.0.0.1:80 is left alone: nothing listens, so it is
      // refused at once; a DNAT to the pod would leave with source 127.0.0.1
      // and time out.
      assertFailed(
        await t.requests(t.node, [tcp("127.0.0.1", 80, { timeoutMs: DROP_MS })]),
        "refused",
      );
    },
  },
  {
    name:
      "--masquerade-all: a pod's packet to an externalTrafficPolicy Local node port or LB IP keeps its source",
    plans: (t) =>
      plans(
        [servicePort({
          name: "etp-local-masq-all",
          clusterIP: "10.96.1.22",
          nodePort: 30085,
          loadBalancerIPs: ["10.204.0.12"],
          internalEndpoints: [local(t, 0), remote(t, 0)].map((p) => endpointOf(p)),
          externalEndpoints: [endpointOf(local(t, 0))],
          externalLocal: true,
        })],
        [],
        { clusterIPMasquerade: "all" },
      ),
    async expect({ topology: t }) {
      const pod = local(t, 2);
      const allowed = names([local(t, 0), remote(t, 0)]);
      // Short-circuited to the cluster-IP endpoints, as upstream: only traffic
      // addressed to the cluster IP is marked for masquerade.
      const external = await t.requests(pod.ns, [
        ...repeat(5, tcp(A.nodeV4, 30085)),
        ...repeat(5, tcp("10.204.0.12")),
      ]);
      assertAnsweredBy(external, allowed);
      assertPeers(external, [pod.ipv4], "pod traffic to a Local node port or LB IP");
      const cluster = await t.requests(pod.ns, repeat(5, tcp("10.96.1.22")));
      assertAnsweredBy(cluster, allowed);
      assertPeers(cluster, NODE_ADDRESSES_V4, "pod traffic to the cluster IP masqueraded");
      const client = await t.requests(t.client, repeat(5, tcp(A.nodeV4, 30085)));
      assertAnsweredBy(client, names([local(t, 0)]));
      assertPeers(client, [A.clientV4], "client traffic keeps its source");
    },
  },
  {
    name:
      "internalTrafficPolicy Local: node and pod traffic only to local endpoints; none local drops",
    plans: (t) =>
      plans([servicePort({
        name: "itp-local",
        clusterIP: "10.96.1.11",
        internalEndpoints: [endpointOf(local(t, 0))],
        externalEndpoints: [local(t, 0), remote(t, 0)].map((p) => endpointOf(p)),
      })]),
    async expect({ topology: t }) {
      assertAnsweredBy(
        await t.requests(t.node, repeat(10, tcp("10.96.1.11"))),
        names([local(t, 0)]),
      );
      assertAnsweredBy(
        await t.requests(local(t, 2).ns, repeat(10, tcp("10.96.1.11"))),
        names([local(t, 0)]),
      );
    },
    steps: [{
      name: "no local endpoint: dropped",
      plans: (t) =>
        plans([servicePort({
          name: "itp-local",
          clusterIP: "10.96.1.11",
          internalEndpoints: [],
          internalWhenEmpty: "drop",
          externalEndpoints: [endpointOf(remote(t, 0))],
        })]),
      async expect({ topology: t }) {
        assertFailed(
          await t.requests(local(t, 2).ns, [tcp("10.96.1.11", 80, { timeoutMs: DROP_MS })]),
          "timeout",
        );
      },
    }],
  },
  {
    name: "no endpoints: rejected quickly (TCP refused, UDP unreachable), not dropped",
    plans: () =>
      plans([
        servicePort({ name: "empty", clusterIP: "10.96.1.12", nodePort: 30083 }),
        servicePort({ name: "empty-udp", protocol: "UDP", clusterIP: "10.96.1.12" }),
      ]),
    async expect({ topology: t }) {
      const replies = await t.requests(t.client, [
        tcp("10.96.1.12"),
        tcp(A.nodeV4, 30083),
        udp("10.96.1.12"),
      ]);
      assertFailed(replies, "refused");
      assertFailed(await t.requests(t.node, [tcp("10.96.1.12")]), "refused");
    },
  },
  {
    name: "terminating endpoints in the plan are used",
    plans: (t) =>
      plans([servicePort({
        name: "terminating",
        clusterIP: "10.96.1.13",
        endpoints: [endpointOf(local(t, 1), { ready: false, serving: true, terminating: true })],
      })]),
    async expect({ topology: t }) {
      assertAnsweredBy(
        await t.requests(t.client, repeat(5, tcp("10.96.1.13"))),
        names([local(t, 1)]),
      );
    },
  },
  {
    name: "hairpin: a pod reaches itself through its service, masqueraded",
    plans: (t) =>
      plans([servicePort({
        name: "hairpin",
        clusterIP: "10.96.1.14",
        endpoints: [endpointOf(local(t, 0))],
      })]),
    async expect({ topology: t }) {
      const replies = await t.requests(local(t, 0).ns, repeat(3, tcp("10.96.1.14")));
      assertAnsweredBy(replies, names([local(t, 0)]));
      for (const reply of replies) {
        assert.ok(
          reply.ok && reply.peer !== local(t, 0).ipv4,
          `hairpin not masqueraded: ${JSON.stringify(reply)}`,
        );
      }
    },
  },
  {
    name: "IPv6 ClusterIP and NodePort",
    plans: (t) =>
      plans([], [servicePort({
        name: "v6",
        family: "IPv6",
        clusterIP: "fd00:96::10",
        nodePort: 30084,
        endpoints: [local(t, 0), local(t, 1), remote(t, 0)].map((p) =>
          endpointOf(p, { family: "IPv6" })
        ),
      })]),
    async expect({ topology: t }) {
      const allowed = names([local(t, 0), local(t, 1), remote(t, 0)]);
      const pods = assertAnsweredBy(
        await t.requests(t.client, repeat(20, tcp("fd00:96::10"))),
        allowed,
      );
      assert.ok(pods.size >= 2, `only ${[...pods]} answered`);
      assertAnsweredBy(await t.requests(t.client, repeat(5, tcp(A.nodeV6, 30084))), allowed);
      assertAnsweredBy(await t.requests(t.node, repeat(3, tcp("fd00:96::10"))), allowed);
    },
  },
  {
    name: "UDP endpoint removed: the stale conntrack entry is flushed and traffic moves",
    plans: (t) =>
      plans([servicePort({
        name: "udp-move",
        protocol: "UDP",
        port: 53,
        clusterIP: "10.96.1.15",
        endpoints: [endpointOf(local(t, 0))],
      })]),
    async expect({ topology: t }) {
      assertAnsweredBy(
        await t.requests(t.client, repeat(3, udp("10.96.1.15", 53, { sourcePort: 40053 }))),
        names([local(t, 0)]),
      );
    },
    steps: [{
      name: "endpoint replaced, same client source port",
      plans: (t) =>
        plans([servicePort({
          name: "udp-move",
          protocol: "UDP",
          port: 53,
          clusterIP: "10.96.1.15",
          endpoints: [endpointOf(local(t, 1))],
        })]),
      changed: [servicePortId("kernel", "udp-move", "", "UDP")],
      async expect({ topology: t }) {
        assertAnsweredBy(
          await t.requests(t.client, repeat(3, udp("10.96.1.15", 53, { sourcePort: 40053 }))),
          names([local(t, 1)]),
        );
      },
    }],
  },
  {
    name:
      "UDP endpoint port changes on the same IP: a kept flow reaches the new port (ClusterIP, NodePort)",
    plans: (t) => plans([udpFlowService(t, { port: 8080 })]),
    async expect({ topology: t }) {
      assertFlowsReach(await t.requests(t.client, udpFlows()), local(t, 0), 8080);
    },
    steps: [{
      name: "targetPort 8080 → 9090, same client source ports",
      plans: (t) => plans([udpFlowService(t, { port: 9090 })]),
      changed: [UDP_FLOW_ID],
      async expect({ topology: t }) {
        assertFlowsReach(await t.requests(t.client, udpFlows()), local(t, 0), 9090);
      },
    }],
  },
  {
    name:
      "UDP endpoint goes away and another appears: kept flows move (ClusterIP, NodePort, external IP)",
    plans: (t) => plans([udpFlowService(t, { pod: local(t, 0) })]),
    async expect({ topology: t }) {
      assertFlowsReach(await t.requests(t.client, udpFlows({ externalIP: true })), local(t, 0));
    },
    steps: [{
      name: "pod-a1 gone, pod-a2 serving",
      plans: (t) => plans([udpFlowService(t, { pod: local(t, 1) })]),
      changed: [UDP_FLOW_ID],
      async expect({ topology: t }) {
        assertFlowsReach(await t.requests(t.client, udpFlows({ externalIP: true })), local(t, 1));
      },
    }],
  },
  {
    name: "UDP flows to a Service whose serving endpoints stay keep their conntrack entries",
    plans: (t) => plans([udpFlowService(t, { pod: local(t, 0) }), udpOther(t, 0)]),
    async expect({ topology: t }) {
      assertFlowsReach(await t.requests(t.client, udpFlows()), local(t, 0));
    },
    steps: [
      {
        name: "another UDP Service changes",
        plans: (t) => plans([udpFlowService(t, { pod: local(t, 0) }), udpOther(t, 1)]),
        changed: [servicePortId("kernel", "udp-other", "", "UDP")],
        async expect({ topology: t }) {
          assertFlowsReach(await t.requests(t.client, udpFlows()), local(t, 0));
        },
      },
      {
        name: "a full resync of the same rules",
        plans: (t) => plans([udpFlowService(t, { pod: local(t, 0) }), udpOther(t, 1)]),
        full: true,
        async expect({ topology: t }) {
          assertFlowsReach(await t.requests(t.client, udpFlows()), local(t, 0));
        },
      },
      {
        name: "the flows' endpoint starts terminating (still serving), another is ready",
        plans: (t) =>
          plans([
            udpFlowService(t, {
              pod: local(t, 1),
              serving: [
                endpointOf(local(t, 0), { ready: false, serving: true, terminating: true }),
                endpointOf(local(t, 1)),
              ],
            }),
            udpOther(t, 1),
          ]),
        changed: [UDP_FLOW_ID],
        async expect({ topology: t }) {
          assertFlowsReach(await t.requests(t.client, udpFlows()), local(t, 0));
          const fresh = await t.requests(t.client, repeat(3, udp(UDP_FLOW_IP, 53)));
          assertAnsweredBy(fresh, names([local(t, 1)]));
        },
      },
    ],
  },
  {
    name: "partial sync moves one service's traffic and leaves the others alone",
    plans: (t) =>
      plans([
        servicePort({
          name: "move",
          clusterIP: "10.96.1.16",
          endpoints: [endpointOf(local(t, 0))],
        }),
        servicePort({
          name: "stay",
          clusterIP: "10.96.1.17",
          endpoints: [endpointOf(local(t, 1))],
        }),
      ]),
    async expect({ topology: t }) {
      assertAnsweredBy(await t.requests(t.client, [tcp("10.96.1.16")]), names([local(t, 0)]));
      assertAnsweredBy(await t.requests(t.client, [tcp("10.96.1.17")]), names([local(t, 1)]));
    },
    steps: [{
      name: "only 'move' changed",
      plans: (t) =>
        plans([
          servicePort({
            name: "move",
            clusterIP: "10.96.1.16",
            endpoints: [endpointOf(local(t, 2))],
          }),
          servicePort({
            name: "stay",
            clusterIP: "10.96.1.17",
            endpoints: [endpointOf(local(t, 1))],
          }),
        ]),
      changed: [servicePortId("kernel", "move", "", "TCP")],
      async expect({ topology: t }) {
        assertAnsweredBy(
          await t.requests(t.client, repeat(5, tcp("10.96.1.16"))),
          names([local(t, 2)]),
        );
        assertAnsweredBy(
          await t.requests(t.client, repeat(5, tcp("10.96.1.17"))),
          names([local(t, 1)]),
        );
      },
    }],
  },
  {
    name: "drift: wiped rules are detected and a full sync restores traffic",
    plans: (t) =>
      plans([servicePort({
        name: "drift",
        clusterIP: "10.96.1.18",
        endpoints: [endpointOf(local(t, 0))],
      })]),
    async expect({ topology: t, backend }) {
      assertAnsweredBy(await t.requests(t.client, [tcp("10.96.1.18")]), names([local(t, 0)]));
      assert.ok(backend.checkDrift, "the backend has no checkDrift()");
      assert.equal(await backend.checkDrift(), false, "drift reported right after a sync");
    },
    steps: [{
      name: "rules wiped, drift detected, full sync",
      async before(context) {
        await context.wipeRules();
        assert.equal(await context.backend.checkDrift!(), true, "drift not detected");
        await context.flushConntrack();
        assertFailed(
          await context.topology.requests(context.topology.client, [
            tcp("10.96.1.18", 80, { timeoutMs: DROP_MS }),
          ]),
          "timeout",
        );
      },
      plans: (t) =>
        plans([servicePort({
          name: "drift",
          clusterIP: "10.96.1.18",
          endpoints: [endpointOf(local(t, 0))],
        })]),
      full: true,
      async expect({ topology: t }) {
        assertAnsweredBy(
          await t.requests(t.client, repeat(3, tcp("10.96.1.18"))),
          names([local(t, 0)]),
        );
      },
    }],
  },
  {
    name: "random spread: 200 requests over 3 endpoints give each 20-47%",
    plans: (t) =>
      plans([servicePort({
        name: "uniform",
        clusterIP: "10.96.1.19",
        endpoints: t.localPods.map((p) => endpointOf(p)),
      })]),
    async expect({ topology: t }) {
      const pods = answeredPods(await t.requests(t.client, repeat(200, tcp("10.96.1.19"))));
      for (const pod of names(t.localPods)) {
        const share = pods.filter((name) => name === pod).length / pods.length;
        assert.ok(share >= 0.2 && share <= 0.47, `${pod} got ${(share * 100).toFixed(0)}%`);
      }
    },
  },
  {
    name: "unallocated service CIDR address is rejected, not leaked",
    plans: (t) =>
      plans(
        [servicePort({
          name: "allocated",
          clusterIP: "10.96.1.20",
          endpoints: [endpointOf(local(t, 0))],
        })],
        [servicePort({
          name: "allocated6",
          family: "IPv6",
          clusterIP: "fd00:96::20",
          endpoints: [endpointOf(local(t, 0), { family: "IPv6" })],
        })],
      ),
    async expect({ topology: t }) {
      const replies = await t.requests(t.client, [
        tcp("10.96.99.99", 80, { timeoutMs: DROP_MS }),
        udp("10.96.99.99", 53, { timeoutMs: DROP_MS }),
        // An ICMPv6 reject of a SYN surfaces only with the 1 s SYN retransmit.
        tcp("fd00:96::99", 80, { timeoutMs: 2_500 }),
      ]);
      assertFailed(replies, "refused");
      const wrongPort = await t.requests(t.client, [tcp("10.96.1.20", 81, { timeoutMs: DROP_MS })]);
      assert.ok(!wrongPort[0]!.ok, `an unused port of a cluster IP answered`);
    },
  },
  {
    name: "conntrack-invalid packets (TCP SYN+FIN) are dropped, not forwarded",
    plans: (t) =>
      plans([servicePort({
        name: "invalid",
        clusterIP: "10.96.1.21",
        endpoints: [endpointOf(local(t, 0))],
      })]),
    async expect({ topology: t }) {
      const arrived = await countSynFin(t, local(t, 0));
      await sendSynFin(t, {
        fromNs: t.client,
        sourceIp: A.clientV4,
        ip: local(t, 0).ipv4,
        port: TARGET_PORT,
      });
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(await arrived(), 0, "SYN+FIN packets crossed the node to the pod");
      assertAnsweredBy(await t.requests(t.client, [tcp("10.96.1.21")]), names([local(t, 0)]));
    },
  },
  {
    name:
      "an externalIP two Services claim answers from the lower service port id, then from the other once it goes",
    plans: (t) =>
      plannedFromObjects([
        ...sharedExternalIPObjects("shared-b", "10.96.1.25", local(t, 1)),
        ...sharedExternalIPObjects("shared-a", "10.96.1.24", local(t, 0)),
      ]),
    async expect({ topology: t }) {
      assertAnsweredBy(
        await t.requests(t.client, repeat(5, tcp("10.203.0.14"))),
        names([local(t, 0)]),
      );
    },
    steps: [{
      name: "shared-a deleted: shared-b takes the address in a partial sync",
      plans: (t) =>
        plannedFromObjects(sharedExternalIPObjects("shared-b", "10.96.1.25", local(t, 1))),
      changed: ["kernel/shared-a:http/TCP", "kernel/shared-b:http/TCP"],
      async expect({ topology: t }) {
        assertAnsweredBy(
          await t.requests(t.client, repeat(5, tcp("10.203.0.14"))),
          names([local(t, 1)]),
        );
      },
    }],
  },
];
