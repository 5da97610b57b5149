/**
 * The normalised, validated view of the API objects kproxy cares about.
 *
 * Everything downstream of the sources (tracker, planner, backends) sees only
 * these types, never raw API objects. The parsers that produce them live in
 * `lib/core/parse/`: they validate every field and reject an object whole
 * rather than pass a doubtful value on.
 *
 * @module
 */

/** Layer-4 protocols a Service port may use. */
export type Protocol = "TCP" | "UDP" | "SCTP";

/** An IP family, named as the Kubernetes API names it. */
export type IpFamily = "IPv4" | "IPv6";

/** Traffic policy for internal or external traffic. */
export type TrafficPolicy = "Cluster" | "Local";

/** Service types that kproxy programs (ExternalName is dropped at parse time). */
export type ServiceType = "ClusterIP" | "NodePort" | "LoadBalancer";

/** One port of a Service, as declared in its spec. */
export interface ServicePortSpec {
  /** Port name; "" when the service has a single unnamed port. */
  name: string;
  protocol: Protocol;
  /** The service (virtual) port. */
  port: number;
  /** Numeric target port, or a named port resolved per endpoint. */
  targetPort: number | string;
  /** Allocated node port, 0 when none. */
  nodePort: number;
}

/** A load-balancer ingress address. `Proxy` ipMode addresses are not captured on the node. */
export interface LoadBalancerIngress {
  ip: string;
  ipMode: "VIP" | "Proxy";
}

/** A validated Service. */
export interface Service {
  namespace: string;
  name: string;
  type: ServiceType;
  /** Cluster IPs in family order; empty for headless services (which are skipped). */
  clusterIPs: string[];
  ports: ServicePortSpec[];
  externalIPs: string[];
  loadBalancerIngress: LoadBalancerIngress[];
  loadBalancerSourceRanges: string[];
  /** Seconds of ClientIP affinity, or 0 when sessionAffinity is None. */
  affinityTimeoutSeconds: number;
  internalTrafficPolicy: TrafficPolicy;
  externalTrafficPolicy: TrafficPolicy;
  /** Health-check node port for externalTrafficPolicy Local LoadBalancers, 0 when none. */
  healthCheckNodePort: number;
  /** spec.trafficDistribution, "" when unset. */
  trafficDistribution: string;
  /** spec.topologyKeys (seed 002), empty when unset. */
  topologyKeys: string[];
  /** "Auto" when the topology annotation (`service.kubernetes.io/topology-mode` or the older
   * `service.kubernetes.io/topology-aware-hints`) asks for hints, "" for any other value or none.
   * It only explains hints: kproxy follows the hints a slice carries whatever it says. */
  topologyMode: "Auto" | "";
  /** The `preserve-destination: "true"` annotation (Windows): external traffic keeps its
   * destination address, so node ports and load-balancer IPs reach this node's endpoints only.
   * Absent when not asked for. */
  preserveDestination?: true;
}

/** Topology hints an EndpointSlice controller wrote on an endpoint. */
export interface EndpointHints {
  forZones: string[];
  forNodes: string[];
}

/** One endpoint address of an EndpointSlice, with its conditions. */
export interface SliceEndpoint {
  /** A single IP address (one per endpoint; extra addresses are ignored as upstream does). */
  ip: string;
  /** `conditions.ready`, nil treated as true. */
  ready: boolean;
  /** `conditions.serving`, nil treated as `ready`. */
  serving: boolean;
  /** `conditions.terminating`, nil treated as false. */
  terminating: boolean;
  nodeName: string;
  zone: string;
  /** undefined when the endpoint carries no hints at all. */
  hints?: EndpointHints;
}

/** A port of an EndpointSlice. */
export interface SlicePort {
  name: string;
  protocol: Protocol;
  port: number;
}

/** A validated EndpointSlice. */
export interface EndpointSlice {
  namespace: string;
  name: string;
  /** The owning service's name (label kubernetes.io/service-name). */
  serviceName: string;
  family: IpFamily;
  ports: SlicePort[];
  endpoints: SliceEndpoint[];
}

/** A validated Node: only what the proxy needs. */
export interface Node {
  name: string;
  labels: Record<string, string>;
  /** InternalIP/ExternalIP addresses from status, InternalIP first. */
  addresses: string[];
  /** spec.podCIDRs. */
  podCIDRs: string[];
  /** True once metadata.deletionTimestamp is set or the cluster autoscaler has tainted the
   * node `ToBeDeletedByClusterAutoscaler`: kube-proxy then reports `nodeEligible: false`. */
  deleting: boolean;
}

/** A validated ServiceCIDR (networking.k8s.io). */
export interface ServiceCIDR {
  name: string;
  cidrs: string[];
}

/** `namespace/name`, the key of a Service and of the set of its slices. */
export type ServiceKey = string;

/** Builds the key of a namespaced object. */
export function serviceKey(namespace: string, name: string): ServiceKey {
  return `${namespace}/${name}`;
}

/** The well-known node label holding a node's zone. */
export const ZONE_LABEL = "topology.kubernetes.io/zone";
/** The well-known node label holding a node's region. */
export const REGION_LABEL = "topology.kubernetes.io/region";
/** The well-known node label holding a node's host name. */
export const HOSTNAME_LABEL = "kubernetes.io/hostname";
