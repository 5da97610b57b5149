/**
 * Which chains a service port needs and how they connect, read from its plan.
 * Shared by the renderer of the top-level chains (which jump into a
 * service's chains) and the renderer of the service's own chains.
 *
 * @module
 */

import type { Plan, PlanEndpoint, ServiceCounter, ServicePortPlan } from "../../lib/core/plan.ts";
import { serviceNfacctNames } from "./counters.ts";
import { type ServiceChainNames, serviceChainNames, servicePortName } from "./names.ts";

/** The chains of one service port, as upstream's `syncProxyRules` arranges them. */
export interface ServiceLayout {
  /** `ns/name:port`, used in rule comments. */
  portName: string;
  protocol: string;
  names: ServiceChainNames;
  /** Some endpoint, internal or external, exists: the service gets nat chains. */
  hasEndpoints: boolean;
  /** Chain holding `internal.endpoints`; undefined when there are none. */
  internalChain?: string;
  /** Chain holding `external.endpoints`; undefined when there are none. */
  externalPolicyChain?: string;
  /** The KUBE-EXT chain exists (node port, external IP or load-balancer IP, with endpoints). */
  usesExternalChain: boolean;
  /** The KUBE-FW chain exists (load-balancer IPs with source ranges, with endpoints). */
  usesFirewallChain: boolean;
  /** The nfacct objects of the port's counters (`ServicePortPlan.counters`), by counter. */
  counters: Map<ServiceCounter, string>;
}

function sameEndpoints(a: readonly PlanEndpoint[], b: readonly PlanEndpoint[]): boolean {
  return a.length === b.length &&
    a.every((endpoint, i) => endpoint.ip === b[i]?.ip && endpoint.port === b[i]?.port);
}

/**
 * Lays out a service port's chains. The chain with Local-policy endpoints is
 * KUBE-SVL, the one with Cluster-policy endpoints KUBE-SVC; when internal and
 * external traffic use the same endpoints they share one chain.
 */
export function serviceLayout(service: ServicePortPlan, plan: Plan): ServiceLayout {
  const names = serviceChainNames(service);
  const internal = service.internal.endpoints;
  const external = service.external.endpoints;
  const hasEndpoints = internal.length > 0 || external.length > 0;
  const externalName = service.externalLocal ? names.local : names.cluster;
  const internalName = sameEndpoints(internal, external)
    ? externalName
    : service.externalLocal
    ? names.cluster
    : names.local;
  const externallyAccessible = service.nodePort > 0 || service.externalIPs.length > 0 ||
    service.loadBalancerIPs.length > 0;
  return {
    portName: servicePortName(service),
    protocol: service.protocol.toLowerCase(),
    names,
    hasEndpoints,
    internalChain: internal.length > 0 ? internalName : undefined,
    externalPolicyChain: external.length > 0 ? externalName : undefined,
    usesExternalChain: hasEndpoints && externallyAccessible,
    usesFirewallChain: hasEndpoints && service.loadBalancerIPs.length > 0 &&
      service.sourceRanges.length > 0,
    counters: serviceNfacctNames(plan, service),
  };
}
