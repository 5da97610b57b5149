/**
 * A small schema of the Kubernetes API kinds the shipped manifests use
 * (Service, EndpointSlice, Node, ServiceCIDR and `kind: List`), written from
 * the API reference (k8s.io/api core/v1, discovery/v1, networking/v1): known
 * field names, and the list types server-side apply enforces (`+listType=map`
 * with its keys, `+listType=set`). Enough to catch what a real apiserver
 * refuses: an unknown field (strict decoding) or a duplicate list-map key.
 *
 * @module
 */

/** The shape of a value. */
export type Shape =
  /** Any value, not checked further (free-form or beside the point here). */
  | "any"
  /** A string, number or boolean. */
  | "scalar"
  /** A map of strings (labels, annotations, selectors). */
  | "strings"
  | { fields: Readonly<Record<string, Shape>> }
  | {
    /** The items' shape. */
    items: Shape;
    /** `map`: keyed by `keys`; `set`: scalar items, unique; `atomic`: anything. */
    listType: "map" | "set" | "atomic";
    keys?: readonly string[];
    /** Values a missing key field defaults to (`protocol: TCP`). */
    defaults?: Readonly<Record<string, string>>;
  };

const atomic = (items: Shape): Shape => ({ items, listType: "atomic" });
const set: Shape = { items: "scalar", listType: "set" };
const conditions: Shape = { items: "any", listType: "map", keys: ["type"] };

const OBJECT_META: Shape = {
  fields: {
    name: "scalar",
    generateName: "scalar",
    namespace: "scalar",
    selfLink: "scalar",
    uid: "scalar",
    resourceVersion: "scalar",
    generation: "scalar",
    creationTimestamp: "scalar",
    deletionTimestamp: "scalar",
    deletionGracePeriodSeconds: "scalar",
    labels: "strings",
    annotations: "strings",
    ownerReferences: { items: "any", listType: "map", keys: ["uid"] },
    finalizers: set,
    managedFields: atomic("any"),
  },
};

const SERVICE: Shape = {
  fields: {
    apiVersion: "scalar",
    kind: "scalar",
    metadata: OBJECT_META,
    spec: {
      fields: {
        ports: {
          listType: "map",
          keys: ["port", "protocol"],
          defaults: { protocol: "TCP" },
          items: {
            fields: {
              name: "scalar",
              protocol: "scalar",
              appProtocol: "scalar",
              port: "scalar",
              targetPort: "scalar",
              nodePort: "scalar",
            },
          },
        },
        selector: "strings",
        clusterIP: "scalar",
        clusterIPs: atomic("scalar"),
        type: "scalar",
        externalIPs: atomic("scalar"),
        sessionAffinity: "scalar",
        loadBalancerIP: "scalar",
        loadBalancerSourceRanges: atomic("scalar"),
        externalName: "scalar",
        externalTrafficPolicy: "scalar",
        healthCheckNodePort: "scalar",
        publishNotReadyAddresses: "scalar",
        sessionAffinityConfig: { fields: { clientIP: { fields: { timeoutSeconds: "scalar" } } } },
        ipFamilies: atomic("scalar"),
        ipFamilyPolicy: "scalar",
        allocateLoadBalancerNodePorts: "scalar",
        loadBalancerClass: "scalar",
        internalTrafficPolicy: "scalar",
        trafficDistribution: "scalar",
      },
    },
    status: {
      fields: {
        loadBalancer: {
          fields: {
            ingress: atomic({
              fields: {
                ip: "scalar",
                hostname: "scalar",
                ipMode: "scalar",
                ports: atomic({ fields: { port: "scalar", protocol: "scalar", error: "scalar" } }),
              },
            }),
          },
        },
        conditions,
      },
    },
  },
};

const ENDPOINT_SLICE: Shape = {
  fields: {
    apiVersion: "scalar",
    kind: "scalar",
    metadata: OBJECT_META,
    addressType: "scalar",
    endpoints: atomic({
      fields: {
        addresses: set,
        conditions: { fields: { ready: "scalar", serving: "scalar", terminating: "scalar" } },
        hostname: "scalar",
        targetRef: "any",
        deprecatedTopology: "strings",
        nodeName: "scalar",
        zone: "scalar",
        hints: {
          fields: {
            forZones: atomic({ fields: { name: "scalar" } }),
            forNodes: atomic({ fields: { name: "scalar" } }),
          },
        },
      },
    }),
    ports: atomic({
      fields: { name: "scalar", protocol: "scalar", port: "scalar", appProtocol: "scalar" },
    }),
  },
};

const NODE: Shape = {
  fields: {
    apiVersion: "scalar",
    kind: "scalar",
    metadata: OBJECT_META,
    spec: {
      fields: {
        podCIDR: "scalar",
        podCIDRs: set,
        providerID: "scalar",
        unschedulable: "scalar",
        taints: atomic("any"),
        configSource: "any",
        externalID: "scalar",
      },
    },
    status: {
      fields: {
        capacity: "strings",
        allocatable: "strings",
        phase: "scalar",
        conditions,
        // +listType=map +listMapKey=type: one address per type, as server-side apply sees it.
        addresses: {
          listType: "map",
          keys: ["type"],
          items: { fields: { type: "scalar", address: "scalar" } },
        },
        daemonEndpoints: "any",
        nodeInfo: "any",
        images: atomic("any"),
        volumesInUse: atomic("scalar"),
        volumesAttached: atomic("any"),
        config: "any",
        runtimeHandlers: atomic("any"),
        features: "any",
        declaredFeatures: atomic("scalar"),
      },
    },
  },
};

const SERVICE_CIDR: Shape = {
  fields: {
    apiVersion: "scalar",
    kind: "scalar",
    metadata: OBJECT_META,
    spec: { fields: { cidrs: atomic("scalar") } },
    status: { fields: { conditions } },
  },
};

/** Each kind's apiVersion and shape. */
export const KINDS: Readonly<Record<string, { apiVersion: string; shape: Shape }>> = {
  Service: { apiVersion: "v1", shape: SERVICE },
  EndpointSlice: { apiVersion: "discovery.k8s.io/v1", shape: ENDPOINT_SLICE },
  Node: { apiVersion: "v1", shape: NODE },
  ServiceCIDR: { apiVersion: "networking.k8s.io/v1", shape: SERVICE_CIDR },
};

const LIST_FIELDS = ["apiVersion", "kind", "metadata", "items"];

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function checkValue(value: unknown, shape: Shape, path: string, problems: string[]): void {
  if (shape === "any" || value === null) return;
  if (shape === "scalar") {
    if (typeof value === "object") problems.push(`${path}: is not a string, number or boolean`);
    return;
  }
  if (shape === "strings") {
    if (!isRecord(value) || Object.values(value).some((v) => typeof v !== "string")) {
      problems.push(`${path}: is not a map of strings`);
    }
    return;
  }
  if ("fields" in shape) {
    if (!isRecord(value)) return void problems.push(`${path}: is not an object`);
    for (const [key, inner] of Object.entries(value)) {
      const field = shape.fields[key];
      const at = path === "" ? key : `${path}.${key}`;
      if (field === undefined) problems.push(`unknown field ${at}`);
      else checkValue(inner, field, at, problems);
    }
    return;
  }
  if (!Array.isArray(value)) return void problems.push(`${path}: is not a list`);
  const seen = new Set<string>();
  value.forEach((item, i) => {
    checkValue(item, shape.items, `${path}[${i}]`, problems);
    if (shape.listType === "atomic") return;
    const key = shape.listType === "set"
      ? JSON.stringify(item)
      : (shape.keys ?? []).map((k) =>
        `${k}=${JSON.stringify((isRecord(item) ? item[k] : undefined) ?? shape.defaults?.[k])}`
      ).join(",");
    if (seen.has(key)) problems.push(`${path}: duplicate entries for key [${key}]`);
    seen.add(key);
  });
}

/**
 * What a real apiserver would refuse in one manifest document: unknown fields,
 * a wrong apiVersion, an unknown kind, duplicate list-map or set entries. A
 * `kind: List`'s items are checked as objects of their own kinds.
 *
 * @returns One line per problem, `Kind ns/name: problem`.
 */
export function apiProblems(document: unknown): string[] {
  if (!isRecord(document)) return ["a document is not an object"];
  if (document.kind === "List") {
    const problems = Object.keys(document)
      .filter((key) => !LIST_FIELDS.includes(key))
      .map((key) => `List: unknown field ${key}`);
    const items = Array.isArray(document.items) ? document.items : [];
    return [...problems, ...items.flatMap((item) => apiProblems(item))];
  }
  const kind = String(document.kind);
  const metadata = isRecord(document.metadata) ? document.metadata : {};
  const name = `${kind} ${metadata.namespace ? `${metadata.namespace}/` : ""}${metadata.name}`;
  const known = KINDS[kind];
  if (known === undefined) return [`${name}: kind is not one of ${Object.keys(KINDS)}`];
  const problems: string[] = [];
  if (document.apiVersion !== known.apiVersion) {
    problems.push(`apiVersion ${document.apiVersion} is not ${known.apiVersion}`);
  }
  checkValue(document, known.shape, "", problems);
  return problems.map((problem) => `${name}: ${problem}`);
}
