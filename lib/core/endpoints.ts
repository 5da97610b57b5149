/**
 * Endpoints of one service port: merging a service's EndpointSlices, then
 * categorising the result into what internal and external traffic may use,
 * after the way upstream `CategorizeEndpoints` (pkg/proxy/topology.go) does it.
 *
 * Pure functions.
 *
 * @module
 */

import type { EndpointSlice, IpFamily, Protocol, Service } from "./model.ts";
import type { PlanEndpoint, TrafficPlan } from "./plan.ts";
import {
  type CandidateEndpoint,
  selectTopologyEndpoints,
  type TopologyInput,
  type Usability,
} from "./topology.ts";

/** Input of {@linkcode mergeSliceEndpoints}. */
export interface MergeSlicesInput {
  slices: readonly EndpointSlice[];
  family: IpFamily;
  /** The service port's name; slice ports are matched by name and protocol. */
  portName: string;
  protocol: Protocol;
  /** This node's name, to mark local endpoints. */
  nodeName: string;
}

/**
 * Merges the endpoints of all slices of one family for one service port.
 *
 * The endpoint port comes from the slice port whose name and protocol equal the
 * service port's, so a named targetPort is resolved per slice. Slices without
 * such a port contribute nothing. The same `ip:port` in two slices appears once,
 * the ready copy preferred. The result is sorted by IP, then port.
 *
 * @param input The slices and the service port to match.
 * @returns The merged endpoints with their hints.
 */
export function mergeSliceEndpoints(input: MergeSlicesInput): CandidateEndpoint[] {
  const candidates: CandidateEndpoint[] = [];
  const keys: IpSortKey[] = [];
  for (const slice of input.slices) {
    if (slice.family !== input.family) continue;
    const slicePort = slice.ports.find((p) =>
      p.name === input.portName && p.protocol === input.protocol
    );
    if (slicePort === undefined || slicePort.port <= 0) continue;
    for (const sliceEndpoint of slice.endpoints) {
      const endpoint: PlanEndpoint = {
        ip: sliceEndpoint.ip,
        port: slicePort.port,
        nodeName: sliceEndpoint.nodeName,
        zone: sliceEndpoint.zone,
        isLocal: sliceEndpoint.nodeName !== "" && sliceEndpoint.nodeName === input.nodeName,
        ready: sliceEndpoint.ready,
        serving: sliceEndpoint.serving,
        terminating: sliceEndpoint.terminating,
      };
      candidates.push(
        sliceEndpoint.hints === undefined ? { endpoint } : { endpoint, hints: sliceEndpoint.hints },
      );
      keys.push(ipSortKey(sliceEndpoint.ip));
    }
  }
  // A stable sort by address keeps copies of one ip:port adjacent, in slice
  // order: the first ready copy, else the first copy, is kept.
  const order: number[] = [];
  for (let i = 0; i < candidates.length; i++) order.push(i);
  order.sort((a, b) =>
    compareKeys(keys[a]!, keys[b]!) ||
    candidates[a]!.endpoint.port - candidates[b]!.endpoint.port
  );
  const merged: CandidateEndpoint[] = [];
  for (let i = 0; i < order.length;) {
    const first = candidates[order[i]!]!;
    let kept = first;
    let next = i + 1;
    for (; next < order.length; next++) {
      const copy = candidates[order[next]!]!;
      if (copy.endpoint.ip !== first.endpoint.ip || copy.endpoint.port !== first.endpoint.port) {
        break;
      }
      if (!kept.endpoint.ready && copy.endpoint.ready) kept = copy;
    }
    merged.push(kept);
    i = next;
  }
  return merged;
}

/** IPv4 sorts as a number, before IPv6, which sorts as its zero-padded full form. */
type IpSortKey = number | string;

function compareKeys(a: IpSortKey, b: IpSortKey): number {
  if (typeof a !== typeof b) return typeof a === "number" ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

function ipSortKey(ip: string): IpSortKey {
  if (!ip.includes(":")) {
    let value = 0;
    let octet = 0;
    for (let i = 0; i < ip.length; i++) {
      const code = ip.charCodeAt(i);
      if (code === 46) {
        value = value * 256 + octet;
        octet = 0;
      } else {
        octet = octet * 10 + code - 48;
      }
    }
    return value * 256 + octet;
  }
  const [head = "", tail] = ip.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const fill = tail === undefined ? [] : Array(Math.max(0, 8 - left.length - right.length)).fill(
    "0",
  );
  return [...left, ...fill, ...right].map((g) => g.toLowerCase().padStart(4, "0")).join(":");
}

/** Input of {@linkcode categorizeEndpoints}. */
export interface CategorizeInput {
  /** All merged endpoints of the service port (any condition). */
  endpoints: readonly CandidateEndpoint[];
  service: Pick<
    Service,
    "internalTrafficPolicy" | "topologyKeys" | "trafficDistribution" | "topologyMode"
  >;
  /** externalTrafficPolicy Local applies (the service has external addresses). */
  externalLocal: boolean;
  /** This node's topology, for {@linkcode selectTopologyEndpoints}. */
  topology: Pick<TopologyInput, "nodeName" | "nodeLabels" | "featureGates">;
}

/** Endpoints of one service port, by class of traffic. */
export interface CategorizedEndpoints {
  internal: TrafficPlan;
  external: TrafficPlan;
  /** Ready endpoints on this node (health-check node port). */
  localReadyEndpoints: number;
  /** Every serving endpoint, whatever policy and topology chose (conntrack keeps their flows). */
  serving: PlanEndpoint[];
}

/**
 * Decides the endpoints for traffic to the cluster IP (`internal`) and to the
 * node ports, external IPs and load-balancer IPs (`external`).
 *
 * Usable endpoints are the ready ones; when none is ready anywhere, the
 * serving-terminating ones. Under a `Local` policy the same fallback is computed
 * among local endpoints only. Topology applies to `Cluster` policies only.
 * With no usable endpoint anywhere both classes reject; with some usable
 * endpoint but none eligible here they drop.
 *
 * @param input The merged endpoints, policies and this node's topology.
 * @returns The internal and external traffic plans.
 */
export function categorizeEndpoints(input: CategorizeInput): CategorizedEndpoints {
  const ready: CandidateEndpoint[] = [];
  const servingTerminating: CandidateEndpoint[] = [];
  const serving: PlanEndpoint[] = [];
  let localReadyEndpoints = 0;
  for (const candidate of input.endpoints) {
    const ep = candidate.endpoint;
    if (ep.serving) serving.push(ep);
    if (ep.ready) {
      ready.push(candidate);
      if (ep.isLocal) localReadyEndpoints++;
    } else if (ep.serving && ep.terminating) {
      servingTerminating.push(candidate);
    }
  }
  if (ready.length === 0 && servingTerminating.length === 0) {
    const reason = input.endpoints.length === 0
      ? "no endpoints: reject"
      : "no ready or serving endpoints: reject";
    const none: TrafficPlan = { endpoints: [], whenEmpty: "reject", reason };
    return { internal: none, external: { ...none }, localReadyEndpoints: 0, serving };
  }

  const internalLocal = input.service.internalTrafficPolicy === "Local";
  let cluster: TrafficPlan | undefined;
  let local: { endpoints: PlanEndpoint[]; detail: string } | undefined;
  const clusterPlan = (): TrafficPlan => {
    cluster ??= clusterTraffic(input, ready, servingTerminating);
    return cluster;
  };
  const localPlan = () => {
    local ??= localTraffic(ready, servingTerminating);
    return local;
  };
  const internal = internalLocal
    ? policyLocal("internalTrafficPolicy", localPlan())
    : clusterPlan();
  const external = input.externalLocal
    ? policyLocal("externalTrafficPolicy", localPlan())
    : clusterPlan();
  return { internal, external, localReadyEndpoints, serving };
}

function clusterTraffic(
  input: CategorizeInput,
  ready: CandidateEndpoint[],
  servingTerminating: CandidateEndpoint[],
): TrafficPlan {
  const usability: Usability = ready.length > 0 ? "ready" : "serving-terminating";
  const decision = selectTopologyEndpoints({
    ...input.topology,
    endpoints: usability === "ready" ? ready : servingTerminating,
    usability,
    service: input.service,
  });
  const base = usability === "ready" ? "ready endpoints" : "terminating fallback";
  const endpoints = decision.endpoints.map((c) => c.endpoint);
  let reason = decision.reason === "" ? base : `${base}, ${decision.reason}`;
  if (endpoints.length === 0) reason += ": drop";
  return { endpoints, whenEmpty: "drop", reason };
}

function localTraffic(
  ready: CandidateEndpoint[],
  servingTerminating: CandidateEndpoint[],
): { endpoints: PlanEndpoint[]; detail: string } {
  const localReady = ready.filter((c) => c.endpoint.isLocal).map((c) => c.endpoint);
  if (localReady.length > 0) {
    return { endpoints: localReady, detail: countLocal(localReady.length, "") };
  }
  const localTerminating = servingTerminating.filter((c) => c.endpoint.isLocal).map((c) =>
    c.endpoint
  );
  if (localTerminating.length > 0) {
    return {
      endpoints: localTerminating,
      detail: `terminating fallback, ${countLocal(localTerminating.length, "terminating ")}`,
    };
  }
  return { endpoints: [], detail: "no local endpoints: drop" };
}

function countLocal(n: number, kind: string): string {
  return `${n} ${kind}local endpoint${n === 1 ? "" : "s"}`;
}

function policyLocal(
  field: string,
  local: { endpoints: PlanEndpoint[]; detail: string },
): TrafficPlan {
  return {
    endpoints: [...local.endpoints],
    whenEmpty: "drop",
    reason: `${field} Local: ${local.detail}`,
  };
}
