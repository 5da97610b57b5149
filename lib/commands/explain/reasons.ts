/**
 * The reasons `kproxy explain` gives for a service port: masquerade, source
 * ranges, what happens without endpoints, and for each endpoint why it is
 * used or not.
 *
 * @module
 */

import { mergeSliceEndpoints } from "../../core/endpoints.ts";
import { cidrContains, isLoopback, parseIP } from "../../core/ip.ts";
import type { EndpointSlice, Service } from "../../core/model.ts";
import { HOSTNAME_LABEL, serviceKey, ZONE_LABEL } from "../../core/model.ts";
import type { Plan, PlanEndpoint, ServicePortPlan, TrafficPlan } from "../../core/plan.ts";
import {
  type CandidateEndpoint,
  gateEnabled,
  selectTopologyEndpoints,
  SERVICE_TOPOLOGY_GATE,
  type TopologyDecision,
  unservedTopologyKeys,
  usesTopologyKeys,
} from "../../core/topology.ts";
import { type ModeDescriptor, modeOf, PROXY_MODES } from "../../../backends/registry.ts";
import type { AddressKind, Answer, Context, EndpointVerdict, ServicePortMatch } from "./types.ts";

// ---------------------------------------------------------------------------
// A service port.

export function explainMatch(
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
  switch (plan.clusterIPMasquerade) {
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
    const fromLoadBalancerIPs = sp.allowFromLoadBalancerIPs
      ? `. They hold a node address, so traffic from the load-balancer IPs themselves is ${byMode()}`
      : "";
    return {
      ranges,
      answer: "depends",
      text: `only from ${ranges.join(", ")}; other sources are dropped${fromLoadBalancerIPs}`,
    };
  }
  const allowedBy = ranges.find((cidr) => cidrContains(cidr, ctx.from));
  if (allowedBy !== undefined) {
    return { ranges, answer: "allowed", text: `${ctx.from} is allowed by ${allowedBy}` };
  }
  if (sp.allowFromLoadBalancerIPs && sp.loadBalancerIPs.includes(ctx.from)) {
    return {
      ranges,
      answer: "depends",
      text: `${ctx.from} is a load-balancer IP of the service, outside loadBalancerSourceRanges ${
        ranges.join(", ")
      }, which hold a node address: ${byMode()}`,
    };
  }
  return {
    ranges,
    answer: "dropped",
    text: `${ctx.from} is outside loadBalancerSourceRanges ${ranges.join(", ")}: dropped`,
  };
}

/** What each mode does with traffic from a load-balancer IP when the Plan's
 * `allowFromLoadBalancerIPs` is set (its registry entry's `sourceRanges`). */
function byMode(): string {
  const modes = (handling: ModeDescriptor["sourceRanges"]) =>
    PROXY_MODES.filter((mode) => modeOf(mode).sourceRanges === handling);
  const named = (list: readonly string[]) =>
    `${list.join(list.length > 2 ? ", " : " and ")} mode${list.length > 1 ? "s" : ""}`;
  const parts = [
    `allowed in ${named(modes("with-load-balancer-ips"))}`,
    `dropped in ${named(modes("ranges-only"))}`,
  ];
  const unenforced = modes("not-enforced");
  if (unenforced.length > 0) parts.push(`${named(unenforced)} does not enforce the ranges`);
  return parts.join("; ");
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

export function outcomeOf(match: ServicePortMatch): string {
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
  const onThisNode = c.endpoint.nodeName === ctx.nodeName;
  const theirs = labelOf(
    onThisNode ? ctx.nodeLabels : {},
    c.endpoint.nodeName,
    c.endpoint.zone,
    key,
  );
  const unknown = !onThisNode && unservedTopologyKeys([key]).length > 0;
  return `not matching topologyKeys ${keys}: first matching key ${key}=${mine}, endpoint has ${
    theirs ?? (unknown ? "unknown (another node's labels other than hostname and zone)" : "none")
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
