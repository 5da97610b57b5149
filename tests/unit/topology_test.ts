import assert from "node:assert/strict";
import type { Node, Service } from "../../lib/core/model.ts";
import { HOSTNAME_LABEL, REGION_LABEL, ZONE_LABEL } from "../../lib/core/model.ts";
import { categorizeEndpoints } from "../../lib/core/endpoints.ts";
import {
  type CandidateEndpoint,
  gateEnabled,
  selectTopologyEndpoints,
  type TopologyInput,
  unservedTopologyKeys,
} from "../../lib/core/topology.ts";

// A cluster of six nodes over two regions and three zones:
//   region r1: zone a (node-a1, node-a2), zone b (node-b1)
//   region r2: zone c (node-c1, node-c2), plus node-x with no labels at all.
const NODES: ReadonlyMap<string, Node> = new Map(
  [
    node("node-a1", "a", "r1"),
    node("node-a2", "a", "r1"),
    node("node-b1", "b", "r1"),
    node("node-c1", "c", "r2"),
    node("node-c2", "c", "r2"),
    { name: "node-x", labels: {}, addresses: [], podCIDRs: [], deleting: false },
  ].map((n) => [n.name, n]),
);

function node(name: string, zone: string, region: string): Node {
  return {
    name,
    labels: { [HOSTNAME_LABEL]: name, [ZONE_LABEL]: zone, [REGION_LABEL]: region },
    addresses: [],
    podCIDRs: [],
    deleting: false,
  };
}

interface EpSpec {
  ip: string;
  node: string;
  forZones?: string[];
  forNodes?: string[];
  ready?: boolean;
  terminating?: boolean;
}

/** Builds a candidate endpoint; the zone comes from the node table. */
function ep(spec: EpSpec, thisNode = "node-a1"): CandidateEndpoint {
  const ready = spec.ready ?? true;
  const candidate: CandidateEndpoint = {
    endpoint: {
      ip: spec.ip,
      port: 8080,
      nodeName: spec.node,
      zone: NODES.get(spec.node)?.labels[ZONE_LABEL] ?? "",
      isLocal: spec.node === thisNode,
      ready,
      serving: ready || (spec.terminating ?? false),
      terminating: spec.terminating ?? false,
    },
  };
  if (spec.forZones !== undefined || spec.forNodes !== undefined) {
    candidate.hints = { forZones: spec.forZones ?? [], forNodes: spec.forNodes ?? [] };
  }
  return candidate;
}

interface ServiceSpec {
  topologyKeys?: string[];
  trafficDistribution?: string;
  topologyMode?: Service["topologyMode"];
}

function input(
  thisNode: string,
  endpoints: CandidateEndpoint[],
  service: ServiceSpec = {},
  featureGates: Record<string, boolean> = {},
): TopologyInput {
  return {
    endpoints,
    usability: "ready",
    service: {
      topologyKeys: service.topologyKeys ?? [],
      trafficDistribution: service.trafficDistribution ?? "",
      topologyMode: service.topologyMode ?? "",
    },
    nodeName: thisNode,
    nodeLabels: NODES.get(thisNode)?.labels ?? {},
    featureGates,
  };
}

const ips = (endpoints: readonly CandidateEndpoint[]) => endpoints.map((c) => c.endpoint.ip);

/** One endpoint per zone-a/b/c node, each hinted for its own zone (PreferClose). */
function preferCloseEndpoints(): CandidateEndpoint[] {
  return [
    ep({ ip: "10.0.1.1", node: "node-a1", forZones: ["a"] }),
    ep({ ip: "10.0.1.2", node: "node-a2", forZones: ["a"] }),
    ep({ ip: "10.0.2.1", node: "node-b1", forZones: ["b"] }),
    ep({ ip: "10.0.3.1", node: "node-c1", forZones: ["c"] }),
  ];
}

/** PreferSameNode: every endpoint hinted for its node and its zone. */
function preferSameNodeEndpoints(nodes: string[]): CandidateEndpoint[] {
  return nodes.map((n, i) =>
    ep({
      ip: `10.0.9.${i + 1}`,
      node: n,
      forNodes: [n],
      forZones: [NODES.get(n)!.labels[ZONE_LABEL]!],
    })
  );
}

interface HintCase {
  name: string;
  thisNode: string;
  endpoints: CandidateEndpoint[];
  service?: ServiceSpec;
  gates?: Record<string, boolean>;
  want: string[];
  reason: RegExp;
}

const HINT_CASES: HintCase[] = [
  {
    name: "004 Story 1: trafficDistribution unset, no hints: all endpoints across zones",
    thisNode: "node-a1",
    endpoints: [
      ep({ ip: "10.0.1.1", node: "node-a1" }),
      ep({ ip: "10.0.2.1", node: "node-b1" }),
      ep({ ip: "10.0.3.1", node: "node-c1" }),
    ],
    want: ["10.0.1.1", "10.0.2.1", "10.0.3.1"],
    reason: /^$/,
  },
  {
    name: "004 Story 2: PreferClose with endpoints in the client's zone: same zone only",
    thisNode: "node-a1",
    endpoints: preferCloseEndpoints(),
    service: { trafficDistribution: "PreferClose" },
    want: ["10.0.1.1", "10.0.1.2"],
    reason: /^hints: zone a \(trafficDistribution PreferClose\)$/,
  },
  {
    name: "004 Story 2: PreferClose with no endpoint in the client's zone: other zones",
    thisNode: "node-a1",
    endpoints: [
      ep({ ip: "10.0.2.1", node: "node-b1", forZones: ["b"] }),
      ep({ ip: "10.0.3.1", node: "node-c1", forZones: ["c"] }),
    ],
    service: { trafficDistribution: "PreferClose" },
    want: ["10.0.2.1", "10.0.3.1"],
    reason: /^hints ignored: no endpoint is hinted for zone a$/,
  },
  {
    name: "004 Story 3: a standard value (PreferSameZone) is followed the same way on any node",
    thisNode: "node-c2",
    endpoints: preferCloseEndpoints(),
    service: { trafficDistribution: "PreferSameZone" },
    want: ["10.0.3.1"],
    reason: /^hints: zone c \(trafficDistribution PreferSameZone\)$/,
  },
  {
    name: "004 Story 4 (DNS): PreferSameNode with an endpoint on every node: own node only",
    thisNode: "node-b1",
    endpoints: preferSameNodeEndpoints(["node-a1", "node-a2", "node-b1", "node-c1", "node-c2"]),
    service: { trafficDistribution: "PreferSameNode" },
    want: ["10.0.9.3"],
    reason: /^hints: node node-b1 \(trafficDistribution PreferSameNode\)$/,
  },
  {
    name: "004 Story 4 (DNS): PreferSameNode without a local endpoint falls back to PreferClose",
    thisNode: "node-a2",
    endpoints: preferSameNodeEndpoints(["node-a1", "node-b1", "node-c1"]),
    service: { trafficDistribution: "PreferSameNode" },
    want: ["10.0.9.1"],
    reason: /^hints: zone a/,
  },
  {
    name: "000 PreferSameNode: no same-node nor same-zone endpoint: cluster-wide",
    thisNode: "node-c2",
    endpoints: preferSameNodeEndpoints(["node-a1", "node-b1"]),
    service: { trafficDistribution: "PreferSameNode" },
    want: ["10.0.9.1", "10.0.9.2"],
    reason: /^hints ignored: no endpoint is hinted for zone c$/,
  },
  {
    name:
      "004 PreferSameNode: a proxy that does not process ForNodes (gate off) treats it as PreferClose",
    thisNode: "node-a1",
    endpoints: preferSameNodeEndpoints(["node-a1", "node-a2", "node-b1"]),
    service: { trafficDistribution: "PreferSameNode" },
    gates: { PreferSameTrafficDistribution: false },
    want: ["10.0.9.1", "10.0.9.2"],
    reason: /^hints: zone a/,
  },
  {
    name:
      "004 Changes within kube-proxy, new behaviour: hints followed with no annotation nor field",
    thisNode: "node-a1",
    endpoints: preferCloseEndpoints(),
    want: ["10.0.1.1", "10.0.1.2"],
    reason: /^hints: zone a$/,
  },
  {
    name: "004 NOTE: all endpoints must have hints; partial hints are ignored",
    thisNode: "node-a1",
    endpoints: [
      ep({ ip: "10.0.1.1", node: "node-a1", forZones: ["a"] }),
      ep({ ip: "10.0.2.1", node: "node-b1" }),
      ep({ ip: "10.0.3.1", node: "node-c1", forZones: ["c"] }),
    ],
    service: { trafficDistribution: "PreferClose" },
    want: ["10.0.1.1", "10.0.2.1", "10.0.3.1"],
    reason: /^hints ignored: some endpoints have no zone hint$/,
  },
  {
    name: "004 NOTE: ForNodes on only some endpoints is ignored and zone hints decide",
    thisNode: "node-a1",
    endpoints: [
      ep({ ip: "10.0.1.1", node: "node-a1", forZones: ["a"], forNodes: ["node-a1"] }),
      ep({ ip: "10.0.1.2", node: "node-a2", forZones: ["a"] }),
      ep({ ip: "10.0.2.1", node: "node-b1", forZones: ["b"] }),
    ],
    want: ["10.0.1.1", "10.0.1.2"],
    reason: /^hints: zone a$/,
  },
  {
    name:
      "004 Topology-Aware Hints: ForZones set by the controller (annotation Auto) may send another zone's endpoint",
    thisNode: "node-a1",
    endpoints: [
      ep({ ip: "10.0.1.1", node: "node-a1", forZones: ["a"] }),
      ep({ ip: "10.0.2.1", node: "node-b1", forZones: ["a"] }),
      ep({ ip: "10.0.2.2", node: "node-b1", forZones: ["b"] }),
      ep({ ip: "10.0.3.1", node: "node-c1", forZones: ["c"] }),
    ],
    service: { topologyMode: "Auto" },
    want: ["10.0.1.1", "10.0.2.1"],
    reason: /^hints: zone a \(topology-mode Auto\)$/,
  },
  {
    name:
      "004 Risks: annotation and trafficDistribution both set: the annotation explains the hints",
    thisNode: "node-a1",
    endpoints: preferCloseEndpoints(),
    service: { topologyMode: "Auto", trafficDistribution: "PreferClose" },
    want: ["10.0.1.1", "10.0.1.2"],
    reason: /\(topology-mode Auto\)$/,
  },
  {
    name: "004 Version skew, old controller #1: hints programmed per annotation are followed",
    thisNode: "node-b1",
    endpoints: preferCloseEndpoints(),
    service: { topologyMode: "Auto", trafficDistribution: "PreferClose" },
    want: ["10.0.2.1"],
    reason: /^hints: zone b/,
  },
  {
    name:
      "004 Version skew, old controller #2: only trafficDistribution and no hints: all endpoints",
    thisNode: "node-a1",
    endpoints: [
      ep({ ip: "10.0.1.1", node: "node-a1" }),
      ep({ ip: "10.0.2.1", node: "node-b1" }),
    ],
    service: { trafficDistribution: "PreferClose" },
    want: ["10.0.1.1", "10.0.2.1"],
    reason: /^$/,
  },
  {
    name: "hints: a node without a zone label does no zone filtering",
    thisNode: "node-x",
    endpoints: preferCloseEndpoints(),
    service: { trafficDistribution: "PreferClose" },
    want: ["10.0.1.1", "10.0.1.2", "10.0.2.1", "10.0.3.1"],
    reason: /^hints ignored: node has no topology.kubernetes.io\/zone label$/,
  },
  {
    name: "hints: topologyKeys with the ServiceTopology gate off are ignored and hints decide",
    thisNode: "node-a1",
    endpoints: preferCloseEndpoints(),
    service: { topologyKeys: ["kubernetes.io/hostname"] },
    want: ["10.0.1.1", "10.0.1.2"],
    reason: /^hints: zone a$/,
  },
];

for (const c of HINT_CASES) {
  Deno.test(`selectTopologyEndpoints() ${c.name}`, () => {
    const decision = selectTopologyEndpoints(input(c.thisNode, c.endpoints, c.service, c.gates));
    assert.deepEqual(ips(decision.endpoints), c.want);
    assert.match(decision.reason, c.reason);
  });
}

const TOPOLOGY_GATE = { ServiceTopology: true };

interface KeysCase {
  name: string;
  thisNode: string;
  topologyKeys: string[];
  endpointNodes: string[];
  want: string[];
  reason: RegExp;
}

/** Endpoint i (1-based) runs on endpointNodes[i-1] and has ip 10.1.0.i. */
function keyedEndpoints(nodes: string[], thisNode: string): CandidateEndpoint[] {
  return nodes.map((n, i) => ep({ ip: `10.1.0.${i + 1}`, node: n }, thisNode));
}

const HOST = HOSTNAME_LABEL;
const ZONE = ZONE_LABEL;
const REGION = REGION_LABEL;

const KEYS_CASES: KeysCase[] = [
  {
    name: "002 Only Node Local Endpoints: a local endpoint is chosen",
    thisNode: "node-a1",
    topologyKeys: [HOST],
    endpointNodes: ["node-a1", "node-a2", "node-b1"],
    want: ["10.1.0.1"],
    reason: /^topologyKeys: kubernetes.io\/hostname$/,
  },
  {
    name: "002 Only Node Local Endpoints: no local endpoint, traffic has no endpoint",
    thisNode: "node-a1",
    topologyKeys: [HOST],
    endpointNodes: ["node-a2", "node-b1"],
    want: [],
    reason: /^topologyKeys: no endpoint matches \[kubernetes.io\/hostname\]$/,
  },
  {
    name: "002 Prefer Node Local Endpoints: local endpoint preferred",
    thisNode: "node-b1",
    topologyKeys: [HOST, "*"],
    endpointNodes: ["node-a1", "node-b1", "node-c1"],
    want: ["10.1.0.2"],
    reason: /^topologyKeys: kubernetes.io\/hostname$/,
  },
  {
    name: "002 Prefer Node Local Endpoints: falls back to cluster wide",
    thisNode: "node-b1",
    topologyKeys: [HOST, "*"],
    endpointNodes: ["node-a1", "node-c1"],
    want: ["10.1.0.1", "10.1.0.2"],
    reason: /^topologyKeys: \*$/,
  },
  {
    name: "002 Only Zonal or Regional Endpoints: same zone",
    thisNode: "node-a1",
    topologyKeys: [ZONE, REGION],
    endpointNodes: ["node-a2", "node-b1", "node-c1"],
    want: ["10.1.0.1"],
    reason: /^topologyKeys: topology.kubernetes.io\/zone$/,
  },
  {
    // kproxy watches only its own Node: another node's region is not in its EndpointSlice.
    name: "002 Only Zonal or Regional Endpoints: another node's region is unknown, no endpoint",
    thisNode: "node-a1",
    topologyKeys: [ZONE, REGION],
    endpointNodes: ["node-b1", "node-c1", "node-c2"],
    want: [],
    reason: /^topologyKeys: no endpoint matches/,
  },
  {
    name: "002 Only Regional Endpoints: an endpoint on this node has this node's region",
    thisNode: "node-a1",
    topologyKeys: [REGION],
    endpointNodes: ["node-a2", "node-a1", "node-c1"],
    want: ["10.1.0.2"],
    reason: /^topologyKeys: topology.kubernetes.io\/region$/,
  },
  {
    name: "002 Only Zonal or Regional Endpoints: neither, traffic is dropped",
    thisNode: "node-a1",
    topologyKeys: [ZONE, REGION],
    endpointNodes: ["node-c1", "node-c2"],
    want: [],
    reason: /^topologyKeys: no endpoint matches/,
  },
  {
    name: "002 Prefer Node Local, Zonal, then Regional Endpoints: node local",
    thisNode: "node-c1",
    topologyKeys: [HOST, ZONE, REGION, "*"],
    endpointNodes: ["node-c1", "node-c2", "node-a1"],
    want: ["10.1.0.1"],
    reason: /hostname$/,
  },
  {
    name: "002 Prefer Node Local, Zonal, then Regional Endpoints: zonal",
    thisNode: "node-c1",
    topologyKeys: [HOST, ZONE, REGION, "*"],
    endpointNodes: ["node-c2", "node-a1"],
    want: ["10.1.0.1"],
    reason: /zone$/,
  },
  {
    name:
      "002 Prefer Node Local, Zonal, then Regional Endpoints: regional is unknown, cluster wide",
    thisNode: "node-a1",
    topologyKeys: [HOST, ZONE, REGION, "*"],
    endpointNodes: ["node-c1", "node-b1"],
    want: ["10.1.0.1", "10.1.0.2"],
    reason: /\*$/,
  },
  {
    name: "002 Prefer Node Local, Zonal, then Regional Endpoints: cluster wide",
    thisNode: "node-a1",
    topologyKeys: [HOST, ZONE, REGION, "*"],
    endpointNodes: ["node-c1", "node-c2"],
    want: ["10.1.0.1", "10.1.0.2"],
    reason: /\*$/,
  },
  {
    name: "002 same zone with fallback on any endpoint: [zone, *] in zone",
    thisNode: "node-b1",
    topologyKeys: [ZONE, "*"],
    endpointNodes: ["node-a1", "node-b1"],
    want: ["10.1.0.2"],
    reason: /zone$/,
  },
  {
    name: "002 same zone with fallback on any endpoint: [zone, *] none in zone",
    thisNode: "node-b1",
    topologyKeys: [ZONE, "*"],
    endpointNodes: ["node-a1", "node-c1"],
    want: ["10.1.0.1", "10.1.0.2"],
    reason: /\*$/,
  },
  {
    name: "002 node without topology labels: keys are skipped, * matches all",
    thisNode: "node-x",
    topologyKeys: [ZONE, "*"],
    endpointNodes: ["node-a1", "node-c1"],
    want: ["10.1.0.1", "10.1.0.2"],
    reason: /\*$/,
  },
  {
    name: "002 node without topology labels and no *: no endpoint",
    thisNode: "node-x",
    topologyKeys: [ZONE, REGION],
    endpointNodes: ["node-a1", "node-c1"],
    want: [],
    reason: /no endpoint matches/,
  },
];

for (const c of KEYS_CASES) {
  Deno.test(`selectTopologyEndpoints() topologyKeys: ${c.name}`, () => {
    const decision = selectTopologyEndpoints(
      input(
        c.thisNode,
        keyedEndpoints(c.endpointNodes, c.thisNode),
        { topologyKeys: c.topologyKeys },
        TOPOLOGY_GATE,
      ),
    );
    assert.deepEqual(ips(decision.endpoints), c.want);
    assert.match(decision.reason, c.reason);
  });
}

Deno.test("selectTopologyEndpoints() topologyKeys take precedence over hints", () => {
  const endpoints = [
    ep({ ip: "10.0.1.1", node: "node-a1", forZones: ["a"] }),
    ep({ ip: "10.0.1.2", node: "node-a2", forZones: ["a"] }),
  ];
  const decision = selectTopologyEndpoints(
    input("node-a2", endpoints, { topologyKeys: [HOST] }, TOPOLOGY_GATE),
  );
  assert.deepEqual(ips(decision.endpoints), ["10.0.1.2"]);
});

Deno.test("selectTopologyEndpoints() topologyKeys: the zone of an unknown node comes from the endpoint", () => {
  const endpoints = [
    ep({ ip: "10.0.1.1", node: "node-gone" }),
    ep({ ip: "10.0.2.1", node: "node-b1" }),
  ];
  endpoints[0]!.endpoint.zone = "a";
  const decision = selectTopologyEndpoints(
    input("node-a1", endpoints, { topologyKeys: [ZONE] }, TOPOLOGY_GATE),
  );
  assert.deepEqual(ips(decision.endpoints), ["10.0.1.1"]);
});

Deno.test("selectTopologyEndpoints() topologyKeys: hostname and zone come from the EndpointSlice, not Node objects", () => {
  const endpoints = [
    ep({ ip: "10.0.1.1", node: "node-a2" }),
    ep({ ip: "10.0.2.1", node: "node-b1" }),
  ];
  // No Node object of node-a2 or node-b1 is known: kproxy does not watch them.
  const decision = selectTopologyEndpoints(
    input("node-a1", endpoints, { topologyKeys: [ZONE] }, TOPOLOGY_GATE),
  );
  assert.deepEqual(ips(decision.endpoints), ["10.0.1.1"]);
});

Deno.test("selectTopologyEndpoints() topologyKeys: another node's other labels are unknown", () => {
  const rack = (name: string): Node => ({
    ...NODES.get(name)!,
    labels: { ...NODES.get(name)!.labels, "example.com/rack": "r7" },
  });
  const endpoints = [
    ep({ ip: "10.0.1.1", node: "node-a1" }),
    ep({ ip: "10.0.1.2", node: "node-a2" }),
  ];
  const decision = selectTopologyEndpoints({
    ...input("node-a1", endpoints, { topologyKeys: ["example.com/rack"] }, TOPOLOGY_GATE),
    nodeLabels: rack("node-a1").labels,
  });
  assert.deepEqual(ips(decision.endpoints), ["10.0.1.1"]);
});

Deno.test("unservedTopologyKeys() names the keys only this node's endpoints can match", () => {
  assert.deepEqual(unservedTopologyKeys([HOST, ZONE, "*"]), []);
  assert.deepEqual(unservedTopologyKeys([HOST, REGION, "example.com/rack", "*"]), [
    REGION,
    "example.com/rack",
  ]);
});

Deno.test("selectTopologyEndpoints() ignores hints for the serving-terminating fallback", () => {
  const decision = selectTopologyEndpoints({
    ...input("node-a1", preferCloseEndpoints()),
    usability: "serving-terminating",
  });
  assert.equal(decision.endpoints.length, 4);
  assert.equal(decision.filtered, false);
});

Deno.test("gateEnabled() uses upstream defaults for known gates", () => {
  assert.equal(gateEnabled({}, "PreferSameTrafficDistribution"), true);
  assert.equal(gateEnabled({}, "ServiceTopology"), false);
  assert.equal(gateEnabled({}, "Unknown"), false);
  assert.equal(gateEnabled({ ServiceTopology: true }, "ServiceTopology"), true);
});

// Seed 004 "Intersection with internal/externalTrafficPolicy" and seed 000
// "Interaction with Traffic Policies": Local policies win over hints.
interface PolicyCase {
  name: string;
  itp: "Cluster" | "Local";
  externalLocal: boolean;
  wantInternal: string[];
  wantExternal: string[];
}

const POLICY_CASES: PolicyCase[] = [
  {
    name: "ETP -, ITP -, hints: both follow hints",
    itp: "Cluster",
    externalLocal: false,
    wantInternal: ["10.0.1.1", "10.0.1.2"],
    wantExternal: ["10.0.1.1", "10.0.1.2"],
  },
  {
    name: "ETP Local, ITP -, hints: external local, internal hints",
    itp: "Cluster",
    externalLocal: true,
    wantInternal: ["10.0.1.1", "10.0.1.2"],
    wantExternal: ["10.0.1.2"],
  },
  {
    name: "ETP Local, ITP Local, hints: both local",
    itp: "Local",
    externalLocal: true,
    wantInternal: ["10.0.1.2"],
    wantExternal: ["10.0.1.2"],
  },
  {
    name: "ETP -, ITP Local, hints: internal local, external hints",
    itp: "Local",
    externalLocal: false,
    wantInternal: ["10.0.1.2"],
    wantExternal: ["10.0.1.1", "10.0.1.2"],
  },
];

for (const c of POLICY_CASES) {
  Deno.test(`categorizeEndpoints() 004 Intersection with traffic policies: ${c.name}`, () => {
    const thisNode = "node-a2";
    const endpoints = [
      ep({ ip: "10.0.1.1", node: "node-a1", forZones: ["a"] }, thisNode),
      ep({ ip: "10.0.1.2", node: "node-a2", forZones: ["a"] }, thisNode),
      ep({ ip: "10.0.2.1", node: "node-b1", forZones: ["b"] }, thisNode),
    ];
    const { internal, external } = categorizeEndpoints({
      endpoints,
      service: {
        internalTrafficPolicy: c.itp,
        topologyKeys: [],
        trafficDistribution: "PreferClose",
        topologyMode: "",
      },
      externalLocal: c.externalLocal,
      topology: {
        nodeName: thisNode,
        nodeLabels: NODES.get(thisNode)!.labels,
        featureGates: {},
      },
    });
    assert.deepEqual(internal.endpoints.map((e) => e.ip), c.wantInternal);
    assert.deepEqual(external.endpoints.map((e) => e.ip), c.wantExternal);
  });
}
