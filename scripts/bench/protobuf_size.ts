/**
 * What `application/vnd.kubernetes.protobuf` would save kproxy's lists,
 * estimated without an apiserver: the bench's realistic Services and
 * EndpointSlices (`cluster.ts`) encoded as Kubernetes' protobuf (field
 * numbers of `staging/src/k8s.io/api/{core,discovery}/v1/generated.proto`
 * and `apimachinery/pkg/apis/meta/v1`; the `k8s\0` envelope with
 * `runtime.Unknown`), in pages of 500 as kproxy lists, against the same
 * pages as JSON. Then the time to read every page: `JSON.parse` whole (the
 * floor of any JSON reading), and a protobuf walk that reads what kproxy
 * reads (metadata's name, namespace, resourceVersion, labels; the spec;
 * the endpoints) and skips the rest by its length (managedFields,
 * annotations, ownerReferences).
 *
 * An estimate, not real apiserver bytes: Go's generated marshallers also
 * write empty strings and zero times that this encoder leaves out (a few
 * bytes per object). The real kube-apiserver is the proof.
 *
 * ```sh
 * deno run --allow-all --v8-flags=--expose-gc scripts/bench/protobuf_size.ts --services=10000
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { serviceObject, sliceObject } from "./cluster.ts";

type FieldType =
  | "string"
  | "varint"
  | "bool"
  | "time"
  | "fieldsV1"
  | "map"
  | "intOrString"
  | { message: string };

/** Field name → [number, type] per message, for the fields the bench's objects carry. */
const SCHEMA: Record<string, Record<string, [number, FieldType]>> = {
  ObjectMeta: {
    name: [1, "string"],
    generateName: [2, "string"],
    namespace: [3, "string"],
    uid: [5, "string"],
    resourceVersion: [6, "string"],
    generation: [7, "varint"],
    creationTimestamp: [8, "time"],
    labels: [11, "map"],
    annotations: [12, "map"],
    ownerReferences: [13, { message: "OwnerReference" }],
    managedFields: [17, { message: "ManagedFieldsEntry" }],
  },
  OwnerReference: {
    kind: [1, "string"],
    name: [3, "string"],
    uid: [4, "string"],
    apiVersion: [5, "string"],
    controller: [6, "bool"],
    blockOwnerDeletion: [7, "bool"],
  },
  ManagedFieldsEntry: {
    manager: [1, "string"],
    operation: [2, "string"],
    apiVersion: [3, "string"],
    time: [4, "time"],
    fieldsType: [6, "string"],
    fieldsV1: [7, "fieldsV1"],
  },
  Service: {
    metadata: [1, { message: "ObjectMeta" }],
    spec: [2, { message: "ServiceSpec" }],
    status: [3, { message: "ServiceStatus" }],
  },
  ServiceSpec: {
    ports: [1, { message: "ServicePort" }],
    selector: [2, "map"],
    clusterIP: [3, "string"],
    type: [4, "string"],
    sessionAffinity: [7, "string"],
    ipFamilyPolicy: [17, "string"],
    clusterIPs: [18, "string"],
    ipFamilies: [19, "string"],
    internalTrafficPolicy: [22, "string"],
  },
  ServicePort: {
    name: [1, "string"],
    protocol: [2, "string"],
    port: [3, "varint"],
    targetPort: [4, "intOrString"],
  },
  ServiceStatus: { loadBalancer: [1, { message: "Empty" }] },
  Empty: {},
  EndpointSlice: {
    metadata: [1, { message: "ObjectMeta" }],
    endpoints: [2, { message: "Endpoint" }],
    ports: [3, { message: "EndpointPort" }],
    addressType: [4, "string"],
  },
  Endpoint: {
    addresses: [1, "string"],
    conditions: [2, { message: "EndpointConditions" }],
    targetRef: [4, { message: "ObjectReference" }],
    nodeName: [6, "string"],
  },
  EndpointConditions: { ready: [1, "bool"], serving: [2, "bool"], terminating: [3, "bool"] },
  ObjectReference: {
    kind: [1, "string"],
    namespace: [2, "string"],
    name: [3, "string"],
    uid: [4, "string"],
  },
  EndpointPort: { name: [1, "string"], protocol: [2, "string"], port: [3, "varint"] },
};

/** A growable byte buffer with protobuf's primitives. */
class Writer {
  bytes = new Uint8Array(1024);
  length = 0;
  #ensure(extra: number): void {
    if (this.length + extra <= this.bytes.length) return;
    const next = new Uint8Array(Math.max(this.bytes.length * 2, this.length + extra));
    next.set(this.bytes.subarray(0, this.length));
    this.bytes = next;
  }
  varint(value: number): void {
    this.#ensure(10);
    while (value > 127) {
      this.bytes[this.length++] = (value & 127) | 128;
      value = Math.floor(value / 128);
    }
    this.bytes[this.length++] = value;
  }
  tag(field: number, wire: number): void {
    this.varint(field * 8 + wire);
  }
  raw(data: Uint8Array): void {
    this.varint(data.length);
    this.#ensure(data.length);
    this.bytes.set(data, this.length);
    this.length += data.length;
  }
  done(): Uint8Array {
    return this.bytes.subarray(0, this.length);
  }
}

const encoder = new TextEncoder();

function message(build: (writer: Writer) => void): Uint8Array {
  const writer = new Writer();
  build(writer);
  return writer.done();
}

function encodeField(writer: Writer, number: number, type: FieldType, value: unknown): void {
  if (Array.isArray(value)) {
    for (const item of value) encodeField(writer, number, type, item);
    return;
  }
  if (type === "string") {
    writer.tag(number, 2);
    writer.raw(encoder.encode(String(value)));
  } else if (type === "varint" || type === "bool") {
    writer.tag(number, 0);
    writer.varint(Number(value));
  } else if (type === "time") {
    writer.tag(number, 2);
    writer.raw(message((w) => {
      w.tag(1, 0);
      w.varint(Date.parse(String(value)) / 1000);
    }));
  } else if (type === "fieldsV1") {
    writer.tag(number, 2);
    writer.raw(message((w) => {
      w.tag(1, 2);
      w.raw(encoder.encode(JSON.stringify(value)));
    }));
  } else if (type === "map") {
    for (const [key, entry] of Object.entries(value as Record<string, string>)) {
      writer.tag(number, 2);
      writer.raw(message((w) => {
        w.tag(1, 2);
        w.raw(encoder.encode(key));
        w.tag(2, 2);
        w.raw(encoder.encode(entry));
      }));
    }
  } else if (type === "intOrString") {
    writer.tag(number, 2);
    writer.raw(message((w) => {
      if (typeof value === "number") {
        w.tag(1, 0);
        w.varint(0);
        w.tag(2, 0);
        w.varint(value);
      } else {
        w.tag(1, 0);
        w.varint(1);
        w.tag(3, 2);
        w.raw(encoder.encode(String(value)));
      }
    }));
  } else {
    writer.tag(number, 2);
    writer.raw(encodeMessage(type.message, value as Record<string, unknown>));
  }
}

/** Encodes `object` as message `name` of {@linkcode SCHEMA}; unknown fields throw. */
export function encodeMessage(name: string, object: Record<string, unknown>): Uint8Array {
  const schema = SCHEMA[name];
  if (!schema) throw new Error(`Cannot encode message ${name}: not in the schema`);
  return message((writer) => {
    for (const [field, value] of Object.entries(object)) {
      const spec = schema[field];
      if (!spec) throw new Error(`Cannot encode ${name}.${field}: not in the schema`);
      encodeField(writer, spec[0], spec[1], value);
    }
  });
}

/** One list page in the `k8s\0` envelope: runtime.Unknown{typeMeta, raw: List{metadata, items}}. */
function protobufPage(kind: string, items: Uint8Array[], resourceVersion: string): Uint8Array {
  const list = message((w) => {
    w.tag(1, 2);
    w.raw(message((m) => {
      m.tag(2, 2);
      m.raw(encoder.encode(resourceVersion));
    }));
    for (const item of items) {
      w.tag(2, 2);
      w.raw(item);
    }
  });
  const unknown = message((w) => {
    w.tag(1, 2);
    w.raw(message((t) => {
      t.tag(1, 2);
      t.raw(encoder.encode(kind === "Service" ? "v1" : "discovery.k8s.io/v1"));
      t.tag(2, 2);
      t.raw(encoder.encode(`${kind}List`));
    }));
    w.tag(2, 2);
    w.raw(list);
  });
  const out = new Uint8Array(4 + unknown.length);
  out.set([0x6b, 0x38, 0x73, 0x00]);
  out.set(unknown, 4);
  return out;
}

/** Reads varints and skips fields: the cursor of the walk below. */
class Reader {
  at = 0;
  constructor(readonly bytes: Uint8Array) {}
  varint(): number {
    let value = 0;
    let scale = 1;
    for (;;) {
      const byte = this.bytes[this.at++]!;
      value += (byte & 127) * scale;
      if (byte < 128) return value;
      scale *= 128;
    }
  }
}

const decoder = new TextDecoder();

/**
 * Walks one message, calling `visit(field, wire, start, stop)` for each field:
 * a varint's value twice, or where a length-delimited value starts and stops.
 */
function walk(
  reader: Reader,
  end: number,
  visit: (field: number, wire: number, start: number, stop: number) => void,
): void {
  while (reader.at < end) {
    const key = reader.varint();
    const wire = key & 7;
    if (wire === 0) {
      const value = reader.varint();
      visit(key >>> 3, 0, value, value);
    } else if (wire === 2) {
      const length = reader.varint();
      const start = reader.at;
      reader.at += length;
      visit(key >>> 3, 2, start, start + length);
    } else throw new Error(`wire type ${wire}`);
  }
}

/** What kproxy reads of an object: a loose stand-in for its parsed item. */
type Read = Record<string, unknown>;

function readMeta(bytes: Uint8Array, start: number, stop: number): Read {
  const meta: Read = {};
  const labels: Record<string, string> = {};
  const reader = new Reader(bytes);
  reader.at = start;
  walk(reader, stop, (field, wire, from, to) => {
    if (wire !== 2) return;
    if (field === 1) meta.name = decoder.decode(bytes.subarray(from, to));
    else if (field === 3) meta.namespace = decoder.decode(bytes.subarray(from, to));
    else if (field === 6) meta.resourceVersion = decoder.decode(bytes.subarray(from, to));
    else if (field === 11) {
      const entry = new Reader(bytes);
      entry.at = from;
      let key = "";
      walk(entry, to, (f, _w, a, b) => {
        if (f === 1) key = decoder.decode(bytes.subarray(a, b));
        else labels[key] = decoder.decode(bytes.subarray(a, b));
      });
    }
  });
  meta.labels = labels;
  return meta;
}

/** Per message read, which fields hold a nested message (and its name); the rest are scalars. */
const NESTED: Record<string, Record<number, string>> = {
  ServiceSpec: { 1: "ServicePort", 2: "MapEntry" },
  ServicePort: { 4: "IntOrString" },
  IntOrString: {},
  MapEntry: {},
  Endpoint: { 2: "EndpointConditions", 4: "ObjectReference" },
  EndpointConditions: {},
  ObjectReference: {},
  EndpointPort: {},
};

/** Reads what kproxy reads from one item of `kind`; every other field is skipped by length. */
function readItem(kind: string, bytes: Uint8Array, start: number, stop: number): Read {
  const item: Read = {};
  const reader = new Reader(bytes);
  reader.at = start;
  walk(reader, stop, (field, wire, from, to) => {
    if (field === 1) item.metadata = readMeta(bytes, from, to);
    else if (kind === "Service" && field === 2) {
      item.spec = readFields("ServiceSpec", bytes, from, to);
    } else if (kind === "EndpointSlice" && field === 2) {
      ((item.endpoints ??= []) as Read[]).push(readFields("Endpoint", bytes, from, to));
    } else if (kind === "EndpointSlice" && field === 3) {
      item.ports = readFields("EndpointPort", bytes, from, to);
    } else if (kind === "EndpointSlice" && field === 4 && wire === 2) {
      item.addressType = decoder.decode(bytes.subarray(from, to));
    }
  });
  return item;
}

/** Every field of a small message (a spec, an endpoint), nested messages by {@linkcode NESTED}. */
function readFields(name: string, bytes: Uint8Array, start: number, stop: number): Read {
  const out: Read = {};
  const nested = NESTED[name]!;
  const reader = new Reader(bytes);
  reader.at = start;
  walk(reader, stop, (field, wire, from, to) => {
    const inner = nested[field];
    if (wire === 0) out[field] = from;
    else if (inner !== undefined) out[field] = readFields(inner, bytes, from, to);
    else out[field] = decoder.decode(bytes.subarray(from, to));
  });
  return out;
}

/** Reads every item of one protobuf page. */
function readProtobufPage(kind: string, page: Uint8Array): Read[] {
  const items: Read[] = [];
  const outer = new Reader(page);
  outer.at = 4;
  walk(outer, page.length, (field, _wire, from, to) => {
    if (field !== 2) return;
    const list = new Reader(page);
    list.at = from;
    walk(list, to, (f, _w, a, b) => {
      if (f === 2) items.push(readItem(kind, page, a, b));
    });
  });
  return items;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1] ?? NaN;
}

function collect(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      services: { type: "string", default: "1000" },
      endpoints: { type: "string", default: "10" },
      "page-size": { type: "string", default: "500" },
      runs: { type: "string", default: "5" },
    },
  });
  const services = Number(values.services);
  const perService = Number(values.endpoints);
  const pageSize = Number(values["page-size"]);
  for (const kind of ["Service", "EndpointSlice"]) {
    const jsonPages: Uint8Array[] = [];
    const protobufPages: Uint8Array[] = [];
    for (let first = 0; first < services; first += pageSize) {
      const objects = [];
      for (let i = first; i < Math.min(services, first + pageSize); i++) {
        const object = kind === "Service" ? serviceObject(i) : sliceObject(i, perService);
        const metadata = object.metadata as Record<string, unknown>;
        objects.push({ ...object, metadata: { ...metadata, resourceVersion: String(1000 + i) } });
      }
      const apiVersion = kind === "Service" ? "v1" : "discovery.k8s.io/v1";
      jsonPages.push(encoder.encode(JSON.stringify({
        kind: `${kind}List`,
        apiVersion,
        metadata: { resourceVersion: "99999", continue: "token" },
        items: objects.map((o) => ({ kind, apiVersion, ...o })),
      })));
      protobufPages.push(protobufPage(
        kind,
        objects.map((o) => encodeMessage(kind, o as Record<string, unknown>)),
        "99999",
      ));
    }
    const bytes = (pages: Uint8Array[]) => pages.reduce((sum, page) => sum + page.length, 0);
    const times = { json: [] as number[], protobuf: [] as number[] };
    for (let run = 0; run < Number(values.runs); run++) {
      for (const format of ["json", "protobuf"] as const) {
        const start = performance.now();
        const kept: unknown[] = [];
        for (const page of format === "json" ? jsonPages : protobufPages) {
          kept.push(
            format === "json"
              ? JSON.parse(decoder.decode(page)).items.length
              : readProtobufPage(kind, page),
          );
        }
        times[format].push(performance.now() - start);
        collect();
        if (kept.length === 0) throw new Error("nothing read");
      }
    }
    const mib = (n: number) => (n / 1024 / 1024).toFixed(2);
    console.log(
      `${kind} × ${services} (${perService} endpoints each), pages of ${pageSize}: ` +
        `JSON ${mib(bytes(jsonPages))} MiB, protobuf ${mib(bytes(protobufPages))} MiB ` +
        `(${(100 * bytes(protobufPages) / bytes(jsonPages)).toFixed(0)} %); read all pages: ` +
        `JSON.parse ${median(times.json).toFixed(0)} ms, protobuf walk of kproxy's fields ` +
        `${median(times.protobuf).toFixed(0)} ms (medians of ${values.runs})`,
    );
  }
}
