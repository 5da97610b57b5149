/**
 * Plans for the network-namespace topology of `scripts/netns.ts`: endpoints
 * of its pods and ClusterIP-style service ports, for the kernel tests and the
 * takeover scenarios.
 *
 * @module
 */

import type { IpFamily, Protocol } from "../../lib/core/model.ts";
import type {
  NoEndpointsVerdict,
  Plan,
  PlanEndpoint,
  ServicePortPlan,
} from "../../lib/core/plan.ts";
import { servicePortId } from "../../lib/core/plan.ts";
import { ADDRESSES, type Pod } from "../netns.ts";

/** The port the echo servers of the topology serve endpoints on. */
export const TARGET_PORT = 8080;

/** Options for {@linkcode endpointOf}. */
export interface EndpointOptions {
  family?: IpFamily;
  /** @default {8080} (the echo servers also listen on 9090) */
  port?: number;
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
}

/** The PlanEndpoint of a pod of the topology. */
export function endpointOf(pod: Pod, options: EndpointOptions = {}): PlanEndpoint {
  const ready = options.ready ?? true;
  return {
    ip: options.family === "IPv6" ? pod.ipv6 : pod.ipv4,
    port: options.port ?? TARGET_PORT,
    nodeName: pod.nodeName,
    zone: pod.isLocal ? "zone-a" : "zone-b",
    isLocal: pod.isLocal,
    ready,
    serving: options.serving ?? ready,
    terminating: options.terminating ?? false,
  };
}

/** Options for {@linkcode servicePort}; unset fields take ClusterIP-service defaults. */
export interface ServicePortOptions {
  name: string;
  family?: IpFamily;
  protocol?: Protocol;
  port?: number;
  clusterIP: string;
  /** Endpoints for internal and external traffic unless overridden. */
  endpoints?: PlanEndpoint[];
  internalEndpoints?: PlanEndpoint[];
  externalEndpoints?: PlanEndpoint[];
  /** @default {"reject"} */
  internalWhenEmpty?: NoEndpointsVerdict;
  /** @default {"reject"} */
  externalWhenEmpty?: NoEndpointsVerdict;
  nodePort?: number;
  externalIPs?: string[];
  loadBalancerIPs?: string[];
  sourceRanges?: string[];
  affinityTimeoutSeconds?: number;
  externalLocal?: boolean;
  /** @default {the serving ones of the internal and external endpoints} */
  servingEndpoints?: PlanEndpoint[];
}

/**
 * The one complete ServicePortPlan of the tests: neutral defaults (TCP port 80,
 * no address, no endpoint), the id made from the names, then `fields`. Each
 * fixture builder passes its own defaults through it, so a new Plan field is
 * added here once.
 */
export function servicePortPlan(
  fields: Partial<ServicePortPlan> & { name: string },
): ServicePortPlan {
  const namespace = fields.namespace ?? "default";
  const portName = fields.portName ?? "";
  const protocol = fields.protocol ?? "TCP";
  const none = { endpoints: [], whenEmpty: "reject" as const, reason: "" };
  return {
    id: servicePortId(namespace, fields.name, portName, protocol),
    namespace,
    portName,
    protocol,
    port: 80,
    clusterIPs: [],
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    sourceRanges: [],
    allowFromLoadBalancerIPs: false,
    healthCheckNodePort: 0,
    affinityTimeoutSeconds: 0,
    internal: none,
    external: none,
    externalLocal: false,
    localReadyEndpoints: 0,
    servingEndpoints: [],
    ...fields,
  };
}

/** Builds one ServicePortPlan in namespace "kernel" with port name "". */
export function servicePort(options: ServicePortOptions): ServicePortPlan {
  const protocol = options.protocol ?? "TCP";
  const internal = options.internalEndpoints ?? options.endpoints ?? [];
  const external = options.externalEndpoints ?? options.endpoints ?? [];
  const sortKey = (e: PlanEndpoint) => `${e.ip}:${e.port}`;
  const sorted = (list: PlanEndpoint[]) =>
    [...list].sort((a, b) => sortKey(a).localeCompare(sortKey(b)));
  return servicePortPlan({
    namespace: "kernel",
    name: options.name,
    protocol,
    port: options.port ?? 80,
    clusterIPs: [options.clusterIP],
    nodePort: options.nodePort ?? 0,
    externalIPs: options.externalIPs ?? [],
    loadBalancerIPs: options.loadBalancerIPs ?? [],
    sourceRanges: options.sourceRanges ?? [],
    affinityTimeoutSeconds: options.affinityTimeoutSeconds ?? 0,
    internal: {
      endpoints: sorted(internal),
      whenEmpty: options.internalWhenEmpty ?? "reject",
      reason: "kernel test",
    },
    external: {
      endpoints: sorted(external),
      whenEmpty: options.externalWhenEmpty ?? "reject",
      reason: "kernel test",
    },
    externalLocal: options.externalLocal ?? false,
    localReadyEndpoints: internal.filter((e) => e.isLocal && e.ready).length,
    servingEndpoints: options.servingEndpoints ??
      sorted([...new Map([...internal, ...external].map((e) => [sortKey(e), e])).values()])
        .filter((e) => e.serving),
  });
}

/** The plan of one family on node "node-a" with the topology's node, service and pod CIDRs. */
export function familyPlan(
  family: IpFamily,
  services: ServicePortPlan[],
  fields: Partial<Plan> = {},
): Plan {
  const v6 = family === "IPv6";
  return {
    family,
    nodeName: "node-a",
    nodePortAddresses: [v6 ? ADDRESSES.nodeV6 : ADDRESSES.nodeV4],
    serviceCIDRs: [v6 ? ADDRESSES.serviceCIDRV6 : ADDRESSES.serviceCIDRV4],
    localTraffic: {
      mode: "ClusterCIDR",
      cidrs: [v6 ? ADDRESSES.clusterCIDRV6 : ADDRESSES.clusterCIDRV4],
    },
    clusterIPMasquerade: "non-local",
    services: [...services].sort((a, b) => a.id.localeCompare(b.id)),
    ...fields,
  };
}

/** Plans for both families: the IPv4 services and (optionally) IPv6 ones, with `fields` each. */
export function plans(
  ipv4: ServicePortPlan[],
  ipv6: ServicePortPlan[] = [],
  fields: Partial<Plan> = {},
): Plan[] {
  return [familyPlan("IPv4", ipv4, fields), familyPlan("IPv6", ipv6, fields)];
}
