/**
 * The nftables objects of one service port: its dispatch elements, slot-map
 * elements or chains of its own, affinity maps, and the shared `dnat-E…`
 * chains it goes to. Pure (apart from a log line for what it skips) and
 * independent of every other service port, which is what makes partial
 * syncs cheap.
 *
 * @module
 */

import { getLogger } from "../../lib/core/logger.ts";
import type { Plan, PlanEndpoint, ServicePortPlan, TrafficPlan } from "../../lib/core/plan.ts";
import { collapseCIDRs, parseCIDR } from "../../lib/core/ip.ts";
import { objectName, serviceNameSuffix } from "./names.ts";
import { CONNECTION_COUNTERS } from "./skeleton.ts";
import { Chain, Element, NftSet } from "./transaction.ts";

import { address, type Context, context, port, type RenderOptions } from "./context.ts";

const logger = getLogger(["kproxy", "nftables"]);

/** nftables objects owned by one service port. */
export interface ServiceObjects {
  chains: { chain: Chain; rules: string[] }[];
  /** Chains shared with other service ports (`dnat-E…`), by name, with their rules. */
  sharedChains: Map<string, string[]>;
  /** Affinity maps. */
  sets: NftSet[];
  /** Elements of the global maps and sets that only this service port owns. */
  elements: Element[];
  /** Entries of `@cluster-ips` (shared by all ports of a service). */
  clusterIPs: string[];
  /** IPs of endpoints that may hairpin on this node, for `@hairpin`. */
  endpointIPs: string[];
  /** Affinity map name to endpoint keys (`ip:port`), to flush maps that lost an endpoint. */
  affinityEndpoints: Map<string, string[]>;
}

function dnatTarget(ctx: Context, endpoint: PlanEndpoint): string {
  const ip = address(ctx, endpoint.ip);
  const p = port(endpoint.port, "endpoint port");
  return ctx.family === "IPv4" ? `${ip}:${p}` : `[${ip}]:${p}`;
}

function endpointKey(endpoint: PlanEndpoint): string {
  return `${endpoint.ip}:${endpoint.port}`;
}

function sameEndpoints(a: TrafficPlan, b: TrafficPlan): boolean {
  return a.endpoints.length === b.endpoints.length &&
    a.endpoints.every((endpoint, i) => endpointKey(endpoint) === endpointKey(b.endpoints[i]!));
}

/** An affinity map and, when every endpoint has the same port, that port (the map then holds addresses only). */
interface Affinity {
  map: string;
  port?: string;
}

function endpointRules(
  ctx: Context,
  service: ServicePortPlan,
  endpoints: PlanEndpoint[],
  affinity: Affinity | undefined,
): string[] {
  const proto = service.protocol.toLowerCase();
  const rules: string[] = [];
  if (affinity !== undefined) {
    const portSuffix = affinity.port === undefined ? "" : ` : ${affinity.port}`;
    rules.push(
      `meta l4proto ${proto} dnat ${ctx.ipx} to ${ctx.ipx} saddr map @${affinity.map}${portSuffix}`,
    );
  }
  endpoints.forEach((endpoint, j) => {
    const remaining = endpoints.length - j;
    const parts: string[] = [];
    if (remaining > 1) parts.push(`numgen random mod ${remaining} 0`);
    if (affinity !== undefined) {
      const ip = address(ctx, endpoint.ip);
      const data = affinity.port === undefined
        ? `${ip} . ${port(endpoint.port, "endpoint port")}`
        : ip;
      parts.push(`update @${affinity.map} { ${ctx.ipx} saddr : ${data} }`);
    }
    parts.push(`meta l4proto ${proto} dnat to ${dnatTarget(ctx, endpoint)}`);
    rules.push(parts.join(" "));
  });
  return rules;
}

function verdictWhenEmpty(traffic: TrafficPlan): string {
  return traffic.whenEmpty === "reject" ? "goto reject-chain" : "drop";
}

/**
 * Builds the objects of one service port. Pure and independent of every other
 * service port, which is what makes partial syncs cheap.
 *
 * @throws {TypeError} when an address in the service port is not of the plan's family
 */
export function serviceObjects(
  plan: Plan,
  service: ServicePortPlan,
  options: RenderOptions = {},
): ServiceObjects {
  return buildServiceObjects(context(plan, options), service);
}

function buildServiceObjects(ctx: Context, service: ServicePortPlan): ServiceObjects {
  const proto = service.protocol.toLowerCase();
  if (!/^(tcp|udp|sctp)$/.test(proto)) {
    throw new TypeError(`Cannot render protocol "${service.protocol}"`);
  }
  const servicePort = port(service.port, "service port");
  const { internal, external } = service;
  const externalAddresses = [...service.externalIPs, ...service.loadBalancerIPs].map((ip) =>
    address(ctx, ip)
  );
  const routes = usesSlotMaps(service)
    ? slotMapRoutes(ctx, service)
    : chainRoutes(ctx, service, externalAddresses.length > 0 || service.nodePort > 0);

  const elements: Element[] = [];
  const countConnections = ctx.counters && (service.counters ?? []).includes("connections");
  const dispatch = (
    sets: DispatchSets,
    key: string[],
    route: Route,
    traffic: TrafficPlan,
    dispatched: boolean,
  ) => {
    if (dispatched) {
      elements.push(new Element({ set: sets.dispatch, key, value: route.verdict }));
      elements.push(...route.slots(sets.slots, key));
    }
    if (traffic.endpoints.length === 0) {
      elements.push(new Element({ set: sets.empty, key, value: verdictWhenEmpty(traffic) }));
    } else if (countConnections) {
      elements.push(new Element({ set: sets.connectionCounters, key }));
    }
  };
  const clusterIPs = service.clusterIPs.map((ip) => address(ctx, ip));
  for (const ip of clusterIPs) {
    const key = [ip, proto, servicePort];
    dispatch(ADDRESS_SETS, key, routes.internal, internal, internal.endpoints.length > 0);
  }
  const dispatchExternal = external.endpoints.length > 0 || service.externalLocal;
  for (const ip of externalAddresses) {
    dispatch(ADDRESS_SETS, [ip, proto, servicePort], routes.external, external, dispatchExternal);
  }
  if (service.nodePort > 0) {
    const key = [proto, port(service.nodePort, "node port")];
    dispatch(NODE_PORT_SETS, key, routes.nodePort, external, dispatchExternal);
  }
  if (service.sourceRanges.length > 0) {
    // Interval sets refuse overlapping elements: a covered range adds nothing.
    const ranges = collapseCIDRs(service.sourceRanges.map((text) => {
      const cidr = parseCIDR(text);
      if (cidr === undefined || cidr.family !== ctx.family) {
        throw new TypeError(`Cannot render source range "${text}": not an ${ctx.family} CIDR`);
      }
      return cidr.cidr;
    }));
    for (const lbIP of service.loadBalancerIPs.map((ip) => address(ctx, ip))) {
      elements.push(new Element({ set: "firewall-ips", key: [lbIP, proto, servicePort] }));
      for (const range of ranges) {
        elements.push(
          new Element({ set: "firewall-allow", key: [lbIP, proto, servicePort, range] }),
        );
      }
    }
  }
  const endpointIPs = [
    ...new Set(
      [...internal.endpoints, ...external.endpoints].filter(mayHairpinHere).map((e) =>
        address(ctx, e.ip)
      ),
    ),
  ];
  return {
    chains: routes.chains,
    sharedChains: routes.sharedChains,
    sets: routes.sets,
    elements,
    clusterIPs,
    endpointIPs,
    affinityEndpoints: routes.affinityEndpoints,
  };
}

/**
 * The maps a dispatch key is written to: its verdict, its slots, the verdict
 * without endpoints, and the set counting its connections.
 */
interface DispatchSets {
  dispatch: "service-ips" | "service-nodeports";
  slots: SlotMap;
  empty: "no-endpoint-services" | "no-endpoint-nodeports";
  connectionCounters: string;
}

const ADDRESS_SETS: DispatchSets = {
  dispatch: "service-ips",
  slots: "service-endpoints",
  empty: "no-endpoint-services",
  connectionCounters: CONNECTION_COUNTERS.address,
};

const NODE_PORT_SETS: DispatchSets = {
  dispatch: "service-nodeports",
  slots: "nodeport-endpoints",
  empty: "no-endpoint-nodeports",
  connectionCounters: CONNECTION_COUNTERS.nodePort,
};

/** Where one kind of traffic of a service port goes: a verdict, and the slot elements it reads. */
interface Route {
  verdict: string;
  /** Slot elements (`key . j : endpoint`) for a dispatch key, in `map`. */
  slots(map: SlotMap, key: string[]): Element[];
}

/** How a service port's traffic reaches its endpoints, and the objects that takes. */
interface Routes {
  internal: Route;
  external: Route;
  nodePort: Route;
  chains: { chain: Chain; rules: string[] }[];
  sharedChains: Map<string, string[]>;
  sets: NftSet[];
  affinityEndpoints: Map<string, string[]>;
}

/** The two slot maps: dispatch key and slot number to an endpoint's `addr . port`. */
type SlotMap = "service-endpoints" | "nodeport-endpoints";

/** Who gets the masquerade mark on the way to the endpoints. */
type Masquerade = "none" | "all" | "non-local";

/**
 * Whether a service port takes the slot-map layout: its endpoints are
 * elements of a global map, read through a chain shared by every service
 * port with as many endpoints. Session affinity (a map written per client)
 * and externalTrafficPolicy Local (one address, two endpoint lists) keep
 * chains of their own.
 */
function usesSlotMaps(service: ServicePortPlan): boolean {
  return service.affinityTimeoutSeconds <= 0 && !service.externalLocal;
}

function clusterMasquerade(ctx: Context): Masquerade {
  if (ctx.clusterIPMasquerade === "all") return "all";
  if (ctx.clusterIPMasquerade === "non-local" && ctx.nonLocalMatch !== undefined) {
    return "non-local";
  }
  return "none";
}

/** Name of the shared chain that picks one of `count` slots of `map`, marking as `masquerade` says. */
export function slotChainName(map: SlotMap, count: number, masquerade: Masquerade): string {
  const prefix = map === "service-endpoints" ? "dnat" : "nodeport-dnat";
  const suffix = masquerade === "all"
    ? "-masq"
    : masquerade === "non-local"
    ? "-masq-nonlocal"
    : "";
  return `${prefix}-${count}${suffix}`;
}

function slotChainRules(
  ctx: Context,
  map: SlotMap,
  count: number,
  masquerade: Masquerade,
): string[] {
  const rules: string[] = [];
  if (masquerade === "all") rules.push(ctx.markSet);
  if (masquerade === "non-local") rules.push(`${ctx.nonLocalMatch} ${ctx.markSet}`);
  const key = map === "service-endpoints"
    ? `${ctx.ipx} daddr . meta l4proto . th dport`
    : "meta l4proto . th dport";
  rules.push(`dnat ${ctx.ipx} to ${key} . numgen random mod ${count} map @${map}`);
  return rules;
}

/** A shared chain a slot-map service port dispatches to. */
interface SlotChain {
  map: SlotMap;
  count: number;
  masquerade: Masquerade;
}

/**
 * The shared chains a service port's dispatch elements go to: cheap (no
 * element is built), so an incremental sync can ask it of every service port.
 */
export function slotChainsOf(ctx: Context, service: ServicePortPlan): SlotChain[] {
  if (!usesSlotMaps(service)) return [];
  const chains: SlotChain[] = [];
  const internal = service.internal.endpoints.length;
  const external = service.external.endpoints.length;
  if (internal > 0 && service.clusterIPs.length > 0) {
    chains.push({
      map: "service-endpoints",
      count: internal,
      masquerade: clusterMasquerade(ctx),
    });
  }
  if (external > 0 && service.externalIPs.length + service.loadBalancerIPs.length > 0) {
    chains.push({ map: "service-endpoints", count: external, masquerade: "all" });
  }
  if (external > 0 && service.nodePort > 0) {
    chains.push({ map: "nodeport-endpoints", count: external, masquerade: "all" });
  }
  return chains;
}

function slotMapRoutes(ctx: Context, service: ServicePortPlan): Routes {
  const route = (map: SlotMap, endpoints: PlanEndpoint[], masquerade: Masquerade): Route => {
    const targets = endpoints.map((endpoint) =>
      `${address(ctx, endpoint.ip)} . ${port(endpoint.port, "endpoint port")}`
    );
    return {
      verdict: `goto ${slotChainName(map, targets.length, masquerade)}`,
      slots: (set, key) =>
        targets.map((value, j) => new Element({ set, key: [...key, String(j)], value })),
    };
  };
  const sharedChains = new Map<string, string[]>();
  for (const { map, count, masquerade } of slotChainsOf(ctx, service)) {
    sharedChains.set(
      slotChainName(map, count, masquerade),
      slotChainRules(ctx, map, count, masquerade),
    );
  }
  return {
    internal: route(
      "service-endpoints",
      service.internal.endpoints,
      clusterMasquerade(ctx),
    ),
    external: route("service-endpoints", service.external.endpoints, "all"),
    nodePort: route("nodeport-endpoints", service.external.endpoints, "all"),
    chains: [],
    sharedChains,
    sets: [],
    affinityEndpoints: new Map(),
  };
}

function chainRoutes(ctx: Context, service: ServicePortPlan, hasExternal: boolean): Routes {
  const suffix = serviceNameSuffix(service);
  const svcChain = objectName("svc", suffix);
  const extChain = objectName("ext", suffix);
  const { internal, external } = service;
  const affinity = service.affinityTimeoutSeconds;
  const sets: NftSet[] = [];
  const affinityEndpoints = new Map<string, string[]>();
  const affinityMap = (kind: "aff" | "affx", traffic: TrafficPlan): Affinity | undefined => {
    if (affinity <= 0 || traffic.endpoints.length === 0) return undefined;
    const name = objectName(kind, suffix);
    const ports = new Set(traffic.endpoints.map((e) => port(e.port, "endpoint port")));
    const single = ports.size === 1 ? [...ports][0] : undefined;
    if (single === undefined && ctx.family === "IPv6") {
      // nft 1.0.6 aborts on `update @m { ip6 saddr : addr . port }`.
      logger.warn("Skipping session affinity of {id}: IPv6 endpoints with different ports", {
        id: service.id,
      });
      return undefined;
    }
    if (!affinityEndpoints.has(name)) {
      sets.push(
        new NftSet({
          name,
          type: ctx.addrType,
          dataType: single === undefined ? `${ctx.addrType} . inet_service` : ctx.addrType,
          flags: ["dynamic", "timeout"],
          timeoutSeconds: affinity,
        }),
      );
      affinityEndpoints.set(name, traffic.endpoints.map(endpointKey));
    }
    return { map: name, port: single };
  };

  const svcRules: string[] = [];
  const masquerade = clusterMasquerade(ctx);
  // The plan's masquerade is for traffic to the cluster IP: a local pod's packet
  // short-circuited here from an external address keeps its source, as upstream's.
  if (masquerade === "all") {
    for (const ip of service.clusterIPs) {
      svcRules.push(`${ctx.ipx} daddr ${address(ctx, ip)} ${ctx.markSet}`);
    }
  }
  if (masquerade === "non-local") svcRules.push(`${ctx.nonLocalMatch} ${ctx.markSet}`);
  svcRules.push(...endpointRules(ctx, service, internal.endpoints, affinityMap("aff", internal)));
  const chains = [{ chain: new Chain({ name: svcChain }), rules: svcRules }];

  if (hasExternal) {
    const same = sameEndpoints(internal, external);
    const extMapKind = same ? "aff" : "affx";
    const extRules: string[] = [];
    if (service.externalLocal) {
      for (const match of ctx.localMatches) extRules.push(`${match} goto ${svcChain}`);
      extRules.push(`fib saddr type local ${ctx.markSet} goto ${svcChain}`);
      extRules.push(
        ...endpointRules(ctx, service, external.endpoints, affinityMap(extMapKind, external)),
      );
    } else {
      extRules.push(ctx.markSet);
      if (same) {
        extRules.push(`goto ${svcChain}`);
      } else {
        extRules.push(
          ...endpointRules(ctx, service, external.endpoints, affinityMap(extMapKind, external)),
        );
      }
    }
    chains.push({ chain: new Chain({ name: extChain }), rules: extRules });
  }
  const noSlots = () => [];
  const toExternal: Route = { verdict: `goto ${extChain}`, slots: noSlots };
  return {
    internal: { verdict: `goto ${svcChain}`, slots: noSlots },
    external: toExternal,
    nodePort: toExternal,
    chains,
    sharedChains: new Map(),
    sets,
    affinityEndpoints,
  };
}

/**
 * Whether a packet from this endpoint can be DNATed back to it on this node
 * with nothing else asking for masquerade: only a local endpoint can, or one
 * whose node is unknown. A remote endpoint's own traffic to a service is
 * DNATed on its node; it reaches this node DNATed already, or as external
 * traffic that the external chain marks for masquerade.
 */
export function mayHairpinHere(endpoint: PlanEndpoint): boolean {
  return endpoint.isLocal || endpoint.nodeName === "";
}

const DISPATCH_SETS = [ADDRESS_SETS, NODE_PORT_SETS];

export const DISPATCH_MAPS: ReadonlySet<string> = new Set(
  DISPATCH_SETS.map((sets) => sets.dispatch),
);

/** Whether an element is one of a dispatch element's endpoint slots. */
export function isSlotElement(element: Element): boolean {
  return DISPATCH_SETS.some((sets) => sets.slots === element.options.set);
}

/**
 * The shared chains every full sync writes: for 1 to `count` endpoints, each
 * kind {@linkcode slotChainsOf} can name, so any of its chains up to `count`
 * exists.
 */
export function presetSlotChains(ctx: Context, count: number): Map<string, string[]> {
  const kinds: [SlotMap, Masquerade][] = [
    ["service-endpoints", "none"],
    ["service-endpoints", "all"],
    ["nodeport-endpoints", "all"],
  ];
  if (ctx.nonLocalMatch !== undefined) kinds.push(["service-endpoints", "non-local"]);
  const chains = new Map<string, string[]>();
  for (const [map, masquerade] of kinds) {
    for (let endpoints = 1; endpoints <= count; endpoints++) {
      chains.set(
        slotChainName(map, endpoints, masquerade),
        slotChainRules(ctx, map, endpoints, masquerade),
      );
    }
  }
  return chains;
}

/** Builds a service port's objects, or logs and skips a service port that cannot be rendered. */
export function tryServiceObjects(
  ctx: Context,
  service: ServicePortPlan,
): ServiceObjects | undefined {
  try {
    return buildServiceObjects(ctx, service);
  } catch (error) {
    if (!(error instanceof TypeError || error instanceof RangeError)) throw error;
    logger.warn("Skipping service port {id}: {reason}", { id: service.id, reason: error.message });
    return undefined;
  }
}

export function elementId(element: Element): string {
  return `${element.options.set} ${element.keyText}`;
}
