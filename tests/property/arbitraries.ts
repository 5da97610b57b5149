/**
 * fast-check arbitraries for raw API objects as an apiserver (or a hostile or
 * broken one) would send them, and for the source events and planner options
 * the property tests feed through the tracker, the planner and the renderers.
 *
 * Valid arbitraries produce objects the apiserver accepts (edge ports, dual
 * stack, named target ports, affinity timeouts at their limits, hints,
 * topologyKeys, 1000-endpoint slices, the same endpoint in two slices).
 * Hostile arbitraries take a valid object and break one field: quotes,
 * semicolons, newlines, braces, `$()`, backticks, unicode, very long strings,
 * out-of-range or mistyped ports, non-canonical IPs, missing fields, wrong
 * types.
 *
 * @module
 */

import fc from "fast-check";
import type { ObjectKind, SourceEvent } from "../../lib/core/source.ts";
import type { PlannerOptions } from "../../lib/core/planner.ts";

type Json = Record<string, unknown>;

/** The node the proxy under test runs on. */
export const THIS_NODE = "node-a";
/** Namespaces objects are drawn from: few, so services and slices meet. */
export const NAMESPACES = ["default", "kube-system"] as const;
/** Service names objects are drawn from. */
export const SERVICE_NAMES = ["web", "db", "a", "b-c", "x9"] as const;
/** Node names endpoints and Node objects are drawn from. */
export const NODE_NAMES = [THIS_NODE, "node-b", "node-c.example"] as const;
/** Zones of nodes and endpoints. */
export const ZONES = ["zone-a", "zone-b", "Zone_C.1"] as const;
/** Port names shared by services and slices, so slice ports match service ports. */
export const PORT_NAMES = ["http", "dns", "m-2"] as const;

const ZONE_LABEL = "topology.kubernetes.io/zone";
const SERVICE_NAME_LABEL = "kubernetes.io/service-name";

// ------------------------------------------------------------------ addresses

/** Canonical IPv4 pod addresses from a small pool, so endpoints repeat across slices. */
export const podIPv4Arb: fc.Arbitrary<string> = fc.tuple(
  fc.integer({ min: 0, max: 3 }),
  fc.integer({ min: 1, max: 12 }),
).map(([a, b]) => `10.244.${a}.${b}`);

/** IPv6 pod addresses, sometimes spelled non-canonically (upper case, leading zeros). */
export const podIPv6Arb: fc.Arbitrary<string> = fc.tuple(
  fc.integer({ min: 0, max: 3 }),
  fc.integer({ min: 1, max: 12 }),
  fc.constantFrom("short", "long", "upper"),
).map(([a, b, style]) =>
  style === "short"
    ? `fd00:244:0:${a}::${b.toString(16)}`
    : style === "long"
    ? `fd00:0244:0000:000${a}:0000:0000:0000:${b.toString(16).padStart(4, "0")}`
    : `FD00:244:0:${a}::${b.toString(16).toUpperCase()}`
);

/** Any valid IPv4 address (fast-check prints canonical dotted decimal). */
export const anyIPv4Arb: fc.Arbitrary<string> = fc.ipV4();

/** Any valid IPv6 address that is not IPv4-mapped, written as 8 hex groups. */
export const anyIPv6Arb: fc.Arbitrary<string> = fc.tuple(
  fc.integer({ min: 1, max: 0xffff }),
  fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 7, maxLength: 7 }),
).map(([first, rest]) => [first, ...rest].map((g) => g.toString(16)).join(":"));

/** Valid IPv4 or IPv6 CIDRs, host bits sometimes set (the parser clears them). */
export const cidrArb: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(anyIPv4Arb, fc.integer({ min: 0, max: 32 })).map(([ip, p]) => `${ip}/${p}`),
  fc.tuple(anyIPv6Arb, fc.integer({ min: 0, max: 128 })).map(([ip, p]) => `${ip}/${p}`),
);

/** Addresses that look like IPs but that kproxy must refuse. */
export const HOSTILE_IPS: readonly unknown[] = [
  "010.0.0.1",
  "1.2.3.4/32",
  "::ffff:1.2.3.4",
  "::FFFF:1.2.3.4",
  "fe80::1%eth0",
  "1.2.3",
  "1.2.3.4.5",
  "256.1.1.1",
  " 1.2.3.4",
  "1.2.3.4 ",
  "1.2.3.4\n",
  "0x7f.0.0.1",
  "1.2.3.04",
  "1::2::3",
  "[::1]",
  ":::",
  "1.2.3.4;drop",
  "1.2.3.4 } ; flush ruleset ; {",
  "１.２.３.４",
  "1.2.3.4\u0000",
  "localhost",
  "None",
  "",
  167772161,
  ["1.2.3.4"],
  { ip: "1.2.3.4" },
  null,
  true,
];

// ------------------------------------------------------------------ hostile values

/** Strings that would break a script if they ever reached one. */
export const HOSTILE_STRINGS: readonly string[] = [
  'a"b',
  "a'b",
  "a;b",
  "a\nb",
  "a\r\nb",
  "{a}",
  "a}b{",
  "$(reboot)",
  "`id`",
  "a b",
  "a\tb",
  "ñame",
  "ｗｅｂ",
  "web\u202e",
  "web\u0000",
  "web\u200b",
  "-web",
  "web-",
  "WEB",
  "web.",
  "../web",
  "web/x",
  "web:80",
  "*",
  "#",
  "@set",
  "a".repeat(64),
  "a".repeat(254),
  "a".repeat(10_000),
  "",
];

/** Port values an apiserver should never send. */
export const HOSTILE_PORTS: readonly unknown[] = [
  0,
  65536,
  -1,
  "80",
  "0x50",
  1.5,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  2 ** 53,
  1e6,
  null,
  true,
  [],
  {},
];

/** Any hostile value: strings, ports, IPs, and arbitrary JSON-ish values. */
export const hostileValueArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...HOSTILE_STRINGS) },
  { weight: 2, arbitrary: fc.constantFrom(...HOSTILE_PORTS) },
  { weight: 2, arbitrary: fc.constantFrom(...HOSTILE_IPS) },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 20 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 20 }) },
  { weight: 1, arbitrary: fc.anything({ maxDepth: 2 }) },
);

/** A marker value meaning "delete this field". */
export const MISSING: unique symbol = Symbol("missing");

// ------------------------------------------------------------------ services

const portNumberArb = fc.oneof(
  fc.constantFrom(1, 53, 80, 443, 65535),
  fc.integer({ min: 1, max: 65535 }),
);
const nodePortArb = fc.oneof(
  fc.constantFrom(1, 30000, 32767, 65535),
  fc.integer({ min: 1, max: 65535 }),
);
const ianaNameArb = fc.constantFrom("http", "dns-tcp", "a", "x1", "metrics-abcdefg");

interface RawPortShape {
  name: string;
  protocol: "TCP" | "UDP" | "SCTP" | undefined;
  port: number;
  targetPort: number | string | undefined;
  nodePort: number | undefined;
}

function servicePortsArb(withNodePorts: boolean): fc.Arbitrary<RawPortShape[]> {
  return fc.uniqueArray(
    fc.record({
      name: fc.constantFrom<string>(...PORT_NAMES),
      protocol: fc.constantFrom("TCP", "UDP", "SCTP", undefined),
      port: portNumberArb,
      targetPort: fc.oneof(portNumberArb, ianaNameArb, fc.constant(undefined)),
      nodePort: withNodePorts ? nodePortArb : fc.constant(undefined),
    }),
    { minLength: 1, maxLength: 3, selector: (p) => p.name },
  ).map((generated) => {
    const seen = new Set<string>();
    const nodePorts = new Set<number>();
    const unique: RawPortShape[] = [];
    for (const generatedPort of generated) {
      const p = { ...generatedPort };
      const key = `${p.protocol ?? "TCP"}/${p.port}`;
      if (seen.has(key)) continue;
      seen.add(key);
      // Node ports are unique within a service, as the apiserver allocates them.
      while (p.nodePort !== undefined && nodePorts.has(p.nodePort)) {
        p.nodePort = (p.nodePort % 65535) + 1;
      }
      if (p.nodePort !== undefined) nodePorts.add(p.nodePort);
      unique.push(p);
    }
    // A single port may be unnamed.
    if (unique.length === 1 && unique[0]!.name === "http") unique[0]!.name = "";
    return unique;
  });
}

type FamilyChoice = "IPv4" | "IPv6" | "IPv4,IPv6" | "IPv6,IPv4";

const familiesArb: fc.Arbitrary<FamilyChoice> = fc.constantFrom(
  "IPv4",
  "IPv6",
  "IPv4,IPv6",
  "IPv6,IPv4",
);

function clusterIPFor(family: "IPv4" | "IPv6", index: number): string {
  return family === "IPv4"
    ? `10.96.${(index + 1) >> 8}.${(index + 1) & 0xff}`
    : `fd00:96::${(index + 1).toString(16)}`;
}

/**
 * A valid core/v1 Service of any type. Addresses that the apiserver keeps unique
 * across services (cluster IPs, node ports) are random here; use
 * {@linkcode clusterArb} for a consistent cluster.
 */
export const rawServiceArb: fc.Arbitrary<Json> = fc.record({
  namespace: fc.constantFrom(...NAMESPACES),
  name: fc.constantFrom(...SERVICE_NAMES),
  type: fc.constantFrom("ClusterIP", "NodePort", "LoadBalancer"),
  families: familiesArb,
  ipIndex: fc.integer({ min: 0, max: 600 }),
  ports: servicePortsArb(true),
  externalIPs: fc.uniqueArray(fc.oneof(anyIPv4Arb, anyIPv6Arb), { maxLength: 2 }),
  ingress: fc.uniqueArray(
    fc.record({
      ip: fc.oneof(anyIPv4Arb, anyIPv6Arb),
      ipMode: fc.constantFrom("VIP", "Proxy", undefined),
    }),
    { maxLength: 2, selector: (i) => i.ip },
  ),
  sourceRanges: fc.array(cidrArb, { maxLength: 3 }),
  affinity: fc.constantFrom("None", "ClientIP", undefined),
  affinityTimeout: fc.constantFrom(undefined, 1, 10800, 86400),
  etp: fc.constantFrom("Cluster", "Local", undefined),
  itp: fc.constantFrom("Cluster", "Local", undefined),
  healthCheckNodePort: fc.oneof(fc.constant(undefined), nodePortArb),
  trafficDistribution: fc.constantFrom(
    undefined,
    "",
    "PreferClose",
    "PreferSameZone",
    "PreferSameNode",
  ),
  topologyMode: fc.constantFrom(undefined, "Auto", "auto", "Disabled"),
  topologyKeys: fc.constantFrom<string[] | undefined>(
    undefined,
    [],
    ["kubernetes.io/hostname"],
    [ZONE_LABEL, "*"],
    ["kubernetes.io/hostname", ZONE_LABEL, "topology.kubernetes.io/region", "*"],
  ),
  singleClusterIPField: fc.boolean(),
}).map((s) => {
  const families = s.families.split(",") as ("IPv4" | "IPv6")[];
  const clusterIPs = families.map((family) => clusterIPFor(family, s.ipIndex));
  const spec: Json = {
    type: s.type,
    ipFamilies: families,
    ipFamilyPolicy: families.length === 2 ? "RequireDualStack" : "SingleStack",
    ports: s.ports.map((p) => {
      const port: Json = { name: p.name, port: p.port };
      if (p.protocol !== undefined) port.protocol = p.protocol;
      if (p.targetPort !== undefined) port.targetPort = p.targetPort;
      if (s.type !== "ClusterIP" && p.nodePort !== undefined) port.nodePort = p.nodePort;
      return port;
    }),
  };
  if (s.singleClusterIPField && families.length === 1) spec.clusterIP = clusterIPs[0];
  else {
    spec.clusterIP = clusterIPs[0];
    spec.clusterIPs = clusterIPs;
  }
  if (s.externalIPs.length > 0) spec.externalIPs = s.externalIPs;
  if (s.affinity !== undefined) spec.sessionAffinity = s.affinity;
  if (s.affinity === "ClientIP" && s.affinityTimeout !== undefined) {
    spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: s.affinityTimeout } };
  }
  if (s.type !== "ClusterIP" && s.etp !== undefined) spec.externalTrafficPolicy = s.etp;
  if (s.itp !== undefined) spec.internalTrafficPolicy = s.itp;
  if (s.type === "LoadBalancer") {
    if (s.sourceRanges.length > 0) spec.loadBalancerSourceRanges = s.sourceRanges;
    if (s.etp === "Local" && s.healthCheckNodePort !== undefined) {
      spec.healthCheckNodePort = s.healthCheckNodePort;
    }
  }
  if (s.trafficDistribution !== undefined) spec.trafficDistribution = s.trafficDistribution;
  if (s.topologyKeys !== undefined) spec.topologyKeys = s.topologyKeys;
  const metadata: Json = { namespace: s.namespace, name: s.name, resourceVersion: "1" };
  if (s.topologyMode !== undefined) {
    metadata.annotations = { "service.kubernetes.io/topology-mode": s.topologyMode };
  }
  const status: Json = {};
  if (s.type === "LoadBalancer") {
    status.loadBalancer = {
      ingress: s.ingress.map((
        i,
      ) => (i.ipMode === undefined ? { ip: i.ip } : { ip: i.ip, ipMode: i.ipMode })),
    };
  }
  return clone({ apiVersion: "v1", kind: "Service", metadata, spec, status });
});

// ------------------------------------------------------------------ endpoint slices

interface EndpointShape {
  ip: string;
  ready: boolean | undefined;
  serving: boolean | undefined;
  terminating: boolean | undefined;
  nodeName: string | undefined;
  zone: string | undefined;
  hints: Json | undefined;
}

const hintsArb: fc.Arbitrary<Json | undefined> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(undefined) },
  {
    weight: 1,
    arbitrary: fc.record({
      forZones: fc.uniqueArray(fc.constantFrom(...ZONES), { maxLength: 2 }).map((z) =>
        z.map((name) => ({ name }))
      ),
      forNodes: fc.uniqueArray(fc.constantFrom(...NODE_NAMES), { maxLength: 2 }).map((n) =>
        n.map((name) => ({ name }))
      ),
    }, { requiredKeys: [] }),
  },
);

function endpointArb(ipArb: fc.Arbitrary<string>): fc.Arbitrary<EndpointShape> {
  return fc.record({
    ip: ipArb,
    ready: fc.constantFrom(true, false, undefined),
    serving: fc.constantFrom(true, false, undefined),
    terminating: fc.constantFrom(true, false, undefined),
    nodeName: fc.constantFrom(...NODE_NAMES, undefined),
    zone: fc.constantFrom(...ZONES, undefined),
    hints: hintsArb,
  });
}

function rawEndpoint(e: EndpointShape): Json {
  const conditions: Json = {};
  if (e.ready !== undefined) conditions.ready = e.ready;
  if (e.serving !== undefined) conditions.serving = e.serving;
  if (e.terminating !== undefined) conditions.terminating = e.terminating;
  const raw: Json = { addresses: [e.ip], conditions };
  if (e.nodeName !== undefined) raw.nodeName = e.nodeName;
  if (e.zone !== undefined) raw.zone = e.zone;
  if (e.hints !== undefined) raw.hints = e.hints;
  return raw;
}

const slicePortsArb = fc.uniqueArray(
  fc.record({
    name: fc.constantFrom("", ...PORT_NAMES),
    protocol: fc.constantFrom("TCP", "UDP", "SCTP", undefined),
    port: fc.oneof(portNumberArb, fc.constant(undefined)),
  }),
  { maxLength: 3, selector: (p) => `${p.name}/${p.protocol ?? "TCP"}` },
).map((ports) =>
  ports.map((p) => {
    const raw: Json = { name: p.name };
    if (p.protocol !== undefined) raw.protocol = p.protocol;
    if (p.port !== undefined) raw.port = p.port;
    return raw;
  })
);

/** Options for {@linkcode rawEndpointSliceArb}. */
export interface SliceArbOptions {
  /** Let an endpoint of the other family slip into the slice (the apiserver forbids it). */
  conflictingFamilies?: boolean;
  /** @default {6} */
  maxEndpoints?: number;
}

/**
 * A discovery.k8s.io/v1 EndpointSlice owned by one of {@linkcode SERVICE_NAMES}.
 * Endpoints come from a small address pool, so the same endpoint often appears
 * in two slices of a service.
 */
export function rawEndpointSliceArb(options: SliceArbOptions = {}): fc.Arbitrary<Json> {
  const maxLength = options.maxEndpoints ?? 6;
  return fc.record({
    namespace: fc.constantFrom(...NAMESPACES),
    service: fc.constantFrom(...SERVICE_NAMES),
    suffix: fc.constantFrom("abcde", "fghij", "k1"),
    family: fc.constantFrom("IPv4" as const, "IPv6" as const),
    ports: slicePortsArb,
    v4: fc.array(endpointArb(podIPv4Arb), { maxLength }),
    v6: fc.array(endpointArb(podIPv6Arb), { maxLength }),
    intruder: options.conflictingFamilies
      ? fc.option(fc.nat(), { nil: undefined })
      : fc.constant(undefined),
  }).map((s) => {
    const own = s.family === "IPv4" ? s.v4 : s.v6;
    const other = s.family === "IPv4" ? s.v6 : s.v4;
    const endpoints = own.map(rawEndpoint);
    if (s.intruder !== undefined && other.length > 0) {
      endpoints.splice(s.intruder % (endpoints.length + 1), 0, rawEndpoint(other[0]!));
    }
    return clone({
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      metadata: {
        namespace: s.namespace,
        name: `${s.service}-${s.suffix}`,
        labels: { [SERVICE_NAME_LABEL]: s.service },
      },
      addressType: s.family,
      ports: s.ports,
      endpoints,
    });
  });
}

/** A slice with `count` distinct ready IPv4 endpoints (1000 by default) for `namespace/service`. */
export function largeSlice(namespace: string, service: string, count = 1000): Json {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { namespace, name: `${service}-large`, labels: { [SERVICE_NAME_LABEL]: service } },
    addressType: "IPv4",
    ports: ["", ...PORT_NAMES].map((name) => ({ name, protocol: "TCP", port: 8080 })),
    endpoints: Array.from({ length: count }, (_, i) => ({
      addresses: [`10.245.${i >> 8}.${i & 0xff}`],
      conditions: { ready: true },
      nodeName: NODE_NAMES[i % NODE_NAMES.length],
      zone: ZONES[i % ZONES.length],
    })),
  };
}

// ------------------------------------------------------------------ nodes and service CIDRs

/** A core/v1 Node with zone labels, addresses and pod CIDRs. */
export const rawNodeArb: fc.Arbitrary<Json> = fc.record({
  name: fc.constantFrom(...NODE_NAMES),
  zone: fc.constantFrom(...ZONES, undefined),
  v4: fc.constantFrom("192.168.1.10", "192.168.1.11", undefined),
  v6: fc.constantFrom("fd00::10", "FD00:0::11", undefined),
  podCIDRs: fc.constantFrom<string[]>([], ["10.244.0.0/24"], ["10.244.0.0/24", "fd00:244::/64"]),
  deleting: fc.boolean(),
}).map((n) => {
  const labels: Json = { "kubernetes.io/hostname": n.name };
  if (n.zone !== undefined) labels[ZONE_LABEL] = n.zone;
  const addresses: Json[] = [{ type: "Hostname", address: n.name }];
  if (n.v4 !== undefined) addresses.push({ type: "InternalIP", address: n.v4 });
  if (n.v6 !== undefined) addresses.push({ type: "InternalIP", address: n.v6 });
  const metadata: Json = { name: n.name, labels };
  if (n.deleting) metadata.deletionTimestamp = "2026-01-01T00:00:00Z";
  return clone({
    apiVersion: "v1",
    kind: "Node",
    metadata,
    spec: { podCIDRs: n.podCIDRs },
    status: { addresses },
  });
});

/** A networking.k8s.io/v1 ServiceCIDR. */
export const rawServiceCIDRArb: fc.Arbitrary<Json> = fc.record({
  name: fc.constantFrom("kubernetes", "extra"),
  cidrs: fc.constantFrom<string[]>(
    ["10.96.0.0/16"],
    ["10.96.0.0/16", "fd00:96::/112"],
    ["fd00:96::/108"],
    ["10.100.0.1/16"],
  ),
}).map((c) => ({
  apiVersion: "networking.k8s.io/v1",
  kind: "ServiceCIDR",
  metadata: { name: c.name },
  spec: { cidrs: [...c.cidrs] },
}));

// ------------------------------------------------------------------ hostile objects

type Path = readonly (string | number)[];

function clone<T>(value: T): T {
  return structuredClone(value);
}

/** Sets (or with {@linkcode MISSING} deletes) the value at `path`, creating containers on the way. */
export function setPath(target: Json, path: Path, value: unknown): Json {
  let node: Record<string | number, unknown> = target;
  for (const [i, key] of path.entries()) {
    if (i === path.length - 1) {
      // JSON never holds sparse arrays: a missing element is a shorter list.
      if (value !== MISSING) {
        const copy = typeof value === "object" && value !== null ? clone(value) : value;
        if (Array.isArray(node) && typeof key === "number" && key > node.length) node.push(copy);
        else node[key] = copy;
      } else if (Array.isArray(node) && typeof key === "number") node.splice(key, 1);
      else delete node[key];
      break;
    }
    const container = typeof path[i + 1] === "number" ? [] : {};
    if (Array.isArray(node) && typeof key === "number" && key >= node.length) {
      node.push(container);
      node = container;
      continue;
    }
    const next = node[key];
    if (typeof next !== "object" || next === null) node[key] = container;
    node = node[key] as Record<string | number, unknown>;
  }
  return target;
}

const SERVICE_PATHS: readonly Path[] = [
  [],
  ["metadata"],
  ["metadata", "name"],
  ["metadata", "namespace"],
  ["metadata", "labels"],
  ["metadata", "annotations"],
  ["metadata", "annotations", "service.kubernetes.io/topology-mode"],
  ["metadata", "annotations", "service.kubernetes.io/topology-aware-hints"],
  ["spec"],
  ["spec", "type"],
  ["spec", "clusterIP"],
  ["spec", "clusterIPs"],
  ["spec", "clusterIPs", 0],
  ["spec", "clusterIPs", 1],
  ["spec", "ports"],
  ["spec", "ports", 0],
  ["spec", "ports", 0, "name"],
  ["spec", "ports", 0, "port"],
  ["spec", "ports", 0, "protocol"],
  ["spec", "ports", 0, "targetPort"],
  ["spec", "ports", 0, "nodePort"],
  ["spec", "ports", 1, "port"],
  ["spec", "externalIPs"],
  ["spec", "externalIPs", 0],
  ["spec", "loadBalancerSourceRanges", 0],
  ["spec", "sessionAffinity"],
  ["spec", "sessionAffinityConfig", "clientIP", "timeoutSeconds"],
  ["spec", "externalTrafficPolicy"],
  ["spec", "internalTrafficPolicy"],
  ["spec", "healthCheckNodePort"],
  ["spec", "trafficDistribution"],
  ["spec", "topologyKeys"],
  ["spec", "topologyKeys", 0],
  ["status", "loadBalancer", "ingress"],
  ["status", "loadBalancer", "ingress", 0, "ip"],
  ["status", "loadBalancer", "ingress", 0, "ipMode"],
];

const SLICE_PATHS: readonly Path[] = [
  [],
  ["metadata", "name"],
  ["metadata", "namespace"],
  ["metadata", "labels"],
  ["metadata", "labels", SERVICE_NAME_LABEL],
  ["addressType"],
  ["ports"],
  ["ports", 0],
  ["ports", 0, "name"],
  ["ports", 0, "port"],
  ["ports", 0, "protocol"],
  ["endpoints"],
  ["endpoints", 0],
  ["endpoints", 0, "addresses"],
  ["endpoints", 0, "addresses", 0],
  ["endpoints", 0, "addresses", 1],
  ["endpoints", 0, "conditions"],
  ["endpoints", 0, "conditions", "ready"],
  ["endpoints", 0, "conditions", "serving"],
  ["endpoints", 0, "nodeName"],
  ["endpoints", 0, "zone"],
  ["endpoints", 0, "hints"],
  ["endpoints", 0, "hints", "forZones", 0, "name"],
  ["endpoints", 0, "hints", "forNodes", 0, "name"],
];

const NODE_PATHS: readonly Path[] = [
  [],
  ["metadata", "name"],
  ["metadata", "labels"],
  ["metadata", "labels", ZONE_LABEL],
  ["metadata", "labels", "a;b"],
  ["spec", "podCIDRs"],
  ["spec", "podCIDRs", 0],
  ["spec", "podCIDR"],
  ["status", "addresses"],
  ["status", "addresses", 0, "address"],
  ["status", "addresses", 1, "address"],
  ["status", "addresses", 1, "type"],
];

const SERVICE_CIDR_PATHS: readonly Path[] = [
  [],
  ["metadata", "name"],
  ["spec", "cidrs"],
  ["spec", "cidrs", 0],
  ["spec", "cidrs", 1],
  ["spec", "cidrs", 2],
];

const fieldValueArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: hostileValueArb },
  { weight: 1, arbitrary: fc.constant(MISSING) },
);

function breakOneField(valid: fc.Arbitrary<Json>, paths: readonly Path[]): fc.Arbitrary<Json> {
  return fc.tuple(
    valid,
    fc.array(fc.tuple(fc.constantFrom(...paths), fieldValueArb), {
      minLength: 1,
      maxLength: 2,
    }),
  )
    .map(([raw, edits]) => {
      let result = clone(raw);
      for (const [path, value] of edits) {
        if (path.length === 0) {
          // Replace the whole object: only keep it a record so events stay well-typed.
          result = (typeof value === "object" && value !== null && !Array.isArray(value)
            ? value
            : { metadata: result.metadata, spec: value }) as Json;
        } else {
          result = setPath(result, path, value);
        }
      }
      return result;
    });
}

/** A Service with one or two fields broken. */
export const hostileServiceArb: fc.Arbitrary<Json> = breakOneField(rawServiceArb, SERVICE_PATHS);
/** An EndpointSlice with one or two fields broken, or a wrong-family endpoint. */
export const hostileEndpointSliceArb: fc.Arbitrary<Json> = fc.oneof(
  breakOneField(rawEndpointSliceArb(), SLICE_PATHS),
  rawEndpointSliceArb({ conflictingFamilies: true }),
);
/** A Node with one or two fields broken. */
export const hostileNodeArb: fc.Arbitrary<Json> = breakOneField(rawNodeArb, NODE_PATHS);
/** A ServiceCIDR with one or two fields broken. */
export const hostileServiceCIDRArb: fc.Arbitrary<Json> = breakOneField(
  rawServiceCIDRArb,
  SERVICE_CIDR_PATHS,
);

/** Anything at all, as JSON.parse of a corrupted body might produce. */
export const garbageArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({ maxDepth: 3 }),
  fc.json().map((text) => JSON.parse(text) as unknown),
  fc.constantFrom(null, undefined, [], "", 0, { metadata: null }, { metadata: [] }, {
    metadata: { name: { toString: "x" } },
  }),
);

// ------------------------------------------------------------------ events

const VALID_BY_KIND: Record<ObjectKind, fc.Arbitrary<Json>> = {
  Service: rawServiceArb,
  EndpointSlice: rawEndpointSliceArb(),
  Node: rawNodeArb,
  ServiceCIDR: rawServiceCIDRArb,
};

const HOSTILE_BY_KIND: Record<ObjectKind, fc.Arbitrary<Json>> = {
  Service: hostileServiceArb,
  EndpointSlice: hostileEndpointSliceArb,
  Node: hostileNodeArb,
  ServiceCIDR: hostileServiceCIDRArb,
};

const kindArb = fc.constantFrom<ObjectKind>(
  "Service",
  "EndpointSlice",
  "EndpointSlice",
  "Node",
  "ServiceCIDR",
);

/** Options for {@linkcode sourceEventArb}. */
export interface EventArbOptions {
  /** Include broken objects. @default {true} */
  hostile?: boolean;
  /** Give Services the addresses the apiserver would allocate to their key
   * ({@linkcode allocateByKey}), so no two services share one. @default {false} */
  allocated?: boolean;
}

/** One source event: an upsert or delete of a valid or broken object, or `synced`. */
export function sourceEventArb(options: EventArbOptions = {}): fc.Arbitrary<SourceEvent> {
  const hostile = options.hostile ?? true;
  const allocate = options.allocated ?? false;
  const objectOf = (kind: ObjectKind) =>
    hostile
      ? fc.oneof({ weight: 3, arbitrary: VALID_BY_KIND[kind] }, {
        weight: 2,
        arbitrary: HOSTILE_BY_KIND[kind],
      })
      : VALID_BY_KIND[kind];
  const change = kindArb.chain((kind) =>
    fc.tuple(
      fc.constantFrom<"upsert" | "delete">("upsert", "upsert", "upsert", "delete"),
      objectOf(kind),
    )
      .map(([type, object]): SourceEvent => ({
        type,
        kind,
        object: allocate && kind === "Service" ? allocateByKey(object) : object,
      }))
  );
  return fc.oneof({ weight: 20, arbitrary: change }, {
    weight: 1,
    arbitrary: fc.constant({ type: "synced" as const }),
  });
}

// ------------------------------------------------------------------ consistent clusters

/**
 * Rewrites the addresses the apiserver allocates uniquely (cluster IPs, node
 * ports, health-check node ports) so no two services share one. Services are
 * numbered in list order.
 */
export function allocateUniquely(services: readonly Json[], first = 0): Json[] {
  return services.map((raw, i) => {
    const index = first + i;
    const service = clone(raw);
    const spec = service.spec as Json;
    const declared = Array.isArray(spec.ipFamilies) ? spec.ipFamilies : [];
    const families = declared.length > 0 && declared.every((f) => f === "IPv4" || f === "IPv6")
      ? declared as ("IPv4" | "IPv6")[]
      : ["IPv4" as const];
    const ips = families.map((family) => clusterIPFor(family, index));
    if (Array.isArray(spec.clusterIPs)) spec.clusterIPs = ips;
    spec.clusterIP = ips[0];
    for (const [p, port] of (Array.isArray(spec.ports) ? spec.ports as Json[] : []).entries()) {
      if (port.nodePort !== undefined) port.nodePort = 30000 + index * 4 + p;
    }
    if (spec.healthCheckNodePort !== undefined) spec.healthCheckNodePort = 32000 + index;
    return service;
  });
}

const SERVICE_KEYS = NAMESPACES.flatMap((ns) => SERVICE_NAMES.map((name) => `${ns}/${name}`));

/**
 * Gives a Service the cluster IPs and node ports the apiserver would have
 * allocated to its key: every version of one service gets the same, two
 * services never share one. Objects of other shapes are returned unchanged.
 */
export function allocateByKey(raw: Json): Json {
  const metadata = raw.metadata as Json | undefined;
  const index = SERVICE_KEYS.indexOf(`${metadata?.namespace}/${metadata?.name}`);
  const spec = raw.spec;
  if (index < 0 || typeof spec !== "object" || spec === null || Array.isArray(spec)) return raw;
  const service = clone(raw);
  const ports = (service.spec as Json).ports;
  if (Array.isArray(ports) && ports.some((p) => typeof p !== "object" || p === null)) return raw;
  return allocateUniquely([service], index)[0]!;
}

/** A consistent set of raw objects, as an apiserver's initial list would hold. */
export interface RawCluster {
  services: Json[];
  slices: Json[];
  nodes: Json[];
  serviceCIDRs: Json[];
}

/** Options for {@linkcode clusterArb}. */
export interface ClusterArbOptions {
  /** Sometimes add a 1000-endpoint slice. @default {false} */
  large?: boolean;
  /** @default {6} */
  maxServices?: number;
}

/** A cluster whose services have unique cluster IPs and node ports, with slices and nodes. */
export function clusterArb(options: ClusterArbOptions = {}): fc.Arbitrary<RawCluster> {
  return fc.record({
    services: fc.uniqueArray(rawServiceArb, {
      maxLength: options.maxServices ?? 6,
      selector: (s) => `${(s.metadata as Json).namespace}/${(s.metadata as Json).name}`,
    }),
    slices: fc.uniqueArray(rawEndpointSliceArb(), {
      maxLength: 10,
      selector: (s) => `${(s.metadata as Json).namespace}/${(s.metadata as Json).name}`,
    }),
    nodes: fc.uniqueArray(rawNodeArb, { maxLength: 3, selector: (n) => (n.metadata as Json).name }),
    serviceCIDRs: fc.uniqueArray(rawServiceCIDRArb, {
      maxLength: 2,
      selector: (c) => (c.metadata as Json).name,
    }),
    owned: fc.array(fc.array(rawEndpointSliceArb({ maxEndpoints: 8 }), { maxLength: 2 }), {
      minLength: options.maxServices ?? 6,
      maxLength: options.maxServices ?? 6,
    }),
    large: options.large ? fc.boolean() : fc.constant(false),
  }).map((c) => {
    const services = c.services.map(allocateByKey);
    const slices = [...c.slices];
    // Slices owned by each service, with its port names and protocols, so plans have endpoints.
    for (const [i, service] of services.entries()) {
      const { namespace, name } = service.metadata as { namespace: string; name: string };
      const ports = ((service.spec as Json).ports as Json[]).map((port) => ({
        name: port.name,
        protocol: port.protocol ?? "TCP",
        port: typeof port.targetPort === "number" ? port.targetPort : 8080,
      }));
      for (const [k, owned] of (c.owned[i] ?? []).entries()) {
        slices.push({
          ...owned,
          metadata: { namespace, name: `${name}-own${k}`, labels: { [SERVICE_NAME_LABEL]: name } },
          ports,
        });
      }
    }
    const first = services[0]?.metadata as Json | undefined;
    if (c.large && first) slices.push(largeSlice(String(first.namespace), String(first.name)));
    return { services, slices, nodes: c.nodes, serviceCIDRs: c.serviceCIDRs };
  });
}

/** The events of a source's initial list of `cluster`, ending with `synced`. */
export function listEvents(cluster: RawCluster): SourceEvent[] {
  const upsert = (kind: ObjectKind) => (object: Json): SourceEvent => ({
    type: "upsert",
    kind,
    object,
  });
  return [
    ...cluster.nodes.map(upsert("Node")),
    ...cluster.serviceCIDRs.map(upsert("ServiceCIDR")),
    ...cluster.services.map(upsert("Service")),
    ...cluster.slices.map(upsert("EndpointSlice")),
    { type: "synced" },
  ];
}

// ------------------------------------------------------------------ planner options

/** Planner options for {@linkcode THIS_NODE}, across detect-local modes, node-port
 * address choices, masquerade-all, externalIP allow-lists and feature gates. */
export const plannerOptionsArb: fc.Arbitrary<PlannerOptions> = fc.record({
  detect: fc.constantFrom(
    "",
    "ClusterCIDR",
    "NodeCIDR",
    "BridgeInterface",
    "InterfaceNamePrefix",
  ) as fc.Arbitrary<
    PlannerOptions["detectLocalMode"]
  >,
  nodePortAddresses: fc.constantFrom<string[]>(["primary"], [], ["192.168.1.0/24", "fd00::/64"], [
    "127.0.0.0/8",
    "192.168.0.0/16",
  ]),
  masqueradeAll: fc.boolean(),
  allowed: fc.constantFrom<string[]>([], ["203.0.113.0/24"], ["0.0.0.0/0", "::/0"]),
  topologyGate: fc.boolean(),
}).map((o): PlannerOptions => ({
  nodeName: THIS_NODE,
  nodePortAddresses: o.nodePortAddresses,
  localAddresses: ["127.0.0.1", "192.168.1.10", "192.168.1.12", "::1", "fd00::10"],
  clusterCIDRs: o.detect === "" ? [] : ["10.244.0.0/16", "fd00:244::/48"],
  detectLocalMode: o.detect,
  bridgeInterface: "cbr0",
  interfaceNamePrefix: "veth",
  masqueradeAll: o.masqueradeAll,
  serviceClusterIPRange: ["10.96.0.0/16", "fd00:96::/112"],
  externalIPAllowedCIDRs: o.allowed,
  featureGates: { ServiceTopology: o.topologyGate },
}));

// ------------------------------------------------------------------ run counts

/**
 * The number of runs for a property: `FUZZ_RUNS` from the environment or
 * `--fuzz-runs=N` after `--` on the test command line, else `fallback`.
 * (`deno test --ignore-env` hides the environment, hence the argument.)
 */
export function fuzzRuns(fallback: number): number {
  let text: string | undefined;
  try {
    text = Deno.env.get("FUZZ_RUNS");
  } catch {
    text = undefined;
  }
  for (const arg of Deno.args) {
    if (arg.startsWith("--fuzz-runs=")) text = arg.slice("--fuzz-runs=".length);
  }
  const runs = Number(text);
  return text !== undefined && Number.isInteger(runs) && runs > 0 ? runs : fallback;
}
