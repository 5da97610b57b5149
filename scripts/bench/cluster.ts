/**
 * A synthetic cluster for the benchmarks, as raw API objects: `services`
 * ClusterIP services (port 80/TCP → 8080) in namespace `bench`, each with one
 * EndpointSlice of `endpointsPerService` ready endpoints, plus the Node
 * objects. One endpoint in {@linkcode LOCAL_ENDPOINT_EVERY} runs on node-a, the
 * node under test (300 at 30k × 10, a full node's worth of pods); the rest on
 * node-b. Endpoint addresses come from a generation number, so a
 * change ("move endpoint 0 of service i to generation g") is reproducible and
 * checkable.
 *
 * @module
 */

import type { ApiObject, FakeApiServer } from "../testbed/fake_apiserver.ts";

/** Size of a synthetic cluster. */
export interface ClusterSize {
  services: number;
  endpointsPerService: number;
}

/** The name of service `index` (and of its slice, with `-1`). */
export function serviceName(index: number): string {
  return `svc-${String(index).padStart(6, "0")}`;
}

/** The ClusterIP of service `index` (inside 10.96.0.0/12). */
export function clusterIP(index: number): string {
  return `10.${96 + (index >> 16)}.${(index >> 8) & 255}.${index & 255}`;
}

/**
 * Address of endpoint `j` of service `index`; generation 0 is the initial
 * state, later generations give endpoint 0 fresh addresses (10.128.0.0/9).
 */
export function endpointIP(
  index: number,
  j: number,
  perService: number,
  generation = 0,
): string {
  const n = j === 0 && generation > 0
    ? (1 << 22) + ((generation - 1) << 19) + index
    : index * perService + j;
  return `10.${128 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
}

/** One endpoint position in this many is on node-a, the node under test. */
export const LOCAL_ENDPOINT_EVERY = 1000;

/** The node of endpoint `j` of service `index`. */
export function endpointNode(index: number, j: number, perService: number): string {
  return (index * perService + j) % LOCAL_ENDPOINT_EVERY === 0 ? "node-a" : "node-b";
}

/** The Service object of `index`. */
export function serviceObject(index: number): ApiObject {
  return {
    metadata: { namespace: "bench", name: serviceName(index) },
    spec: {
      type: "ClusterIP",
      clusterIP: clusterIP(index),
      clusterIPs: [clusterIP(index)],
      ipFamilies: ["IPv4"],
      ports: [{ name: "http", port: 80, targetPort: 8080, protocol: "TCP" }],
    },
  };
}

/** The EndpointSlice of service `index`, endpoint 0 at `generation`. */
export function sliceObject(
  index: number,
  perService: number,
  generation = 0,
): ApiObject {
  const endpoints = [];
  for (let j = 0; j < perService; j++) {
    endpoints.push({
      addresses: [endpointIP(index, j, perService, generation)],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: endpointNode(index, j, perService),
    });
  }
  return {
    metadata: {
      namespace: "bench",
      name: `${serviceName(index)}-1`,
      labels: { "kubernetes.io/service-name": serviceName(index) },
    },
    addressType: "IPv4",
    ports: [{ name: "http", port: 8080, protocol: "TCP" }],
    endpoints,
  };
}

/** Loads the whole cluster into a fake apiserver. */
export function fillCluster(server: FakeApiServer, size: ClusterSize): void {
  server.upsert("nodes", {
    metadata: { name: "node-a", labels: { "kubernetes.io/hostname": "node-a" } },
    spec: { podCIDRs: ["10.244.1.0/24"] },
    status: { addresses: [{ type: "InternalIP", address: "10.201.0.1" }] },
  });
  server.upsert("nodes", {
    metadata: { name: "node-b", labels: { "kubernetes.io/hostname": "node-b" } },
    spec: { podCIDRs: ["10.244.2.0/24"] },
    status: { addresses: [{ type: "InternalIP", address: "10.202.0.2" }] },
  });
  for (let i = 0; i < size.services; i++) {
    server.upsert("services", serviceObject(i));
    server.upsert("endpointslices", sliceObject(i, size.endpointsPerService));
  }
}

/** kproxy's flags for a bench run against a kubeconfig. */
export function kproxyArgs(options: {
  mode: "nftables" | "iptables";
  kubeconfig: string;
  healthz?: string;
  metrics?: string;
}): string[] {
  return [
    `--proxy-mode=${options.mode}`,
    `--kubeconfig=${options.kubeconfig}`,
    "--hostname-override=node-a",
    "--cluster-cidr=10.244.0.0/16",
    `--${options.mode}-min-sync-period=0s`,
    `--healthz-bind-address=${options.healthz ?? ""}`,
    `--metrics-bind-address=${options.metrics ?? ""}`,
  ];
}
