/**
 * The synthetic Plan the benchmarks render and load: `count` ClusterIP
 * services (port 80/TCP → 8080) in namespace `bench`, each with `perService`
 * ready endpoints, placed on nodes as `cluster.ts` places them (the same
 * services it serves as API objects), and the row every sync measurement of
 * it fills.
 *
 * @module
 */

import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { endpointNode } from "./cluster.ts";

function endpoint(address: number, nodeName: string): PlanEndpoint {
  return {
    ip: `10.${128 + (address >> 16)}.${(address >> 8) & 255}.${address & 255}`,
    port: 8080,
    nodeName,
    zone: "",
    isLocal: nodeName === "node-a",
    ready: true,
    serving: true,
    terminating: false,
  };
}

function service(index: number, endpoints: PlanEndpoint[], affinity: boolean): ServicePortPlan {
  const name = `svc-${String(index).padStart(6, "0")}`;
  const traffic = { endpoints, whenEmpty: "reject" as const, reason: "bench" };
  return {
    id: `bench/${name}:http/TCP`,
    namespace: "bench",
    name,
    portName: "http",
    protocol: "TCP",
    port: 80,
    clusterIPs: [`10.${96 + (index >> 16)}.${(index >> 8) & 255}.${index & 255}`],
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    sourceRanges: [],
    allowFromLoadBalancerIPs: false,
    healthCheckNodePort: 0,
    affinityTimeoutSeconds: affinity ? 10800 : 0,
    internal: traffic,
    external: traffic,
    externalLocal: false,
    localReadyEndpoints: 0,
    servingEndpoints: endpoints,
  };
}

/**
 * A plan of `count` ClusterIP services with `perService` remote endpoints;
 * every `affinityEvery`-th service has session affinity; service `shift` has
 * its first endpoint replaced (for the one-change sync).
 */
export function benchPlan(
  count: number,
  perService: number,
  options: { shift?: number; affinityEvery?: number; counters?: boolean } = {},
): Plan {
  const services: ServicePortPlan[] = [];
  for (let i = 0; i < count; i++) {
    const endpoints: PlanEndpoint[] = [];
    for (let j = 0; j < perService; j++) {
      const address = i * perService + j + (i === options.shift && j === 0 ? 1 << 22 : 0);
      endpoints.push(endpoint(address, endpointNode(i, j, perService)));
    }
    endpoints.sort((a, b) => a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0);
    const every = options.affinityEvery ?? 0;
    const port = service(i, endpoints, every > 0 && i % every === 0);
    // The counters the planner gives a ClusterIP port (lib/core/planner.ts).
    if (options.counters === true) port.counters = ["connections", "no-endpoints"];
    services.push(port);
  }
  return {
    family: "IPv4",
    nodeName: "node-a",
    nodePortAddresses: ["192.168.0.10"],
    serviceCIDRs: ["10.96.0.0/12"],
    localTraffic: { mode: "ClusterCIDR", cidrs: ["10.244.0.0/16"] },
    clusterIPMasquerade: "non-local",
    services,
    ...(options.counters === true ? { serviceCounters: true } : {}),
  };
}

/**
 * `plan` with the first endpoint of each service at `indexes` moved to a
 * fresh address of `generation` (≥ 1), as a storm of EndpointSlice updates
 * leaves it; the other service entries are the same objects.
 */
export function moveEndpoints(plan: Plan, indexes: Iterable<number>, generation: number): Plan {
  const services = [...plan.services];
  for (const index of indexes) {
    const service = services[index]!;
    const address = (1 << 22) + ((generation - 1) << 19) + index;
    const [first, ...rest] = service.internal.endpoints;
    const moved = endpoint(address, first!.nodeName);
    const endpoints = [moved, ...rest].sort((a, b) => a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0);
    const traffic = { ...service.internal, endpoints };
    services[index] = { ...service, internal: traffic, external: traffic };
  }
  return { ...plan, services };
}

/** One sync measurement of a backend variant at one size. */
export interface SyncBenchRow {
  backend: string;
  variant: string;
  services: number;
  endpointsPerService: number;
  /** Lines (nft) or rules (iptables) of the full input. */
  rules: number;
  /** Rendering the full script, in the process. */
  renderMs: number;
  /** First sync, through the backend. */
  fullMs: number;
  /** Sync after one endpoint of one service changed; NaN when not measured. */
  partialMs: number;
}
