/**
 * The JSON form of the status page, for tools.
 *
 * @module
 */

import type { SyncRecord } from "../../shell/sync_history.ts";
import type { StatusSnapshot } from "./snapshot.ts";

/** The JSON form of a snapshot: times as ISO strings, plus uptime. */
export function statusJson(s: StatusSnapshot): Record<string, unknown> {
  return {
    version: s.version,
    mode: s.mode,
    node: s.node,
    healthy: s.healthy,
    startedAt: isoTime(s.startedAt),
    now: isoTime(s.now),
    uptimeSeconds: Math.max(0, Math.floor(s.uptimeMs / 1000)),
    families: s.families ?? null,
    totalSyncs: s.totalSyncs,
    failedSyncs: s.failedSyncs,
    driftRepairs: s.driftRepairs,
    ...(s.traffic === undefined ? {} : { traffic: s.traffic }),
    lastFailure: s.lastFailure === undefined ? null : syncJson(s.lastFailure),
    syncs: s.syncs.map(syncJson),
  };
}

function syncJson(sync: SyncRecord): Record<string, unknown> {
  return {
    at: isoTime(sync.at),
    full: sync.full,
    durationMs: sync.durationMs,
    changed: sync.changed,
    ok: sync.ok,
    ...(sync.error === undefined ? {} : { error: sync.error }),
  };
}

/** A wall time as ISO text; "" when it is not a finite time. */
export function isoTime(ms: number): string {
  return Number.isFinite(ms) ? new Date(ms).toISOString() : "";
}
