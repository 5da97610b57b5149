/**
 * Renders a {@linkcode Plan} as nftables transactions. Pure: no I/O.
 *
 * Layout (docs/ARCHITECTURE.md and docs/BENCHMARKS.md hold the measurements
 * behind it):
 *
 * - One table per family, `ip kproxy` and `ip6 kproxy`, as upstream does with
 *   `kube-proxy`: each table has plain single-family types (no `inet` family
 *   casts), and a partial sync of one family never touches the other table.
 * - Static skeleton: base chains for nat (dstnat/srcnat) and filter hooks,
 *   helper chains, and global named sets and maps. Everything dynamic lives in
 *   elements of those global maps, never in a set per service, because every
 *   set bound to a rule makes each later load slower.
 * - `services` dispatches `daddr . l4proto . dport` through ONE verdict map
 *   (`service-ips`) and node ports through `service-nodeports`, restricted to
 *   `@nodeport-ips` (never loopback).
 * - Endpoints are elements, not rules: `@service-endpoints` maps
 *   `daddr . l4proto . dport . slot` and `@nodeport-endpoints`
 *   `l4proto . dport . slot` to an endpoint's `addr . port`, slot j for the
 *   j-th endpoint. A dispatch element goes to a chain shared by every service
 *   port with E endpoints (`dnat-E`, `dnat-E-masq`, `dnat-E-masq-nonlocal`,
 *   `nodeport-dnat-E-masq`), whose one rule is `dnat to daddr . l4proto .
 *   dport . numgen random mod E map @service-endpoints`. Only these few
 *   rules bind the maps (each rule binding a map costs more as the table
 *   grows), and an endpoint change rewrites elements only, which nft and the
 *   kernel apply without re-validating the table. Full syncs write the
 *   shared chains for 1 to 64 endpoints up front, because nft 1.0.6 cannot
 *   add a rule reading a slot map once it is in the kernel.
 * - Session affinity and externalTrafficPolicy Local keep chains of their
 *   own per service port: `svc-…` and, with external addresses, `ext-…`,
 *   where rule j is `numgen random mod (E-j) 0 … dnat to ep_j`.
 * - Hairpin masquerade is global: nat postrouting masquerades DNATed packets
 *   whose `saddr . daddr` is in `@hairpin` (`ep . ep` for each local endpoint
 *   IP, or one of unknown node), instead of a rule per endpoint.
 * - Source ranges: `@firewall-ips` (LB IP . proto . port) and an interval set
 *   `@firewall-allow` (LB IP . proto . port . source CIDR), one rule.
 * - Session affinity: one dynamic map per affinity service port (`aff-…`,
 *   client address to endpoint `addr . port`), consulted with
 *   `dnat to saddr map @aff-…` and filled by the rule that picked the endpoint.
 *   When the service loses an endpoint the map is flushed.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan, PlanEndpoint, ServicePortPlan, TrafficPlan } from "../../lib/core/plan.ts";
import { canonicalIP, collapseCIDRs, ipFamily, parseCIDR } from "../../lib/core/ip.ts";
import { objectName, serviceNameSuffix } from "./names.ts";
import {
  Chain,
  type ChainOptions,
  Element,
  ElementLines,
  type NftFamily,
  NftSet,
  Rule,
  Table,
  type TableRef,
  Transaction,
} from "./transaction.ts";

const logger = getLogger(["kproxy", "nftables"]);

/** Default table name in both families. */
export const DEFAULT_TABLE = "kproxy";

/** Default masquerade mark: bit 14, as kube-proxy. */
export const DEFAULT_MASQUERADE_MARK = 0x4000;

/**
 * Name of the one-element set holding the sync generation. Listing it is
 * cheap at any table size (~0 ms at 30k services), while `nft list chain`
 * fetches every chain and set of the table first (0.35 s at 30k).
 */
export const CANARY_SET = "canary";

/** Options shared by the render functions. */
export interface RenderOptions {
  /** @default {"kproxy"} */
  table?: string;
  /** Packet mark bit that asks nat postrouting to masquerade. @default {0x4000} */
  masqueradeMark?: number;
  /** Sync generation written to the canary set. @default {0} */
  generation?: number;
  /**
   * Drop forwarded packets conntrack marks INVALID, as upstream's iptables
   * mode does unless `nf_conntrack_tcp_be_liberal` is set: an out-of-window
   * packet would otherwise reach the pod un-DNATed and reset the connection.
   * @default {true}
   */
  dropInvalid?: boolean;
  /**
   * A full sync writes the shared `dnat-E…` chains for 1 to this many
   * endpoints whether or not a service port uses them, so an incremental sync
   * never adds one (nft 1.0.6 cannot add a rule reading a slot map that is
   * already in the kernel). A change to a count above it that no service
   * port already uses takes a full sync.
   * @default {64}
   */
  presetSlotChains?: number;
}

/** Default of {@linkcode RenderOptions.presetSlotChains}. */
export const DEFAULT_PRESET_SLOT_CHAINS = 64;

/** Maps a plan family to its nftables family. */
export function nftFamily(family: IpFamily): NftFamily {
  return family === "IPv4" ? "ip" : "ip6";
}

/** The table a plan of `family` is rendered into. */
export function tableRef(family: IpFamily, table = DEFAULT_TABLE): TableRef {
  return { family: nftFamily(family), table };
}

interface Context {
  family: IpFamily;
  ipx: NftFamily;
  addrType: string;
  /** The masquerade mark in hex, e.g. `0x4000`. */
  mark: string;
  markSet: string;
  /** Matches traffic from local pods, one alternative per rule. */
  localMatches: string[];
  /** Matches traffic NOT from local pods (all conditions in one rule), or undefined. */
  nonLocalMatch?: string;
}

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

function context(plan: Plan, options: RenderOptions): Context {
  const ipx = nftFamily(plan.family);
  const mark = options.masqueradeMark ?? DEFAULT_MASQUERADE_MARK;
  if (!Number.isInteger(mark) || mark <= 0 || mark > 0xffffffff) {
    throw new RangeError(`Cannot use masquerade mark "${mark}": not a 32-bit mark`);
  }
  const markSet = `meta mark set meta mark | 0x${mark.toString(16)}`;
  const markHex = `0x${mark.toString(16)}`;
  const detector = plan.localTraffic;
  let localMatches: string[] = [];
  let negatives: string[] = [];
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR": {
      const cidrs = detector.cidrs.map((text) => {
        const cidr = parseCIDR(text);
        if (cidr === undefined || cidr.family !== plan.family) {
          throw new TypeError(
            `Cannot render local traffic CIDR "${text}": not an ${plan.family} CIDR`,
          );
        }
        return cidr.cidr;
      });
      localMatches = cidrs.map((cidr) => `${ipx} saddr ${cidr}`);
      negatives = cidrs.map((cidr) => `${ipx} saddr != ${cidr}`);
      break;
    }
    case "BridgeInterface":
    case "InterfaceNamePrefix": {
      const wildcard = detector.mode === "InterfaceNamePrefix" ? "*" : "";
      const names = detector.interfaces.map((name) => {
        if (!/^[a-zA-Z0-9_.@:-]{1,15}$/.test(name)) {
          throw new TypeError(`Cannot render interface name "${name}": not an interface name`);
        }
        return `"${name}${wildcard}"`;
      });
      localMatches = names.map((name) => `iifname ${name}`);
      negatives = names.map((name) => `iifname != ${name}`);
      break;
    }
    case "None":
      break;
  }
  return {
    family: plan.family,
    ipx,
    addrType: plan.family === "IPv4" ? "ipv4_addr" : "ipv6_addr",
    mark: markHex,
    markSet,
    localMatches,
    nonLocalMatch: negatives.length > 0 ? negatives.join(" ") : undefined,
  };
}

const IPV4 =
  /^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$/;

function address(ctx: Context, text: string): string {
  if (ctx.family === "IPv4" && IPV4.test(text)) return text;
  const ip = canonicalIP(text);
  if (ip === undefined || ipFamily(ip) !== ctx.family) {
    throw new TypeError(`Cannot render address "${text}": not an ${ctx.family} address`);
  }
  return ip;
}

function port(value: number, what: string): string {
  if (!Number.isInteger(value) || value < 1 || value > 65535) {
    throw new RangeError(`Cannot render ${what} "${value}": not a port number`);
  }
  return String(value);
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

/** The maps a dispatch key is written to: its verdict, its slots, and the verdict without endpoints. */
interface DispatchSets {
  dispatch: "service-ips" | "service-nodeports";
  slots: SlotMap;
  empty: "no-endpoint-services" | "no-endpoint-nodeports";
}

const ADDRESS_SETS: DispatchSets = {
  dispatch: "service-ips",
  slots: "service-endpoints",
  empty: "no-endpoint-services",
};

const NODE_PORT_SETS: DispatchSets = {
  dispatch: "service-nodeports",
  slots: "nodeport-endpoints",
  empty: "no-endpoint-nodeports",
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

function clusterMasquerade(ctx: Context, service: ServicePortPlan): Masquerade {
  if (service.clusterIPMasquerade === "all") return "all";
  if (service.clusterIPMasquerade === "non-local" && ctx.nonLocalMatch !== undefined) {
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
function slotChainsOf(ctx: Context, service: ServicePortPlan): SlotChain[] {
  if (!usesSlotMaps(service)) return [];
  const chains: SlotChain[] = [];
  const internal = service.internal.endpoints.length;
  const external = service.external.endpoints.length;
  if (internal > 0 && service.clusterIPs.length > 0) {
    chains.push({
      map: "service-endpoints",
      count: internal,
      masquerade: clusterMasquerade(ctx, service),
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
      clusterMasquerade(ctx, service),
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
  const masquerade = clusterMasquerade(ctx, service);
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
function mayHairpinHere(endpoint: PlanEndpoint): boolean {
  return endpoint.isLocal || endpoint.nodeName === "";
}

interface BaseChain extends ChainOptions {
  rules: string[];
}

function skeleton(ctx: Context, dropInvalid: boolean): { sets: NftSet[]; chains: BaseChain[] } {
  const { ipx, addrType } = ctx;
  const tuple = `${addrType} . inet_proto . inet_service`;
  const sets = [
    new NftSet({
      name: "service-ips",
      type: tuple,
      dataType: "verdict",
      comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    }),
    new NftSet({
      name: "service-nodeports",
      type: "inet_proto . inet_service",
      dataType: "verdict",
      comment: "NodePort traffic",
    }),
    new NftSet({
      name: "no-endpoint-services",
      type: tuple,
      dataType: "verdict",
      comment: "drop or reject traffic to services with no endpoints",
    }),
    new NftSet({
      name: "no-endpoint-nodeports",
      type: "inet_proto . inet_service",
      dataType: "verdict",
      comment: "drop or reject traffic to node ports with no endpoints",
    }),
    new NftSet({
      name: "nodeport-ips",
      type: addrType,
      flags: ["interval"],
      comment: "addresses that accept node port traffic",
    }),
    new NftSet({ name: "cluster-ips", type: addrType, comment: "active cluster IPs" }),
    new NftSet({
      name: "service-cidrs",
      type: addrType,
      flags: ["interval"],
      comment: "service CIDRs",
    }),
    new NftSet({
      name: "firewall-ips",
      type: tuple,
      comment: "destinations subject to loadBalancerSourceRanges",
    }),
    new NftSet({
      name: "firewall-allow",
      type: `${tuple} . ${addrType}`,
      flags: ["interval"],
      comment: "allowed sources per firewalled destination",
    }),
    new NftSet({
      name: "service-endpoints",
      type: `${ipx} daddr . meta l4proto . th dport . numgen random mod 1`,
      dataType: `${ipx} daddr . th dport`,
      typeOf: true,
      comment: "service address . proto . port . slot: endpoint address . port",
    }),
    new NftSet({
      name: "nodeport-endpoints",
      type: "meta l4proto . th dport . numgen random mod 1",
      dataType: `${ipx} daddr . th dport`,
      typeOf: true,
      comment: "proto . node port . slot: endpoint address . port",
    }),
    new NftSet({
      name: "hairpin",
      type: `${addrType} . ${addrType}`,
      comment: "endpoint . endpoint: DNATed back to its own source",
    }),
  ];
  const ctNew = "ct state new";
  const chains: BaseChain[] = [
    {
      name: "filter-prerouting-pre-dnat",
      type: "filter",
      hook: "prerouting",
      priority: -110,
      rules: [`${ctNew} jump firewall-check`],
    },
    {
      name: "filter-output-pre-dnat",
      type: "filter",
      hook: "output",
      priority: -110,
      rules: [`${ctNew} jump firewall-check`],
    },
    {
      name: "filter-forward",
      type: "filter",
      hook: "forward",
      priority: 0,
      rules: [
        ...(dropInvalid ? ["ct state invalid drop"] : []),
        `${ctNew} jump service-endpoints-check`,
        `${ctNew} jump cluster-ips-check`,
      ],
    },
    {
      name: "filter-input",
      type: "filter",
      hook: "input",
      priority: 0,
      rules: [`${ctNew} jump nodeport-endpoints-check`, `${ctNew} jump service-endpoints-check`],
    },
    {
      name: "filter-output",
      type: "filter",
      hook: "output",
      priority: 0,
      rules: [`${ctNew} jump service-endpoints-check`, `${ctNew} jump cluster-ips-check`],
    },
    {
      name: "nat-prerouting",
      type: "nat",
      hook: "prerouting",
      priority: -100,
      rules: ["jump services"],
    },
    { name: "nat-output", type: "nat", hook: "output", priority: -100, rules: ["jump services"] },
    {
      name: "nat-postrouting",
      type: "nat",
      hook: "postrouting",
      priority: 100,
      rules: ["jump masquerading"],
    },
    {
      name: "firewall-check",
      rules: [
        `${ipx} daddr . meta l4proto . th dport @firewall-ips ${ipx} daddr . meta l4proto . th dport . ${ipx} saddr != @firewall-allow drop`,
      ],
    },
    {
      name: "service-endpoints-check",
      rules: [`${ipx} daddr . meta l4proto . th dport vmap @no-endpoint-services`],
    },
    {
      name: "nodeport-endpoints-check",
      rules: [`${ipx} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports`],
    },
    // Upstream drops unallocated addresses; kproxy's Plan contract says reject.
    {
      name: "cluster-ips-check",
      rules: [`${ipx} daddr @cluster-ips reject`, `${ipx} daddr @service-cidrs reject`],
    },
    { name: "reject-chain", rules: ["reject"] },
    {
      name: "services",
      rules: [
        `${ipx} daddr . meta l4proto . th dport vmap @service-ips`,
        `${ipx} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports`,
      ],
    },
    {
      name: "masquerading",
      rules: [
        `ct status dnat ${ipx} saddr . ${ipx} daddr @hairpin masquerade fully-random`,
        `meta mark & ${ctx.mark} == 0 return`,
        `meta mark set meta mark ^ ${ctx.mark}`,
        "masquerade fully-random",
      ],
    },
  ];
  return { sets, chains };
}

/**
 * The skeleton chains {@linkcode renderFull} writes for `plan`, each with its
 * number of rules: the same in every sync with the same options.
 */
export function skeletonRuleCounts(plan: Plan, options: RenderOptions = {}): Map<string, number> {
  const { chains } = skeleton(context(plan, options), options.dropInvalid ?? true);
  return new Map(chains.map((chain) => [chain.name, chain.rules.length]));
}

/**
 * About how many set and map elements {@linkcode renderFull} writes for
 * `plan`, counted without rendering it: what listing the table costs.
 */
export function estimateElements(plan: Plan): number {
  let count = 0;
  for (const service of plan.services) {
    const external = service.externalIPs.length + service.loadBalancerIPs.length +
      (service.nodePort > 0 ? 1 : 0);
    count += service.clusterIPs.length * (2 + service.internal.endpoints.length) +
      external * (1 + service.external.endpoints.length);
  }
  return count;
}

function canary(tx: Transaction, generation: number, fresh: boolean): void {
  if (!Number.isInteger(generation) || generation < 0 || generation > 0xffffffff) {
    throw new RangeError(`Cannot write canary generation "${generation}": not a 32-bit number`);
  }
  const set = new NftSet({ name: CANARY_SET, type: "mark", comment: "kproxy sync generation" });
  if (fresh) tx.add(set);
  else tx.flush(set);
  tx.add(new Element({ set: CANARY_SET, key: [String(generation)] }));
}

/** Parses the generation out of `nft list set … canary` output, or undefined. */
export function parseCanaryGeneration(listing: string): number | undefined {
  const match = listing.match(/elements = \{ (0x[0-9a-fA-F]+|[0-9]+) \}/);
  return match === null ? undefined : Number(match[1]);
}

function addressElements(ctx: Context, set: string, values: string[]): Element[] {
  return values.map((text) => {
    const cidr = parseCIDR(
      text.includes("/") ? text : `${text}/${ctx.family === "IPv4" ? 32 : 128}`,
    );
    if (cidr === undefined || cidr.family !== ctx.family) {
      throw new TypeError(
        `Cannot render "${text}" in ${set}: not an ${ctx.family} address or CIDR`,
      );
    }
    return new Element({ set, key: [cidr.cidr] });
  });
}

const DISPATCH_SETS = [ADDRESS_SETS, NODE_PORT_SETS];
const DISPATCH_MAPS: ReadonlySet<string> = new Set(DISPATCH_SETS.map((sets) => sets.dispatch));

/** The id of the dispatch element a slot element belongs to, or undefined for other elements. */
function dispatchIdOfSlot(element: Element): string | undefined {
  const { set, key } = element.options;
  const sets = DISPATCH_SETS.find((candidate) => candidate.slots === set);
  return sets === undefined ? undefined : `${sets.dispatch} ${key.slice(0, -1).join(" . ")}`;
}

function addSharedChain(tx: Transaction, name: string, rules: string[]): void {
  tx.add(new Chain({ name }));
  for (const rule of rules) tx.add(new Rule({ chain: name, rule }));
}

function presetCount(options: RenderOptions): number {
  const count = options.presetSlotChains ?? DEFAULT_PRESET_SLOT_CHAINS;
  if (!Number.isInteger(count) || count < 0 || count > 4096) {
    throw new RangeError(`Cannot preset "${count}" slot chains: not an integer from 0 to 4096`);
  }
  return count;
}

/**
 * The shared chains every full sync writes: for 1 to `count` endpoints, each
 * kind {@linkcode slotChainsOf} can name, so any of its chains up to `count`
 * exists.
 */
function presetSlotChains(ctx: Context, count: number): Map<string, string[]> {
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

function addService(tx: Transaction, objects: ServiceObjects): void {
  for (const set of objects.sets) tx.add(set);
  for (const { chain, rules } of objects.chains) {
    tx.add(chain);
    for (const rule of rules) tx.add(new Rule({ chain: chain.name, rule }));
  }
}

/** Builds a service port's objects, or logs and skips a service port that cannot be rendered. */
function tryServiceObjects(ctx: Context, service: ServicePortPlan): ServiceObjects | undefined {
  try {
    return buildServiceObjects(ctx, service);
  } catch (error) {
    if (!(error instanceof TypeError || error instanceof RangeError)) throw error;
    logger.warn("Skipping service port {id}: {reason}", { id: service.id, reason: error.message });
    return undefined;
  }
}

/**
 * Renders the whole table for one plan: `add table`, `delete table` and a
 * rebuild, which replaces any earlier table atomically in one `nft -f`.
 *
 * Re-creating (not flushing) the table also registers its base chains anew,
 * and the kernel runs a hook registered later before the others of the same
 * priority; of nat chains, the first that NATs a connection decides it. So
 * while another proxy's nat chains at the same priority still exist
 * (kube-proxy's dstnat chains during a takeover), kproxy's rules decide
 * after each full sync (tests/kernel/nat_order_test.ts).
 */
export function renderFull(plan: Plan, options: RenderOptions = {}): Transaction {
  const ctx = context(plan, options);
  const tx = new Transaction(tableRef(plan.family, options.table));
  tx.add(new Table());
  tx.delete(new Table());
  tx.add(new Table({ comment: "rules for kproxy" }));
  const { sets, chains } = skeleton(ctx, options.dropInvalid ?? true);
  for (const set of sets) tx.add(set);
  for (const { rules: _rules, ...chain } of chains) tx.add(new Chain(chain));
  for (const { name, rules } of chains) {
    for (const rule of rules) tx.add(new Rule({ chain: name, rule }));
  }
  canary(tx, options.generation ?? 0, true);
  for (const element of addressElements(ctx, "nodeport-ips", plan.nodePortAddresses)) {
    tx.add(element);
  }
  for (const element of addressElements(ctx, "service-cidrs", collapseCIDRs(plan.serviceCIDRs))) {
    tx.add(element);
  }

  // Elements are kept as their item text, joined per set into script lines as
  // they come; element objects would triple the peak heap.
  const items = new Map<string, ElementLines>();
  const seen = new Set<string>();
  // Dispatch element id to the service port that claimed it: slot elements
  // follow their dispatch key's owner, the first claimant in plan order, so
  // they need no id of their own in `seen`.
  const owners = new Map<string, string>();
  const addOnce = (element: Element, owner: string) => {
    const dispatch = dispatchIdOfSlot(element);
    if (dispatch !== undefined) {
      if (owners.get(dispatch) !== owner) return;
    } else {
      const id = elementId(element);
      if (seen.has(id)) return;
      seen.add(id);
      if (DISPATCH_MAPS.has(element.options.set)) owners.set(id, owner);
    }
    const item = tx.itemToAdd(element);
    if (item === undefined) return;
    const set = element.options.set;
    let lines = items.get(set);
    if (lines === undefined) items.set(set, lines = new ElementLines(set));
    lines.push(item);
  };
  const sharedChains = presetSlotChains(ctx, presetCount(options));
  for (const service of plan.services) {
    const objects = tryServiceObjects(ctx, service);
    if (objects === undefined) continue;
    addService(tx, objects);
    for (const [name, rules] of objects.sharedChains) sharedChains.set(name, rules);
    for (const element of objects.elements) addOnce(element, service.id);
    for (const ip of objects.clusterIPs) {
      addOnce(new Element({ set: "cluster-ips", key: [ip] }), service.id);
    }
    for (const ip of objects.endpointIPs) {
      addOnce(new Element({ set: "hairpin", key: [ip, ip] }), service.id);
    }
  }
  for (const [name, rules] of sharedChains) addSharedChain(tx, name, rules);
  for (const lines of items.values()) tx.addLines(lines);
  return tx;
}

/** What {@linkcode renderIncremental} needs. */
export interface IncrementalInput {
  plan: Plan;
  /** The plan the kernel holds now (last applied). */
  previous: Plan;
  /** Ids of service ports that may differ between `previous` and `plan`. */
  changed: ReadonlySet<string>;
}

function indexById(plan: Plan, ids: ReadonlySet<string>): Map<string, ServicePortPlan> {
  const found = new Map<string, ServicePortPlan>();
  for (const service of plan.services) {
    if (ids.has(service.id)) found.set(service.id, service);
  }
  return found;
}

function elementId(element: Element): string {
  return `${element.options.set} ${element.keyText}`;
}

function sameSet(a: NftSet, b: NftSet): boolean {
  return JSON.stringify(a.options) === JSON.stringify(b.options);
}

/**
 * Renders only what changed: the chains, affinity maps and map elements of
 * the service ports in `changed`, plus the plan-wide address sets. Cost
 * follows the number of changed service ports.
 *
 * @returns the transaction, or undefined when the change needs a full render
 *   (another family or another local-traffic detector)
 */
export function renderIncremental(
  input: IncrementalInput,
  options: RenderOptions = {},
): Transaction | undefined {
  const { plan, previous, changed } = input;
  if (plan.family !== previous.family) return undefined;
  if (JSON.stringify(plan.localTraffic) !== JSON.stringify(previous.localTraffic)) return undefined;
  const ctx = context(plan, options);
  const tx = new Transaction(tableRef(plan.family, options.table));
  const before = indexById(previous, changed);
  const after = indexById(plan, changed);

  const oldObjects = [...before.values()].flatMap((service) =>
    tryServiceObjects(ctx, service) ?? []
  );
  const newObjects = new Map<string, ServiceObjects>();
  for (const [id, service] of after) {
    const objects = tryServiceObjects(ctx, service);
    if (objects !== undefined) newObjects.set(id, objects);
  }

  const oldChains = new Set(oldObjects.flatMap((o) => o.chains.map((c) => c.chain.name)));
  const newChains = new Set(
    [...newObjects.values()].flatMap((o) => o.chains.map((c) => c.chain.name)),
  );
  const oldSets = new Map(
    oldObjects.flatMap((o) => o.sets.map((s) => [s.options.name, s] as const)),
  );
  const newSets = new Map(
    [...newObjects.values()].flatMap((o) => o.sets.map((s) => [s.options.name, s] as const)),
  );
  const oldElements = new Map(
    oldObjects.flatMap((o) => o.elements.map((e) => [elementId(e), e] as const)),
  );
  const newElements = new Map(
    [...newObjects.values()].flatMap((o) => o.elements.map((e) => [elementId(e), e] as const)),
  );

  if (sharesKeyWithUnchanged(ctx, plan, changed, oldElements, newElements)) return undefined;

  // 1. Drop every rule of the changed service ports, so nothing references
  //    chains, maps and elements about to go.
  for (const name of oldChains) tx.flush(new Chain({ name }));
  // 2. Elements that went away or changed value.
  for (const [id, element] of oldElements) {
    const next = newElements.get(id);
    if (next === undefined || next.options.value !== element.options.value) tx.delete(element);
  }
  // 3. Chains and affinity maps that went away or changed definition.
  for (const name of oldChains) {
    if (!newChains.has(name)) tx.delete(new Chain({ name }));
  }
  for (const [name, set] of oldSets) {
    const next = newSets.get(name);
    if (next === undefined || !sameSet(set, next)) tx.delete(set);
  }
  // Affinity entries may point at an endpoint that is gone: forget them all.
  const oldAffinity = new Map(oldObjects.flatMap((o) => [...o.affinityEndpoints]));
  for (const objects of newObjects.values()) {
    for (const [name, endpoints] of objects.affinityEndpoints) {
      const was = oldAffinity.get(name);
      const set = newSets.get(name)!;
      const old = oldSets.get(name);
      if (was !== undefined && old !== undefined && sameSet(old, set)) {
        const kept = new Set(endpoints);
        if (was.some((endpoint) => !kept.has(endpoint))) tx.flush(set);
      }
    }
  }
  // 4. New and rewritten objects. Shared chains are written by full syncs
  //    only: one the changed service ports now need must be a preset one,
  //    or one a service port already dispatches to.
  const presetUpTo = presetCount(options);
  const oldShared = new Set(oldObjects.flatMap((o) => [...o.sharedChains.keys()]));
  const missing = new Set<string>();
  for (const service of after.values()) {
    for (const { map, count, masquerade } of slotChainsOf(ctx, service)) {
      const name = slotChainName(map, count, masquerade);
      if (count > presetUpTo && !oldShared.has(name)) missing.add(name);
    }
  }
  for (const service of plan.services) {
    if (missing.size === 0) break;
    if (changed.has(service.id)) continue;
    for (const { map, count, masquerade } of slotChainsOf(ctx, service)) {
      missing.delete(slotChainName(map, count, masquerade));
    }
  }
  if (missing.size > 0) return undefined;
  for (const objects of newObjects.values()) {
    for (const set of objects.sets) {
      const old = oldSets.get(set.options.name);
      if (old !== undefined && sameSet(old, set)) continue;
      tx.add(set);
    }
    for (const { chain, rules } of objects.chains) {
      tx.add(chain);
      for (const rule of rules) tx.add(new Rule({ chain: chain.name, rule }));
    }
  }
  for (const [id, element] of newElements) {
    const old = oldElements.get(id);
    if (old === undefined || old.options.value !== element.options.value) tx.add(element);
  }

  // 5. Shared sets: cluster IPs may be shared with sibling ports of the same service.
  const oldClusterIPs = new Set(oldObjects.flatMap((o) => o.clusterIPs));
  const newClusterIPs = new Set([...newObjects.values()].flatMap((o) => o.clusterIPs));
  const gone = [...oldClusterIPs].filter((ip) => !newClusterIPs.has(ip));
  if (gone.length > 0) {
    const stillUsed = new Set<string>();
    const owners = new Set([...before.values()].map((s) => `${s.namespace}/${s.name}`));
    for (const service of plan.services) {
      if (!changed.has(service.id) && owners.has(`${service.namespace}/${service.name}`)) {
        for (const ip of service.clusterIPs) stillUsed.add(canonicalIP(ip) ?? ip);
      }
    }
    for (const ip of gone) {
      if (!stillUsed.has(ip)) tx.delete(new Element({ set: "cluster-ips", key: [ip] }));
    }
  }
  for (const ip of newClusterIPs) {
    if (!oldClusterIPs.has(ip)) tx.add(new Element({ set: "cluster-ips", key: [ip] }));
  }
  // Hairpin entries: add new endpoint IPs; delete those of endpoints gone,
  // unless an unchanged service port still uses the IP (checked only when
  // some endpoint went away).
  const oldEndpointIPs = new Set(oldObjects.flatMap((o) => o.endpointIPs));
  const newEndpointIPs = new Set([...newObjects.values()].flatMap((o) => o.endpointIPs));
  for (const ip of newEndpointIPs) {
    if (!oldEndpointIPs.has(ip)) tx.add(new Element({ set: "hairpin", key: [ip, ip] }));
  }
  const goneEndpointIPs = new Set([...oldEndpointIPs].filter((ip) => !newEndpointIPs.has(ip)));
  for (const service of plan.services) {
    if (goneEndpointIPs.size === 0) break;
    if (changed.has(service.id)) continue;
    for (const endpoint of [...service.internal.endpoints, ...service.external.endpoints]) {
      if (mayHairpinHere(endpoint)) goneEndpointIPs.delete(endpoint.ip); // canonical (lib/parse.ts)
    }
  }
  for (const ip of goneEndpointIPs) tx.delete(new Element({ set: "hairpin", key: [ip, ip] }));

  // 6. Plan-wide address sets.
  diffAddressSet(tx, ctx, "nodeport-ips", previous.nodePortAddresses, plan.nodePortAddresses);
  diffAddressSet(
    tx,
    ctx,
    "service-cidrs",
    collapseCIDRs(previous.serviceCIDRs),
    collapseCIDRs(plan.serviceCIDRs),
  );
  canary(tx, options.generation ?? 0, false);
  return tx;
}

/**
 * Whether an element key that changed service ports gain or lose is also
 * claimed by an unchanged service port: a node port, or an `ip . proto .
 * port` that two services declare. The full render gives such a key to its
 * first claimant in plan order; an incremental update would add a duplicate
 * ("File exists") or delete the other's element, so it declines.
 */
function sharesKeyWithUnchanged(
  ctx: Context,
  plan: Plan,
  changed: ReadonlySet<string>,
  oldElements: ReadonlyMap<string, Element>,
  newElements: ReadonlyMap<string, Element>,
): boolean {
  const atStake = new Map<string, Element>();
  for (const [id, element] of oldElements) if (!newElements.has(id)) atStake.set(id, element);
  for (const [id, element] of newElements) if (!oldElements.has(id)) atStake.set(id, element);
  if (atStake.size === 0) return false;
  const parts = new Set([...atStake.values()].flatMap((element) => element.options.key));
  for (const service of plan.services) {
    if (changed.has(service.id)) continue;
    const addresses = [...service.clusterIPs, ...service.externalIPs, ...service.loadBalancerIPs];
    const candidate = (service.nodePort !== 0 && parts.has(String(service.nodePort))) ||
      addresses.some((ip) => parts.has(ip));
    if (!candidate) continue;
    const objects = tryServiceObjects(ctx, service);
    if (objects?.elements.some((element) => atStake.has(elementId(element)))) return true;
  }
  return false;
}

function diffAddressSet(
  tx: Transaction,
  ctx: Context,
  set: string,
  before: string[],
  after: string[],
): void {
  const old = new Map(addressElements(ctx, set, before).map((e) => [e.keyText, e]));
  const next = new Map(addressElements(ctx, set, after).map((e) => [e.keyText, e]));
  for (const [key, element] of old) if (!next.has(key)) tx.delete(element);
  for (const [key, element] of next) if (!old.has(key)) tx.add(element);
}

/**
 * Renders the removal of a table of a family whether it exists or not
 * (`add table` is a no-op on an existing one, then `delete table`), so it can
 * join a transaction without making it fail.
 */
export function renderDeleteTable(family: IpFamily, table = DEFAULT_TABLE): Transaction {
  const tx = new Transaction(tableRef(family, table));
  tx.add(new Table());
  tx.delete(new Table());
  return tx;
}

/** Parses `nft list tables` output into `family table` pairs, e.g. `ip kube-proxy`. */
export function parseTableList(text: string): string[] {
  return [...text.matchAll(/^table (\S+) (\S+)/gm)].map((match) => `${match[1]} ${match[2]}`);
}
