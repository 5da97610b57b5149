/**
 * Plans for the iptables renderer tests: one per service kind, built from
 * small helpers so each case states only what makes it different.
 *
 * @module
 */

import type { IpFamily, Protocol } from "../../../lib/core/model.ts";
import type { Plan, PlanEndpoint, ServicePortPlan, TrafficPlan } from "../../../lib/core/plan.ts";
import { servicePortPlan } from "../../../scripts/testbed/plans.ts";

/** An endpoint on this node (`local`) or another one. */
export function endpoint(ip: string, port: number, local = false): PlanEndpoint {
  return {
    ip,
    port,
    nodeName: local ? "node-a" : "node-b",
    zone: "",
    isLocal: local,
    ready: true,
    serving: true,
    terminating: false,
  };
}

/** Traffic to the given endpoints; `whenEmpty` matters only when there are none. */
export function traffic(endpoints: PlanEndpoint[], whenEmpty: "reject" | "drop" = "reject"): TrafficPlan {
  return { endpoints, whenEmpty, reason: "test" };
}

/** A ClusterIP service port with two remote endpoints, overridable field by field. */
export function servicePort(
  fields: Partial<ServicePortPlan> & { name: string; namespace?: string; protocol?: Protocol },
): ServicePortPlan {
  const endpoints = [endpoint("10.244.1.5", 8080), endpoint("10.244.2.7", 8080)];
  return servicePortPlan({
    portName: "http",
    clusterIPs: ["10.96.0.10"],
    internal: traffic(endpoints),
    external: traffic(endpoints),
    servingEndpoints: endpoints,
    ...fields,
  });
}

/** A plan for node-a with the given services (sorted by id). */
export function plan(services: ServicePortPlan[], fields: Partial<Plan> = {}): Plan {
  const family: IpFamily = fields.family ?? "IPv4";
  return {
    family,
    nodeName: "node-a",
    nodePortAddresses: family === "IPv4" ? ["192.168.0.10"] : ["fd00:1::10"],
    serviceCIDRs: family === "IPv4" ? ["10.96.0.0/16"] : ["fd00:96::/112"],
    localTraffic: { mode: "ClusterCIDR", cidrs: [family === "IPv4" ? "10.244.0.0/16" : "fd00:244::/56"] },
    clusterIPMasquerade: "non-local",
    services: [...services].sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
    ...fields,
  };
}

const local = [endpoint("10.244.0.9", 8080, true)];
const remote = [endpoint("10.244.1.5", 8080), endpoint("10.244.2.7", 8080)];
const all = [local[0]!, ...remote].sort((a, b) => a.ip < b.ip ? -1 : 1);

/** One named plan per service kind the golden tests cover. */
/** `services` ClusterIP service ports with `endpointsEach` remote endpoints each. */
export function uniformCluster(services: number, endpointsEach: number): Plan {
  return plan(Array.from({ length: services }, (_, i) => {
    const endpoints = Array.from(
      { length: endpointsEach },
      (_, j) => endpoint(`10.244.${i}.${j + 1}`, 8080),
    );
    return servicePort({
      name: `svc-${i}`,
      clusterIPs: [`10.96.1.${i + 1}`],
      internal: traffic(endpoints),
      external: traffic(endpoints),
    });
  }));
}

export const GOLDEN_CASES: Record<string, Plan> = {
  clusterip: plan([servicePort({ name: "web" })]),
  nodeport: plan([servicePort({ name: "web", nodePort: 30080 })]),
  loadbalancer: plan([
    servicePort({ name: "web", nodePort: 30080, loadBalancerIPs: ["203.0.113.10"] }),
  ]),
  loadbalancer_source_ranges: plan([
    servicePort({
      name: "web",
      nodePort: 30080,
      loadBalancerIPs: ["203.0.113.10"],
      sourceRanges: ["198.51.100.0/24", "192.168.0.0/16"],
      // The node's 192.168.0.10 is inside a range (the planner decides it).
      allowFromLoadBalancerIPs: true,
    }),
  ]),
  externalips: plan([servicePort({ name: "web", externalIPs: ["198.51.100.20"] })]),
  affinity: plan([servicePort({ name: "web", affinityTimeoutSeconds: 10800 })]),
  etp_local: plan([
    servicePort({
      name: "web",
      nodePort: 30080,
      loadBalancerIPs: ["203.0.113.10"],
      healthCheckNodePort: 32000,
      internal: traffic(all),
      external: traffic(local),
      externalLocal: true,
      localReadyEndpoints: 1,
    }),
  ]),
  etp_local_no_local_endpoints: plan([
    servicePort({
      name: "web",
      nodePort: 30080,
      externalIPs: ["198.51.100.20"],
      healthCheckNodePort: 32000,
      internal: traffic(remote),
      external: traffic([], "drop"),
      externalLocal: true,
    }),
  ]),
  itp_local: plan([
    servicePort({ name: "web", nodePort: 30080, internal: traffic(local), external: traffic(all) }),
  ]),
  itp_local_no_local_endpoints: plan([
    servicePort({ name: "web", internal: traffic([], "drop"), external: traffic(remote) }),
  ]),
  reject: plan([
    servicePort({
      name: "web",
      nodePort: 30080,
      externalIPs: ["198.51.100.20"],
      loadBalancerIPs: ["203.0.113.10"],
      internal: traffic([]),
      external: traffic([]),
    }),
  ]),
  service_counters: plan([
    servicePort({
      name: "web",
      nodePort: 30080,
      loadBalancerIPs: ["203.0.113.10"],
      sourceRanges: ["198.51.100.0/24"],
      counters: ["connections", "no-endpoints", "source-range"],
    }),
    servicePort({
      name: "empty",
      nodePort: 30081,
      clusterIPs: ["10.96.0.11"],
      internal: traffic([]),
      external: traffic([]),
      counters: ["connections", "no-endpoints"],
    }),
    servicePort({
      name: "nolocal",
      nodePort: 30082,
      clusterIPs: ["10.96.0.12"],
      internal: traffic(remote),
      external: traffic([], "drop"),
      externalLocal: true,
      counters: ["connections", "no-endpoints", "no-local-endpoints"],
    }),
  ], { serviceCounters: true }),
  hairpin_udp: plan([
    servicePort({
      name: "dns",
      namespace: "kube-system",
      portName: "dns",
      protocol: "UDP",
      port: 53,
      internal: traffic([endpoint("10.244.0.3", 53, true)]),
      external: traffic([endpoint("10.244.0.3", 53, true)]),
    }),
  ]),
  masquerade_all: plan([servicePort({ name: "web" })], { clusterIPMasquerade: "all" }),
  masquerade_none: plan([servicePort({ name: "web" })], {
    clusterIPMasquerade: "none",
    localTraffic: { mode: "None" },
  }),
  masquerade_bridge: plan([servicePort({ name: "web" })], {
    localTraffic: { mode: "BridgeInterface", interfaces: ["cbr0"] },
  }),
  masquerade_prefix: plan([servicePort({ name: "web", nodePort: 30080, externalLocal: true, internal: traffic(all), external: traffic(local) })], {
    localTraffic: { mode: "InterfaceNamePrefix", interfaces: ["veth"] },
  }),
  sctp_unnamed: plan([servicePort({ name: "sig", portName: "", protocol: "SCTP", port: 3868 })]),
  ipv6: plan([
    servicePort({
      name: "web",
      clusterIPs: ["fd00:96::10"],
      nodePort: 30080,
      loadBalancerIPs: ["2001:db8::10"],
      sourceRanges: ["2001:db8:1::/48"],
      affinityTimeoutSeconds: 60,
      internal: traffic([endpoint("fd00:244:1::5", 8080), endpoint("fd00:244:2::7", 8080)]),
      external: traffic([endpoint("fd00:244:1::5", 8080), endpoint("fd00:244:2::7", 8080)]),
    }),
  ], { family: "IPv6" }),
  empty: plan([]),
};

const twoServices = plan([
  servicePort({ name: "web", nodePort: 30080 }),
  servicePort({ name: "api", clusterIPs: ["10.96.0.20"] }),
]);
const moved = [endpoint("10.244.1.5", 8080), endpoint("10.244.3.9", 8080)];

/** Partial syncs: the kernel holds `previous`, the sync moves it to `next`. */
export const PARTIAL_CASES: Record<
  string,
  { previous: Plan; next: Plan; changed: Set<string> }
> = {
  partial_endpoint_change: {
    previous: twoServices,
    next: plan([
      servicePort({ name: "web", nodePort: 30080, internal: traffic(moved), external: traffic(moved) }),
      servicePort({ name: "api", clusterIPs: ["10.96.0.20"] }),
    ]),
    changed: new Set(["default/web:http/TCP"]),
  },
  partial_service_removed: {
    previous: twoServices,
    next: plan([servicePort({ name: "api", clusterIPs: ["10.96.0.20"] })]),
    changed: new Set(["default/web:http/TCP"]),
  },
  partial_endpoints_gone: {
    previous: twoServices,
    next: plan([
      servicePort({ name: "web", nodePort: 30080, internal: traffic([]), external: traffic([]) }),
      servicePort({ name: "api", clusterIPs: ["10.96.0.20"] }),
    ]),
    changed: new Set(["default/web:http/TCP"]),
  },
};
