/**
 * Raw API objects (Node, Service, EndpointSlice) for the network-namespace
 * topology of `scripts/netns.ts`, and manifests made of them.
 *
 * @module
 */

import type { ApiObject } from "./fake_apiserver.ts";
/** The Node object of the topology's proxy node. */
export function nodeObject(): ApiObject {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "node-a", labels: { "kubernetes.io/hostname": "node-a" } },
    spec: { podCIDR: "10.244.1.0/24", podCIDRs: ["10.244.1.0/24"] },
    status: { addresses: [{ type: "InternalIP", address: "10.201.0.1" }] },
  };
}

/** Options for {@linkcode serviceObject}. */
export interface ServiceSpec {
  name: string;
  clusterIP: string;
  port?: number;
  targetPort?: number;
  type?: "ClusterIP" | "NodePort";
  nodePort?: number;
  externalIPs?: string[];
  /** @default {"TCP"} */
  protocol?: "TCP" | "UDP";
}

/** An IPv4 single-port Service (TCP unless said) in namespace `default`. */
export function serviceObject(spec: ServiceSpec): ApiObject {
  const port: ApiObject = {
    name: "http",
    port: spec.port ?? 80,
    targetPort: spec.targetPort ?? 8080,
    protocol: spec.protocol ?? "TCP",
  };
  if (spec.nodePort !== undefined) port.nodePort = spec.nodePort;
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: spec.name, namespace: "default" },
    spec: {
      type: spec.type ?? "ClusterIP",
      clusterIP: spec.clusterIP,
      clusterIPs: [spec.clusterIP],
      ipFamilies: ["IPv4"],
      ports: [port],
      ...(spec.externalIPs ? { externalIPs: spec.externalIPs } : {}),
    },
  };
}

/** An IPv4 EndpointSlice of `service` (port "http", TCP unless said) with ready endpoints at
 * `addresses`. */
export function sliceObject(
  service: string,
  addresses: string[],
  options: { name?: string; port?: number; nodeName?: string; protocol?: "TCP" | "UDP" } = {},
): ApiObject {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: options.name ?? `${service}-1`,
      namespace: "default",
      labels: { "kubernetes.io/service-name": service },
    },
    addressType: "IPv4",
    ports: [{ name: "http", port: options.port ?? 8080, protocol: options.protocol ?? "TCP" }],
    endpoints: addresses.map((address) => ({
      addresses: [address],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: options.nodeName ?? "node-a",
    })),
  };
}

/** A YAML-free manifest file body: JSON documents separated by `---`. */
export function manifestText(objects: ApiObject[]): string {
  return objects.map((object) => JSON.stringify(object)).join("\n---\n") + "\n";
}

// ---------------------------------------------------------------------------
// A hand-driven source
