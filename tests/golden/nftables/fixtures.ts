/**
 * Plans for the nftables golden and unit tests: one per service kind.
 *
 * @module
 */

import {
  emptyPlan,
  type Plan,
  type PlanEndpoint,
  type ServicePortPlan,
  servicePortId,
} from "../../../lib/core/plan.ts";
import { servicePortPlan } from "../../../scripts/testbed/plans.ts";

/** An endpoint; `ip` is required, the rest defaults to a ready remote endpoint. */
export function endpoint(ip: string, overrides: Partial<PlanEndpoint> = {}): PlanEndpoint {
  return {
    ip,
    port: 8080,
    nodeName: "node-b",
    zone: "",
    isLocal: false,
    ready: true,
    serving: true,
    terminating: false,
    ...overrides,
  };
}

/** A ClusterIP service port with two endpoints, overridable. */
export function servicePort(
  namespace: string,
  name: string,
  overrides: Partial<ServicePortPlan> = {},
): ServicePortPlan {
  const endpoints = [endpoint("10.180.0.1"), endpoint("10.180.0.2")];
  return servicePortPlan({
    namespace,
    name,
    portName: "http",
    clusterIPs: ["172.30.0.10"],
    internal: { endpoints, whenEmpty: "reject", reason: "cluster" },
    external: { endpoints, whenEmpty: "reject", reason: "cluster" },
    servingEndpoints: endpoints,
    ...overrides,
  });
}

/** A plan around some service ports (sorted by id here). */
export function plan(
  services: ServicePortPlan[],
  options: Partial<Pick<Plan, "family" | "localTraffic" | "clusterIPMasquerade">> & {
    counters?: boolean;
  } = {},
): Plan {
  const family = options.family ?? "IPv4";
  const v4 = family === "IPv4";
  return {
    ...emptyPlan(family, "node-a"),
    nodePortAddresses: [v4 ? "192.168.0.2" : "fd00::2"],
    serviceCIDRs: [v4 ? "172.30.0.0/16" : "fd00:10:96::/112"],
    localTraffic: options.localTraffic ?? { mode: "ClusterCIDR", cidrs: [v4 ? "10.0.0.0/8" : "fd00:10::/64"] },
    clusterIPMasquerade: options.clusterIPMasquerade ?? "non-local",
    services: [...services].sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
    ...(options.counters === true ? { serviceCounters: true } : {}),
  };
}

/** The counters the planner gives a service port (lib/core/planner.ts). */
export function withCounters(service: ServicePortPlan): ServicePortPlan {
  const local = service.externalLocal || service.internal.whenEmpty === "drop";
  const firewalled = service.sourceRanges.length > 0 && service.loadBalancerIPs.length > 0;
  return {
    ...service,
    counters: [
      "connections",
      "no-endpoints",
      ...(local ? ["no-local-endpoints" as const] : []),
      ...(firewalled ? ["source-range" as const] : []),
    ],
  };
}

const local = endpoint("10.180.0.3", { nodeName: "node-a", isLocal: true });

/** Named plans, one per service kind; each becomes `<name>.nft`. */
export const GOLDEN_PLANS: Record<string, Plan> = {
  "cluster-ip": plan([servicePort("ns1", "web")]),
  "node-port": plan([servicePort("ns1", "np", { nodePort: 30080 })]),
  "load-balancer": plan([
    servicePort("ns1", "lb", { nodePort: 30081, loadBalancerIPs: ["1.2.3.4"] }),
  ]),
  "load-balancer-source-ranges": plan([
    servicePort("ns1", "lbsr", {
      nodePort: 30082,
      loadBalancerIPs: ["1.2.3.5"],
      sourceRanges: ["203.0.113.0/25", "198.51.100.7/32"],
    }),
  ]),
  "external-ips": plan([servicePort("ns1", "ext", { externalIPs: ["192.168.99.22"] })]),
  "affinity": plan([
    servicePort("ns1", "sticky", { affinityTimeoutSeconds: 10800, nodePort: 30083 }),
  ]),
  "etp-local": plan([
    servicePort("ns2", "local", {
      nodePort: 30084,
      loadBalancerIPs: ["1.2.3.6"],
      healthCheckNodePort: 30000,
      externalLocal: true,
      external: { endpoints: [local], whenEmpty: "drop", reason: "local" },
      internal: {
        endpoints: [endpoint("10.180.0.1"), local],
        whenEmpty: "reject",
        reason: "cluster",
      },
      localReadyEndpoints: 1,
    }),
  ]),
  "etp-local-no-local-endpoints": plan([
    servicePort("ns2", "nolocal", {
      nodePort: 30085,
      loadBalancerIPs: ["1.2.3.7"],
      externalLocal: true,
      external: { endpoints: [], whenEmpty: "drop", reason: "no local endpoints" },
    }),
  ]),
  "itp-local-drop": plan([
    servicePort("ns2", "itp", {
      internal: { endpoints: [], whenEmpty: "drop", reason: "no local endpoints" },
    }),
  ]),
  "no-endpoints-reject": plan([
    servicePort("ns3", "empty", {
      nodePort: 30086,
      externalIPs: ["192.168.99.23"],
      internal: { endpoints: [], whenEmpty: "reject", reason: "no endpoints" },
      external: { endpoints: [], whenEmpty: "reject", reason: "no endpoints" },
    }),
  ]),
  "terminating": plan([
    servicePort("ns3", "term", {
      internal: {
        endpoints: [endpoint("10.180.0.9", { ready: false, terminating: true })],
        whenEmpty: "reject",
        reason: "terminating fallback",
      },
      external: {
        endpoints: [endpoint("10.180.0.9", { ready: false, terminating: true })],
        whenEmpty: "reject",
        reason: "terminating fallback",
      },
    }),
  ]),
  "udp-multi-port": plan([
    servicePort("kube-system", "dns", { protocol: "UDP", portName: "dns", port: 53, clusterIPs: ["172.30.0.53"] }),
    servicePort("kube-system", "dns", { protocol: "TCP", portName: "dns-tcp", port: 53, clusterIPs: ["172.30.0.53"] }),
  ]),
  "ipv6": plan([
    servicePort("ns1", "web6", {
      clusterIPs: ["fd00:10:96::10"],
      nodePort: 30087,
      loadBalancerIPs: ["2001:db8::6"],
      sourceRanges: ["2001:db8:1::/48"],
      affinityTimeoutSeconds: 60,
      internal: { endpoints: [endpoint("fd00:10::1"), endpoint("fd00:10::2")], whenEmpty: "reject", reason: "" },
      external: { endpoints: [endpoint("fd00:10::1"), endpoint("fd00:10::2")], whenEmpty: "reject", reason: "" },
    }),
  ], { family: "IPv6" }),
  "masquerade-all": plan([servicePort("ns1", "all")], { clusterIPMasquerade: "all" }),
  "masquerade-none": plan([servicePort("ns1", "none")], {
    clusterIPMasquerade: "none",
    localTraffic: { mode: "None" },
  }),
  "detect-node-cidr": plan([servicePort("ns1", "nc", { nodePort: 30088, externalLocal: true })], {
    localTraffic: { mode: "NodeCIDR", cidrs: ["10.0.1.0/24"] },
  }),
  "detect-bridge": plan([servicePort("ns1", "br", { nodePort: 30089, externalLocal: true })], {
    localTraffic: { mode: "BridgeInterface", interfaces: ["cbr0"] },
  }),
  "service-counters": plan([
    servicePort("ns1", "lbsr", {
      nodePort: 30082,
      loadBalancerIPs: ["1.2.3.5"],
      sourceRanges: ["203.0.113.0/25"],
    }),
    servicePort("ns2", "nolocal", {
      clusterIPs: ["172.30.0.11"],
      nodePort: 30085,
      loadBalancerIPs: ["1.2.3.7"],
      externalLocal: true,
      external: { endpoints: [], whenEmpty: "drop", reason: "no local endpoints" },
    }),
    servicePort("ns3", "empty", {
      clusterIPs: ["172.30.0.12"],
      nodePort: 30086,
      internal: { endpoints: [], whenEmpty: "reject", reason: "no endpoints" },
      external: { endpoints: [], whenEmpty: "reject", reason: "no endpoints" },
    }),
  ].map(withCounters), { counters: true }),
  "detect-interface-prefix": plan([servicePort("ns1", "veth", { nodePort: 30090, externalLocal: true })], {
    localTraffic: { mode: "InterfaceNamePrefix", interfaces: ["veth", "cali"] },
  }),
};

/** Previous plan, next plan and changed ids for the incremental golden file. */
export function incrementalCase(): { previous: Plan; next: Plan; changed: Set<string> } {
  const web = servicePort("ns1", "web");
  const sticky = servicePort("ns1", "sticky", { clusterIPs: ["172.30.0.11"], affinityTimeoutSeconds: 300 });
  const gone = servicePort("ns1", "gone", { clusterIPs: ["172.30.0.12"], nodePort: 30091 });
  const previous = plan([web, sticky, gone]);
  const next = plan([
    web,
    {
      ...sticky,
      internal: { ...sticky.internal, endpoints: [endpoint("10.180.0.1"), endpoint("10.180.0.4")] },
      external: { ...sticky.external, endpoints: [endpoint("10.180.0.1"), endpoint("10.180.0.4")] },
    },
    servicePort("ns1", "new", { clusterIPs: ["172.30.0.13"], nodePort: 30092 }),
  ]);
  return {
    previous,
    next,
    changed: new Set([sticky.id, gone.id, servicePortId("ns1", "new", "http", "TCP")]),
  };
}
