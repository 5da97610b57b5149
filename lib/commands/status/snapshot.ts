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
