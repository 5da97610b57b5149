/**
 * kproxy's HTTP servers: `/healthz` and `/livez` on the health address,
 * `/metrics` (and `/healthz`, `/livez`, `/statusz`) on the metrics address,
 * and one server per health-check node port. All are bounded
 * (`http_server.ts`): the addresses are reachable from the network.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import {
  handleHealthRequest,
  type HealthRequestOptions,
  JSON_HEADERS,
  type ProxyHealth,
} from "./health.ts";
import { type HttpServer, serveHttp } from "./http_server.ts";
import { ConnectionLimit } from "./connection_limit.ts";
import type { ProxyMetrics, Registry } from "./metrics.ts";

const logger = getLogger(["kproxy", "health"]);

/** Splits a `host:port` or `[v6]:port` bind address. */
export function parseBindAddress(address: string): { hostname: string; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\[\]]*)):(\d{1,5})$/.exec(address);
  const port = Number(match?.[3]);
  if (!match || port > 65535) {
    throw new TypeError(`Cannot parse bind address "${address}": expected host:port`);
  }
  return { hostname: match[1] ?? (match[2] || "0.0.0.0"), port };
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
    serves: "health checks (--healthz-bind-address)",
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
            serves: `the health check node port of ${info.namespace}/${info.name}`,
            connections: this.#connections,
            handler: () => this.#answer(port),
          }),
        );
      } catch (error) {
        logger.error("{error}; trying again at the next sync", {
          port,
          namespace: info.namespace,
          name: info.name,
          error,
        });
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

/** Options for {@linkcode startMetricsServer}. */
export interface MetricsServerOptions {
  /** `host:port` (`[v6]:port` for IPv6); port 0 picks a free port. */
  address: string;
  registry: Registry;
  /** Metric families kproxy renders itself, served after the registry's. */
  families?: readonly (() => Promise<string>)[];
  /** When given, /healthz and /livez are served too, as upstream's metrics server does. */
  health?: ProxyHealth;
  /** Counts /healthz and /livez answers. */
  metrics?: ProxyMetrics;
  /** Stops the server. */
  signal?: AbortSignal;
  /** More read-only pages by path, e.g. `/statusz`. */
  routes?: Record<string, (request: Request) => Response>;
  /** Shared with kproxy's other servers. @default a limit of its own */
  connections?: ConnectionLimit;
}

/** The registry's text, then each family's, a blank line between them as prom-client writes. */
async function exposition(
  registry: Registry,
  families: readonly (() => Promise<string>)[],
): Promise<string> {
  const texts = await Promise.all([registry.metrics(), ...families.map((family) => family())]);
  return texts.join("\n");
}

/**
 * Serves `/metrics` (and `/healthz`, `/livez` when `health` is given) within
 * the limits of {@linkcode serveHttp}.
 *
 * @returns the running server; `server.addr` has the bound port
 */
export function startMetricsServer(options: MetricsServerOptions): HttpServer {
  const { hostname, port } = parseBindAddress(options.address);
  const { signal, connections } = options;
  return serveHttp({
    hostname,
    port,
    serves: "metrics (--metrics-bind-address)",
    signal,
    connections,
    handler: (request) => {
      const { pathname } = new URL(request.url);
      if (pathname === "/metrics") {
        return exposition(options.registry, options.families ?? []).then((text) =>
          new Response(text, { headers: { "content-type": options.registry.contentType } })
        );
      }
      if (options.health && (pathname === "/healthz" || pathname === "/livez")) {
        return handleHealthRequest(request, { health: options.health, metrics: options.metrics });
      }
      const extra = options.routes?.[pathname];
      if (extra) return extra(request);
      return new Response("404 page not found\n", { status: 404 });
    },
  });
}
