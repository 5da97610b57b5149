/**
 * The Plan: every policy decision about a node's packet path, made once by the
 * planner and rendered by every backend. Backends read a Plan and never look at
 * API objects or re-decide policy.
 *
 * @module
 */

import type { IpFamily, Protocol } from "./model.ts";

/** One endpoint a service port may send traffic to, with its resolved target port. */
export interface PlanEndpoint {
  ip: string;
  port: number;
  nodeName: string;
  zone: string;
  /** Runs on this node. */
  isLocal: boolean;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
}

/** What to do with a packet for which no endpoint is eligible. */
export type NoEndpointsVerdict = "reject" | "drop";

/** How traffic arriving at one class of address (internal or external) is handled. */
export interface TrafficPlan {
  /** Endpoints to choose from, sorted by `ip:port`; empty means `whenEmpty` applies. */
  endpoints: PlanEndpoint[];
  /** "reject" when the service has no usable endpoint at all, "drop" when endpoints
   * exist but none is eligible here (Local policy without local endpoints). */
  whenEmpty: NoEndpointsVerdict;
  /** Why these endpoints were chosen, for `plan` and `explain` output. */
  reason: string;
}

/**
 * Masquerade decision for packets addressed to the cluster IP, and only those
 * (upstream's `daddr <cluster IP> … mark-for-masquerade`): a local pod's packet
 * that `externalLocal` short-circuits to the internal endpoints keeps its source.
 * - "all": masquerade every packet (`--masquerade-all`);
 * - "non-local": masquerade packets whose source is not local per `Plan.localTraffic`;
 * - "none": never (no local-traffic detector configured).
 */
export type ClusterIPMasquerade = "all" | "non-local" | "none";

/** A `--detect-local-mode` value ("" means none). */
export type DetectLocalMode =
  | ""
  | "ClusterCIDR"
  | "NodeCIDR"
  | "BridgeInterface"
  | "InterfaceNamePrefix";

/** How the node recognises traffic from its own pods (`--detect-local-mode`). */
export type LocalTrafficDetector =
  | { mode: "ClusterCIDR"; cidrs: string[] }
  | { mode: "NodeCIDR"; cidrs: string[] }
  | { mode: "BridgeInterface"; interfaces: string[] }
  | { mode: "InterfaceNamePrefix"; interfaces: string[] }
  | { mode: "None" };

/**
 * A traffic counter kept in the kernel for one service port of one family:
 * - "connections": first packets sent to an endpoint (what the NAT path sees);
 * - "no-endpoints": packets refused because the service has no endpoint;
 * - "no-local-endpoints": packets dropped by a Local traffic policy with no local endpoint;
 * - "source-range": packets to a load-balancer IP dropped by `loadBalancerSourceRanges`.
 */
export type ServiceCounter =
  | "connections"
  | "no-endpoints"
  | "no-local-endpoints"
  | "source-range";

/** Every {@linkcode ServiceCounter}, in exposition order. */
export const SERVICE_COUNTERS: readonly ServiceCounter[] = [
  "connections",
  "no-endpoints",
  "no-local-endpoints",
  "source-range",
];

/** The kinds of frontend a service port declares. */
export type FrontendKind = "clusterIP" | "externalIP" | "loadBalancerIP" | "nodePort";

/**
 * A frontend a service port declares but another service port holds: two
 * services claim the same address, protocol and port (or node port and
 * protocol), which the apiserver allocates uniquely for cluster IPs and node
 * ports but not for externalIPs and load-balancer IPs. The lower service port
 * id holds it (lib/core/frontends.ts); the frontend is left out of the
 * loser's lists (`nodePort` 0 for a node port).
 */
export interface ShadowedFrontend {
  kind: FrontendKind;
  /** The address; "" for a node port. */
  address: string;
  port: number;
  /** The id of the service port that holds it. */
  heldBy: string;
}

/** One service port of one IP family: the unit every backend programs. */
export interface ServicePortPlan {
  /** Stable id: `namespace/name:portName/protocol` (portName may be ""). */
  id: string;
  namespace: string;
  name: string;
  portName: string;
  protocol: Protocol;
  /** The service port on cluster IPs, external IPs and load-balancer IPs. */
  port: number;
  /** Cluster IPs of this plan's family (at most one). */
  clusterIPs: string[];
  /** Node port, 0 when none. Captured on `Plan.nodePortAddresses`. */
  nodePort: number;
  /** Declared external IPs of this family (after any allowed-CIDR filter). */
  externalIPs: string[];
  /** Load-balancer ingress IPs of this family with ipMode VIP. */
  loadBalancerIPs: string[];
  /** loadBalancerSourceRanges of this family; empty means any source. When non-empty,
   * traffic to the load-balancer IPs from other sources is dropped. */
  sourceRanges: string[];
  /**
   * True when `sourceRanges` hold one of the node's addresses: traffic from the
   * load-balancer IPs themselves passes too (a node reaching a VIP routed to
   * itself arrives from the VIP), as in upstream's iptables mode. Which modes
   * honour it is their registry entry's `sourceRanges` (backends/registry.ts),
   * which `explain` reads too.
   */
  allowFromLoadBalancerIPs: boolean;
  /** Health-check node port served by kproxy, 0 when none. */
  healthCheckNodePort: number;
  /** ClientIP affinity timeout in seconds, 0 for none. */
  affinityTimeoutSeconds: number;
  /** Traffic to cluster IPs (internalTrafficPolicy applied). */
  internal: TrafficPlan;
  /** Traffic to node ports, external IPs and load-balancer IPs (externalTrafficPolicy applied). */
  external: TrafficPlan;
  /** externalTrafficPolicy Local: external traffic keeps its source and goes to local
   * endpoints only; traffic from local pods short-circuits to `internal` and keeps its
   * source too (`Plan.clusterIPMasquerade` is for cluster IP destinations only), and traffic
   * originated on the node itself is masqueraded and also goes to `internal`.
   * False: all external traffic is masqueraded. */
  externalLocal: boolean;
  /** Number of ready local endpoints, served on the health-check node port. */
  localReadyEndpoints: number;
  /**
   * Every serving endpoint of the port (ready, or serving while terminating), whatever the
   * traffic policies and topology chose, sorted by `ip:port`. A UDP or SCTP flow whose reply
   * comes from one of them keeps its conntrack entry; a flow to the port from anywhere else is
   * stale (lib/core/conntrack.ts), as in kube-proxy's conntrack reconciler.
   */
  servingEndpoints: PlanEndpoint[];
  /**
   * The counters the backend keeps for this port (`--service-counters`), in
   * {@linkcode SERVICE_COUNTERS} order; absent or empty means none. They depend
   * on the Service only, never on its endpoints, so they survive endpoint changes.
   */
  counters?: ServiceCounter[];

  /**
   * The Service's `preserve-destination` annotation (Windows, as upstream's winkernel): its node
   * port and load-balancer IPs send to this node's endpoints only, keeping the destination
   * address. Absent when not asked for, or the port has neither.
   */
  preserveDestination?: true;

  /** Frontends this port declares that another service port holds; absent when none. */
  shadowed?: ShadowedFrontend[];
}

/** Everything one IP family of the node needs, for one sync. */
export interface Plan {
  family: IpFamily;
  nodeName: string;
  /** Addresses on which node ports are captured (never loopback). */
  nodePortAddresses: string[];
  /** Service CIDRs: traffic to an unallocated address inside them is rejected. */
  serviceCIDRs: string[];
  localTraffic: LocalTrafficDetector;
  /** Masquerade for traffic to cluster IPs, the same for every service port of the node. */
  clusterIPMasquerade: ClusterIPMasquerade;
  /** Service ports, sorted by id. */
  services: ServicePortPlan[];
  /** `--service-counters`: the backend keeps `ServicePortPlan.counters`. Absent means off. */
  serviceCounters?: boolean;
}

/** The plans for both families; a family without services or node address still has a Plan. */
export interface NodePlans {
  ipv4: Plan;
  ipv6: Plan;
}

/** Builds the stable id of a service port. */
export function servicePortId(
  namespace: string,
  name: string,
  portName: string,
  protocol: Protocol,
): string {
  return `${namespace}/${name}:${portName}/${protocol}`;
}

/** The first index of `services` (sorted by id) whose id is not below `id`. */
export function lowerBoundById(services: readonly ServicePortPlan[], id: string): number {
  let low = 0;
  let high = services.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (services[middle]!.id < id) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * The service port `id` of `plan`, found by binary search (its services are
 * sorted by id); a plan that is not sorted is scanned instead.
 */
export function findServicePort(plan: Plan, id: string): ServicePortPlan | undefined {
  const found = plan.services[lowerBoundById(plan.services, id)];
  return found?.id === id ? found : plan.services.find((service) => service.id === id);
}

/** An empty plan for a family, as used before the first sync. */
export function emptyPlan(family: IpFamily, nodeName = ""): Plan {
  return {
    family,
    nodeName,
    nodePortAddresses: [],
    serviceCIDRs: [],
    localTraffic: { mode: "None" },
    clusterIPMasquerade: "none",
    services: [],
  };
}
