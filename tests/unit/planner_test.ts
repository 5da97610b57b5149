import assert from "node:assert/strict";
import { modelService } from "../support/model_fixtures.ts";
import { withLogRecords } from "../support/logs.ts";
import type {
  EndpointSlice,
  IpFamily,
  Node,
  Service,
  ServiceCIDR,
  ServicePortSpec,
  SliceEndpoint,
  SlicePort,
} from "../../lib/core/model.ts";
import { HOSTNAME_LABEL, serviceKey, ZONE_LABEL } from "../../lib/core/model.ts";
import type { NodePlans, Plan, ServicePortPlan } from "../../lib/core/plan.ts";
import { changedServicePortIds, type PlannerOptions, planNode } from "../../lib/core/planner.ts";
import type { ClusterState } from "../../lib/core/state.ts";

const THIS_NODE = "node-a";

// ---------------------------------------------------------------- builders

function port(spec: Partial<ServicePortSpec> = {}): ServicePortSpec {
  return { name: "", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 0, ...spec };
}

function service(spec: Partial<Service> & { name: string }): Service {
  return modelService({ ports: [port()], ...spec });
}

function endpoint(spec: Partial<SliceEndpoint> & { ip: string }): SliceEndpoint {
  const ready = spec.ready ?? true;
  return {
    ready,
    serving: ready,
    terminating: false,
    nodeName: "node-b",
    zone: "",
    ...spec,
  };
}

/** A terminating endpoint that still serves. */
function terminating(spec: Partial<SliceEndpoint> & { ip: string }): SliceEndpoint {
  return endpoint({ ready: false, serving: true, terminating: true, ...spec });
}

let sliceCount = 0;

function slice(
  spec: Partial<EndpointSlice> & { service: string; endpoints: SliceEndpoint[] },
): EndpointSlice {
  const { service: serviceName, ...rest } = spec;
  return {
    namespace: "default",
    name: `${serviceName}-${++sliceCount}`,
    serviceName,
    family: "IPv4",
    ports: [{ name: "", protocol: "TCP", port: 8080 }],
    ...rest,
  };
}

function node(spec: Partial<Node> & { name: string }): Node {
  return { labels: {}, addresses: [], podCIDRs: [], deleting: false, ...spec };
}

interface StateSpec {
  services?: Service[];
  slices?: EndpointSlice[];
  nodes?: Node[];
  serviceCIDRs?: ServiceCIDR[];
}

function state(spec: StateSpec): ClusterState {
  const slicesByService = new Map<string, EndpointSlice[]>();
  for (const s of spec.slices ?? []) {
    const key = serviceKey(s.namespace, s.serviceName);
    slicesByService.set(key, [...(slicesByService.get(key) ?? []), s]);
  }
  return {
    services: new Map((spec.services ?? []).map((s) => [serviceKey(s.namespace, s.name), s])),
    slicesByService,
    nodes: new Map(
      (spec.nodes ?? [node({ name: THIS_NODE, addresses: ["192.168.1.10"] })]).map((
        n,
      ) => [n.name, n]),
    ),
    serviceCIDRs: spec.serviceCIDRs ?? [],
  };
}

function options(spec: Partial<PlannerOptions> = {}): PlannerOptions {
  return {
    nodeName: THIS_NODE,
    nodePortAddresses: ["primary"],
    localAddresses: ["127.0.0.1", "192.168.1.10", "::1", "fd00::10"],
    clusterCIDRs: [],
    detectLocalMode: "",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    masqueradeAll: false,
    serviceClusterIPRange: ["10.96.0.0/16"],
    externalIPAllowedCIDRs: [],
    featureGates: {},
    ...spec,
  };
}

function plan(spec: StateSpec, opts: Partial<PlannerOptions> = {}): NodePlans {
  return planNode({ state: state(spec), options: options(opts) });
}

/** The only service port of the IPv4 plan. */
function only(plans: NodePlans, family: IpFamily = "IPv4"): ServicePortPlan {
  const services = (family === "IPv4" ? plans.ipv4 : plans.ipv6).services;
  assert.equal(services.length, 1, `expected one ${family} service port`);
  return services[0]!;
}

const ips = (t: { endpoints: { ip: string; port: number }[] }) =>
  t.endpoints.map((e) => `${e.ip}:${e.port}`);

// ---------------------------------------------------------------- service types

Deno.test("planNode() plans a ClusterIP service port", () => {
  const plans = plan({
    services: [service({ name: "web", affinityTimeoutSeconds: 0 })],
    slices: [slice({ service: "web", endpoints: [endpoint({ ip: "10.244.1.5" })] })],
  });
  const sp = only(plans);
  assert.equal(sp.id, "default/web:/TCP");
  assert.deepEqual(sp.clusterIPs, ["10.96.0.10"]);
  assert.equal(sp.port, 80);
  assert.equal(sp.nodePort, 0);
  assert.deepEqual(sp.externalIPs, []);
  assert.deepEqual(sp.loadBalancerIPs, []);
  assert.equal(sp.externalLocal, false);
  assert.equal(sp.healthCheckNodePort, 0);
  assert.deepEqual(ips(sp.internal), ["10.244.1.5:8080"]);
  assert.deepEqual(sp.internal, sp.external);
  assert.equal(sp.internal.reason, "ready endpoints");
  assert.equal(sp.internal.endpoints[0]!.isLocal, false);
  assert.deepEqual(plans.ipv6.services, []);
  assert.equal(plans.ipv6.family, "IPv6");
  assert.equal(plans.ipv4.nodeName, THIS_NODE);
});

Deno.test("planNode() sets the node port of NodePort and LoadBalancer services only", () => {
  const types: [Service["type"], number][] = [
    ["ClusterIP", 0],
    ["NodePort", 30080],
    ["LoadBalancer", 30080],
  ];
  for (const [type, want] of types) {
    const sp = only(plan({
      services: [service({ name: "web", type, ports: [port({ nodePort: 30080 })] })],
    }));
    assert.equal(sp.nodePort, want, type);
  }
});

Deno.test("planNode() captures VIP load-balancer IPs and not Proxy ones", () => {
  const sp = only(plan({
    services: [service({
      name: "lb",
      type: "LoadBalancer",
      ports: [port({ nodePort: 30001 })],
      loadBalancerIngress: [
        { ip: "203.0.113.1", ipMode: "VIP" },
        { ip: "203.0.113.2", ipMode: "Proxy" },
      ],
      loadBalancerSourceRanges: ["198.51.100.0/24", "2001:db8::/64"],
    })],
  }));
  assert.deepEqual(sp.loadBalancerIPs, ["203.0.113.1"]);
  assert.deepEqual(sp.sourceRanges, ["198.51.100.0/24"]);
  assert.equal(sp.healthCheckNodePort, 0);
});

Deno.test("planNode() lets load-balancer IPs through the source ranges only when they hold a node port address", () => {
  const lb = (ranges: string[]) =>
    only(plan({
      services: [service({
        name: "lb",
        type: "LoadBalancer",
        ports: [port({ nodePort: 30001 })],
        loadBalancerIngress: [{ ip: "203.0.113.1", ipMode: "VIP" }],
        loadBalancerSourceRanges: ranges,
      })],
    }));
  // The node's primary address is 192.168.1.10.
  assert.equal(lb(["198.51.100.0/24", "192.168.0.0/16"]).allowFromLoadBalancerIPs, true);
  assert.equal(lb(["198.51.100.0/24"]).allowFromLoadBalancerIPs, false);
  assert.equal(lb([]).allowFromLoadBalancerIPs, false);
});

Deno.test("planNode() ignores load-balancer fields on non-LoadBalancer services", () => {
  const sp = only(plan({
    services: [service({
      name: "np",
      type: "NodePort",
      ports: [port({ nodePort: 30001 })],
      loadBalancerIngress: [{ ip: "203.0.113.1", ipMode: "VIP" }],
      loadBalancerSourceRanges: ["198.51.100.0/24"],
      healthCheckNodePort: 31000,
      externalTrafficPolicy: "Local",
    })],
  }));
  assert.deepEqual(sp.loadBalancerIPs, []);
  assert.deepEqual(sp.sourceRanges, []);
  assert.equal(sp.healthCheckNodePort, 0);
});

Deno.test("planNode() sets healthCheckNodePort only for externalTrafficPolicy Local LoadBalancers", () => {
  for (const [etp, want] of [["Local", 31000], ["Cluster", 0]] as const) {
    const sp = only(plan({
      services: [service({
        name: "lb",
        type: "LoadBalancer",
        ports: [port({ nodePort: 30001 })],
        loadBalancerIngress: [{ ip: "203.0.113.1", ipMode: "VIP" }],
        externalTrafficPolicy: etp,
        healthCheckNodePort: 31000,
      })],
    }));
    assert.equal(sp.healthCheckNodePort, want, etp);
    assert.equal(sp.externalLocal, etp === "Local");
  }
});

Deno.test("planNode() carries preserve-destination to ports with a node port or load-balancer IP", () => {
  const cases = [
    { type: "LoadBalancer" as const, nodePort: 30001, want: true },
    { type: "NodePort" as const, nodePort: 30001, want: true },
    { type: "ClusterIP" as const, nodePort: 0, want: undefined },
  ];
  for (const { type, nodePort, want } of cases) {
    const sp = only(plan({
      services: [service({
        name: "keep",
        type,
        ports: [port({ nodePort })],
        preserveDestination: true,
      })],
    }));
    assert.equal(sp.preserveDestination, want, type);
  }
});

Deno.test("planNode() honours declared externalIPs", () => {
  const sp = only(plan({
    services: [service({ name: "ext", externalIPs: ["198.51.100.7", "2001:db8::7"] })],
  }));
  assert.deepEqual(sp.externalIPs, ["198.51.100.7"]);
});

Deno.test("planNode() drops externalIPs outside externalIPAllowedCIDRs (CVE-2020-8554)", () => {
  const sp = only(plan(
    { services: [service({ name: "ext", externalIPs: ["198.51.100.7", "203.0.113.9"] })] },
    { externalIPAllowedCIDRs: ["198.51.100.0/24"] },
  ));
  assert.deepEqual(sp.externalIPs, ["198.51.100.7"]);
});

Deno.test("planNode() skips headless services defensively", () => {
  const plans = plan({
    services: [service({ name: "headless", clusterIPs: [] })],
    slices: [slice({ service: "headless", endpoints: [endpoint({ ip: "10.244.1.5" })] })],
  });
  assert.deepEqual(plans.ipv4.services, []);
  assert.deepEqual(plans.ipv6.services, []);
});

Deno.test("planNode() skips services with odd cluster IPs and ExternalName services defensively", () => {
  const plans = plan({
    services: [
      service({ name: "none", clusterIPs: ["None"] }),
      { ...service({ name: "ext", clusterIPs: [] }), type: "ExternalName" as Service["type"] },
      service({ name: "ok", clusterIPs: ["10.96.0.11"] }),
    ],
  });
  assert.deepEqual(plans.ipv4.services.map((s) => s.name), ["ok"]);
  assert.deepEqual(plans.ipv6.services, []);
});

Deno.test("planNode() plans one service port per declared port, sorted by id", () => {
  const plans = plan({
    services: [
      service({
        name: "multi",
        ports: [
          port({ name: "https", port: 443 }),
          port({ name: "dns", protocol: "UDP", port: 53 }),
        ],
      }),
      service({ name: "alpha", clusterIPs: ["10.96.0.11"] }),
    ],
    slices: [slice({
      service: "multi",
      ports: [
        { name: "https", protocol: "TCP", port: 8443 },
        { name: "dns", protocol: "UDP", port: 5353 },
      ],
      endpoints: [endpoint({ ip: "10.244.1.5" })],
    })],
  });
  assert.deepEqual(plans.ipv4.services.map((s) => s.id), [
    "default/alpha:/TCP",
    "default/multi:dns/UDP",
    "default/multi:https/TCP",
  ]);
  assert.deepEqual(ips(plans.ipv4.services[1]!.internal), ["10.244.1.5:5353"]);
  assert.deepEqual(ips(plans.ipv4.services[2]!.internal), ["10.244.1.5:8443"]);
});

Deno.test("planNode() carries the session affinity timeout", () => {
  const sp = only(plan({ services: [service({ name: "sticky", affinityTimeoutSeconds: 10800 })] }));
  assert.equal(sp.affinityTimeoutSeconds, 10800);
});

// ---------------------------------------------------------------- traffic policies

interface PolicyCase {
  name: string;
  itp: "Cluster" | "Local";
  etp: "Cluster" | "Local";
  endpoints: SliceEndpoint[];
  internal: string[];
  internalWhenEmpty?: "reject" | "drop";
  internalReason: RegExp;
  external: string[];
  externalWhenEmpty?: "reject" | "drop";
  externalReason: RegExp;
  externalLocal: boolean;
  localReady: number;
}

const LOCAL_1 = endpoint({ ip: "10.244.0.5", nodeName: THIS_NODE });
const REMOTE_1 = endpoint({ ip: "10.244.1.5", nodeName: "node-b" });
const REMOTE_2 = endpoint({ ip: "10.244.2.5", nodeName: "node-c" });

const POLICY_CASES: PolicyCase[] = [
  {
    name: "ITP Cluster, ETP Cluster: every ready endpoint for both",
    itp: "Cluster",
    etp: "Cluster",
    endpoints: [LOCAL_1, REMOTE_1],
    internal: ["10.244.0.5:8080", "10.244.1.5:8080"],
    internalReason: /^ready endpoints$/,
    external: ["10.244.0.5:8080", "10.244.1.5:8080"],
    externalReason: /^ready endpoints$/,
    externalLocal: false,
    localReady: 1,
  },
  {
    name: "ITP Local, ETP Cluster: internal local only",
    itp: "Local",
    etp: "Cluster",
    endpoints: [LOCAL_1, REMOTE_1],
    internal: ["10.244.0.5:8080"],
    internalReason: /^internalTrafficPolicy Local: 1 local endpoint$/,
    external: ["10.244.0.5:8080", "10.244.1.5:8080"],
    externalReason: /^ready endpoints$/,
    externalLocal: false,
    localReady: 1,
  },
  {
    name: "ITP Cluster, ETP Local: external local only",
    itp: "Cluster",
    etp: "Local",
    endpoints: [LOCAL_1, REMOTE_1],
    internal: ["10.244.0.5:8080", "10.244.1.5:8080"],
    internalReason: /^ready endpoints$/,
    external: ["10.244.0.5:8080"],
    externalReason: /^externalTrafficPolicy Local: 1 local endpoint$/,
    externalLocal: true,
    localReady: 1,
  },
  {
    name: "ITP Local, ETP Local: both local only",
    itp: "Local",
    etp: "Local",
    endpoints: [LOCAL_1, REMOTE_1],
    internal: ["10.244.0.5:8080"],
    internalReason: /^internalTrafficPolicy Local/,
    external: ["10.244.0.5:8080"],
    externalReason: /^externalTrafficPolicy Local/,
    externalLocal: true,
    localReady: 1,
  },
  {
    name: "ITP Local without local endpoints: internal drops, external still forwards",
    itp: "Local",
    etp: "Cluster",
    endpoints: [REMOTE_1, REMOTE_2],
    internal: [],
    internalWhenEmpty: "drop",
    internalReason: /^internalTrafficPolicy Local: no local endpoints: drop$/,
    external: ["10.244.1.5:8080", "10.244.2.5:8080"],
    externalReason: /^ready endpoints$/,
    externalLocal: false,
    localReady: 0,
  },
  {
    name: "ETP Local without local endpoints: external drops",
    itp: "Cluster",
    etp: "Local",
    endpoints: [REMOTE_1],
    internal: ["10.244.1.5:8080"],
    internalReason: /^ready endpoints$/,
    external: [],
    externalWhenEmpty: "drop",
    externalReason: /^externalTrafficPolicy Local: no local endpoints: drop$/,
    externalLocal: true,
    localReady: 0,
  },
  {
    name: "no endpoints at all: both reject",
    itp: "Local",
    etp: "Local",
    endpoints: [],
    internal: [],
    internalWhenEmpty: "reject",
    internalReason: /^no endpoints: reject$/,
    external: [],
    externalWhenEmpty: "reject",
    externalReason: /^no endpoints: reject$/,
    externalLocal: true,
    localReady: 0,
  },
  {
    name: "only unready (not serving) endpoints: both reject",
    itp: "Cluster",
    etp: "Cluster",
    endpoints: [endpoint({ ip: "10.244.1.5", ready: false })],
    internal: [],
    internalWhenEmpty: "reject",
    internalReason: /^no ready or serving endpoints: reject$/,
    external: [],
    externalWhenEmpty: "reject",
    externalReason: /reject$/,
    externalLocal: false,
    localReady: 0,
  },
  {
    name: "terminating fallback (cluster): no ready endpoint anywhere, serving-terminating used",
    itp: "Cluster",
    etp: "Cluster",
    endpoints: [
      terminating({ ip: "10.244.1.5" }),
      endpoint({ ip: "10.244.1.6", ready: false, serving: false, terminating: true }),
    ],
    internal: ["10.244.1.5:8080"],
    internalReason: /^terminating fallback$/,
    external: ["10.244.1.5:8080"],
    externalReason: /^terminating fallback$/,
    externalLocal: false,
    localReady: 0,
  },
  {
    name: "terminating fallback is not used while a ready endpoint exists",
    itp: "Cluster",
    etp: "Cluster",
    endpoints: [terminating({ ip: "10.244.1.5" }), REMOTE_2],
    internal: ["10.244.2.5:8080"],
    internalReason: /^ready endpoints$/,
    external: ["10.244.2.5:8080"],
    externalReason: /^ready endpoints$/,
    externalLocal: false,
    localReady: 0,
  },
  {
    name:
      "000 terminating endpoints, Local: all local endpoints terminating, they are used though remote ones are ready",
    itp: "Local",
    etp: "Local",
    endpoints: [terminating({ ip: "10.244.0.5", nodeName: THIS_NODE }), REMOTE_1],
    internal: ["10.244.0.5:8080"],
    internalReason: /^internalTrafficPolicy Local: terminating fallback, 1 terminating local/,
    external: ["10.244.0.5:8080"],
    externalReason: /^externalTrafficPolicy Local: terminating fallback/,
    externalLocal: true,
    localReady: 0,
  },
  {
    name: "000 terminating endpoints, Local: a ready local endpoint is preferred over terminating",
    itp: "Cluster",
    etp: "Local",
    endpoints: [
      terminating({ ip: "10.244.0.5", nodeName: THIS_NODE }),
      endpoint({ ip: "10.244.0.6", nodeName: THIS_NODE }),
    ],
    internal: ["10.244.0.6:8080"],
    internalReason: /^ready endpoints$/,
    external: ["10.244.0.6:8080"],
    externalReason: /^externalTrafficPolicy Local: 1 local endpoint$/,
    externalLocal: true,
    localReady: 1,
  },
  {
    name: "000 terminating endpoints, Local: remote terminating endpoints do not count",
    itp: "Cluster",
    etp: "Local",
    endpoints: [terminating({ ip: "10.244.1.5" })],
    internal: ["10.244.1.5:8080"],
    internalReason: /^terminating fallback$/,
    external: [],
    externalWhenEmpty: "drop",
    externalReason: /no local endpoints: drop$/,
    externalLocal: true,
    localReady: 0,
  },
];

for (const c of POLICY_CASES) {
  Deno.test(`planNode() traffic policy: ${c.name}`, () => {
    const sp = only(plan({
      services: [service({
        name: "web",
        type: "NodePort",
        ports: [port({ nodePort: 30080 })],
        internalTrafficPolicy: c.itp,
        externalTrafficPolicy: c.etp,
      })],
      slices: [slice({ service: "web", endpoints: c.endpoints })],
    }));
    assert.deepEqual(ips(sp.internal), c.internal, "internal");
    assert.match(sp.internal.reason, c.internalReason);
    if (c.internalWhenEmpty) assert.equal(sp.internal.whenEmpty, c.internalWhenEmpty);
    assert.deepEqual(ips(sp.external), c.external, "external");
    assert.match(sp.external.reason, c.externalReason);
    if (c.externalWhenEmpty) assert.equal(sp.external.whenEmpty, c.externalWhenEmpty);
    assert.equal(sp.externalLocal, c.externalLocal);
    assert.equal(sp.localReadyEndpoints, c.localReady);
  });
}

Deno.test("planNode() applies externalTrafficPolicy Local only to services with external addresses", () => {
  const sp = only(plan({
    services: [service({ name: "web", externalTrafficPolicy: "Local" })],
    slices: [slice({ service: "web", endpoints: [REMOTE_1] })],
  }));
  assert.equal(sp.externalLocal, false);
  assert.deepEqual(ips(sp.external), ["10.244.1.5:8080"]);
});

Deno.test("planNode() applies externalTrafficPolicy Local to externalIPs of a ClusterIP service", () => {
  const sp = only(plan({
    services: [service({
      name: "web",
      externalIPs: ["198.51.100.7"],
      externalTrafficPolicy: "Local",
    })],
    slices: [slice({ service: "web", endpoints: [LOCAL_1, REMOTE_1] })],
  }));
  assert.equal(sp.externalLocal, true);
  assert.deepEqual(ips(sp.external), ["10.244.0.5:8080"]);
});

Deno.test("planNode() counts ready local endpoints for the health-check node port", () => {
  const sp = only(plan({
    services: [service({
      name: "lb",
      type: "LoadBalancer",
      ports: [port({ nodePort: 30001 })],
      externalTrafficPolicy: "Local",
      healthCheckNodePort: 31000,
    })],
    slices: [slice({
      service: "lb",
      endpoints: [
        endpoint({ ip: "10.244.0.5", nodeName: THIS_NODE }),
        endpoint({ ip: "10.244.0.6", nodeName: THIS_NODE }),
        terminating({ ip: "10.244.0.7", nodeName: THIS_NODE }),
        endpoint({ ip: "10.244.0.8", nodeName: THIS_NODE, ready: false }),
        REMOTE_1,
      ],
    })],
  }));
  assert.equal(sp.localReadyEndpoints, 2);
  assert.match(sp.external.reason, /2 local endpoints$/);
});

Deno.test("planNode() lists every serving endpoint for conntrack, whatever policy chose", () => {
  const sp = only(plan({
    services: [service({
      name: "dns",
      ports: [port({ protocol: "UDP", port: 53, nodePort: 30053 })],
      type: "NodePort",
      internalTrafficPolicy: "Local",
      externalTrafficPolicy: "Local",
    })],
    slices: [slice({
      service: "dns",
      ports: [{ name: "", protocol: "UDP", port: 5353 }],
      endpoints: [
        endpoint({ ip: "10.244.0.5", nodeName: THIS_NODE }),
        terminating({ ip: "10.244.0.7", nodeName: THIS_NODE }),
        endpoint({ ip: "10.244.0.8", nodeName: THIS_NODE, ready: false }),
        endpoint({ ip: "10.244.1.5" }),
        terminating({ ip: "10.244.1.9" }),
      ],
    })],
  }));
  assert.deepEqual(ips(sp.internal), ["10.244.0.5:5353"]);
  assert.deepEqual(sp.servingEndpoints.map((e) => `${e.ip}:${e.port}`), [
    "10.244.0.5:5353",
    "10.244.0.7:5353",
    "10.244.1.5:5353",
    "10.244.1.9:5353",
  ]);
});

// ---------------------------------------------------------------- endpoints from slices

Deno.test("planNode() resolves a named targetPort per slice from the slice port", () => {
  const sp = only(plan({
    services: [service({ name: "web", ports: [port({ name: "http", targetPort: "http" })] })],
    slices: [
      slice({
        service: "web",
        ports: [{ name: "http", protocol: "TCP", port: 8080 }],
        endpoints: [endpoint({ ip: "10.244.1.5" })],
      }),
      slice({
        service: "web",
        ports: [{ name: "http", protocol: "TCP", port: 9090 }],
        endpoints: [endpoint({ ip: "10.244.2.5" })],
      }),
    ],
  }));
  assert.deepEqual(ips(sp.internal), ["10.244.1.5:8080", "10.244.2.5:9090"]);
});

Deno.test("planNode() matches slice ports by name and protocol", () => {
  const ports: SlicePort[] = [
    { name: "dns", protocol: "TCP", port: 5353 },
    { name: "other", protocol: "UDP", port: 1 },
  ];
  const sp = only(plan({
    services: [service({ name: "dns", ports: [port({ name: "dns", protocol: "UDP", port: 53 })] })],
    slices: [slice({ service: "dns", ports, endpoints: [endpoint({ ip: "10.244.1.5" })] })],
  }));
  assert.deepEqual(sp.internal.endpoints, []);
  assert.equal(sp.internal.whenEmpty, "reject");
});

Deno.test("planNode() keeps one copy of an endpoint listed in two slices, the ready one", () => {
  const sp = only(plan({
    services: [service({ name: "web" })],
    slices: [
      slice({ service: "web", endpoints: [endpoint({ ip: "10.244.1.5", ready: false })] }),
      slice({ service: "web", endpoints: [endpoint({ ip: "10.244.1.5" })] }),
      slice({ service: "web", endpoints: [endpoint({ ip: "10.244.1.5", ready: false })] }),
    ],
  }));
  assert.equal(sp.internal.endpoints.length, 1);
  assert.equal(sp.internal.endpoints[0]!.ready, true);
});

Deno.test("planNode() merges several slices and sorts endpoints by IP then port", () => {
  const sp = only(plan({
    services: [service({ name: "web" })],
    slices: [
      slice({
        service: "web",
        endpoints: [endpoint({ ip: "10.244.1.10" }), endpoint({ ip: "10.244.1.9" })],
      }),
      slice({ service: "web", endpoints: [endpoint({ ip: "10.244.1.100" })] }),
      slice({
        service: "web",
        ports: [{ name: "", protocol: "TCP", port: 7070 }],
        endpoints: [endpoint({ ip: "10.244.1.9" })],
      }),
    ],
  }));
  assert.deepEqual(ips(sp.internal), [
    "10.244.1.9:7070",
    "10.244.1.9:8080",
    "10.244.1.10:8080",
    "10.244.1.100:8080",
  ]);
});

Deno.test("planNode() marks endpoints on this node as local", () => {
  const sp = only(plan({
    services: [service({ name: "web" })],
    slices: [slice({ service: "web", endpoints: [LOCAL_1, REMOTE_1] })],
  }));
  assert.deepEqual(sp.internal.endpoints.map((e) => e.isLocal), [true, false]);
});

// ---------------------------------------------------------------- dual stack

Deno.test("planNode() splits a dual-stack service by family", () => {
  const plans = plan({
    services: [service({
      name: "dual",
      type: "LoadBalancer",
      clusterIPs: ["10.96.0.10", "fd00:96::10"],
      ports: [port({ nodePort: 30080 })],
      externalIPs: ["198.51.100.7", "2001:db8:1::7"],
      loadBalancerIngress: [
        { ip: "203.0.113.1", ipMode: "VIP" },
        { ip: "2001:db8:2::1", ipMode: "VIP" },
      ],
      loadBalancerSourceRanges: ["198.51.100.0/24", "2001:db8:3::/64"],
    })],
    slices: [
      slice({ service: "dual", endpoints: [endpoint({ ip: "10.244.1.5" })] }),
      slice({ service: "dual", family: "IPv6", endpoints: [endpoint({ ip: "fd00:244::5" })] }),
    ],
  });
  const v4 = only(plans, "IPv4");
  const v6 = only(plans, "IPv6");
  assert.deepEqual(
    [v4.clusterIPs, v4.externalIPs, v4.loadBalancerIPs, v4.sourceRanges, ips(v4.internal)],
    [["10.96.0.10"], ["198.51.100.7"], ["203.0.113.1"], ["198.51.100.0/24"], [
      "10.244.1.5:8080",
    ]],
  );
  assert.deepEqual(
    [v6.clusterIPs, v6.externalIPs, v6.loadBalancerIPs, v6.sourceRanges, ips(v6.internal)],
    [["fd00:96::10"], ["2001:db8:1::7"], ["2001:db8:2::1"], ["2001:db8:3::/64"], [
      "fd00:244::5:8080",
    ]],
  );
  assert.equal(v4.nodePort, 30080);
  assert.equal(v6.nodePort, 30080);
  assert.equal(v4.id, v6.id);
});

Deno.test("planNode() plans a single-stack IPv6 service in the IPv6 plan only", () => {
  const plans = plan({
    services: [service({ name: "v6", clusterIPs: ["fd00:96::10"], externalIPs: ["198.51.100.7"] })],
    slices: [
      slice({ service: "v6", family: "IPv6", endpoints: [endpoint({ ip: "fd00:244::5" })] }),
    ],
  });
  assert.deepEqual(plans.ipv4.services, []);
  const sp = only(plans, "IPv6");
  assert.deepEqual(sp.externalIPs, []);
  assert.deepEqual(ips(sp.internal), ["fd00:244::5:8080"]);
});

Deno.test("planNode() lets load-balancer IPs through the source ranges by the node IP, as kube-proxy's allowFromNode", () => {
  const lb = (opts: Partial<PlannerOptions>) =>
    only(plan({
      services: [service({
        name: "lb",
        type: "LoadBalancer",
        ports: [port({ nodePort: 30001 })],
        loadBalancerIngress: [{ ip: "203.0.113.1", ipMode: "VIP" }],
        loadBalancerSourceRanges: ["10.0.0.0/8"],
      })],
    }, { nodePortAddresses: [], localAddresses: ["192.168.1.10", "10.0.0.5"], ...opts }));
  assert.equal(lb({}).allowFromLoadBalancerIPs, false, "another local address is not the node IP");
  assert.equal(lb({ bindAddress: "10.0.0.5" }).allowFromLoadBalancerIPs, true);
});

// ---------------------------------------------------------------- node ports

interface NodePortCase {
  name: string;
  nodePortAddresses: string[];
  localAddresses?: string[];
  nodeAddresses?: string[];
  bindAddress?: string;
  ipv4: string[];
  ipv6: string[];
}

const NODE_PORT_CASES: NodePortCase[] = [
  {
    name: "primary: the node's first address of each family",
    nodePortAddresses: ["primary"],
    nodeAddresses: ["192.168.1.10", "203.0.113.50", "fd00::10"],
    ipv4: ["192.168.1.10"],
    ipv6: ["fd00::10"],
  },
  {
    name: "primary without a node address: every local address of the family, as kube-proxy",
    nodePortAddresses: ["primary"],
    nodeAddresses: ["192.168.1.10"],
    localAddresses: ["127.0.0.1", "192.168.1.10", "::1", "fd00::20", "fd00::21"],
    ipv4: ["192.168.1.10"],
    ipv6: ["fd00::20", "fd00::21"],
  },
  {
    name: "primary: --bind-address replaces the node's address of its family",
    nodePortAddresses: ["primary"],
    nodeAddresses: ["192.168.1.10", "fd00::10"],
    bindAddress: "192.168.1.99",
    ipv4: ["192.168.1.99"],
    ipv6: ["fd00::10"],
  },
  {
    name: "primary: an unspecified --bind-address changes nothing",
    nodePortAddresses: ["primary"],
    nodeAddresses: ["192.168.1.10", "fd00::10"],
    bindAddress: "0.0.0.0",
    ipv4: ["192.168.1.10"],
    ipv6: ["fd00::10"],
  },
  {
    name: "empty: every local address, never loopback (iptables and ipvs default)",
    nodePortAddresses: [],
    nodeAddresses: ["192.168.1.10"],
    localAddresses: ["127.0.0.1", "192.168.1.10", "10.0.0.5", "::1", "fd00::20"],
    ipv4: ["192.168.1.10", "10.0.0.5"],
    ipv6: ["fd00::20"],
  },
  {
    name: "CIDRs: local addresses inside them, per family",
    nodePortAddresses: ["192.168.0.0/16", "fd00::/64"],
    localAddresses: ["10.0.0.1", "192.168.1.10", "192.168.2.10", "fd00::10", "fd01::10"],
    ipv4: ["192.168.1.10", "192.168.2.10"],
    ipv6: ["fd00::10"],
  },
  {
    name: "CIDRs for one family only: the other family accepts on all its local addresses",
    nodePortAddresses: ["192.168.0.0/16"],
    nodeAddresses: ["192.168.1.10", "fd00::10"],
    localAddresses: ["192.168.1.10", "10.0.0.5", "fd00::10", "fd01::5"],
    ipv4: ["192.168.1.10"],
    ipv6: ["fd00::10", "fd01::5"],
  },
  {
    name: "loopback is never captured, even when a CIDR includes it",
    nodePortAddresses: ["0.0.0.0/0", "::/0"],
    localAddresses: ["127.0.0.1", "192.168.1.10", "::1", "fd00::10"],
    ipv4: ["192.168.1.10"],
    ipv6: ["fd00::10"],
  },
  {
    name: "loopback is never captured as a primary address",
    nodePortAddresses: ["primary"],
    nodeAddresses: ["127.0.0.1"],
    localAddresses: ["127.0.0.1"],
    ipv4: [],
    ipv6: [],
  },
];

for (const c of NODE_PORT_CASES) {
  Deno.test(`planNode() nodePortAddresses: ${c.name}`, () => {
    const plans = plan(
      { nodes: [node({ name: THIS_NODE, addresses: c.nodeAddresses ?? [] })] },
      {
        nodePortAddresses: c.nodePortAddresses,
        ...(c.localAddresses ? { localAddresses: c.localAddresses } : {}),
        ...(c.bindAddress ? { bindAddress: c.bindAddress } : {}),
      },
    );
    assert.deepEqual(plans.ipv4.nodePortAddresses, c.ipv4);
    assert.deepEqual(plans.ipv6.nodePortAddresses, c.ipv6);
  });
}

// ---------------------------------------------------------------- masquerade

interface MasqCase {
  name: string;
  opts: Partial<PlannerOptions>;
  podCIDRs?: string[];
  want: [Plan["localTraffic"], Plan["localTraffic"]];
  masq: [Plan["clusterIPMasquerade"], Plan["clusterIPMasquerade"]];
}

const MASQ_CASES: MasqCase[] = [
  {
    name: "masqueradeAll masquerades everything",
    opts: { masqueradeAll: true, clusterCIDRs: ["10.244.0.0/16"], detectLocalMode: "ClusterCIDR" },
    want: [{ mode: "ClusterCIDR", cidrs: ["10.244.0.0/16"] }, { mode: "None" }],
    masq: ["all", "all"],
  },
  {
    name: "ClusterCIDR: family-filtered cluster CIDRs",
    opts: { detectLocalMode: "ClusterCIDR", clusterCIDRs: ["10.244.0.0/16", "fd00:244::/56"] },
    want: [
      { mode: "ClusterCIDR", cidrs: ["10.244.0.0/16"] },
      { mode: "ClusterCIDR", cidrs: ["fd00:244::/56"] },
    ],
    masq: ["non-local", "non-local"],
  },
  {
    name: "unset mode with cluster CIDRs behaves as ClusterCIDR",
    opts: { detectLocalMode: "", clusterCIDRs: ["10.244.0.0/16"] },
    want: [{ mode: "ClusterCIDR", cidrs: ["10.244.0.0/16"] }, { mode: "None" }],
    masq: ["non-local", "none"],
  },
  {
    name: "unset mode without cluster CIDRs: no detector, no masquerade",
    opts: { detectLocalMode: "" },
    want: [{ mode: "None" }, { mode: "None" }],
    masq: ["none", "none"],
  },
  {
    name: "NodeCIDR: this node's pod CIDRs",
    opts: { detectLocalMode: "NodeCIDR" },
    podCIDRs: ["10.244.3.0/24", "fd00:244:0:3::/64"],
    want: [
      { mode: "NodeCIDR", cidrs: ["10.244.3.0/24"] },
      { mode: "NodeCIDR", cidrs: ["fd00:244:0:3::/64"] },
    ],
    masq: ["non-local", "non-local"],
  },
  {
    name: "NodeCIDR without pod CIDRs: no detector",
    opts: { detectLocalMode: "NodeCIDR" },
    want: [{ mode: "None" }, { mode: "None" }],
    masq: ["none", "none"],
  },
  {
    name: "BridgeInterface",
    opts: { detectLocalMode: "BridgeInterface", bridgeInterface: "cbr0" },
    want: [
      { mode: "BridgeInterface", interfaces: ["cbr0"] },
      { mode: "BridgeInterface", interfaces: ["cbr0"] },
    ],
    masq: ["non-local", "non-local"],
  },
  {
    name: "InterfaceNamePrefix",
    opts: { detectLocalMode: "InterfaceNamePrefix", interfaceNamePrefix: "veth" },
    want: [
      { mode: "InterfaceNamePrefix", interfaces: ["veth"] },
      { mode: "InterfaceNamePrefix", interfaces: ["veth"] },
    ],
    masq: ["non-local", "non-local"],
  },
];

for (const c of MASQ_CASES) {
  Deno.test(`planNode() masquerade: ${c.name}`, () => {
    const plans = plan({
      services: [service({ name: "dual", clusterIPs: ["10.96.0.10", "fd00:96::10"] })],
      nodes: [node({ name: THIS_NODE, podCIDRs: c.podCIDRs ?? [] })],
    }, c.opts);
    assert.deepEqual([plans.ipv4.localTraffic, plans.ipv6.localTraffic], c.want);
    assert.deepEqual(
      [plans.ipv4.clusterIPMasquerade, plans.ipv6.clusterIPMasquerade],
      c.masq,
    );
  });
}

// ---------------------------------------------------------------- service CIDRs

Deno.test("planNode() takes service CIDRs from ServiceCIDR objects, split by family", () => {
  const plans = plan({
    serviceCIDRs: [
      { name: "kubernetes", cidrs: ["10.96.0.0/28", "fd00:96::/112"] },
      { name: "newservicecidr", cidrs: ["10.96.0.0/24"] },
    ],
  });
  // The seed's /28 lies inside the /24: one interval covers both.
  assert.deepEqual(plans.ipv4.serviceCIDRs, ["10.96.0.0/24"]);
  assert.deepEqual(plans.ipv6.serviceCIDRs, ["fd00:96::/112"]);
});

Deno.test("planNode() falls back to serviceClusterIPRange without ServiceCIDR objects", () => {
  const plans = plan({}, { serviceClusterIPRange: ["10.96.0.0/16", "fd00:96::/108"] });
  assert.deepEqual(plans.ipv4.serviceCIDRs, ["10.96.0.0/16"]);
  assert.deepEqual(plans.ipv6.serviceCIDRs, ["fd00:96::/108"]);
});

Deno.test("planNode() logs a cluster IP outside every service CIDR once per change", async (t) => {
  const outside = (ip: string) =>
    service({
      name: "odd",
      clusterIPs: [ip],
      ports: [port({ name: "a" }), port({ name: "b", port: 81 })],
    });
  const withEndpoint = (ip: string) => [slice({ service: "odd", endpoints: [endpoint({ ip })] })];
  const logged = async (
    steps: {
      spec: StateSpec;
      opts?: Partial<PlannerOptions>;
      changed?: string[];
      global?: boolean;
    }[],
  ) => {
    const lines: string[] = [];
    await withLogRecords(["kproxy", "planner"], (records) => {
      let previous: NodePlans | undefined;
      for (const step of steps) {
        previous = planNode({
          state: state(step.spec),
          options: options(step.opts),
          previous,
          changedServices: step.changed === undefined ? undefined : new Set(step.changed),
          globalChange: step.global,
        });
        lines.push(records.splice(0).map((r) => JSON.stringify(r.properties)).join(" | "));
      }
    });
    return lines;
  };
  await t.step(
    "outside --service-cluster-ip-range: one line per service, not per port",
    async () => {
      assert.deepEqual(await logged([{ spec: { services: [outside("10.97.0.5")] } }]), [
        '{"ip":"10.97.0.5","key":"default/odd","cidrs":["10.96.0.0/16"]}',
      ]);
    },
  );
  await t.step("not again when only its endpoints or other services change", async () => {
    const lines = await logged([
      { spec: { services: [outside("10.97.0.5")], slices: withEndpoint("10.244.1.5") } },
      {
        spec: { services: [outside("10.97.0.5")], slices: withEndpoint("10.244.1.6") },
        changed: ["default/odd"],
      },
      {
        spec: { services: [outside("10.97.0.5"), service({ name: "web" })] },
        changed: ["default/web", "default/odd"],
      },
      { spec: { services: [outside("10.97.0.5")] }, opts: { masqueradeAll: true }, global: true },
    ]);
    assert.equal(lines[0]!.length > 0, true);
    assert.deepEqual(lines.slice(1), ["", "", ""]);
  });
  await t.step("again when its cluster IP or the service CIDRs change", async () => {
    const lines = await logged([
      { spec: { services: [outside("10.97.0.5")] } },
      { spec: { services: [outside("10.98.0.5")] }, changed: ["default/odd"] },
      {
        spec: {
          services: [outside("10.98.0.5")],
          serviceCIDRs: [{ name: "kubernetes", cidrs: ["10.99.0.0/16"] }],
        },
        global: true,
      },
    ]);
    assert.deepEqual(lines, [
      '{"ip":"10.97.0.5","key":"default/odd","cidrs":["10.96.0.0/16"]}',
      '{"ip":"10.98.0.5","key":"default/odd","cidrs":["10.96.0.0/16"]}',
      '{"ip":"10.98.0.5","key":"default/odd","cidrs":["10.99.0.0/16"]}',
    ]);
  });
  await t.step("silent inside a ServiceCIDR, or when no CIDR is known", async () => {
    const lines = await logged([
      {
        spec: {
          services: [outside("10.97.0.5")],
          serviceCIDRs: [{ name: "extra", cidrs: ["10.97.0.0/24"] }],
        },
      },
      { spec: { services: [outside("10.97.0.5")] }, opts: { serviceClusterIPRange: [] } },
      { spec: { services: [service({ name: "web" })] } },
    ]);
    assert.deepEqual(lines, ["", "", ""]);
  });
});

// ---------------------------------------------------------------- topology in the planner

Deno.test("planNode() follows zone hints for Cluster policies using this node's zone label", () => {
  const plans = plan({
    services: [service({ name: "web", trafficDistribution: "PreferClose" })],
    slices: [slice({
      service: "web",
      endpoints: [
        endpoint({ ip: "10.244.1.5", zone: "a", hints: { forZones: ["a"], forNodes: [] } }),
        endpoint({ ip: "10.244.2.5", zone: "b", hints: { forZones: ["b"], forNodes: [] } }),
      ],
    })],
    nodes: [node({ name: THIS_NODE, labels: { [ZONE_LABEL]: "a" } })],
  });
  const sp = only(plans);
  assert.deepEqual(ips(sp.internal), ["10.244.1.5:8080"]);
  assert.equal(
    sp.internal.reason,
    "ready endpoints, hints: zone a (trafficDistribution PreferClose)",
  );
});

Deno.test("planNode() applies topologyKeys with the ServiceTopology gate", () => {
  const sp = only(plan({
    services: [service({ name: "web", topologyKeys: [HOSTNAME_LABEL] })],
    slices: [slice({ service: "web", endpoints: [LOCAL_1, REMOTE_1] })],
    nodes: [
      node({ name: THIS_NODE, labels: { [HOSTNAME_LABEL]: THIS_NODE } }),
      node({ name: "node-b", labels: { [HOSTNAME_LABEL]: "node-b" } }),
    ],
  }, { featureGates: { ServiceTopology: true } }));
  assert.deepEqual(ips(sp.internal), ["10.244.0.5:8080"]);
  assert.equal(sp.internal.reason, "ready endpoints, topologyKeys: kubernetes.io/hostname");
});

Deno.test("planNode() drops, not rejects, when topologyKeys match no endpoint", () => {
  const sp = only(plan({
    services: [service({ name: "web", topologyKeys: [HOSTNAME_LABEL] })],
    slices: [slice({ service: "web", endpoints: [REMOTE_1] })],
  }, { featureGates: { ServiceTopology: true } }));
  assert.deepEqual(sp.internal.endpoints, []);
  assert.equal(sp.internal.whenEmpty, "drop");
  assert.match(sp.internal.reason, /no endpoint matches.*: drop$/);
});

Deno.test("planNode() skips a service combining topologyKeys and externalTrafficPolicy Local", () => {
  const spec: StateSpec = {
    services: [
      service({
        name: "bad",
        type: "NodePort",
        ports: [port({ nodePort: 30080 })],
        topologyKeys: [HOSTNAME_LABEL],
        externalTrafficPolicy: "Local",
      }),
      service({ name: "good", clusterIPs: ["10.96.0.11"] }),
    ],
  };
  const on = plan(spec, { featureGates: { ServiceTopology: true } });
  assert.deepEqual(on.ipv4.services.map((s) => s.name), ["good"]);
  const off = plan(spec);
  assert.deepEqual(off.ipv4.services.map((s) => s.name), ["bad", "good"]);
});

// ---------------------------------------------------------------- determinism

Deno.test("planNode() output does not depend on map insertion order", () => {
  const services = [
    service({ name: "b", clusterIPs: ["10.96.0.2"] }),
    service({ name: "a", clusterIPs: ["10.96.0.1"] }),
    service({ name: "c", namespace: "kube-system", clusterIPs: ["10.96.0.3"] }),
  ];
  const slices = [
    slice({ service: "a", endpoints: [endpoint({ ip: "10.244.1.2" })] }),
    slice({ service: "a", endpoints: [endpoint({ ip: "10.244.1.1" })] }),
  ];
  const one = plan({ services, slices });
  const two = plan({ services: [...services].reverse(), slices: [...slices].reverse() });
  assert.equal(JSON.stringify(one), JSON.stringify(two));
  assert.deepEqual(one.ipv4.services.map((s) => s.id), [
    "default/a:/TCP",
    "default/b:/TCP",
    "kube-system/c:/TCP",
  ]);
});

// ---------------------------------------------------------------- incremental

function incrementalFixture() {
  const services = [
    service({ name: "a", clusterIPs: ["10.96.0.1"] }),
    service({
      name: "b",
      clusterIPs: ["10.96.0.2"],
      ports: [port({ name: "x" }), port({ name: "y" })],
    }),
    service({ name: "c", clusterIPs: ["10.96.0.3", "fd00:96::3"] }),
  ];
  const slices = [
    slice({ service: "a", endpoints: [endpoint({ ip: "10.244.1.1" })] }),
    slice({
      service: "b",
      ports: [{ name: "x", protocol: "TCP", port: 1 }, { name: "y", protocol: "TCP", port: 2 }],
      endpoints: [endpoint({ ip: "10.244.1.2" })],
    }),
  ];
  return { services, slices };
}

Deno.test("planNode() replans only changed services and reuses the other plans", () => {
  const { services, slices } = incrementalFixture();
  const opts = options();
  const previous = planNode({ state: state({ services, slices }), options: opts });
  const changedSlices = [
    slice({ service: "a", endpoints: [endpoint({ ip: "10.244.1.9" })] }),
    slices[1]!,
  ];
  const next = planNode({
    state: state({ services, slices: changedSlices }),
    options: opts,
    previous,
    changedServices: new Set(["default/a"]),
  });
  const [a, b1, b2, c] = next.ipv4.services;
  assert.notEqual(a, previous.ipv4.services[0]);
  assert.deepEqual(ips(a!.internal), ["10.244.1.9:8080"]);
  assert.equal(b1, previous.ipv4.services[1]);
  assert.equal(b2, previous.ipv4.services[2]);
  assert.equal(c, previous.ipv4.services[3]);
  assert.equal(next.ipv6.services[0], previous.ipv6.services[0]);
  assert.deepEqual(
    next,
    planNode({ state: state({ services, slices: changedSlices }), options: opts }),
  );
  assert.deepEqual(
    changedServicePortIds(previous.ipv4, next.ipv4),
    new Set(["default/a:/TCP"]),
  );
  assert.deepEqual(
    changedServicePortIds(previous.ipv6, next.ipv6),
    new Set(),
  );
});

Deno.test("planNode() incrementally adds and removes services in id order", () => {
  const { services, slices } = incrementalFixture();
  const opts = options();
  const previous = planNode({ state: state({ services, slices }), options: opts });
  const nextServices = [
    services[0]!,
    services[2]!,
    service({ name: "bb", clusterIPs: ["10.96.0.4"] }),
  ];
  const changed = new Set(["default/b", "default/bb"]);
  const next = planNode({
    state: state({ services: nextServices, slices }),
    options: opts,
    previous,
    changedServices: changed,
  });
  assert.deepEqual(next.ipv4.services.map((s) => s.id), [
    "default/a:/TCP",
    "default/bb:/TCP",
    "default/c:/TCP",
  ]);
  assert.equal(next.ipv4.services[0], previous.ipv4.services[0]);
  assert.deepEqual(
    changedServicePortIds(previous.ipv4, next.ipv4),
    new Set(["default/b:x/TCP", "default/b:y/TCP", "default/bb:/TCP"]),
  );
});

Deno.test("planNode() replans everything on a global change", () => {
  const { services, slices } = incrementalFixture();
  const previous = planNode({ state: state({ services, slices }), options: options() });
  const next = planNode({
    state: state({ services, slices }),
    options: options({ masqueradeAll: true }),
    previous,
    changedServices: new Set(),
    globalChange: true,
  });
  // The node-wide decision is on the Plan (the Proxier syncs fully when it
  // changes); every service port was replanned, none reused.
  assert.equal(next.ipv4.clusterIPMasquerade, "all");
  assert.ok(next.ipv4.services.every((sp) => !previous.ipv4.services.includes(sp)));
  assert.equal(changedServicePortIds(previous.ipv4, next.ipv4).size, 0);
});

Deno.test("planNode() takes another node's zone for topologyKeys from the slice, not its Node", () => {
  const services = [service({ name: "t", topologyKeys: [ZONE_LABEL, "*"] })];
  const slices = [slice({ service: "t", endpoints: [REMOTE_1, REMOTE_2] })];
  const gates = { featureGates: { ServiceTopology: true } };
  const nodes = [
    node({ name: THIS_NODE, labels: { [ZONE_LABEL]: "a" } }),
    node({ name: "node-b", labels: { [ZONE_LABEL]: "a" } }),
  ];
  const plans = planNode({ state: state({ services, slices, nodes }), options: options(gates) });
  assert.equal(only(plans).internal.endpoints.length, 2);
  assert.equal(only(plans).internal.reason, "ready endpoints, topologyKeys: *");
});

Deno.test("changedServicePortIds() compares rebuilt plans field by field", () => {
  const { services, slices } = incrementalFixture();
  const one = planNode({ state: state({ services, slices }), options: options() });
  const two = planNode({ state: state({ services, slices }), options: options() });
  assert.notEqual(one.ipv4.services[0], two.ipv4.services[0]);
  assert.deepEqual(changedServicePortIds(one.ipv4, two.ipv4), new Set());
});

Deno.test("planNode() incremental result equals a full replan for random changes", async () => {
  const fc = (await import("fast-check")).default;
  const names = ["a", "a-b", "ab", "a.b", "b", "b-a", "c"];
  const serviceArb = fc.record({
    name: fc.constantFrom(...names),
    ports: fc.uniqueArray(fc.constantFrom("", "x", "x-y", "y"), { minLength: 1, maxLength: 3 }),
    endpoints: fc.uniqueArray(fc.integer({ min: 1, max: 20 }), { maxLength: 4 }),
  });
  const clusterArb = fc.uniqueArray(serviceArb, { selector: (s) => s.name, maxLength: 7 });
  const build = (cluster: { name: string; ports: string[]; endpoints: number[] }[]) => {
    const ports = (p: string[]) => (p.length > 1 ? p.map((n) => n || "z") : p);
    return state({
      services: cluster.map((s, i) =>
        service({
          name: s.name,
          clusterIPs: [`10.96.0.${i + 1}`],
          ports: ports(s.ports).map((name) => port({ name })),
        })
      ),
      slices: cluster.map((s) =>
        slice({
          service: s.name,
          ports: ports(s.ports).map((name) => ({ name, protocol: "TCP", port: 8080 })),
          endpoints: s.endpoints.map((n) => endpoint({ ip: `10.244.0.${n}` })),
        })
      ),
    });
  };
  fc.assert(
    fc.property(clusterArb, clusterArb, (before, after) => {
      const opts = options();
      const previous = planNode({ state: build(before), options: opts });
      const json = (s: (typeof before)[number]) => JSON.stringify(s);
      const beforeByName = new Map(before.map((s) => [s.name, json(s)]));
      const afterByName = new Map(after.map((s) => [s.name, json(s)]));
      const changed = new Set(
        names.filter((n) => beforeByName.get(n) !== afterByName.get(n)).map((n) => `default/${n}`),
      );
      // Cluster IPs follow list positions, so a service whose position moved changed too.
      for (const [i, s] of after.entries()) {
        if (before.findIndex((b) => b.name === s.name) !== i) changed.add(`default/${s.name}`);
      }
      const next = planNode({
        state: build(after),
        options: opts,
        previous,
        changedServices: changed,
      });
      const full = planNode({ state: build(after), options: opts });
      assert.deepEqual(next, full);
      for (const sp of next.ipv4.services) {
        if (!changed.has(`default/${sp.name}`)) {
          assert.ok(previous.ipv4.services.includes(sp), `${sp.id} reused`);
        }
      }
      const ids = changedServicePortIds(previous.ipv4, next.ipv4);
      const want = new Set<string>();
      const prevById = new Map(previous.ipv4.services.map((s) => [s.id, s]));
      const nextById = new Map(next.ipv4.services.map((s) => [s.id, s]));
      for (const id of new Set([...prevById.keys(), ...nextById.keys()])) {
        if (JSON.stringify(prevById.get(id)) !== JSON.stringify(nextById.get(id))) want.add(id);
      }
      assert.deepEqual(ids, want);
    }),
    { numRuns: 300 },
  );
});

// ---------------------------------------------------------------- service counters

Deno.test("planNode() decides each service port's counters from the Service alone", () => {
  const lb = service({
    name: "lb",
    type: "LoadBalancer",
    ports: [port({ nodePort: 30080 })],
    loadBalancerIngress: [{ ip: "192.0.2.10", ipMode: "VIP" }],
    loadBalancerSourceRanges: ["198.51.100.0/24"],
    externalTrafficPolicy: "Local",
  });
  const plans = plan({ services: [lb] }, { serviceCounters: true });
  assert.equal(plans.ipv4.serviceCounters, true);
  assert.deepEqual(only(plans).counters, [
    "connections",
    "no-endpoints",
    "no-local-endpoints",
    "source-range",
  ]);
  const cluster = plan({
    services: [service({ name: "web" })],
    slices: [slice({ service: "web", endpoints: [endpoint({ ip: "10.244.1.5" })] })],
  }, { serviceCounters: true });
  assert.deepEqual(only(cluster).counters, ["connections", "no-endpoints"]);
  const local = plan(
    { services: [service({ name: "web", internalTrafficPolicy: "Local" })] },
    { serviceCounters: true },
  );
  assert.deepEqual(only(local).counters, ["connections", "no-endpoints", "no-local-endpoints"]);
});

Deno.test("planNode() plans no counter with service counters off", () => {
  const plans = plan({ services: [service({ name: "web" })] }, { serviceCounters: false });
  assert.equal(plans.ipv4.serviceCounters, undefined);
  assert.equal(only(plans).counters, undefined);
});

// ---------------------------------------------------------------- duplicated frontends

Deno.test("planNode() gives a frontend two services claim to the lower service port id", () => {
  const plans = plan({
    services: [
      service({ name: "b", clusterIPs: ["10.96.0.2"], externalIPs: ["192.0.2.1"] }),
      service({ name: "a", clusterIPs: ["10.96.0.1"], externalIPs: ["192.0.2.1", "192.0.2.2"] }),
    ],
  });
  const [a, b] = plans.ipv4.services;
  assert.deepEqual(a!.externalIPs, ["192.0.2.1", "192.0.2.2"]);
  assert.equal(a!.shadowed, undefined);
  assert.deepEqual(b!.externalIPs, []);
  assert.deepEqual(b!.shadowed, [
    { kind: "externalIP", address: "192.0.2.1", port: 80, heldBy: "default/a:/TCP" },
  ]);
});

Deno.test("planNode() gives a node port two services claim to the lower id, across kinds", () => {
  const plans = plan({
    services: [
      service({
        name: "a",
        type: "NodePort",
        clusterIPs: ["10.96.0.1"],
        ports: [port({ nodePort: 30080 })],
      }),
      service({
        name: "b",
        type: "NodePort",
        clusterIPs: ["10.96.0.2"],
        ports: [port({ nodePort: 30080 })],
        externalIPs: ["10.96.0.1"],
      }),
    ],
  });
  const [a, b] = plans.ipv4.services;
  assert.equal(a!.nodePort, 30080);
  assert.equal(b!.nodePort, 0);
  assert.deepEqual(b!.externalIPs, []);
  assert.deepEqual(b!.shadowed, [
    { kind: "externalIP", address: "10.96.0.1", port: 80, heldBy: "default/a:/TCP" },
    { kind: "nodePort", address: "", port: 30080, heldBy: "default/a:/TCP" },
  ]);
});

Deno.test("planNode() hands a shared frontend to the other claimant when its holder goes, incrementally", () => {
  const opts = options();
  const a = service({ name: "a", clusterIPs: ["10.96.0.1"], externalIPs: ["192.0.2.1"] });
  const b = service({ name: "b", clusterIPs: ["10.96.0.2"], externalIPs: ["192.0.2.1"] });
  const c = service({ name: "c", clusterIPs: ["10.96.0.3"] });
  const previous = planNode({ state: state({ services: [a, b, c] }), options: opts });
  assert.deepEqual(previous.ipv4.services[1]!.externalIPs, []);
  const withoutA = planNode({
    state: state({ services: [b, c] }),
    options: opts,
    previous,
    changedServices: new Set(["default/a"]),
  });
  assert.deepEqual(withoutA, planNode({ state: state({ services: [b, c] }), options: opts }));
  assert.deepEqual(withoutA.ipv4.services[0]!.externalIPs, ["192.0.2.1"]);
  assert.equal(withoutA.ipv4.services[1], previous.ipv4.services[2]);
  assert.deepEqual(
    changedServicePortIds(previous.ipv4, withoutA.ipv4),
    new Set(["default/a:/TCP", "default/b:/TCP"]),
  );
  const backAgain = planNode({
    state: state({ services: [a, b, c] }),
    options: opts,
    previous: withoutA,
    changedServices: new Set(["default/a"]),
  });
  assert.deepEqual(backAgain, previous);
});

Deno.test("planNode() incremental result equals a full replan with shared frontends", async () => {
  const fc = (await import("fast-check")).default;
  const names = ["a", "b", "c", "d"];
  const serviceArb = fc.record({
    name: fc.constantFrom(...names),
    externalIPs: fc.uniqueArray(fc.constantFrom("192.0.2.1", "192.0.2.2", "10.96.0.1"), {
      maxLength: 2,
    }),
    nodePort: fc.constantFrom(0, 30080, 30081),
    port: fc.constantFrom(80, 443),
  });
  const clusterArb = fc.uniqueArray(serviceArb, { selector: (s) => s.name, maxLength: 4 });
  type Spec = { name: string; externalIPs: string[]; nodePort: number; port: number };
  const build = (cluster: Spec[]) =>
    state({
      services: cluster.map((s) =>
        service({
          name: s.name,
          type: s.nodePort === 0 ? "ClusterIP" : "NodePort",
          clusterIPs: [`10.96.0.${names.indexOf(s.name) + 1}`],
          externalIPs: s.externalIPs,
          ports: [port({ port: s.port, nodePort: s.nodePort })],
        })
      ),
    });
  fc.assert(
    fc.property(fc.array(clusterArb, { minLength: 2, maxLength: 4 }), (steps) => {
      const opts = options();
      let previous = planNode({ state: build(steps[0]!), options: opts });
      for (let i = 1; i < steps.length; i++) {
        const json = (cluster: Spec[], name: string) =>
          JSON.stringify(cluster.find((s) => s.name === name));
        const changed = new Set(
          names.filter((n) => json(steps[i - 1]!, n) !== json(steps[i]!, n)).map((n) =>
            `default/${n}`
          ),
        );
        const next = planNode({
          state: build(steps[i]!),
          options: opts,
          previous,
          changedServices: changed,
        });
        assert.deepEqual(next, planNode({ state: build(steps[i]!), options: opts }));
        previous = next;
      }
    }),
    { numRuns: 300 },
  );
});
