/**
 * Topology-aware endpoint selection for traffic under a `Cluster` policy:
 * EndpointSlice hints (topology-aware routing, KEP-4444 `trafficDistribution`)
 * and the alpha `spec.topologyKeys` (Service Topology).
 *
 * Pure: the caller hands in the usable endpoints of one service port and this
 * node's topology, and gets back the subset to use and why. Traffic policies
 * (`Local`) are applied by the caller and win over everything here.
 *
 * @module
 */

import { getLogger } from "./logger.ts";
import type { EndpointHints, Service } from "./model.ts";
import { HOSTNAME_LABEL, ZONE_LABEL } from "./model.ts";
import type { PlanEndpoint } from "./plan.ts";

const logger = getLogger(["kproxy", "topology"]);

/** The `topologyKeys` entry that matches any topology. */
const TOPOLOGY_KEY_ANY = "*";

/** Feature gate enabling `spec.topologyKeys` (seed 002). */
export const SERVICE_TOPOLOGY_GATE = "ServiceTopology";
/** Feature gate enabling `hints.forNodes` (KEP-4444 PreferSameNode). */
const PREFER_SAME_TRAFFIC_DISTRIBUTION_GATE = "PreferSameTrafficDistribution";

/** Defaults of the gates read here, as in current upstream releases. */
const GATE_DEFAULTS: Readonly<Record<string, boolean>> = {
  [SERVICE_TOPOLOGY_GATE]: false,
  [PREFER_SAME_TRAFFIC_DISTRIBUTION_GATE]: true,
};

/** An endpoint of one service port together with the hints its slice carried. */
export interface CandidateEndpoint {
  endpoint: PlanEndpoint;
  /** undefined when the endpoint has no hints at all. */
  hints?: EndpointHints;
}

/** Which endpoints the caller considers usable (upstream `CategorizeEndpoints`). */
export type Usability = "ready" | "serving-terminating";

/** Input of {@linkcode selectTopologyEndpoints}. */
export interface TopologyInput {
  /** The usable endpoints of one service port. */
  endpoints: readonly CandidateEndpoint[];
  /** Whether `endpoints` are the ready ones or the serving-terminating fallback;
   * hints are ignored for the fallback, as upstream does. */
  usability: Usability;
  service: Pick<Service, "topologyKeys" | "trafficDistribution" | "topologyMode">;
  /** This node's name. */
  nodeName: string;
  /** This node's labels; empty when the Node object is unknown. */
  nodeLabels: Readonly<Record<string, string>>;
  featureGates: Readonly<Record<string, boolean>>;
}

/** The endpoints topology allows from this node, and why. */
export interface TopologyDecision {
  endpoints: CandidateEndpoint[];
  /** Human-readable explanation, for `plan` and `explain` output. */
  reason: string;
  /** True when the endpoints are a strict choice made by topology (a subset, or none). */
  filtered: boolean;
}

/**
 * The topologyKeys every endpoint's value is known for: its EndpointSlice
 * names its node and zone. kproxy watches only its own Node, as kube-proxy,
 * so any other key (the region, a custom label) is known only for endpoints
 * on this node.
 */
export const ENDPOINT_TOPOLOGY_KEYS: readonly string[] = Object.freeze([
  HOSTNAME_LABEL,
  ZONE_LABEL,
]);

/**
 * The keys of a topologyKeys list that only endpoints on this node can match
 * (see {@linkcode ENDPOINT_TOPOLOGY_KEYS}).
 *
 * @param keys A Service's topologyKeys.
 * @returns The keys outside {@linkcode ENDPOINT_TOPOLOGY_KEYS} and `"*"`, in order.
 */
export function unservedTopologyKeys(keys: readonly string[]): string[] {
  return keys.filter((key) => key !== TOPOLOGY_KEY_ANY && !ENDPOINT_TOPOLOGY_KEYS.includes(key));
}

/**
 * Reads a feature gate, falling back to the upstream default for the gates this
 * module knows.
 *
 * @param gates The configured gates.
 * @param name The gate name.
 * @returns Whether the gate is enabled.
 */
export function gateEnabled(gates: Readonly<Record<string, boolean>>, name: string): boolean {
  return gates[name] ?? GATE_DEFAULTS[name] ?? false;
}

/**
 * Whether `spec.topologyKeys` of a service is in effect (gate on and keys set).
 *
 * @param service The service.
 * @param gates The configured feature gates.
 * @returns True when topologyKeys decide endpoint selection.
 */
export function usesTopologyKeys(
  service: Pick<Service, "topologyKeys">,
  gates: Readonly<Record<string, boolean>>,
): boolean {
  return service.topologyKeys.length > 0 && gateEnabled(gates, SERVICE_TOPOLOGY_GATE);
}

/**
 * Chooses, among the usable endpoints of a service port, those that traffic
 * from this node should use under a `Cluster` traffic policy.
 *
 * Order of precedence:
 * 1. `spec.topologyKeys` (gate `ServiceTopology`): the first key for which some
 *    endpoint's node has this node's label value wins; `"*"` means all; no
 *    match means no endpoint. Another node's hostname and zone come from the
 *    EndpointSlice; its other labels are unknown (only this Node is watched),
 *    so other keys match only endpoints on this node.
 * 2. EndpointSlice hints, followed whatever the annotation or
 *    `trafficDistribution` says: when every ready endpoint has a `forNodes` hint
 *    (gate `PreferSameTrafficDistribution`) and one names this node, only those;
 *    otherwise when every ready endpoint has a `forZones` hint and one names this
 *    node's zone, only those; otherwise all.
 *
 * @example Zone hints
 * ```ts ignore
 * const ep = (ip: string, zone: string) => ({
 *   endpoint: { ip, port: 80, nodeName: "n", zone, isLocal: false, ready: true, serving: true, terminating: false },
 *   hints: { forZones: [zone], forNodes: [] },
 * });
 * const d = selectTopologyEndpoints({
 *   endpoints: [ep("10.0.0.1", "a"), ep("10.0.0.2", "b")], usability: "ready",
 *   service: { topologyKeys: [], trafficDistribution: "PreferClose", topologyMode: "" },
 *   nodeName: "n", nodeLabels: { "topology.kubernetes.io/zone": "a" }, featureGates: {},
 * });
 * // d.endpoints holds 10.0.0.1 only
 * ```
 *
 * @param input The usable endpoints and this node's topology.
 * @returns The endpoints to use and the reason.
 */
export function selectTopologyEndpoints(input: TopologyInput): TopologyDecision {
  if (usesTopologyKeys(input.service, input.featureGates)) {
    return selectByTopologyKeys(input);
  }
  if (input.usability !== "ready") {
    return { endpoints: [...input.endpoints], reason: "", filtered: false };
  }
  return selectByHints(input);
}

function selectByTopologyKeys(input: TopologyInput): TopologyDecision {
  const nodeLabels = effectiveLabels(input.nodeName, input.nodeLabels, "");
  for (const key of input.service.topologyKeys) {
    if (key === TOPOLOGY_KEY_ANY) {
      return {
        endpoints: [...input.endpoints],
        reason: `topologyKeys: ${TOPOLOGY_KEY_ANY}`,
        filtered: false,
      };
    }
    const value = nodeLabels[key];
    if (value === undefined || value === "") continue;
    const matched = input.endpoints.filter((candidate) =>
      endpointLabel(candidate.endpoint, key, input.nodeName, nodeLabels) === value
    );
    if (matched.length > 0) {
      return { endpoints: matched, reason: `topologyKeys: ${key}`, filtered: true };
    }
  }
  return {
    endpoints: [],
    reason: `topologyKeys: no endpoint matches [${input.service.topologyKeys.join(", ")}]`,
    filtered: true,
  };
}

/**
 * An endpoint's value for a topology key: this node's label for an endpoint on
 * this node; else what its EndpointSlice says (node name, zone), nothing for
 * any other key.
 */
function endpointLabel(
  endpoint: PlanEndpoint,
  key: string,
  nodeName: string,
  nodeLabels: Readonly<Record<string, string>>,
): string | undefined {
  if (endpoint.nodeName !== "" && endpoint.nodeName === nodeName) return nodeLabels[key];
  return effectiveLabels(endpoint.nodeName, {}, endpoint.zone)[key];
}

/** Node labels, with the host name and zone derived from the node name and the
 * endpoint's zone when the labels do not carry them. */
function effectiveLabels(
  nodeName: string,
  labels: Readonly<Record<string, string>>,
  zone: string,
): Readonly<Record<string, string>> {
  const derived: Record<string, string> = {};
  if (nodeName !== "") derived[HOSTNAME_LABEL] = nodeName;
  if (zone !== "") derived[ZONE_LABEL] = zone;
  return { ...derived, ...labels };
}

const NO_HINTS: readonly string[] = Object.freeze([]);

function selectByHints(input: TopologyInput): TopologyDecision {
  const { endpoints, nodeName } = input;
  const zone = input.nodeLabels[ZONE_LABEL] ?? "";
  let allHaveNodeHints = true;
  let someForNode = false;
  let allHaveZoneHints = true;
  let someForZone = false;
  let anyHints = false;
  for (const { hints } of endpoints) {
    const forNodes = hints?.forNodes ?? NO_HINTS;
    const forZones = hints?.forZones ?? NO_HINTS;
    if (forNodes.length > 0 || forZones.length > 0) anyHints = true;
    if (forNodes.length === 0) allHaveNodeHints = false;
    else if (forNodes.includes(nodeName)) someForNode = true;
    if (forZones.length === 0) allHaveZoneHints = false;
    else if (zone !== "" && forZones.includes(zone)) someForZone = true;
  }
  const source = hintSource(input.service);
  if (gateEnabled(input.featureGates, PREFER_SAME_TRAFFIC_DISTRIBUTION_GATE)) {
    if (allHaveNodeHints && someForNode) {
      return {
        endpoints: endpoints.filter((c) => c.hints?.forNodes.includes(nodeName) ?? false),
        reason: `hints: node ${nodeName}${source}`,
        filtered: true,
      };
    }
  }
  if (allHaveZoneHints && someForZone) {
    return {
      endpoints: endpoints.filter((c) => c.hints?.forZones.includes(zone) ?? false),
      reason: `hints: zone ${zone}${source}`,
      filtered: true,
    };
  }
  if (!anyHints) return { endpoints: [...endpoints], reason: "", filtered: false };
  const why = !allHaveZoneHints
    ? "some endpoints have no zone hint"
    : zone === ""
    ? `node has no ${ZONE_LABEL} label`
    : `no endpoint is hinted for zone ${zone}`;
  logger.debug("Ignoring topology hints: {why}", { why });
  return { endpoints: [...endpoints], reason: `hints ignored: ${why}`, filtered: false };
}

/** Which controller setting the hints most likely came from: the topology-mode
 * annotation takes precedence over trafficDistribution (seed 000). */
function hintSource(service: TopologyInput["service"]): string {
  if (service.topologyMode === "Auto") return " (topology-mode Auto)";
  if (service.trafficDistribution !== "") {
    return ` (trafficDistribution ${service.trafficDistribution})`;
  }
  return "";
}
