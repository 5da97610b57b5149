/**
 * An in-process fake Kubernetes apiserver for end-to-end tests and
 * benchmarks.
 *
 * It serves list and watch for the four resources kproxy reads, at their
 * real API paths, over plain HTTP on 127.0.0.1:
 *
 * | resource | path |
 * | --- | --- |
 * | services | `/api/v1/services` |
 * | endpointslices | `/apis/discovery.k8s.io/v1/endpointslices` |
 * | nodes | `/api/v1/nodes` |
 * | servicecidrs | `/apis/networking.k8s.io/v1/servicecidrs` |
 *
 * Lists return `{ kind, apiVersion, metadata: { resourceVersion, continue? }, items }`,
 * in pages when `limit` is given (a continue token from before
 * {@linkcode FakeApiServer.compact} gets HTTP 410).
 * Watches (`?watch=1&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=N`)
 * replay the events after RV from the history, then stream new ones as JSON
 * lines (`{"type":"ADDED","object":{...}}`). A watch from a compacted RV gets
 * an `ERROR` event with code 410. `labelSelector` supports `key`, `!key`,
 * `key=value` and `key!=value` terms; `fieldSelector` supports
 * `metadata.name=NAME` and `metadata.namespace=NS`. Events POSTed to
 * `/apis/events.k8s.io/v1/namespaces/NS/events` are kept in
 * {@linkcode FakeApiServer.events}.
 *
 * Objects and resource versions survive {@linkcode FakeApiServer.restart}, as
 * they would with etcd behind a real apiserver.
 *
 * @example Usage
 * ```ts
 * import { FakeApiServer, writeKubeconfig } from "./fake_apiserver.ts";
 * const server = await FakeApiServer.start();
 * const kubeconfig = await writeKubeconfig(server);
 * server.upsert("services", { metadata: { namespace: "default", name: "web" }, spec: {} });
 * await server.stop();
 * await Deno.remove(kubeconfig);
 * ```
 *
 * @module
 */

/** The resources the fake serves. */
export type Resource = "services" | "endpointslices" | "nodes" | "servicecidrs";

/** The API path of each resource's collection. */
export const RESOURCE_PATHS: Readonly<Record<Resource, string>> = {
  services: "/api/v1/services",
  endpointslices: "/apis/discovery.k8s.io/v1/endpointslices",
  nodes: "/api/v1/nodes",
  servicecidrs: "/apis/networking.k8s.io/v1/servicecidrs",
};

const LIST_TYPES: Readonly<Record<Resource, { kind: string; apiVersion: string }>> = {
  services: { kind: "ServiceList", apiVersion: "v1" },
  endpointslices: { kind: "EndpointSliceList", apiVersion: "discovery.k8s.io/v1" },
  nodes: { kind: "NodeList", apiVersion: "v1" },
  servicecidrs: { kind: "ServiceCIDRList", apiVersion: "networking.k8s.io/v1" },
};

const OBJECT_KINDS: Readonly<Record<Resource, string>> = {
  services: "Service",
  endpointslices: "EndpointSlice",
  nodes: "Node",
  servicecidrs: "ServiceCIDR",
};

/** A raw API object. */
export type ApiObject = Record<string, any>;

/** A watch event type as the apiserver sends it. */
export type WatchEventType = "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";

/**
 * An object as stored: its JSON text (what lists and watches send, and small
 * for the garbage collector to walk at 100k objects) and the metadata
 * selectors read.
 */
interface StoredObject {
  json: string;
  metadata: { namespace?: string; name?: string; labels?: Record<string, string> };
}

interface HistoryEntry {
  rv: number;
  resource: Resource;
  type: "ADDED" | "MODIFIED" | "DELETED";
  object: StoredObject;
}

/** Whether an object's metadata matches a request's label and field selectors. */
type Selector = (object: { metadata?: StoredObject["metadata"] }) => boolean;

interface OpenWatch {
  resource: Resource;
  selector: Selector;
  controller: ReadableStreamDefaultController<Uint8Array>;
  stalled: boolean;
  closed: boolean;
  timer?: ReturnType<typeof setTimeout>;
}

/** One request the fake received, for assertions. */
export interface RecordedRequest {
  method: string;
  path: string;
  params: Record<string, string>;
  authorization: string | null;
  /** The Accept-Encoding header, or null. */
  acceptEncoding: string | null;
}

/** Options for {@linkcode FakeApiServer.start}. */
export interface FakeApiServerOptions {
  /** Port to listen on. @default {0} (any free port) */
  port?: number;
  /** Resources answered with 404, as an apiserver without that API. @default {[]} */
  missing?: Resource[];
  /**
   * Serve HTTPS with this PEM certificate (valid for 127.0.0.1) and key;
   * `ca` is the PEM of the CA that signed it, written to kubeconfigs.
   * @default plain HTTP
   */
  tls?: { cert: string; key: string; ca: string };
  /** Answer event creations with this status instead of storing them. @default {undefined} */
  refuseEvents?: number;
}

/** Where events.k8s.io/v1 Events are created: `/apis/events.k8s.io/v1/namespaces/NS/events`. */
const EVENTS_PATH = /^\/apis\/events\.k8s\.io\/v1\/namespaces\/([^/]+)\/events$/;

const encoder = new TextEncoder();

function keyOf(object: ApiObject): string {
  return `${object.metadata?.namespace ?? ""}/${object.metadata?.name ?? ""}`;
}

function storedOf(object: ApiObject): StoredObject {
  const { namespace, name, labels } = object.metadata ?? {};
  return { json: JSON.stringify(object), metadata: { namespace, name, labels } };
}

function status(code: number, reason: string, message: string): ApiObject {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    code,
  };
}

function jsonResponse(code: number, body: unknown): Response {
  return new Response(JSON.stringify(body), {
    status: code,
    headers: { "content-type": "application/json" },
  });
}

function parseSelector(labelSelector: string, fieldSelector: string): Selector {
  const labelTerms = labelSelector.split(",").map((t) => t.trim()).filter((t) => t !== "");
  const fieldTerms = fieldSelector.split(",").map((t) => t.trim()).filter((t) => t !== "");
  return (object) => {
    const labels: Record<string, string> = object.metadata?.labels ?? {};
    for (const term of labelTerms) {
      if (term.startsWith("!")) {
        if (term.slice(1) in labels) return false;
      } else if (term.includes("!=")) {
        const [k, v] = term.split("!=");
        if (labels[k!] === v) return false;
      } else if (term.includes("=")) {
        const [k, v] = term.split(/==?/);
        if (labels[k!] !== v) return false;
      } else if (!(term in labels)) {
        return false;
      }
    }
    for (const term of fieldTerms) {
      const [field, value] = term.split(/==?/);
      if (field === "metadata.name" && object.metadata?.name !== value) return false;
      if (field === "metadata.namespace" && object.metadata?.namespace !== value) return false;
    }
    return true;
  };
}

/**
 * A fake apiserver with fault injection. Create one with
 * {@linkcode FakeApiServer.start}.
 */
export class FakeApiServer {
  #server?: Deno.HttpServer<Deno.NetAddr>;
  #port: number;
  #missing: Set<Resource>;
  #tls: { cert: string; key: string; ca: string } | undefined;
  #rv = 1;
  #compactedBefore = 0;
  #objects: Record<Resource, Map<string, StoredObject>> = {
    services: new Map(),
    endpointslices: new Map(),
    nodes: new Map(),
    servicecidrs: new Map(),
  };
  /** Objects sorted by key, per resource and selectors, until the resource changes. */
  #sorted = new Map<Resource, Map<string, StoredObject[]>>();
  #history: HistoryEntry[] = [];
  #watches = new Set<OpenWatch>();
  #failures: { count: number; status: number } = { count: 0, status: 500 };
  #goneNext: { resource?: Resource; http: boolean } | undefined;
  #stallNew = false;
  #expireContinue = false;
  #delayMs = 0;
  /** Every request received, oldest first. */
  readonly requests: RecordedRequest[] = [];
  /** The events.k8s.io/v1 Events created, oldest first. */
  readonly events: ApiObject[] = [];
  readonly #refuseEvents?: number;

  private constructor(options: FakeApiServerOptions) {
    this.#port = options.port ?? 0;
    this.#missing = new Set(options.missing ?? []);
    this.#tls = options.tls;
    this.#refuseEvents = options.refuseEvents;
  }

  /** Starts a fake apiserver on 127.0.0.1. */
  static async start(options: FakeApiServerOptions = {}): Promise<FakeApiServer> {
    const server = new FakeApiServer(options);
    await server.#listen();
    return server;
  }

  /** The port it listens on (kept across restarts). */
  get port(): number {
    return this.#port;
  }

  /** The base URL, e.g. `http://127.0.0.1:34567` (`https:` with `tls`). */
  get url(): string {
    return `${this.#tls ? "https" : "http"}://127.0.0.1:${this.#port}`;
  }

  /** The PEM of the CA of the served certificate, undefined for plain HTTP. */
  get certificateAuthority(): string | undefined {
    return this.#tls?.ca;
  }

  /** The current resource version. */
  get resourceVersion(): string {
    return String(this.#rv);
  }

  /** The number of open watch streams, optionally for one resource. */
  openWatches(resource?: Resource): number {
    return [...this.#watches].filter((w) => !w.closed && (!resource || w.resource === resource))
      .length;
  }

  /** The requests received for a resource, optionally only watches or only lists. */
  requestsFor(resource: Resource, kind?: "list" | "watch"): RecordedRequest[] {
    return this.requests.filter((r) =>
      r.path === RESOURCE_PATHS[resource] &&
      (kind === undefined ||
        (kind === "watch") === (r.params.watch === "1" || r.params.watch === "true"))
    );
  }

  // ---- objects ----

  /** Returns a stored object (a copy), or undefined. */
  get(resource: Resource, name: string, namespace = ""): ApiObject | undefined {
    const object = this.#objects[resource].get(`${namespace}/${name}`);
    return object ? JSON.parse(object.json) : undefined;
  }

  /** Lists stored objects (copies). */
  list(resource: Resource): ApiObject[] {
    return [...this.#objects[resource].values()].map((o) => JSON.parse(o.json));
  }

  /** Creates or replaces an object; sets its resourceVersion and notifies watches. Returns the stored copy. */
  upsert(resource: Resource, object: ApiObject): ApiObject {
    return JSON.parse(this.#store(resource, JSON.parse(JSON.stringify(object))).json);
  }

  /**
   * Upserts many objects, taking them over instead of copying them (do not
   * change them afterwards) and returning nothing: loads a large cluster fast.
   */
  load(resource: Resource, objects: Iterable<ApiObject>): void {
    for (const object of objects) this.#store(resource, object);
  }

  #store(resource: Resource, stored: ApiObject): StoredObject {
    stored.kind ??= OBJECT_KINDS[resource];
    stored.apiVersion ??= LIST_TYPES[resource].apiVersion;
    stored.metadata = { ...(stored.metadata ?? {}) };
    const key = keyOf(stored);
    const existing = this.#objects[resource].get(key);
    stored.metadata.uid ??= existing ? JSON.parse(existing.json).metadata?.uid : undefined;
    stored.metadata.uid ??= crypto.randomUUID();
    stored.metadata.resourceVersion = String(++this.#rv);
    const entry = storedOf(stored);
    this.#objects[resource].set(key, entry);
    this.#sorted.delete(resource);
    this.#record(resource, existing ? "MODIFIED" : "ADDED", entry);
    return entry;
  }

  /** Alias of {@linkcode upsert} that reads better in tests creating objects. */
  create(resource: Resource, object: ApiObject): ApiObject {
    return this.upsert(resource, object);
  }

  /** Alias of {@linkcode upsert} for updates. */
  update(resource: Resource, object: ApiObject): ApiObject {
    return this.upsert(resource, object);
  }

  /** Deletes an object by name; returns false when it did not exist. */
  delete(resource: Resource, name: string, namespace = ""): boolean {
    const key = `${namespace}/${name}`;
    const existing = this.#objects[resource].get(key);
    if (!existing) return false;
    this.#objects[resource].delete(key);
    this.#sorted.delete(resource);
    const deleted = JSON.parse(existing.json);
    deleted.metadata.resourceVersion = String(++this.#rv);
    this.#record(resource, "DELETED", storedOf(deleted));
    return true;
  }

  /**
   * Changes objects without telling any watch, as if the events were lost
   * while the client was away; only a relist reveals them.
   */
  silently(change: () => void): void {
    const watches = [...this.#watches];
    for (const w of watches) w.stalled = true;
    try {
      change();
    } finally {
      for (const w of watches) w.stalled = false;
    }
  }

  // ---- faults ----

  /**
   * Forgets the history up to now: watches from an older resourceVersion get
   * a 410 Gone ERROR event.
   */
  compact(): void {
    this.#compactedBefore = this.#rv;
    this.#history = [];
  }

  /**
   * Answers the next watch request (of `resource`, or of any) with 410 Gone:
   * an ERROR event in a 200 stream, or an HTTP 410 when `http` is true.
   */
  goneOnNextWatch(options: { resource?: Resource; http?: boolean } = {}): void {
    this.#goneNext = { resource: options.resource, http: options.http ?? false };
  }

  /**
   * Ends open watch streams (of `resource`, or all): cleanly, as a server
   * timeout does, or abruptly (`abrupt: true`), as a cut connection.
   */
  dropWatches(options: { resource?: Resource; abrupt?: boolean } = {}): void {
    for (const watch of [...this.#watches]) {
      if (options.resource && watch.resource !== options.resource) continue;
      this.#closeWatch(watch, options.abrupt ? new Error("connection reset") : undefined);
    }
  }

  /** Answers the next list request carrying a continue token with 410 Gone. */
  expireNextContinue(): void {
    this.#expireContinue = true;
  }

  /** Answers the next `count` requests with `status` (default 500) and a Status body. */
  failNext(count: number, status = 500): void {
    this.#failures = { count, status };
  }

  /**
   * Stalls open watches (of `resource`, or all): they stay open but receive
   * nothing, not even bookmarks. With `newWatches`, later watches stall too
   * until {@linkcode resumeWatches}.
   */
  stallWatches(options: { resource?: Resource; newWatches?: boolean } = {}): void {
    for (const watch of this.#watches) {
      if (!options.resource || watch.resource === options.resource) watch.stalled = true;
    }
    if (options.newWatches) this.#stallNew = true;
  }

  /** Stops stalling new watches (already stalled streams stay silent). */
  resumeWatches(): void {
    this.#stallNew = false;
  }

  /** Delays every response by `ms` milliseconds (0 to stop). */
  slowResponses(ms: number): void {
    this.#delayMs = ms;
  }

  /** Sends a BOOKMARK with the current resourceVersion on open, unstalled watches. */
  bookmark(resource?: Resource): void {
    for (const watch of this.#watches) {
      if (resource && watch.resource !== resource) continue;
      this.#send(watch, "BOOKMARK", {
        json: JSON.stringify({
          kind: OBJECT_KINDS[watch.resource],
          apiVersion: LIST_TYPES[watch.resource].apiVersion,
          metadata: { resourceVersion: this.resourceVersion },
        }),
        metadata: {},
      });
    }
  }

  /** Makes a resource answer 404 (as an API the server lacks), or serve again. */
  setMissing(resource: Resource, missing: boolean): void {
    if (missing) this.#missing.add(resource);
    else this.#missing.delete(resource);
  }

  /** Stops listening and cuts every open watch. Objects are kept. */
  async stop(): Promise<void> {
    for (const watch of [...this.#watches]) this.#closeWatch(watch);
    if (this.#server) {
      await this.#server.shutdown();
      this.#server = undefined;
    }
  }

  /** Stops, then listens again on the same port with the same objects. */
  async restart(): Promise<void> {
    await this.stop();
    await this.#listen();
  }

  // ---- internals ----

  async #listen(): Promise<void> {
    const ready = Promise.withResolvers<void>();
    const options = {
      hostname: "127.0.0.1",
      port: this.#port,
      onListen: () => ready.resolve(),
    };
    const handler = (request: Request) => this.#handle(request);
    this.#server = this.#tls
      ? Deno.serve({ ...options, cert: this.#tls.cert, key: this.#tls.key }, handler)
      : Deno.serve(options, handler);
    await ready.promise;
    this.#port = this.#server.addr.port;
  }

  #record(resource: Resource, type: HistoryEntry["type"], object: StoredObject): void {
    const entry = { rv: this.#rv, resource, type, object };
    this.#history.push(entry);
    for (const watch of this.#watches) {
      if (watch.resource === resource && watch.selector(object)) {
        this.#send(watch, type, object);
      }
    }
  }

  #send(watch: OpenWatch, type: WatchEventType, object: StoredObject): void {
    if (watch.closed || watch.stalled) return;
    try {
      watch.controller.enqueue(encoder.encode(`{"type":"${type}","object":${object.json}}\n`));
    } catch {
      this.#closeWatch(watch);
    }
  }

  #closeWatch(watch: OpenWatch, error?: Error): void {
    if (watch.closed) return;
    watch.closed = true;
    clearTimeout(watch.timer);
    this.#watches.delete(watch);
    try {
      if (error) watch.controller.error(error);
      else watch.controller.close();
    } catch {
      // the client already went away
    }
  }

  async #handle(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const params = Object.fromEntries(url.searchParams);
    this.requests.push({
      method: request.method,
      path: url.pathname,
      params,
      authorization: request.headers.get("authorization"),
      acceptEncoding: request.headers.get("accept-encoding"),
    });
    if (this.#delayMs > 0) await new Promise((r) => setTimeout(r, this.#delayMs));
    if (this.#failures.count > 0) {
      this.#failures.count--;
      return jsonResponse(
        this.#failures.status,
        status(this.#failures.status, "InternalError", "injected failure"),
      );
    }
    const eventsIn = EVENTS_PATH.exec(url.pathname)?.[1];
    if (eventsIn !== undefined && request.method === "POST") {
      return await this.#createEvent(eventsIn, request);
    }
    const resource = (Object.keys(RESOURCE_PATHS) as Resource[]).find((r) =>
      RESOURCE_PATHS[r] === url.pathname
    );
    if (!resource || this.#missing.has(resource) || request.method !== "GET") {
      return jsonResponse(
        404,
        status(404, "NotFound", `the server could not find ${url.pathname}`),
      );
    }
    if (params.watch === "1" || params.watch === "true") {
      const selector = parseSelector(params.labelSelector ?? "", params.fieldSelector ?? "");
      return this.#watch(resource, selector, params);
    }
    return this.#list(resource, params);
  }

  /** Stores an Event created in `namespace` (201), or refuses it as configured. */
  async #createEvent(namespace: string, request: Request): Promise<Response> {
    if (this.#refuseEvents !== undefined) {
      return jsonResponse(
        this.#refuseEvents,
        status(this.#refuseEvents, "Forbidden", "events.events.k8s.io is forbidden"),
      );
    }
    let event: ApiObject;
    try {
      event = await request.json();
    } catch {
      return jsonResponse(400, status(400, "BadRequest", "the body is not JSON"));
    }
    if (event?.metadata?.namespace !== namespace) {
      return jsonResponse(400, status(400, "BadRequest", "the namespace does not match the path"));
    }
    this.events.push(event);
    return jsonResponse(201, event);
  }

  /** Serves a list, in pages when `limit` is set (continue tokens carry the list's RV and offset). */
  #list(resource: Resource, params: Record<string, string>): Response {
    let listRV = this.#rv;
    let offset = 0;
    if (params.continue) {
      try {
        const token = JSON.parse(atob(params.continue));
        listRV = Number(token.rv);
        offset = Number(token.offset);
      } catch {
        return jsonResponse(400, status(400, "BadRequest", "invalid continue token"));
      }
      if (listRV < this.#compactedBefore || this.#expireContinue) {
        this.#expireContinue = false;
        return jsonResponse(410, status(410, "Expired", "the continue token has expired"));
      }
    }
    const all = this.#sortedObjects(
      resource,
      params.labelSelector ?? "",
      params.fieldSelector ?? "",
    );
    const limit = Number(params.limit ?? "0");
    const end = limit > 0 ? Math.min(all.length, offset + limit) : all.length;
    const metadata: ApiObject = { resourceVersion: String(listRV) };
    if (end < all.length) metadata.continue = btoa(JSON.stringify({ rv: listRV, offset: end }));
    const { kind, apiVersion } = LIST_TYPES[resource];
    const items = all.slice(offset, end).map((object) => object.json).join(",");
    return new Response(
      `{"kind":"${kind}","apiVersion":"${apiVersion}","metadata":${
        JSON.stringify(metadata)
      },"items":[${items}]}`,
      { status: 200, headers: { "content-type": "application/json" } },
    );
  }

  /** The objects of a resource matching the selectors, sorted by key; cached until it changes. */
  #sortedObjects(resource: Resource, labelSelector: string, fieldSelector: string) {
    let byQuery = this.#sorted.get(resource);
    if (byQuery === undefined) this.#sorted.set(resource, byQuery = new Map());
    const query = `${labelSelector}\n${fieldSelector}`;
    let sorted = byQuery.get(query);
    if (sorted === undefined) {
      const selector = parseSelector(labelSelector, fieldSelector);
      sorted = [...this.#objects[resource].entries()]
        .sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0)
        .map(([, object]) => object)
        .filter(selector);
      byQuery.set(query, sorted);
    }
    return sorted;
  }

  #watch(
    resource: Resource,
    selector: Selector,
    params: Record<string, string>,
  ): Response {
    const gone = this.#goneNext;
    if (gone && (!gone.resource || gone.resource === resource)) {
      this.#goneNext = undefined;
      if (gone.http) return jsonResponse(410, status(410, "Expired", "too old resource version"));
    }
    const from = Number(params.resourceVersion ?? "0") || 0;
    const expired = (gone && (!gone.resource || gone.resource === resource)) ||
      (from !== 0 && from < this.#compactedBefore);
    let watch: OpenWatch | undefined;
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        watch = {
          resource,
          selector,
          controller,
          stalled: false,
          closed: false,
        };
        if (expired) {
          controller.enqueue(encoder.encode(
            JSON.stringify({
              type: "ERROR",
              object: status(410, "Expired", `too old resource version: ${from}`),
            }) + "\n",
          ));
          controller.close();
          watch.closed = true;
          return;
        }
        this.#watches.add(watch);
        if (from === 0) {
          for (const object of this.#objects[resource].values()) {
            if (selector(object)) this.#send(watch, "ADDED", object);
          }
        } else {
          for (const entry of this.#history) {
            if (entry.resource === resource && entry.rv > from && selector(entry.object)) {
              this.#send(watch, entry.type, entry.object);
            }
          }
        }
        watch.stalled = this.#stallNew;
        const timeoutSeconds = Number(params.timeoutSeconds ?? "0");
        if (timeoutSeconds > 0) {
          watch.timer = setTimeout(() => this.#closeWatch(watch!), timeoutSeconds * 1000);
        }
      },
      cancel: () => {
        if (watch) this.#closeWatch(watch);
      },
    });
    return new Response(body, {
      status: 200,
      headers: { "content-type": "application/json" },
    });
  }
}

/**
 * Writes a kubeconfig pointing at `server` with a bearer token
 * `fake-token`, and returns its path. For a TLS server it trusts the
 * server's certificate; for plain HTTP it sets `insecure-skip-tls-verify`,
 * as kubeconfigs for plain HTTP servers usually do.
 *
 * @param server The fake apiserver.
 * @param path Where to write it. @default a new temporary file
 */
export async function writeKubeconfig(server: FakeApiServer, path?: string): Promise<string> {
  const file = path ?? await Deno.makeTempFile({ prefix: "kp-fake-kubeconfig-", suffix: ".yaml" });
  const config = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{
      name: "fake",
      cluster: server.certificateAuthority
        ? {
          server: server.url,
          "certificate-authority-data": btoa(server.certificateAuthority),
        }
        : { server: server.url, "insecure-skip-tls-verify": true },
    }],
    users: [{ name: "fake", user: { token: "fake-token" } }],
    contexts: [{ name: "fake", context: { cluster: "fake", user: "fake" } }],
    "current-context": "fake",
  };
  await Deno.writeTextFile(file, JSON.stringify(config, null, 2));
  return file;
}
