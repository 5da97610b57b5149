/**
 * The proxy's health (upstream pkg/proxy/healthcheck): when it last synced,
 * whether it is healthy, and the `/healthz` and `/livez` answers built from
 * that. The servers that serve them are in `servers.ts`.
 *
 * @module
 */

import type { Clock } from "../core/clock.ts";
import type { IpFamily } from "../core/model.ts";
import { systemClock } from "./clock.ts";
import type { ProxyMetrics } from "./metrics.ts";

/** What {@linkcode ProxyHealth.status} reports. */
export interface ProxyHealthStatus {
  /** False when an update has been pending longer than the health timeout. */
  healthy: boolean;
  /** False until this node's Node is known (first sync), and while it is being deleted. */
  nodeEligible: boolean;
  /** Wall time (ms since the epoch) of the last successful sync, or of the start before one. */
  lastUpdated: number;
  /** Wall time of the check. */
  currentTime: number;
  /** Each IP family kproxy programs; all of them are synced together, so they agree. */
  families: { family: IpFamily; lastUpdated: number; healthy: boolean }[];
}

/** Options for {@linkcode ProxyHealth}. */
export interface ProxyHealthOptions {
  /** How long a queued update may stay unapplied before the proxy is unhealthy: 2 × syncPeriod. */
  healthTimeoutMs: number;
  /** The families reported in `/healthz`'s `status`. @default {["IPv4", "IPv6"]} */
  families?: readonly IpFamily[];
  /** Monotonic time for the timeout, wall time for the reported times. @default {systemClock} */
  clock?: Pick<Clock, "now" | "wallNow">;
}

/**
 * The queued-versus-updated health model of upstream's proxy_health.go: the
 * proxy is healthy unless a queued update has waited longer than the timeout.
 * As upstream, the start counts as the first update and only a change the
 * source delivered queues one, so a proxy that cannot reach the apiserver yet
 * stays live.
 */
export class ProxyHealth {
  readonly #healthTimeoutMs: number;
  readonly #families: readonly IpFamily[];
  readonly #clock: Pick<Clock, "now" | "wallNow">;
  /** Monotonic time of the oldest update not applied yet. */
  #oldestPendingAt?: number;
  /** Whether a sync took the queued updates ({@linkcode drained}) and has not succeeded yet. */
  #syncing = false;
  /** Monotonic time of the oldest update queued since the running sync took its changes. */
  #queuedSinceDrain?: number;
  /** Wall time of the last successful sync. */
  #lastUpdatedAt: number;
  /** undefined until the first sync looked for this node's Node, as upstream's nil Node. */
  #nodeDeleting?: boolean;

  constructor(options: ProxyHealthOptions) {
    this.#healthTimeoutMs = options.healthTimeoutMs;
    this.#families = options.families ?? ["IPv4", "IPv6"];
    this.#clock = options.clock ?? systemClock;
    this.#lastUpdatedAt = this.#clock.wallNow();
  }

  /** Records that a change is waiting to be applied (keeps the oldest such time). */
  queuedUpdate(): void {
    const now = this.#clock.now();
    this.#oldestPendingAt ??= now;
    if (this.#syncing) this.#queuedSinceDrain ??= now;
  }

  /** Records that a sync took every update queued so far. */
  drained(): void {
    this.#syncing = true;
    this.#queuedSinceDrain = undefined;
  }

  /**
   * Records a successful sync: what it took is applied; an update queued
   * while it ran (after {@linkcode drained}) is still pending, so a sync that
   * succeeds as a change arrives cannot hide the failures after it.
   */
  updated(): void {
    this.#lastUpdatedAt = this.#clock.wallNow();
    this.#oldestPendingAt = this.#syncing ? this.#queuedSinceDrain : undefined;
    this.#syncing = false;
    this.#queuedSinceDrain = undefined;
  }

  /** Records whether this node is being deleted, which fails /healthz (not /livez). Until the
   * first call the node counts as not eligible, as upstream's before it has the Node. */
  setNodeDeleting(deleting: boolean): void {
    this.#nodeDeleting = deleting;
  }

  /** Health now. */
  status(): ProxyHealthStatus {
    const healthy = this.#oldestPendingAt === undefined ||
      this.#clock.now() - this.#oldestPendingAt < this.#healthTimeoutMs;
    const lastUpdated = this.#lastUpdatedAt;
    return {
      healthy,
      nodeEligible: this.#nodeDeleting === false,
      lastUpdated,
      currentTime: this.#clock.wallNow(),
      families: this.#families.map((family) => ({ family, lastUpdated, healthy })),
    };
  }
}

/** The headers of kube-proxy's JSON health answers. */
export const JSON_HEADERS = {
  "content-type": "application/json",
  "x-content-type-options": "nosniff",
};

/** Options for {@linkcode handleHealthRequest}. */
export interface HealthRequestOptions {
  health: ProxyHealth;
  metrics?: ProxyMetrics;
}

/**
 * Formats wall time as Go's `time.Time` marshals to JSON: RFC 3339 in UTC,
 * the fraction without trailing zeros (`2026-01-01T00:00:01.5Z`).
 */
export function formatGoTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.?0*Z$/, "Z");
}

/**
 * The body of `/healthz` (with `nodeEligible`) and `/livez` (without), as
 * kube-proxy 1.36 writes it: while healthy, `lastUpdated` is the current time.
 */
function healthBody(status: ProxyHealthStatus, options: { nodeEligible: boolean }): string {
  const statusByFamily: Record<string, { lastUpdated: string; healthy: boolean }> = {};
  for (const family of [...status.families].sort((a, b) => a.family < b.family ? -1 : 1)) {
    statusByFamily[family.family] = {
      lastUpdated: formatGoTime(family.lastUpdated),
      healthy: family.healthy,
    };
  }
  return JSON.stringify({
    lastUpdated: formatGoTime(status.healthy ? status.currentTime : status.lastUpdated),
    currentTime: formatGoTime(status.currentTime),
    ...(options.nodeEligible ? { nodeEligible: status.nodeEligible } : {}),
    healthy: status.healthy,
    status: statusByFamily,
  });
}

/**
 * Answers `/healthz` (503 when unhealthy or the node is being deleted) and
 * `/livez` (503 only when unhealthy) with kube-proxy's body and headers,
 * counting the codes in the metrics.
 */
export function handleHealthRequest(request: Request, options: HealthRequestOptions): Response {
  const { pathname } = new URL(request.url);
  if (pathname !== "/healthz" && pathname !== "/livez") {
    return new Response("404 page not found\n", { status: 404 });
  }
  const status = options.health.status();
  const healthz = pathname === "/healthz";
  const ok = status.healthy && (!healthz || status.nodeEligible);
  const counter = healthz ? options.metrics?.proxyHealthzTotal : options.metrics?.proxyLivezTotal;
  counter?.inc({ code: ok ? "200" : "503" });
  return new Response(healthBody(status, { nodeEligible: healthz }), {
    status: ok ? 200 : 503,
    headers: JSON_HEADERS,
  });
}
