/**
 * `kproxy explain DEST`: why a packet to DEST goes where it goes.
 *
 * Pure: the caller hands in the cluster state, the node's plans and the
 * planner options; {@linkcode explain} answers which service port DEST is,
 * which endpoints traffic may use and, for every other endpoint of the
 * service, why not. Every answer is read from the {@linkcode NodePlans} (the
 * same decisions every backend renders); the reasons for exclusions are
 * derived with the planner's own building blocks (`mergeSliceEndpoints`,
 * `selectTopologyEndpoints`), never by a second copy of the policy. When a
 * derived reason and the plan disagree, the plan wins.
 *
 * @module
 */

import type { CommandLine } from "../config/command_line.ts";
import { mergeSliceEndpoints } from "../core/endpoints.ts";
import { cidrContains, isLoopback, parseIP } from "../core/ip.ts";
import type { EndpointSlice, IpFamily, Protocol, Service } from "../core/model.ts";
import { HOSTNAME_LABEL, serviceKey, ZONE_LABEL } from "../core/model.ts";
import type { NodePlans, Plan, PlanEndpoint, ServicePortPlan, TrafficPlan } from "../core/plan.ts";
import { type PlannerOptions, planNode } from "../core/planner.ts";
import type { ClusterState } from "../core/state.ts";
import {
  type CandidateEndpoint,
  gateEnabled,
  selectTopologyEndpoints,
  SERVICE_TOPOLOGY_GATE,
  type TopologyDecision,
  usesTopologyKeys,
} from "../core/topology.ts";

// ---------------------------------------------------------------------------
// Destinations.

/** A parsed `DEST` argument. */
export type Destination =
  | {
    kind: "address";
    /** Canonical IP text. */
    ip: string;
    family: IpFamily;
    port: number;
    protocol: Protocol;
  }
  | {
    kind: "service";
    namespace: string;
    name: string;
    /** Service port number or port name. */
    port: number | string;
    /** undefined when DEST did not name one. */
    protocol?: Protocol;
  };

const PROTOCOLS: readonly Protocol[] = ["TCP", "UDP", "SCTP"];
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const PORT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DIGITS = /^[0-9]+$/;
const DEST_FORMS = "IP:PORT[/PROTO], [IPv6]:PORT[/PROTO], NAMESPACE/NAME:PORT or NAME:PORT";

function destError(text: string, why: string): TypeError {
  return new TypeError(`Cannot parse DEST ${JSON.stringify(text)}: ${why} (want ${DEST_FORMS})`);
}

function parsePortNumber(text: string, dest: string): number {
  if (!DIGITS.test(text)) throw destError(dest, `port ${JSON.stringify(text)} is not a number`);
  const port = Number(text);
  if (port < 1 || port > 65535) throw destError(dest, `port ${port} is out of range 1-65535`);
  return port;
}

/**
 * Parses the `DEST` of `kproxy explain`: `IP:PORT/PROTO` (IPv6 as
 * `[IP]:PORT/PROTO`, protocol TCP when omitted), or a service port as
 * `NAMESPACE/NAME:PORT` or `NAME:PORT` (namespace "default"), PORT being a
 * number or a port name, optionally followed by `/PROTO`.
 *
 * @example Usage
 * ```ts
 * import { parseDestination } from "./explain.ts";
 * parseDestination("10.96.0.10:53/udp"); // { kind: "address", ip: "10.96.0.10", port: 53, protocol: "UDP", ... }
 * parseDestination("kube-system/kube-dns:dns"); // { kind: "service", port: "dns", ... }
 * ```
 *
 * @param text The DEST argument.
 * @returns The parsed destination.
 * @throws {TypeError} When `text` is none of the accepted forms.
 */
export function parseDestination(text: string): Destination {
  const trimmed = text.trim();
  if (trimmed === "") throw destError(text, "it is empty");
  let body = trimmed;
  let protocol: Protocol | undefined;
  const lastSlash = trimmed.lastIndexOf("/");
  if (lastSlash >= 0) {
    const suffix = trimmed.slice(lastSlash + 1).toUpperCase();
    const known = PROTOCOLS.find((p) => p === suffix);
    if (known !== undefined) {
      protocol = known;
      body = trimmed.slice(0, lastSlash);
    } else if (!/[a-z]/i.test(trimmed.slice(0, lastSlash)) || trimmed.startsWith("[")) {
      throw destError(text, `unknown protocol ${JSON.stringify(suffix)} (want TCP, UDP or SCTP)`);
    }
  }
  if (body.startsWith("[")) {
    const close = body.indexOf("]");
    if (close < 0) throw destError(text, "missing ']' after the IPv6 address");
    const ip = parseIP(body.slice(1, close));
    if (ip?.family !== "IPv6") {
      throw destError(text, `${JSON.stringify(body.slice(1, close))} is not an IPv6 address`);
    }
    if (body[close + 1] !== ":") throw destError(text, "missing ':PORT' after the address");
    const port = parsePortNumber(body.slice(close + 2), text);
    return { kind: "address", ip: ip.address, family: "IPv6", port, protocol: protocol ?? "TCP" };
  }
  const colons = body.split(":").length - 1;
  if (colons === 0) throw destError(text, "missing ':PORT'");
  if (colons > 1) {
    throw destError(text, "an IPv6 address needs brackets, e.g. [fd00::1]:80");
  }
  const colon = body.indexOf(":");
  const host = body.slice(0, colon);
  const portText = body.slice(colon + 1);
  if (/^[0-9.]+$/.test(host)) {
    const ip = parseIP(host);
    if (ip === undefined) throw destError(text, `${JSON.stringify(host)} is not an IPv4 address`);
    const port = parsePortNumber(portText, text);
    return { kind: "address", ip: ip.address, family: "IPv4", port, protocol: protocol ?? "TCP" };
  }
  const parts = host.split("/");
  if (parts.length > 2) throw destError(text, "a service is NAMESPACE/NAME");
  const [namespace, name] = parts.length === 2 ? [parts[0]!, parts[1]!] : ["default", parts[0]!];
  for (const [what, value] of [["namespace", namespace], ["service name", name]] as const) {
    if (!DNS_LABEL.test(value)) {
      throw destError(text, `${what} ${JSON.stringify(value)} is not a DNS label`);
    }
  }
  let port: number | string;
  if (DIGITS.test(portText)) {
    port = parsePortNumber(portText, text);
  } else if (PORT_NAME.test(portText) && portText.length <= 63) {
    port = portText;
  } else {
    throw destError(text, `${JSON.stringify(portText)} is neither a port number nor a port name`);
  }
  return protocol === undefined
    ? { kind: "service", namespace, name, port }
    : { kind: "service", namespace, name, port, protocol };
}

// ---------------------------------------------------------------------------
// The explanation.

/** Input of {@linkcode explain}. */
export interface ExplainInput {
  state: ClusterState;
  /** The plans of `options.nodeName` for `state` (replanned when `node` differs). */
  plans: NodePlans;
  options: PlannerOptions;
  /** The DEST argument, see {@linkcode parseDestination}. */
  destination: string;
  /** The client's source address; "" or undefined when unknown. */
  from?: string;
  /** The node the packet enters on. @default {options.nodeName} */
  node?: string;
}

/** How an address belongs to a service port. */
export type AddressKind = "cluster IP" | "node port" | "external IP" | "load-balancer IP";

/** One endpoint of the service and whether this packet may go to it. */
export interface EndpointVerdict {
  ip: string;
  /** Target port; 0 when the endpoint's slice has no port for this service port. */
  port: number;
  nodeName: string;
  zone: string;
  /** Runs on the explaining node. */
  local: boolean;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  /** The EndpointSlice it came from. */
  slice: string;
  eligible: boolean;
  /** Why it is (or is not) eligible. */
  reason: string;
}

/** A yes/no answer that may depend on something the explanation cannot see. */
export type Answer = "yes" | "no" | "depends";

/** Which service port DEST is and what happens to the packet there. */
export interface ServicePortMatch {
  /** `namespace/name:portName/protocol`. */
  id: string;
  service: string;
  portName: string;
  kind: AddressKind;
  /** Which traffic plan applies: cluster IP traffic, or external traffic. */
  traffic: "internal" | "external";
  /** The traffic policy that governs `traffic`. */
  policy: string;
  /** The planner's reason for the chosen endpoints. */
  planReason: string;
  endpoints: EndpointVerdict[];
  eligibleCount: number;
  /** What happens when no endpoint is eligible; undefined when some is. */
  whenEmpty?: { verdict: "reject" | "drop"; text: string };
  masquerade: { answer: Answer; reason: string };
  affinity: { timeoutSeconds: number; text: string };
  sourceRanges: {
    ranges: string[];
    answer: "allowed" | "dropped" | "depends" | "any";
    text: string;
  };
  healthCheckNodePort: number;
}

/** The answer of {@linkcode explain}. */
export interface Explanation {
  /** DEST as given. */
  input: string;
  /** The address the packet is sent to. */
  ip: string;
  port: number;
  protocol: Protocol;
  family: IpFamily;
  /** The node the packet enters on. */
  node: string;
  /** The source address, "" when not given. */
  from: string;
  /** The service port DEST belongs to, undefined when it is no service address. */
  match?: ServicePortMatch;
  /** One line: what happens to the packet. */
  outcome: string;
  /** Extra remarks (why an address is no service address, hairpin, ...). */
  notes: string[];
}

/** What {@linkcode explain} derives once per call. */
interface Context {
  state: ClusterState;
  options: PlannerOptions;
  plans: NodePlans;
  nodeName: string;
  nodeLabels: Readonly<Record<string, string>>;
  /** The node's own addresses (Node object, plus interface addresses for this node). */
  nodeAddresses: string[];
  from: string;
}

/**
 * Explains where a packet to `input.destination` goes on a node.
 *
 * @example Usage
 * ```ts ignore
 * const plans = planNode({ state, options });
 * const e = explain({ state, plans, options, destination: "10.96.0.10:80", from: "10.244.1.5" });
 * console.log(formatExplanation(e));
 * ```
 *
 * @param input The state, plans and options, DEST and optionally the source and node.
 * @returns The explanation.
 * @throws {TypeError} When DEST or `from` do not parse.
 * @throws {RangeError} When DEST names an unknown service or port, or `node` is unknown.
 */
export function explain(input: ExplainInput): Explanation {
  const destination = parseDestination(input.destination);
  const from = parseFrom(input.from);
  const ctx = contextFor(input, from);
  const target = resolveDestination(destination, input.destination, ctx);
  const base = {
    input: input.destination,
    ...target,
    node: ctx.nodeName,
    from,
  };
  const fromFamily = from === "" ? undefined : parseIP(from)?.family;
  if (fromFamily !== undefined && fromFamily !== target.family) {
    throw new TypeError(
      `Cannot explain ${input.destination} from ${from}: the source is ${fromFamily} but the destination is ${target.family}`,
    );
  }
  const plan = target.family === "IPv4" ? ctx.plans.ipv4 : ctx.plans.ipv6;
  const found = findServicePort(plan, target);
  if (found === undefined) {
    const miss = explainMiss(ctx, plan, target);
    return { ...base, outcome: miss.outcome, notes: miss.notes };
  }
  const notes: string[] = [];
  const match = explainMatch(ctx, found.plan, found.kind, notes);
  return { ...base, match, outcome: outcomeOf(match), notes };
}

function parseFrom(from: string | undefined): string {
  if (from === undefined || from.trim() === "") return "";
  const ip = parseIP(from.trim());
  if (ip === undefined) {
    throw new TypeError(`Cannot parse --from ${JSON.stringify(from)}: not an IP address`);
  }
  return ip.address;
}

/** Plans as seen from `input.node`: the given plans, or a replan for another node. */
function contextFor(input: ExplainInput, from: string): Context {
  const nodeName = input.node === undefined || input.node === ""
    ? input.options.nodeName
    : input.node;
  const node = input.state.nodes.get(nodeName);
  let options = input.options;
  let plans = input.plans;
  const thisNode = nodeName === input.options.nodeName;
  if (!thisNode) {
    if (node === undefined) {
      const known = [...input.state.nodes.keys()].sort().join(", ") || "none";
      throw new RangeError(
        `Cannot explain as seen from node ${
          JSON.stringify(nodeName)
        }: no such node (known: ${known})`,
      );
    }
    options = { ...input.options, nodeName, localAddresses: [...node.addresses] };
    plans = planNode({ state: input.state, options });
  }
  const nodeAddresses = [...new Set([...(node?.addresses ?? []), ...options.localAddresses])];
  return {
    state: input.state,
    options,
    plans,
    nodeName,
    nodeLabels: node?.labels ?? {},
    nodeAddresses,
    from,
  };
}

interface Target {
  ip: string;
  port: number;
  protocol: Protocol;
  family: IpFamily;
}

function resolveDestination(destination: Destination, text: string, ctx: Context): Target {
  if (destination.kind === "address") {
    const { ip, port, protocol, family } = destination;
    return { ip, port, protocol, family };
  }
  const key = serviceKey(destination.namespace, destination.name);
  const service = ctx.state.services.get(key);
  if (service === undefined) {
    throw new RangeError(`Cannot explain ${text}: no service ${key} (or kproxy ignores it)`);
  }
  const wanted = destination.port;
  const candidates = service.ports.filter((p) =>
    (typeof wanted === "number" ? p.port === wanted : p.name === wanted) &&
    (destination.protocol === undefined || p.protocol === destination.protocol)
  );
  const port = candidates.find((p) => p.protocol === "TCP") ?? candidates[0];
  if (port === undefined) {
    const have = service.ports.map((p) =>
      `${p.name === "" ? "" : `${p.name}=`}${p.port}/${p.protocol}`
    );
    throw new RangeError(
      `Cannot explain ${text}: service ${key} has no port ${wanted}${
        destination.protocol ? `/${destination.protocol}` : ""
      } (it has ${have.join(", ") || "none"})`,
    );
  }
  const fromFamily = ctx.from === "" ? undefined : parseIP(ctx.from)?.family;
  const ip = service.clusterIPs.find((candidate) => parseIP(candidate)?.family === fromFamily) ??
    service.clusterIPs[0];
  const family = ip === undefined ? undefined : parseIP(ip)?.family;
  if (ip === undefined || family === undefined) {
    throw new RangeError(`Cannot explain ${text}: service ${key} has no cluster IP (headless)`);
  }
  return { ip, port: port.port, protocol: port.protocol, family };
}

function findServicePort(
  plan: Plan,
  target: Target,
): { plan: ServicePortPlan; kind: AddressKind } | undefined {
  const onPort = plan.services.filter((sp) => sp.protocol === target.protocol);
  const checks: [AddressKind, (sp: ServicePortPlan) => boolean][] = [
    ["cluster IP", (sp) => sp.port === target.port && sp.clusterIPs.includes(target.ip)],
    ["load-balancer IP", (sp) => sp.port === target.port && sp.loadBalancerIPs.includes(target.ip)],
    ["external IP", (sp) => sp.port === target.port && sp.externalIPs.includes(target.ip)],
    [
      "node port",
      (sp) =>
        sp.nodePort > 0 && sp.nodePort === target.port &&
        plan.nodePortAddresses.includes(target.ip),
    ],
  ];
  for (const [kind, test] of checks) {
    const sp = onPort.find(test);
    if (sp !== undefined) return { plan: sp, kind };
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// Not a service address.

function explainMiss(
  ctx: Context,
  plan: Plan,
  target: Target,
): { outcome: string; notes: string[] } {
  const notes: string[] = [];
  const address = `${target.ip}:${target.port}/${target.protocol}`;
  const ownerOf = (test: (sp: ServicePortPlan) => boolean, what: string): boolean => {
    const owners = plan.services.filter(test);
    if (owners.length === 0) return false;
    const ports = owners.map((sp) => `${sp.port}/${sp.protocol}`).join(", ");
    const services = [...new Set(owners.map((sp) => `${sp.namespace}/${sp.name}`))].join(", ");
    notes.push(
      `${target.ip} is the ${what} of ${services}, on ${ports}, not ${target.port}/${target.protocol}`,
    );
    return true;
  };
  const knownAddress = [
    ownerOf((sp) => sp.clusterIPs.includes(target.ip), "cluster IP"),
    ownerOf((sp) => sp.loadBalancerIPs.includes(target.ip), "load-balancer IP"),
    ownerOf((sp) => sp.externalIPs.includes(target.ip), "external IP"),
  ].some(Boolean);

  const nodeAddress = ctx.nodeAddresses.includes(target.ip) || isLoopback(target.ip);
  const capturing = plan.nodePortAddresses.includes(target.ip);
  const healthCheck = plan.services.find((sp) =>
    sp.healthCheckNodePort === target.port && target.protocol === "TCP"
  );
  if (healthCheck !== undefined && (nodeAddress || capturing)) {
    return {
      outcome:
        `answered by kproxy: health-check node port of ${healthCheck.namespace}/${healthCheck.name} ` +
        `(200 with ${healthCheck.localReadyEndpoints} local ready endpoint(s), 503 with none)`,
      notes,
    };
  }
  const nodePortOwner = plan.services.find((sp) =>
    sp.nodePort === target.port && sp.protocol === target.protocol
  );
  if (nodePortOwner !== undefined && !capturing) {
    const where = plan.nodePortAddresses.join(", ") || "no address";
    notes.push(
      `${target.port}/${target.protocol} is the node port of ${nodePortOwner.id}, but node ports are captured only on ${where}` +
        (isLoopback(target.ip) ? " (never on loopback)" : ""),
    );
  }
  // A service the planner skipped still owns its cluster IP in the state.
  for (const service of ctx.state.services.values()) {
    const skipped = service.clusterIPs.includes(target.ip) &&
      !plan.services.some((sp) => sp.namespace === service.namespace && sp.name === service.name);
    if (skipped) {
      notes.push(
        `${target.ip} is the cluster IP of ${service.namespace}/${service.name}, which the planner skipped (see the warnings in the log)`,
      );
    }
  }
  const cidr = plan.serviceCIDRs.find((c) => cidrContains(c, target.ip));
  if (cidr !== undefined) {
    const what = knownAddress ? "an unknown service port" : "unallocated";
    return {
      outcome:
        `not a service address; inside service CIDR ${cidr}: rejected as ${what} (${address})`,
      notes,
    };
  }
  return { outcome: "not a service address: kproxy does not touch it", notes };
}

// ---------------------------------------------------------------------------
// A service port.

function explainMatch(
  ctx: Context,
  sp: ServicePortPlan,
  kind: AddressKind,
  notes: string[],
): ServicePortMatch {
  const key = serviceKey(sp.namespace, sp.name);
  const service = ctx.state.services.get(key);
  const sourceClass = classifySource(ctx);
  let traffic: "internal" | "external" = kind === "cluster IP" ? "internal" : "external";
  if (traffic === "external" && sp.externalLocal && sourceClass !== "remote" && ctx.from !== "") {
    if (sourceClass === "node" || sourceClass === "pod") {
      traffic = "internal";
      notes.push(
        sourceClass === "node"
          ? "externalTrafficPolicy Local: traffic from the node itself is masqueraded and uses the cluster-IP endpoints"
          : "externalTrafficPolicy Local: traffic from a local pod short-circuits to the cluster-IP endpoints",
      );
    }
  }
  const trafficPlan = traffic === "internal" ? sp.internal : sp.external;
  const localPolicy = traffic === "internal"
    ? service?.internalTrafficPolicy === "Local"
    : sp.externalLocal;
  const policyField = traffic === "internal" ? "internalTrafficPolicy" : "externalTrafficPolicy";
  const policy = `${policyField} ${localPolicy ? "Local" : "Cluster"}`;
  const endpoints = endpointVerdicts({
    ctx,
    sp,
    service,
    trafficPlan,
    localPolicy,
    policyField,
  });
  const eligibleCount = endpoints.filter((e) => e.eligible).length;
  if (ctx.from !== "" && endpoints.some((e) => e.eligible && e.ip === ctx.from)) {
    notes.push(
      `${ctx.from} is itself an eligible endpoint: if it is chosen (hairpin), the packet is masqueraded`,
    );
  }
  const topologyKeysIgnored = service !== undefined && service.topologyKeys.length > 0 &&
    !gateEnabled(ctx.options.featureGates, SERVICE_TOPOLOGY_GATE);
  if (topologyKeysIgnored) {
    notes.push(`topologyKeys are ignored: the ${SERVICE_TOPOLOGY_GATE} feature gate is off`);
  }
  const match: ServicePortMatch = {
    id: sp.id,
    service: key,
    portName: sp.portName,
    kind,
    traffic,
    policy,
    planReason: trafficPlan.reason,
    endpoints,
    eligibleCount,
    masquerade: masqueradeOf(ctx, sp, traffic, kind, sourceClass),
    affinity: sp.affinityTimeoutSeconds > 0
      ? {
        timeoutSeconds: sp.affinityTimeoutSeconds,
        text: `ClientIP: a client sticks to its endpoint for ${sp.affinityTimeoutSeconds}s`,
      }
      : { timeoutSeconds: 0, text: "none" },
    sourceRanges: sourceRangesOf(ctx, sp, kind),
    healthCheckNodePort: sp.healthCheckNodePort,
  };
  if (eligibleCount === 0) match.whenEmpty = whenEmptyOf(trafficPlan, localPolicy, service, ctx);
  return match;
}

/** Where the source comes from, as far as the node can tell. */
type SourceClass = "unknown" | "node" | "pod" | "remote" | "pod-or-remote";

function classifySource(ctx: Context): SourceClass {
  if (ctx.from === "") return "unknown";
  if (ctx.nodeAddresses.includes(ctx.from) || isLoopback(ctx.from)) return "node";
  const local = isLocalTraffic(ctx);
  return local === undefined ? "pod-or-remote" : local ? "pod" : "remote";
}

/** Whether `ctx.from` is local per the node's detector; undefined when it depends
 * on the interface, which an address cannot tell. */
function isLocalTraffic(ctx: Context): boolean | undefined {
  const family = parseIP(ctx.from)?.family;
  const plan = family === "IPv6" ? ctx.plans.ipv6 : ctx.plans.ipv4;
  const detector = plan.localTraffic;
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR":
      return detector.cidrs.some((cidr) => cidrContains(cidr, ctx.from));
    case "BridgeInterface":
    case "InterfaceNamePrefix":
      return undefined;
    case "None":
      return false;
  }
}

function detectorText(plan: Plan): string {
  const detector = plan.localTraffic;
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR":
      return `inside ${detector.mode} ${detector.cidrs.join(", ")}`;
    case "BridgeInterface":
      return `arriving on bridge ${detector.interfaces.join(", ")}`;
    case "InterfaceNamePrefix":
      return `arriving on an interface named ${detector.interfaces.map((i) => `${i}*`).join(", ")}`;
    case "None":
      return "never (no local-traffic detector)";
  }
}

function masqueradeOf(
  ctx: Context,
  sp: ServicePortPlan,
  traffic: "internal" | "external",
  kind: AddressKind,
  source: SourceClass,
): { answer: Answer; reason: string } {
  const plan = parseIP(sp.clusterIPs[0] ?? "")?.family === "IPv6" ? ctx.plans.ipv6 : ctx.plans.ipv4;
  if (kind !== "cluster IP") {
    if (!sp.externalLocal) {
      return {
        answer: "yes",
        reason: `${kind} traffic under externalTrafficPolicy Cluster is always masqueraded`,
      };
    }
    if (source === "node") {
      return {
        answer: "yes",
        reason: "externalTrafficPolicy Local, but the packet comes from the node itself",
      };
    }
    // Cluster-IP masquerading (--masquerade-all or non-local) applies only to packets
    // addressed to the cluster IP, in every mode: a short-circuited pod packet is not one.
    const podKeeps = `a local pod's packet (${
      detectorText(plan)
    }) short-circuits to the cluster-IP endpoints and keeps its source`;
    if (traffic === "internal") {
      return { answer: "no", reason: `externalTrafficPolicy Local: ${podKeeps}` };
    }
    return source === "pod-or-remote"
      ? {
        answer: "no",
        reason: `externalTrafficPolicy Local: a client's source is preserved, and ${podKeeps}`,
      }
      : { answer: "no", reason: "externalTrafficPolicy Local: the client's source is preserved" };
  }
  switch (sp.clusterIPMasquerade) {
    case "all":
      return { answer: "yes", reason: "--masquerade-all" };
    case "none":
      return {
        answer: "no",
        reason:
          "no local-traffic detector (--detect-local-mode): cluster IP traffic keeps its source",
      };
    case "non-local":
      break;
  }
  const local = detectorText(plan);
  switch (source) {
    case "unknown":
      return {
        answer: "depends",
        reason: `masqueraded unless the source is local (${local}); give --from to decide`,
      };
    case "node":
      return {
        answer: "yes",
        reason: `the node's own address is not local traffic (local means ${local})`,
      };
    case "pod":
      return { answer: "no", reason: `${ctx.from} is local traffic (${local})` };
    case "remote":
      return { answer: "yes", reason: `${ctx.from} is not local traffic (local means ${local})` };
    case "pod-or-remote":
      return { answer: "depends", reason: `masqueraded unless the packet is local (${local})` };
  }
}

function sourceRangesOf(
  ctx: Context,
  sp: ServicePortPlan,
  kind: AddressKind,
): ServicePortMatch["sourceRanges"] {
  const ranges = [...sp.sourceRanges];
  if (ranges.length === 0) return { ranges, answer: "any", text: "any source" };
  if (kind !== "load-balancer IP") {
    return {
      ranges,
      answer: "any",
      text: `loadBalancerSourceRanges ${ranges.join(", ")} apply to the load-balancer IP only`,
    };
  }
  if (ctx.from === "") {
    return {
      ranges,
      answer: "depends",
      text: `only from ${ranges.join(", ")}; other sources are dropped`,
    };
  }
  const allowedBy = ranges.find((cidr) => cidrContains(cidr, ctx.from));
  return allowedBy === undefined
    ? {
      ranges,
      answer: "dropped",
      text: `${ctx.from} is outside loadBalancerSourceRanges ${ranges.join(", ")}: dropped`,
    }
    : { ranges, answer: "allowed", text: `${ctx.from} is allowed by ${allowedBy}` };
}

function whenEmptyOf(
  trafficPlan: TrafficPlan,
  localPolicy: boolean,
  service: Service | undefined,
  ctx: Context,
): { verdict: "reject" | "drop"; text: string } {
  if (trafficPlan.whenEmpty === "reject") {
    return { verdict: "reject", text: "connection refused (no endpoints)" };
  }
  if (localPolicy) {
    return { verdict: "drop", text: "dropped (no local endpoint under Local policy)" };
  }
  if (service !== undefined && usesTopologyKeys(service, ctx.options.featureGates)) {
    return { verdict: "drop", text: "dropped (no endpoint matches topologyKeys)" };
  }
  return { verdict: "drop", text: `dropped (${trafficPlan.reason})` };
}

function outcomeOf(match: ServicePortMatch): string {
  if (match.sourceRanges.answer === "dropped") return "dropped by loadBalancerSourceRanges";
  if (match.whenEmpty !== undefined) return match.whenEmpty.text;
  const n = match.eligibleCount;
  const sticky = match.affinity.timeoutSeconds > 0
    ? `, sticky per client for ${match.affinity.timeoutSeconds}s`
    : "";
  return `forwarded (DNAT) to ${
    n === 1 ? "the only eligible endpoint" : `one of ${n} eligible endpoints`
  }${sticky}`;
}

// ---------------------------------------------------------------------------
// Endpoints and why not.

interface VerdictInput {
  ctx: Context;
  sp: ServicePortPlan;
  service: Service | undefined;
  trafficPlan: TrafficPlan;
  localPolicy: boolean;
  policyField: string;
}

function endpointKey(endpoint: Pick<PlanEndpoint, "ip" | "port">): string {
  return `${endpoint.ip}|${endpoint.port}`;
}

function endpointVerdicts(input: VerdictInput): EndpointVerdict[] {
  const { ctx, sp } = input;
  const family = parseIP(sp.clusterIPs[0] ?? "")?.family ?? "IPv4";
  const slices = (ctx.state.slicesByService.get(serviceKey(sp.namespace, sp.name)) ?? [])
    .filter((slice) => slice.family === family);
  const merge = (of: readonly EndpointSlice[]) =>
    mergeSliceEndpoints({
      slices: of,
      family,
      portName: sp.portName,
      protocol: sp.protocol,
      nodeName: ctx.nodeName,
    });
  const candidates = merge(slices);
  const sliceOf = new Map<string, string>();
  const verdicts: EndpointVerdict[] = [];
  for (const slice of slices) {
    const contributed = merge([slice]);
    for (const c of contributed) {
      if (!sliceOf.has(endpointKey(c.endpoint))) sliceOf.set(endpointKey(c.endpoint), slice.name);
    }
    if (contributed.length > 0 || slice.endpoints.length === 0) continue;
    const portLabel = `${
      sp.portName === "" ? "(unnamed)" : JSON.stringify(sp.portName)
    }/${sp.protocol}`;
    const has = slice.ports.map((p) => `${p.name === "" ? "(unnamed)" : p.name}/${p.protocol}`)
      .join(", ") || "none";
    for (const e of slice.endpoints) {
      verdicts.push({
        ip: e.ip,
        port: 0,
        nodeName: e.nodeName,
        zone: e.zone,
        local: e.nodeName !== "" && e.nodeName === ctx.nodeName,
        ready: e.ready,
        serving: e.serving,
        terminating: e.terminating,
        slice: slice.name,
        eligible: false,
        reason:
          `port name not in the slice: ${slice.name} has no port ${portLabel} (it has ${has})`,
      });
    }
  }
  const eligible = new Set(input.trafficPlan.endpoints.map(endpointKey));
  const why = exclusionReasons(input, candidates);
  for (const c of candidates) {
    const e = c.endpoint;
    const isEligible = eligible.has(endpointKey(e));
    const derived = why(c);
    verdicts.push({
      ip: e.ip,
      port: e.port,
      nodeName: e.nodeName,
      zone: e.zone,
      local: e.isLocal,
      ready: e.ready,
      serving: e.serving,
      terminating: e.terminating,
      slice: sliceOf.get(endpointKey(e)) ?? "",
      eligible: isEligible,
      reason: isEligible
        ? eligibleReason(input, c)
        : derived ?? `not chosen by the planner: ${input.trafficPlan.reason}`,
    });
  }
  return verdicts;
}

function eligibleReason(input: VerdictInput, c: CandidateEndpoint): string {
  const e = c.endpoint;
  const parts = [e.ready ? "ready" : "terminating but serving (no ready endpoint to prefer)"];
  if (input.localPolicy) parts.push(`on this node (${input.policyField} Local)`);
  const reason = input.trafficPlan.reason;
  if (reason.includes("hints: zone")) parts.push(`hint forZones=[${c.hints?.forZones.join(", ")}]`);
  else if (reason.includes("hints: node")) {
    parts.push(`hint forNodes=[${c.hints?.forNodes.join(", ")}]`);
  } else if (reason.includes("topologyKeys: ")) {
    parts.push(reason.slice(reason.indexOf("topologyKeys")));
  }
  return parts.join("; ");
}

/**
 * Builds the per-endpoint "why not" for one traffic plan. Returns undefined
 * for an endpoint the rules allow (the plan then decides).
 */
function exclusionReasons(
  input: VerdictInput,
  candidates: readonly CandidateEndpoint[],
): (c: CandidateEndpoint) => string | undefined {
  const { ctx, localPolicy, policyField, service } = input;
  const usableAny = (c: CandidateEndpoint) =>
    c.endpoint.ready || (c.endpoint.serving && c.endpoint.terminating);
  const scope = localPolicy ? candidates.filter((c) => c.endpoint.isLocal) : candidates;
  const readyInScope = scope.some((c) => c.endpoint.ready);
  let topology: TopologyDecision | undefined;
  if (!localPolicy && service !== undefined) {
    const usable = readyInScope
      ? candidates.filter((c) => c.endpoint.ready)
      : candidates.filter((c) => !c.endpoint.ready && usableAny(c));
    topology = selectTopologyEndpoints({
      endpoints: usable,
      usability: readyInScope ? "ready" : "serving-terminating",
      service,
      nodeName: ctx.nodeName,
      nodeLabels: ctx.nodeLabels,
      nodes: ctx.state.nodes,
      featureGates: ctx.options.featureGates,
    });
  }
  const chosen = new Set(topology?.endpoints.map((c) => endpointKey(c.endpoint)) ?? []);
  return (c) => {
    const e = c.endpoint;
    if (!usableAny(c)) {
      return e.serving ? "not ready (serving but not terminating)" : "not ready (and not serving)";
    }
    if (localPolicy && !e.isLocal) {
      return `other node: on ${
        e.nodeName || "no node"
      }, and ${policyField} Local sends only to endpoints on ${ctx.nodeName}`;
    }
    if (!e.ready && readyInScope) {
      return localPolicy
        ? "terminating, and ready local endpoints exist"
        : "terminating, and ready endpoints exist";
    }
    if (topology !== undefined && topology.filtered && !chosen.has(endpointKey(e))) {
      return topologyReason(ctx, topology, c, service!);
    }
    return undefined;
  };
}

function topologyReason(
  ctx: Context,
  decision: TopologyDecision,
  c: CandidateEndpoint,
  service: Service,
): string {
  const reason = decision.reason;
  if (reason.startsWith("hints: node")) {
    return `other node by node hints: hint forNodes=[${
      c.hints?.forNodes.join(", ") ?? ""
    }], this node is ${ctx.nodeName}`;
  }
  if (reason.startsWith("hints: zone")) {
    const zone = ctx.nodeLabels[ZONE_LABEL] ?? "";
    return `other zone by hints: hint forZones=[${
      c.hints?.forZones.join(", ") ?? ""
    }], this node is in zone ${zone}`;
  }
  const keys = `[${service.topologyKeys.join(", ")}]`;
  if (decision.endpoints.length === 0) {
    return `not matching topologyKeys ${keys}: no key matches any endpoint`;
  }
  const key = reason.replace(/^topologyKeys: /, "");
  const mine = labelOf(ctx.nodeLabels, ctx.nodeName, "", key);
  const theirs = labelOf(
    ctx.state.nodes.get(c.endpoint.nodeName)?.labels ?? {},
    c.endpoint.nodeName,
    c.endpoint.zone,
    key,
  );
  return `not matching topologyKeys ${keys}: first matching key ${key}=${mine}, endpoint has ${
    theirs ?? "none"
  }`;
}

function labelOf(
  labels: Readonly<Record<string, string>>,
  nodeName: string,
  zone: string,
  key: string,
): string | undefined {
  const value = labels[key];
  if (value !== undefined) return value;
  if (key === HOSTNAME_LABEL && nodeName !== "") return nodeName;
  if (key === ZONE_LABEL && zone !== "") return zone;
  return undefined;
}

// ---------------------------------------------------------------------------
// Text.

/**
 * Formats an explanation for a terminal.
 *
 * @param e The explanation.
 * @returns Lines of text, ending in a newline.
 */
export function formatExplanation(e: Explanation): string {
  const address = e.family === "IPv6" ? `[${e.ip}]:${e.port}` : `${e.ip}:${e.port}`;
  const lines: string[] = [];
  const via = e.input.includes(e.ip) ? "" : ` (${e.input})`;
  lines.push(
    `${address}/${e.protocol}${via} on node ${e.node}${e.from === "" ? "" : `, from ${e.from}`}`,
  );
  const m = e.match;
  if (m === undefined) {
    lines.push(`  ${e.outcome}`);
    for (const note of e.notes) lines.push(`  note: ${note}`);
    return lines.join("\n") + "\n";
  }
  lines.push(`  service port:     ${m.id} (${m.kind})`);
  const why = m.planReason.startsWith(m.policy.split(" ")[0]!)
    ? m.planReason
    : `${m.policy}, ${m.planReason}`;
  lines.push(`  traffic:          ${m.traffic} (${why})`);
  lines.push(`  endpoints:        ${m.eligibleCount} of ${m.endpoints.length} eligible`);
  for (const ep of m.endpoints) {
    const where = [ep.nodeName || "no node", ep.zone].filter((s) => s !== "").join(" ");
    const target = ep.port === 0 ? ep.ip : `${ep.ip}:${ep.port}`;
    lines.push(
      `    ${ep.eligible ? "+" : "-"} ${target.padEnd(22)} ${where.padEnd(16)} ${ep.reason}`,
    );
  }
  lines.push(`  session affinity: ${m.affinity.text}`);
  lines.push(`  masquerade:       ${m.masquerade.answer}: ${m.masquerade.reason}`);
  lines.push(`  source ranges:    ${m.sourceRanges.text}`);
  if (m.healthCheckNodePort > 0) {
    lines.push(`  health check:     node port ${m.healthCheckNodePort}`);
  }
  lines.push(`  result:           ${e.outcome}`);
  for (const note of e.notes) lines.push(`  note: ${note}`);
  return lines.join("\n") + "\n";
}

// ---------------------------------------------------------------------------
// The command.

/** Options for {@linkcode runExplain}. */
export interface RunExplainOptions {
  /** The parsed command line of `kproxy explain`. */
  commandLine: Pick<CommandLine, "args" | "explain">;
  /** Where the answer and errors go. */
  io: { stdout(text: string): void; stderr(text: string): void };
  /** The cluster state, once the source listed every object. */
  state: ClusterState;
  /** The planner options of this node. */
  plannerOptions: PlannerOptions;
}

/**
 * Runs `kproxy explain`: plans the node, explains DEST and prints the answer.
 *
 * @param options The command line, output, state and planner options.
 * @returns The exit code: 0, or 2 when DEST, `--from` or `--node` is wrong.
 */
export function runExplain(options: RunExplainOptions): number {
  const { commandLine, io, state, plannerOptions } = options;
  try {
    const plans = planNode({ state, options: plannerOptions });
    const explanation = explain({
      state,
      plans,
      options: plannerOptions,
      destination: commandLine.args[0] ?? "",
      from: commandLine.explain?.from,
      node: commandLine.explain?.node,
    });
    io.stdout(formatExplanation(explanation));
    return 0;
  } catch (error) {
    if (error instanceof TypeError || error instanceof RangeError) {
      io.stderr(`kproxy: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
}
