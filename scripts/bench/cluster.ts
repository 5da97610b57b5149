/**
 * A synthetic cluster for the benchmarks, as raw API objects: `services`
 * ClusterIP services (port 80/TCP → 8080), each with one EndpointSlice of
 * `endpointsPerService` ready endpoints, plus the Node objects. One endpoint
 * in {@linkcode LOCAL_ENDPOINT_EVERY} runs on node-a, the node under test
 * (300 at 30k × 10, a full node's worth of pods); the rest on node-b.
 * Endpoint addresses come from a generation number, so a change ("move
 * endpoint 0 of service i to generation g") is reproducible and checkable.
 *
 * Objects come in two shapes ({@linkcode ObjectShape}):
 *
 * - `realistic` (the default): as a real apiserver serves them. Services
 *   created by `kubectl apply` (labels, a selector, the
 *   `kubectl.kubernetes.io/last-applied-configuration` annotation, the
 *   `kubectl-client-side-apply` managedFields entry) in 48 namespaces with
 *   names of 20–35 characters; EndpointSlices as the EndpointSlice controller
 *   writes them (`generateName`, the service's labels plus
 *   `endpointslice.kubernetes.io/managed-by` and `kubernetes.io/service-name`,
 *   the `endpoints.kubernetes.io/last-change-trigger-time` annotation, an
 *   ownerReference to the Service, the `kube-controller-manager`
 *   managedFields entry, a Pod `targetRef` per endpoint). uid and
 *   creationTimestamp are set here, resourceVersion by the fake apiserver.
 * - `minimal`: only the fields kproxy reads, in namespace `bench`, named
 *   `svc-NNNNNN`: the objects of the runs before 2026-11-26, so their
 *   figures can be compared.
 *
 * @module
 */

import type { ApiObject, FakeApiServer } from "../testbed/fake_apiserver.ts";

/** How the bench's API objects are shaped. */
export type ObjectShape = "realistic" | "minimal";

/** Every {@linkcode ObjectShape}. */
export const OBJECT_SHAPES: readonly ObjectShape[] = ["realistic", "minimal"];

/** Size (and object shape) of a synthetic cluster. */
export interface ClusterSize {
  services: number;
  endpointsPerService: number;
  /** @default {"realistic"} */
  shape?: ObjectShape;
}

const TEAMS = [
  "payments",
  "checkout",
  "catalog",
  "inventory",
  "search",
  "recommendations",
  "identity",
  "notifications",
  "billing",
  "shipping",
  "analytics",
  "messaging",
  "storefront",
  "pricing",
  "fulfillment",
  "reporting",
];
const ENVIRONMENTS = ["production", "staging", "canary"];
const ROLES = ["api", "web", "worker", "grpc-gateway", "metrics", "cache", "db-proxy", "frontend"];

/** The namespace of service `index`. */
export function serviceNamespace(index: number, shape: ObjectShape = "realistic"): string {
  if (shape === "minimal") return "bench";
  return `${TEAMS[index % TEAMS.length]}-${ENVIRONMENTS[(index >> 4) % ENVIRONMENTS.length]}`;
}

/** The name of service `index`. */
export function serviceName(index: number, shape: ObjectShape = "realistic"): string {
  const number = String(index).padStart(6, "0");
  if (shape === "minimal") return `svc-${number}`;
  return `${TEAMS[(index * 7 + 3) % TEAMS.length]}-${ROLES[(index >> 2) % ROLES.length]}-${number}`;
}

/** The id kproxy's Plan gives the one port of service `index` (`namespace/name:http/TCP`). */
export function servicePortIdOf(index: number, shape: ObjectShape = "realistic"): string {
  return `${serviceNamespace(index, shape)}/${serviceName(index, shape)}:http/TCP`;
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

/** A 32-bit hash of a few integers (xorshift-multiply), for names that look random but repeat. */
function hash(...values: number[]): number {
  let h = 0x811c9dc5;
  for (const value of values) {
    h = Math.imul(h ^ value, 0x01000193);
    h ^= h >>> 15;
    h = Math.imul(h, 0x2c1b3c6d);
    h ^= h >>> 12;
  }
  return h >>> 0;
}

/** The alphabet of Kubernetes' generated name suffixes (no vowels, no 0, 1, 3). */
const NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789";

function suffix(length: number, ...seed: number[]): string {
  let text = "";
  let bits = 0;
  for (let i = 0; i < length; i++) {
    // 27^6 < 2^32: six characters per hash.
    if (i % 6 === 0) bits = hash(...seed, i);
    text += NAME_ALPHABET[bits % NAME_ALPHABET.length];
    bits = Math.floor(bits / NAME_ALPHABET.length);
  }
  return text;
}

/** A UUID-shaped uid, the same for the same seed. */
function uid(...seed: number[]): string {
  const hex = [0, 1, 2, 3].map((i) => hash(...seed, i).toString(16).padStart(8, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${
    hex.slice(20, 32)
  }`;
}

const KIND_SERVICE = 1;
const KIND_SLICE = 2;
const KIND_POD = 3;
const CREATED = "2026-11-20T08:14:03Z";

/** When the slice of generation `generation` was last changed. */
function changedAt(generation: number): string {
  if (generation === 0) return "2026-11-20T08:14:05Z";
  return new Date(Date.parse("2026-11-20T08:14:05Z") + generation * 60_000).toISOString()
    .replace(".000Z", "Z");
}

function serviceLabels(index: number): Record<string, string> {
  const name = serviceName(index);
  return {
    "app.kubernetes.io/name": name,
    "app.kubernetes.io/instance": `${name}-${ENVIRONMENTS[(index >> 4) % ENVIRONMENTS.length]}`,
    "app.kubernetes.io/component": ROLES[(index >> 2) % ROLES.length]!,
    "app.kubernetes.io/part-of": TEAMS[index % TEAMS.length]!,
  };
}

/** `{"f:key": {}}` for each key, with the `"."` entry managedFields gives a map. */
function fieldSet(keys: Iterable<string>): Record<string, unknown> {
  const set: Record<string, unknown> = { ".": {} };
  for (const key of keys) set[`f:${key}`] = {};
  return set;
}

/** The Service object of `index`. */
export function serviceObject(index: number, shape: ObjectShape = "realistic"): ApiObject {
  const name = serviceName(index, shape);
  const namespace = serviceNamespace(index, shape);
  const port = { name: "http", protocol: "TCP", port: 80, targetPort: 8080 };
  if (shape === "minimal") {
    return {
      metadata: { namespace, name },
      spec: {
        type: "ClusterIP",
        clusterIP: clusterIP(index),
        clusterIPs: [clusterIP(index)],
        ipFamilies: ["IPv4"],
        ports: [{ name: "http", port: 80, targetPort: 8080, protocol: "TCP" }],
      },
    };
  }
  const labels = serviceLabels(index);
  const selector = {
    "app.kubernetes.io/name": labels["app.kubernetes.io/name"]!,
    "app.kubernetes.io/instance": labels["app.kubernetes.io/instance"]!,
  };
  const applied = {
    apiVersion: "v1",
    kind: "Service",
    metadata: { annotations: {}, labels, name, namespace },
    spec: { ports: [port], selector, type: "ClusterIP" },
  };
  return {
    metadata: {
      name,
      namespace,
      uid: uid(KIND_SERVICE, index),
      creationTimestamp: CREATED,
      labels,
      annotations: {
        "kubectl.kubernetes.io/last-applied-configuration": `${JSON.stringify(applied)}\n`,
      },
      managedFields: [{
        manager: "kubectl-client-side-apply",
        operation: "Update",
        apiVersion: "v1",
        time: CREATED,
        fieldsType: "FieldsV1",
        fieldsV1: {
          "f:metadata": {
            "f:annotations": fieldSet(["kubectl.kubernetes.io/last-applied-configuration"]),
            "f:labels": fieldSet(Object.keys(labels)),
          },
          "f:spec": {
            "f:internalTrafficPolicy": {},
            "f:ports": {
              ".": {},
              'k:{"port":80,"protocol":"TCP"}': {
                ".": {},
                "f:name": {},
                "f:port": {},
                "f:protocol": {},
                "f:targetPort": {},
              },
            },
            "f:selector": {},
            "f:sessionAffinity": {},
            "f:type": {},
          },
        },
      }],
    },
    spec: {
      ports: [port],
      selector,
      clusterIP: clusterIP(index),
      clusterIPs: [clusterIP(index)],
      type: "ClusterIP",
      sessionAffinity: "None",
      ipFamilies: ["IPv4"],
      ipFamilyPolicy: "SingleStack",
      internalTrafficPolicy: "Cluster",
    },
    status: { loadBalancer: {} },
  };
}

/** The EndpointSlice of service `index`, endpoint 0 at `generation`. */
export function sliceObject(
  index: number,
  perService: number,
  generation = 0,
  shape: ObjectShape = "realistic",
): ApiObject {
  const name = serviceName(index, shape);
  const namespace = serviceNamespace(index, shape);
  const realistic = shape === "realistic";
  const podPrefix = `${name}-${suffix(10, KIND_POD, index)}-`;
  const endpoints = [];
  for (let j = 0; j < perService; j++) {
    const pod = j === 0 ? generation : 0;
    endpoints.push({
      addresses: [endpointIP(index, j, perService, generation)],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: endpointNode(index, j, perService),
      ...realistic && {
        targetRef: {
          kind: "Pod",
          namespace,
          name: `${podPrefix}${suffix(5, KIND_POD, index, j, pod)}`,
          uid: uid(KIND_POD, index, j, pod),
        },
      },
    });
  }
  const ports = [{ name: "http", port: 8080, protocol: "TCP" }];
  if (!realistic) {
    return {
      metadata: { namespace, name: `${name}-1`, labels: { "kubernetes.io/service-name": name } },
      addressType: "IPv4",
      ports,
      endpoints,
    };
  }
  const serviceUid = uid(KIND_SERVICE, index);
  const labels = {
    ...serviceLabels(index),
    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    "kubernetes.io/service-name": name,
  };
  return {
    metadata: {
      name: `${name}-${suffix(5, KIND_SLICE, index)}`,
      generateName: `${name}-`,
      namespace,
      uid: uid(KIND_SLICE, index),
      generation: generation + 1,
      creationTimestamp: CREATED,
      labels,
      annotations: { "endpoints.kubernetes.io/last-change-trigger-time": changedAt(generation) },
      ownerReferences: [{
        apiVersion: "v1",
        kind: "Service",
        name,
        uid: serviceUid,
        controller: true,
        blockOwnerDeletion: true,
      }],
      managedFields: [{
        manager: "kube-controller-manager",
        operation: "Update",
        apiVersion: "discovery.k8s.io/v1",
        time: changedAt(generation),
        fieldsType: "FieldsV1",
        fieldsV1: {
          "f:addressType": {},
          "f:endpoints": {},
          "f:metadata": {
            "f:annotations": fieldSet(["endpoints.kubernetes.io/last-change-trigger-time"]),
            "f:generateName": {},
            "f:labels": fieldSet(Object.keys(labels)),
            "f:ownerReferences": { ".": {}, [`k:{"uid":"${serviceUid}"}`]: {} },
          },
          "f:ports": {},
        },
      }],
    },
    addressType: "IPv4",
    endpoints,
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
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
  const shape = size.shape ?? "realistic";
  const each = function* <T>(make: (index: number) => T) {
    for (let i = 0; i < size.services; i++) yield make(i);
  };
  server.load("services", each((i) => serviceObject(i, shape)));
  server.load("endpointslices", each((i) => sliceObject(i, size.endpointsPerService, 0, shape)));
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
    "--conntrack-max-per-core=0",
    `--${options.mode}-min-sync-period=0s`,
    `--healthz-bind-address=${options.healthz ?? ""}`,
    `--metrics-bind-address=${options.metrics ?? ""}`,
  ];
}
