/**
 * The planner: cluster state and this node's configuration in, one {@linkcode Plan}
 * per IP family out. Every Service policy decision is made here, once; backends
 * only render the result.
 *
 * Pure apart from log lines. Given a previous result and the set of changed
 * services, it replans only those and reuses the other service port plans as
 * they are (same objects), so the cost of a sync follows the size of the change.
 *
 * @module
 */

import { deepEqual } from "./deep_equal.ts";
import { getLogger } from "./logger.ts";
import type { DetectLocalMode } from "./plan.ts";
import { categorizeEndpoints, mergeSliceEndpoints } from "./endpoints.ts";
import { FrontendClaims, serviceKeyOfPortId } from "./frontends.ts";
import {
  cidrContains,
  collapseCIDRs,
  familyOfValidated,
  isLoopback,
  parseCIDR,
  type ParsedCIDR,
  specialAddress,
} from "./ip.ts";
import type { EndpointSlice, IpFamily, Node, Service, ServiceKey } from "./model.ts";
import { serviceKey } from "./model.ts";
import type {
  LocalTrafficDetector,
  NodePlans,
  Plan,
  ServiceCounter,
  ServicePortPlan,
} from "./plan.ts";
import { lowerBoundById, SERVICE_COUNTERS, servicePortId } from "./plan.ts";
import type { ClusterState } from "./state.ts";
import { usesTopologyKeys } from "./topology.ts";
import { exactArray } from "./exact_array.ts";

const logger = getLogger(["kproxy", "planner"]);

/** The `--nodeport-addresses` value meaning the node's primary addresses. */
const NODE_PORT_ADDRESSES_PRIMARY = "primary";

/** The configuration values the planner needs. */
export interface PlannerOptions {
  nodeName: string;
  /**
   * `["primary"]` (the node IP of each family), CIDRs, or `[]` (all local
   * addresses); a family without CIDRs, or without a node IP for primary,
   * uses all its local addresses, as kube-proxy does.
   */
  nodePortAddresses: string[];
  /** The node's interface addresses, used to resolve nodePortAddresses. */
  localAddresses: string[];
  /**
   * `--bind-address`: when not unspecified, the node IP of its family in place
   * of the Node object's (kube-proxy's detectNodeIPs). @default {"0.0.0.0"}
   */
  bindAddress?: string;
  clusterCIDRs: string[];
  detectLocalMode: DetectLocalMode;
  bridgeInterface: string;
  interfaceNamePrefix: string;
  masqueradeAll: boolean;
  /** Used when the state has no ServiceCIDR objects. */
  serviceClusterIPRange: string[];
  /** Empty means every declared externalIP is honoured. */
  externalIPAllowedCIDRs: string[];
  featureGates: Record<string, boolean>;
  /** `--service-counters`: keep per-service-port traffic counters in the kernel. @default {false} */
  serviceCounters?: boolean;
}

/** Input of {@linkcode planNode}. */
export interface PlanInput {
  state: ClusterState;
  options: PlannerOptions;
  /** The previous result; with `changedServices`, enables an incremental replan. */
  previous?: NodePlans;
  /** Services whose object or slices changed since `previous`. */
  changedServices?: Set<ServiceKey>;
  /** Something every service depends on changed: replan everything. */
  globalChange?: boolean;
}

const FAMILIES: readonly IpFamily[] = ["IPv4", "IPv6"];

/** What every service port plan of one family shares. */
interface FamilyContext {
  family: IpFamily;
  state: ClusterState;
  options: PlannerOptions;
  nodeLabels: Readonly<Record<string, string>>;
  externalIPAllowed: ParsedCIDR[];
  /** The family's service CIDRs (`Plan.serviceCIDRs`). */
  serviceCIDRs: string[];
  /** The family's node port addresses (`Plan.nodePortAddresses`). */
  nodePortAddresses: string[];
  /** The family's node IP, when known: --bind-address, else the Node object's. */
  nodeIP?: string;
  /** The previous plan of the family, to log a cluster IP outside them once per change. */
  previous?: Plan;
}

/**
 * Plans the node's packet path for both IP families.
 *
 * @example Full plan
 * ```ts ignore
 * const plans = planNode({ state, options });
 * plans.ipv4.services; // sorted by id
 * ```
 *
 * @param input The cluster state, the options and optionally the previous result.
 * @returns One plan per family.
 */
export function planNode(input: PlanInput): NodePlans {
  const { state, options, previous, changedServices } = input;
  const node = state.nodes.get(options.nodeName);
  const incremental = previous !== undefined && changedServices !== undefined &&
    input.globalChange !== true;
  const replan = incremental ? changedServices : undefined;
  const plans = FAMILIES.map((family): Plan => {
    const localTraffic = localTrafficDetector(family, options, node);
    const previousPlan = previous === undefined
      ? undefined
      : family === "IPv4"
      ? previous.ipv4
      : previous.ipv6;
    const ctx: FamilyContext = {
      family,
      state,
      options,
      nodeLabels: node?.labels ?? {},
      externalIPAllowed: parseCIDRs(options.externalIPAllowedCIDRs, family),
      serviceCIDRs: serviceCIDRs(family, state, options),
      nodePortAddresses: nodePortAddresses(family, options, node),
      nodeIP: nodeIP(family, options, node),
      previous: previousPlan,
    };
    const { services, claims } = previousPlan !== undefined && replan !== undefined
      ? replanServices(ctx, previousPlan, replan)
      : planAllServices(ctx);
    const plan: Plan = {
      family,
      nodeName: options.nodeName,
      nodePortAddresses: ctx.nodePortAddresses,
      serviceCIDRs: ctx.serviceCIDRs,
      localTraffic,
      clusterIPMasquerade: options.masqueradeAll
        ? "all"
        : localTraffic.mode === "None"
        ? "none"
        : "non-local",
      services,
      ...(options.serviceCounters === true ? { serviceCounters: true } : {}),
    };
    claims.rememberFor(plan);
    return plan;
  });
  return { ipv4: plans[0]!, ipv6: plans[1]! };
}

/** Service port plans with each shared frontend held by one of them, and the claims. */
interface PlannedServices {
  services: ServicePortPlan[];
  claims: FrontendClaims;
}

function planAllServices(ctx: FamilyContext): PlannedServices {
  const declared: ServicePortPlan[] = [];
  for (const [key, service] of ctx.state.services) {
    declared.push(...planServiceSafely(ctx, key, service));
  }
  declared.sort(byId);
  const claims = FrontendClaims.of(declared);
  return { services: declared.map((service) => claims.resolve(service)), claims };
}

/**
 * Replans the given services, and the other claimants of every frontend they
 * claimed or claim now (which of them holds it may have changed), and splices
 * the result into the previous, sorted list. The ports of one service are
 * contiguous there (ids share the `namespace/name:` prefix), so each is found
 * by binary search and the untouched entries are copied by reference: the
 * cost follows the change.
 */
function replanServices(
  ctx: FamilyContext,
  previousPlan: Plan,
  replan: ReadonlySet<ServiceKey>,
): PlannedServices {
  const previous = previousPlan.services;
  const claims = FrontendClaims.after(previousPlan);
  const touched = new Set<string>();
  const declared = new Map<ServiceKey, ServicePortPlan[]>();
  const planAgain = (key: ServiceKey) => {
    const service = ctx.state.services.get(key);
    const ports = service === undefined ? [] : planServiceSafely(ctx, key, service);
    declared.set(key, ports);
    return ports;
  };
  for (const key of replan) {
    const [start, end] = portRange(previous, key);
    for (let i = start; i < end; i++) claims.release(previous[i]!, touched);
    for (const port of planAgain(key)) claims.claim(port, touched);
  }
  for (const frontend of touched) {
    for (const id of claims.claimants(frontend)) {
      const key = serviceKeyOfPortId(id);
      if (!declared.has(key)) planAgain(key);
    }
  }
  const fresh: ServicePortPlan[] = [];
  const removed: [start: number, end: number][] = [];
  for (const [key, ports] of declared) {
    const [start, end] = portRange(previous, key);
    if (end > start) removed.push([start, end]);
    for (const port of ports) fresh.push(claims.resolve(port));
  }
  fresh.sort(byId);
  removed.sort((a, b) => a[0] - b[0]);
  const insertAt = fresh.map((plan) => lowerBoundById(previous, plan.id));
  const merged: ServicePortPlan[] = [];
  let cursor = 0;
  let r = 0;
  let f = 0;
  while (cursor < previous.length || f < fresh.length) {
    if (f < fresh.length && insertAt[f]! <= cursor) {
      merged.push(fresh[f++]!);
    } else if (r < removed.length && removed[r]![0] === cursor) {
      cursor = removed[r++]![1];
    } else {
      const stop = Math.min(
        r < removed.length ? removed[r]![0] : previous.length,
        f < fresh.length ? insertAt[f]! : previous.length,
      );
      while (cursor < stop) merged.push(previous[cursor++]!);
    }
  }
  return { services: merged, claims };
}

/** The index range of the ports of service `key` in a sorted list. */
function portRange(plans: readonly ServicePortPlan[], key: ServiceKey): [number, number] {
  const prefix = `${key}:`;
  const start = lowerBoundById(plans, prefix);
  let end = start;
  while (end < plans.length && plans[end]!.id.startsWith(prefix)) end++;
  return [start, end];
}

function byId(a: ServicePortPlan, b: ServicePortPlan): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** {@linkcode planService}, with any unexpected failure logged and the service skipped. */
function planServiceSafely(
  ctx: FamilyContext,
  key: ServiceKey,
  service: Service,
): ServicePortPlan[] {
  try {
    return planService(ctx, service, ctx.state.slicesByService.get(key) ?? []);
  } catch (error) {
    logger.warn("Skipping service {key}: cannot plan it: {error}", { key, error: String(error) });
    return [];
  }
}

/** Plans every port of one service for one family; [] when the service has no
 * cluster IP of the family or is skipped as invalid. */
function planService(
  ctx: FamilyContext,
  service: Service,
  slices: readonly EndpointSlice[],
): ServicePortPlan[] {
  const { family, options } = ctx;
  const clusterIP = service.clusterIPs.find((ip) => familyOfValidated(ip) === family);
  if (clusterIP === undefined) return [];
  const key = serviceKey(service.namespace, service.name);
  warnIfOutsideServiceCIDRs(ctx, key, clusterIP);
  const topologyKeys = usesTopologyKeys(service, options.featureGates);
  if (topologyKeys && service.externalTrafficPolicy === "Local") {
    logger.warn(
      "Skipping service {key}: topologyKeys cannot be used with externalTrafficPolicy Local",
      { key },
    );
    return [];
  }
  const externalIPs = allowedExternalIPs(ctx, key, service.externalIPs);
  const loadBalancerIPs = service.type === "LoadBalancer"
    ? service.loadBalancerIngress
      .filter((ingress) => ingress.ipMode === "VIP" && familyOfValidated(ingress.ip) === family)
      .map((ingress) => ingress.ip)
    : [];
  const sourceRanges = service.type === "LoadBalancer"
    ? collapseCIDRs(
      service.loadBalancerSourceRanges.filter((cidr) => familyOfValidated(cidr) === family),
    )
    : [];
  const nodeIP = ctx.nodeIP;
  const allowFromLoadBalancerIPs = nodeIP !== undefined &&
    sourceRanges.some((range) => cidrContains(range, nodeIP));
  const healthCheckNodePort =
    service.type === "LoadBalancer" && service.externalTrafficPolicy === "Local"
      ? service.healthCheckNodePort
      : 0;
  const plans: ServicePortPlan[] = [];
  for (const port of service.ports) {
    const nodePort = service.type === "ClusterIP" ? 0 : port.nodePort;
    const externallyAccessible = nodePort > 0 || externalIPs.length > 0 ||
      loadBalancerIPs.length > 0;
    const externalLocal = externallyAccessible && service.externalTrafficPolicy === "Local";
    const endpoints = mergeSliceEndpoints({
      slices,
      family,
      portName: port.name,
      protocol: port.protocol,
      nodeName: options.nodeName,
    });
    const categorized = categorizeEndpoints({
      endpoints,
      service,
      externalLocal,
      topology: {
        nodeName: options.nodeName,
        nodeLabels: ctx.nodeLabels,
        featureGates: options.featureGates,
      },
    });
    plans.push({
      id: servicePortId(service.namespace, service.name, port.name, port.protocol),
      namespace: service.namespace,
      name: service.name,
      portName: port.name,
      protocol: port.protocol,
      port: port.port,
      clusterIPs: [clusterIP],
      nodePort,
      externalIPs: [...externalIPs],
      loadBalancerIPs: [...loadBalancerIPs],
      sourceRanges: [...sourceRanges],
      allowFromLoadBalancerIPs,
      healthCheckNodePort,
      affinityTimeoutSeconds: service.affinityTimeoutSeconds,
      internal: categorized.internal,
      external: categorized.external,
      externalLocal,
      localReadyEndpoints: categorized.localReadyEndpoints,
      servingEndpoints: exactArray(categorized.serving),
      ...(service.preserveDestination && (nodePort > 0 || loadBalancerIPs.length > 0)
        ? { preserveDestination: true as const }
        : {}),
      ...(options.serviceCounters === true
        ? {
          counters: serviceCounters({
            localPolicy: externalLocal || service.internalTrafficPolicy === "Local",
            sourceRanges: sourceRanges.length > 0 && loadBalancerIPs.length > 0,
          }),
        }
        : {}),
    });
  }
  return plans;
}

/**
 * The counters of a service port: connections and no-endpoint refusals always
 * (any port may lose its endpoints), the others only where their rule exists.
 */
function serviceCounters(has: { localPolicy: boolean; sourceRanges: boolean }): ServiceCounter[] {
  return exactArray(
    SERVICE_COUNTERS.filter((counter) =>
      counter === "no-local-endpoints"
        ? has.localPolicy
        : counter === "source-range"
        ? has.sourceRanges
        : true
    ),
  );
}

/**
 * Logs a cluster IP outside every service CIDR of its family (when any is
 * known), unless the previous plan held the service with the same cluster IP
 * and the same CIDRs: once per change, not once per sync.
 */
function warnIfOutsideServiceCIDRs(ctx: FamilyContext, key: ServiceKey, clusterIP: string): void {
  const cidrs = ctx.serviceCIDRs;
  if (cidrs.length === 0 || cidrs.some((cidr) => cidrContains(cidr, clusterIP))) return;
  const previous = ctx.previous;
  if (previous !== undefined && cidrs.join() === previous.serviceCIDRs.join()) {
    const before = previous.services[lowerBoundById(previous.services, `${key}:`)];
    if (before?.id.startsWith(`${key}:`) && before.clusterIPs[0] === clusterIP) return;
  }
  logger.warn("Cluster IP {ip} of service {key} is outside every service CIDR {cidrs}", {
    ip: clusterIP,
    key,
    cidrs,
  });
}

/** Declared externalIPs of the family, without those outside the allow-list. */
function allowedExternalIPs(ctx: FamilyContext, key: ServiceKey, declared: string[]): string[] {
  const ofFamily = declared.filter((ip) => familyOfValidated(ip) === ctx.family);
  if (ctx.options.externalIPAllowedCIDRs.length === 0) return ofFamily;
  return ofFamily.filter((ip) => {
    if (ctx.externalIPAllowed.some((cidr) => cidrContains(cidr, ip))) return true;
    logger.warn(
      "Ignoring externalIP {ip} of service {key}: outside the allowed CIDRs {allowed}",
      { ip, key, allowed: ctx.options.externalIPAllowedCIDRs },
    );
    return false;
  });
}

function parseCIDRs(cidrs: readonly string[], family: IpFamily): ParsedCIDR[] {
  const parsed: ParsedCIDR[] = [];
  for (const text of cidrs) {
    const cidr = parseCIDR(text);
    if (cidr?.family === family) parsed.push(cidr);
  }
  return parsed;
}

/**
 * The local-traffic detector of one family (`--detect-local-mode`). An unset mode
 * with cluster CIDRs behaves as ClusterCIDR, as upstream's default does.
 */
function localTrafficDetector(
  family: IpFamily,
  options: PlannerOptions,
  node: Node | undefined,
): LocalTrafficDetector {
  const ofFamily = (cidrs: readonly string[]) => parseCIDRs(cidrs, family).map((cidr) => cidr.cidr);
  const mode = options.detectLocalMode === "" && options.clusterCIDRs.length > 0
    ? "ClusterCIDR"
    : options.detectLocalMode;
  switch (mode) {
    case "ClusterCIDR": {
      const cidrs = ofFamily(options.clusterCIDRs);
      return cidrs.length > 0 ? { mode, cidrs } : { mode: "None" };
    }
    case "NodeCIDR": {
      const cidrs = ofFamily(node?.podCIDRs ?? []);
      return cidrs.length > 0 ? { mode, cidrs } : { mode: "None" };
    }
    case "BridgeInterface":
      return options.bridgeInterface !== ""
        ? { mode, interfaces: [options.bridgeInterface] }
        : { mode: "None" };
    case "InterfaceNamePrefix":
      return options.interfaceNamePrefix !== ""
        ? { mode, interfaces: [options.interfaceNamePrefix] }
        : { mode: "None" };
    default:
      return { mode: "None" };
  }
}

/**
 * The node IP of one family, as kube-proxy's detectNodeIPs: `--bind-address`
 * when it is of the family and not unspecified, else the Node object's first
 * address of the family; never loopback.
 */
function nodeIP(
  family: IpFamily,
  options: PlannerOptions,
  node: Node | undefined,
): string | undefined {
  const bind = options.bindAddress;
  const candidate = bind !== undefined && familyOfValidated(bind) === family &&
      specialAddress(bind) !== "unspecified"
    ? bind
    : (node?.addresses ?? []).find((ip) => familyOfValidated(ip) === family);
  return candidate === undefined || isLoopback(candidate) ? undefined : candidate;
}

/**
 * Node-port addresses of one family, as kube-proxy resolves nodePortAddresses:
 * for `primary`, the family's node IP; otherwise the local addresses inside
 * the family's CIDRs. A family with no CIDR, or no node IP for `primary`,
 * accepts on all its local addresses. Never loopback.
 */
function nodePortAddresses(
  family: IpFamily,
  options: PlannerOptions,
  node: Node | undefined,
): string[] {
  const localOfFamily = options.localAddresses.filter((ip) => familyOfValidated(ip) === family);
  let candidates = localOfFamily;
  if (options.nodePortAddresses.includes(NODE_PORT_ADDRESSES_PRIMARY)) {
    const primary = nodeIP(family, options, node);
    if (primary !== undefined) candidates = [primary];
  } else {
    const cidrs = parseCIDRs(options.nodePortAddresses, family);
    if (cidrs.length > 0) {
      candidates = localOfFamily.filter((ip) => cidrs.some((cidr) => cidrContains(cidr, ip)));
    }
  }
  return [...new Set(candidates.filter((ip) => !isLoopback(ip)))];
}

/** Service CIDRs of one family: from ServiceCIDR objects, else the configured range. */
function serviceCIDRs(family: IpFamily, state: ClusterState, options: PlannerOptions): string[] {
  const declared = state.serviceCIDRs.length > 0
    ? state.serviceCIDRs.flatMap((serviceCIDR) => serviceCIDR.cidrs)
    : options.serviceClusterIPRange;
  return collapseCIDRs(parseCIDRs(declared, family).map((cidr) => cidr.cidr));
}

/**
 * Ids of the service ports added, removed or changed between two plans of one
 * family. Entries that are the same object are unchanged without a look (the
 * incremental planner reuses them); others are compared field by field.
 *
 * @param previous The plan before.
 * @param next The plan after.
 * @returns The ids that differ.
 */
export function changedServicePortIds(
  previous: Plan,
  next: Plan,
): Set<string> {
  const changed = new Set<string>();
  const before = previous.services;
  const after = next.services;
  let i = 0;
  let j = 0;
  while (i < before.length || j < after.length) {
    const old = before[i];
    const cur = after[j];
    if (old === cur) {
      i++;
      j++;
    } else if (cur === undefined || (old !== undefined && old.id < cur.id)) {
      changed.add(old!.id);
      i++;
    } else if (old === undefined || cur.id < old.id) {
      changed.add(cur.id);
      j++;
    } else {
      if (old !== cur && !deepEqual(old, cur)) changed.add(cur.id);
      i++;
      j++;
    }
  }
  return changed;
}
