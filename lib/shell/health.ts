/**
 * Health reporting (upstream pkg/proxy/healthcheck): the proxy's own
 * /healthz and /livez, and one HTTP server per service health-check node port.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import { type Clock, systemClock } from "./clock.ts";
import { ConnectionLimit, type HttpServer, serveHttp } from "./http_server.ts";
import type { ProxyMetrics } from "./metrics.ts";
import type { IpFamily } from "../core/model.ts";

const logger = getLogger(["kproxy", "health"]);

/** What {@linkcode ProxyHealth.status} reports. */
export interface ProxyHealthStatus {
  /** False when an update has been pending longer than the health timeout. */
  healthy: boolean;
  /** True unless this node is being deleted. */
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
 * As upstream, the start counts as the first update.
 */
export class ProxyHealth {
  readonly #healthTimeoutMs: number;
  readonly #families: readonly IpFamily[];
  readonly #clock: Pick<Clock, "now" | "wallNow">;
  /** Monotonic time of the oldest update not applied yet. */
  #oldestPendingAt?: number;
  /** Wall time of the last successful sync. */
  #lastUpdatedAt: number;
  #nodeDeleting = false;

  constructor(options: ProxyHealthOptions) {
    this.#healthTimeoutMs = options.healthTimeoutMs;
    this.#families = options.families ?? ["IPv4", "IPv6"];
    this.#clock = options.clock ?? systemClock;
    this.#lastUpdatedAt = this.#clock.wallNow();
  }

  /** Records that a change is waiting to be applied (keeps the oldest such time). */
  queuedUpdate(): void {
    this.#oldestPendingAt ??= this.#clock.now();
  }

  /** Records a successful sync: nothing is pending any more. */
  updated(): void {
    this.#lastUpdatedAt = this.#clock.wallNow();
    this.#oldestPendingAt = undefined;
  }

  /** Marks this node as being deleted, which fails /healthz (not /livez). */
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
      nodeEligible: !this.#nodeDeleting,
      lastUpdated,
      currentTime: this.#clock.wallNow(),
      families: this.#families.map((family) => ({ family, lastUpdated, healthy })),
    };
  }
}

/** Splits a `host:port` or `[v6]:port` bind address. */
export function parseBindAddress(address: string): { hostname: string; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]*)):(\d{1,5})$/.exec(address);
  const port = Number(match?.[3]);
  if (!match || port > 65535) {
    throw new TypeError(`Cannot parse bind address "${address}": expected host:port`);
  }
  return { hostname: match[1] ?? (match[2] || "0.0.0.0"), port };
}

const JSON_HEADERS = { "content-type": "application/json", "x-content-type-options": "nosniff" };

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

/** Options for {@linkcode startHealthServer}. */
export interface HealthServerOptions extends HealthRequestOptions {
  /** `host:port`; port 0 picks a free port. */
  address: string;
  /** Stops the server. */
  signal?: AbortSignal;
  /** Shared with kproxy's other servers. @default a limit of its own */
  connections?: ConnectionLimit;
}

/**
 * Serves `/healthz` and `/livez` on `address`, within the limits of
 * {@linkcode serveHttp} (the address is reachable from the network).
 *
 * @returns the running server; `server.addr` has the bound port
 */
export function startHealthServer(options: HealthServerOptions): HttpServer {
  const { hostname, port } = parseBindAddress(options.address);
  return serveHttp({
    hostname,
    port,
    signal: options.signal,
    connections: options.connections,
    handler: (request) => handleHealthRequest(request, options),
  });
}

/** What a health-check node port reports for one service. */
export interface ServiceHealthInfo {
  namespace: string;
  name: string;
  /** Ready endpoints of the service on this node. */
  localEndpoints: number;
}

/** Options for {@linkcode ServiceHealthServers}. */
export interface ServiceHealthServersOptions {
  /** Address the servers listen on. @default {"0.0.0.0"} */
  hostname?: string;
  /** When given, a service reports 503 while the proxy itself is unhealthy. */
  health?: ProxyHealth;
  /** Shared with kproxy's other servers. @default one limit for these servers */
  connections?: ConnectionLimit;
}

/**
 * One HTTP server per health-check node port (upstream service_health.go):
 * 200 while the service has local endpoints and the proxy is healthy, else 503.
 * Declarative: {@linkcode ServiceHealthServers.sync} starts and stops servers
 * to match the given services.
 */
export class ServiceHealthServers {
  readonly #hostname: string;
  readonly #health?: ProxyHealth;
  readonly #connections: ConnectionLimit;
  readonly #servers = new Map<number, HttpServer>();
  #services = new Map<number, ServiceHealthInfo>();

  constructor(options: ServiceHealthServersOptions = {}) {
    this.#hostname = options.hostname ?? "0.0.0.0";
    this.#health = options.health;
    this.#connections = options.connections ?? new ConnectionLimit();
  }

  /** Ports with a listening server, sorted. */
  get ports(): number[] {
    return [...this.#servers.keys()].sort((a, b) => a - b);
  }

  /**
   * Makes the set of servers match `services` (health-check node port →
   * service). A port that cannot be bound is logged and tried again next sync.
   */
  async sync(services: ReadonlyMap<number, ServiceHealthInfo>): Promise<void> {
    this.#services = new Map(services);
    const stopping: Promise<void>[] = [];
    for (const [port, server] of this.#servers) {
      if (!services.has(port)) {
        this.#servers.delete(port);
        stopping.push(server.shutdown());
      }
    }
    await Promise.all(stopping);
    for (const [port, info] of services) {
      if (this.#servers.has(port)) continue;
      try {
        this.#servers.set(
          port,
          serveHttp({
            hostname: this.#hostname,
            port,
            connections: this.#connections,
            handler: () => this.#answer(port),
          }),
        );
      } catch (error) {
        logger.error(
          "Cannot serve health check node port {port} of {namespace}/{name}: {error}",
          { port, namespace: info.namespace, name: info.name, error },
        );
      }
    }
  }

  /** Stops every server. */
  async close(): Promise<void> {
    await this.sync(new Map());
  }

  #answer(port: number): Response {
    const info = this.#services.get(port);
    if (!info) return new Response("404 page not found\n", { status: 404 });
    const proxyHealthy = this.#health?.status().healthy ?? true;
    const body = {
      service: { namespace: info.namespace, name: info.name },
      localEndpoints: info.localEndpoints,
      serviceProxyHealthy: proxyHealthy,
    };
    const ok = info.localEndpoints > 0 && proxyHealthy;
    return new Response(JSON.stringify(body), { status: ok ? 200 : 503, headers: JSON_HEADERS });
  }
}
