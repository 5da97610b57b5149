/**
 * What the status page (`/statusz`) shows: a snapshot of the running proxy
 * taken per request, and the counts of what each family's plan programs.
 *
 * @module
 */

import type { NodePlans, Plan } from "../../core/plan.ts";
import type { SyncRecord } from "../../shell/sync_history.ts";

/** What one IP family of the node programs. */
export interface FamilyCounts {
  /** Distinct services. */
  services: number;
  servicePorts: number;
  /** Distinct `ip:port` endpoints in use (internal or external traffic). */
  endpoints: number;
  /** Of `endpoints`, those on this node. */
  localEndpoints: number;
  /** Service ports with no eligible endpoint for cluster IP traffic. */
  withoutEndpoints: number;
  /** The first {@linkcode MAX_LISTED_IDS} of their ids. */
  withoutEndpointsIds: string[];
}

/** How many ids of service ports without endpoints a snapshot lists per family. */
const MAX_LISTED_IDS = 20;

/** Everything the status page shows; built by the shell on each request. */
export interface StatusSnapshot {
  version: string;
  mode: string;
  node: string;
  /** ms since the epoch. */
  startedAt: number;
  /** ms since the epoch, when the snapshot was taken. */
  now: number;
  /** Time since start, from the monotonic clock (wall time can step). */
  uptimeMs: number;
  healthy: boolean;
  /** Per family; undefined before the first successful sync. */
  families?: { ipv4: FamilyCounts; ipv6: FamilyCounts };
  /** The last syncs, oldest first (see {@linkcode SyncHistory.entries}). */
  syncs: SyncRecord[];
  totalSyncs: number;
  failedSyncs: number;
  lastFailure?: SyncRecord;
  /** Full resyncs forced because the kernel's rules drifted. */
  driftRepairs: number;
  /**
   * Per-Service-port traffic over the last minute (`--service-counters`),
   * from the readings /metrics and /statusz took; undefined when counting is off.
   */
  traffic?: TrafficSummary;
}

/** How many service ports each traffic list of the status page shows. */
export const TOP_TRAFFIC = 10;

/** The busiest service ports and the top refusers of the last minute. */
export interface TrafficSummary {
  /** Seconds the rates are measured over (0 before two readings). */
  windowSeconds: number;
  /** Highest connection rate first, at most {@linkcode TOP_TRAFFIC}. */
  busiest: { key: string; connectionsPerSecond: number }[];
  /** Most refused packets first, only ports that refused any, at most {@linkcode TOP_TRAFFIC}. */
  refusers: { key: string; refusedPackets: number }[];
}

/** Picks the busiest ports and the top refusers from per-port traffic. */
export function summarizeTraffic(
  traffic: readonly { key: string; connectionsPerSecond: number; refusedPackets: number }[],
  windowSeconds: number,
): TrafficSummary {
  const busiest = [...traffic]
    .filter((t) => t.connectionsPerSecond > 0)
    .sort((a, b) => b.connectionsPerSecond - a.connectionsPerSecond || (a.key < b.key ? -1 : 1))
    .slice(0, TOP_TRAFFIC)
    .map(({ key, connectionsPerSecond }) => ({ key, connectionsPerSecond }));
  const refusers = [...traffic]
    .filter((t) => t.refusedPackets > 0)
    .sort((a, b) => b.refusedPackets - a.refusedPackets || (a.key < b.key ? -1 : 1))
    .slice(0, TOP_TRAFFIC)
    .map(({ key, refusedPackets }) => ({ key, refusedPackets }));
  return { windowSeconds, busiest, refusers };
}

/**
 * Counts what a family's plan programs.
 *
 * @param plan The plan of one family.
 * @returns The counts.
 */
export function countPlan(plan: Plan): FamilyCounts {
  const services = new Set<string>();
  const endpoints = new Set<string>();
  const local = new Set<string>();
  let withoutEndpoints = 0;
  const withoutEndpointsIds: string[] = [];
  for (const sp of plan.services) {
    services.add(`${sp.namespace}/${sp.name}`);
    for (const ep of [...sp.internal.endpoints, ...sp.external.endpoints]) {
      const key = `${ep.ip}|${ep.port}`;
      endpoints.add(key);
      if (ep.isLocal) local.add(key);
    }
    if (sp.internal.endpoints.length === 0) {
      withoutEndpoints++;
      if (withoutEndpointsIds.length < MAX_LISTED_IDS) withoutEndpointsIds.push(sp.id);
    }
  }
  return {
    services: services.size,
    servicePorts: plan.services.length,
    endpoints: endpoints.size,
    localEndpoints: local.size,
    withoutEndpoints,
    withoutEndpointsIds,
  };
}

/**
 * Counts both families of the last applied plans.
 *
 * @param plans The plans, or undefined before the first sync.
 * @returns The counts, or undefined.
 */
export function countPlans(
  plans: NodePlans | undefined,
): { ipv4: FamilyCounts; ipv6: FamilyCounts } | undefined {
  return plans === undefined
    ? undefined
    : { ipv4: countPlan(plans.ipv4), ipv6: countPlan(plans.ipv6) };
}
