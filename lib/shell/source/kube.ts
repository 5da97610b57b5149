/**
 * The apiserver source: list and watch Services, EndpointSlices, this node's
 * Node and ServiceCIDRs, and report them as raw API JSON.
 *
 * client-node's informers are not used: their typed deserializer drops
 * fields its model lacks (`spec.topologyKeys`), and they do not restart after
 * errors other than 410 Gone. Instead each resource runs its own list+watch
 * loop over {@linkcode ApiTransport} (which trusts only the cluster's CA), with
 * the connection settings and credentials of {@linkcode loadApiConnection}:
 *
 * - list (in pages), then watch from the list's resourceVersion with bookmarks;
 * - a dropped or ended stream is re-watched from the last resourceVersion seen;
 * - 410 Gone (an ERROR event or an HTTP 410) relists, then upserts what was
 *   listed and deletes what vanished;
 * - a watch silent for longer than the idle timeout is re-established;
 * - failures (HTTP errors, connection refused) retry with capped exponential
 *   backoff, keeping the last known state: nothing is deleted because the
 *   apiserver cannot be reached;
 * - a resource whose API does not exist (404, ServiceCIDRs on older
 *   clusters) counts as empty and is looked for again later.
 *
 * @module
 */

import { getLogger } from "../../core/logger.ts";
import type { ObjectKind, Source, SourceListener } from "../../core/source.ts";
import { systemClock } from "../clock.ts";
import { Backoff, type BackoffOptions, sleep } from "./backoff.ts";
import { type ApiConnection, loadApiConnection } from "./kubeconfig.ts";
import { ListGarbage } from "../list_garbage.ts";
import { ApiTransport } from "./transport.ts";
import { BodyReader } from "./body_text.ts";
import { recordStartingEvent } from "./events.ts";
import { splitListPage, withoutManagedFields } from "../../core/parse/list_page.ts";

const logger = getLogger(["kproxy", "source", "kube"]);

/** Labels that make upstream kube-proxy skip a Service or EndpointSlice. */
const PROXY_LABEL_SELECTOR =
  "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

interface ResourceSpec {
  kind: ObjectKind;
  apiVersion: string;
  path: string;
  labelSelector: string;
  /** A field selector, "" for none. */
  fieldSelector: string;
  /** Whether a 404 means "this cluster has no such API" (treated as empty). */
  optional: boolean;
}

/**
 * What kproxy lists and watches on a node. Only this node's Node, as
 * kube-proxy (`metadata.name=<node>`): a watch of every Node on every node
 * costs the apiserver the square of the cluster's size. What topology needs
 * of other nodes comes from the EndpointSlices (`nodeName`, `zone`).
 */
function resourcesFor(nodeName: string): ResourceSpec[] {
  return [
    {
      kind: "Service",
      apiVersion: "v1",
      path: "/api/v1/services",
      labelSelector: PROXY_LABEL_SELECTOR,
      fieldSelector: "",
      optional: false,
    },
    {
      kind: "EndpointSlice",
      apiVersion: "discovery.k8s.io/v1",
      path: "/apis/discovery.k8s.io/v1/endpointslices",
      labelSelector: PROXY_LABEL_SELECTOR,
      fieldSelector: "",
      optional: false,
    },
    {
      kind: "Node",
      apiVersion: "v1",
      path: "/api/v1/nodes",
      labelSelector: "",
      fieldSelector: `metadata.name=${nodeName}`,
      optional: false,
    },
    {
      kind: "ServiceCIDR",
      apiVersion: "networking.k8s.io/v1",
      path: "/apis/networking.k8s.io/v1/servicecidrs",
      labelSelector: "",
      fieldSelector: "",
      optional: true,
    },
  ];
}

/** Options for {@linkcode KubeSource}. */
export interface KubeSourceOptions {
  /** Path of a kubeconfig file; "" for in-cluster config (or `master` alone). */
  kubeconfig: string;
  /** The apiserver URL; overrides the kubeconfig's server when not "". */
  master: string;
  /** The node kproxy runs on. */
  nodeName: string;
  /** Watch networking.k8s.io/v1 ServiceCIDRs. @default {true} */
  serviceCIDRs?: boolean;
  /** Re-establish a watch that sent nothing (not even a bookmark) for this long. @default {300000} */
  watchIdleTimeoutMs?: number;
  /** `timeoutSeconds` asked of the server on each watch. @default {290} */
  watchTimeoutSeconds?: number;
  /** Retry delays after failures. @default {{ initialMs: 1000, maxMs: 30000 }} */
  backoff?: BackoffOptions;
  /** Objects per list page (`limit`), 0 for unpaginated lists. @default {500} */
  listPageSize?: number;
  /**
   * Objects per page while a list has handed on fewer than `smallListItems`:
   * a small cluster's lists then hold half a page of text at a time (1k
   * Services: ~4 MiB less at the first sync's peak), a large one's are in
   * full pages after the first few. @default {250}
   */
  smallListPageSize?: number;
  /** Objects listed in small pages first. @default {1000} */
  smallListItems?: number;
  /** How often to look again for an API that answered 404. @default {300000} */
  missingApiRetryMs?: number;
}

/** A failed request: an HTTP status, or 0 when the server could not be reached. */
class RequestError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** A watch that lasted this long was healthy even if it carried no event. */
const HEALTHY_WATCH_MS = 10_000;

/** Raised inside a watch to make the loop relist. */
class GoneError extends Error {}

type Json = Record<string, any>;

function metadataOf(object: Json): Json {
  return typeof object.metadata === "object" && object.metadata !== null ? object.metadata : {};
}

function keyOf(object: Json): string {
  const metadata = metadataOf(object);
  return `${metadata.namespace ?? ""}/${metadata.name ?? ""}`;
}

function resourceVersionOf(object: Json): string {
  const rv = metadataOf(object).resourceVersion;
  return typeof rv === "string" ? rv : "";
}

/**
 * The object a relist reports deleted, rebuilt from what is kept of it: its
 * `namespace/name` key and its last resourceVersion.
 */
function deletedObject(resource: ResourceSpec, key: string, resourceVersion: string): Json {
  const slash = key.indexOf("/");
  const namespace = key.slice(0, slash);
  const metadata: Json = { name: key.slice(slash + 1), resourceVersion };
  if (namespace !== "") metadata.namespace = namespace;
  return { kind: resource.kind, apiVersion: resource.apiVersion, metadata };
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  return error.cause instanceof Error
    ? `${error.message}: ${describe(error.cause)}`
    : error.message;
}

/**
 * Reads the four kinds from an apiserver and follows their changes.
 *
 * `start()` emits `upsert` for every listed object, `synced` once every kind
 * has completed its first list, then upserts and deletes as they happen. It
 * resolves when the signal aborts. A delete found by a relist carries only
 * the object's kind, apiVersion and metadata (name, namespace,
 * resourceVersion): only each object's resourceVersion is kept, to save
 * memory.
 *
 * @example Usage
 * ```ts ignore
 * import { KubeSource } from "./kube.ts";
 * const source = new KubeSource({ kubeconfig: "/etc/kproxy/kubeconfig", master: "", nodeName: "node-a" });
 * const controller = new AbortController();
 * await source.start((event) => console.log(event.type), controller.signal);
 * ```
 */
export class KubeSource implements Source {
  readonly #connection: ApiConnection;
  readonly #resources: readonly ResourceSpec[];
  readonly #idleMs: number;
  readonly #timeoutSeconds: number;
  readonly #backoff: BackoffOptions;
  readonly #missingRetryMs: number;
  readonly #pageSize: number;
  readonly #smallPageSize: number;
  readonly #smallListItems: number;
  readonly #nodeName: string;
  readonly #transport = new ApiTransport();
  readonly #garbage = new ListGarbage();
  #warnedInsecure = false;

  /**
   * Configures the client: the kubeconfig file, else in-cluster config when
   * KUBERNETES_SERVICE_HOST is set; `master` overrides the server.
   *
   * @throws {Error} when no apiserver is configured or the kubeconfig is unusable.
   */
  constructor(options: KubeSourceOptions) {
    this.#connection = loadApiConnection(options);
    this.#resources = resourcesFor(options.nodeName).filter((r) =>
      r.kind !== "ServiceCIDR" || options.serviceCIDRs !== false
    );
    this.#idleMs = options.watchIdleTimeoutMs ?? 300_000;
    this.#timeoutSeconds = options.watchTimeoutSeconds ?? 290;
    this.#backoff = options.backoff ?? { initialMs: 1000, maxMs: 30_000 };
    this.#missingRetryMs = options.missingApiRetryMs ?? 300_000;
    this.#pageSize = options.listPageSize ?? 500;
    this.#smallPageSize = Math.min(options.smallListPageSize ?? 250, this.#pageSize);
    this.#smallListItems = options.smallListItems ?? 1000;
    this.#nodeName = options.nodeName;
  }

  /** Creates kube-proxy's `Starting` event on this node's Node; see `events.ts`. */
  recordStarting(signal: AbortSignal): Promise<void> {
    return recordStartingEvent({
      connection: this.#connection,
      transport: this.#transport,
      nodeName: this.#nodeName,
      signal,
      backoff: this.#backoff,
    });
  }

  /** The apiserver URL in use. */
  get server(): string {
    return this.#connection.server;
  }

  /** Lists and watches every kind until `signal` aborts. */
  async start(listener: SourceListener, signal: AbortSignal): Promise<void> {
    logger.info("Listing from the apiserver at {server} ({origin} settings)", {
      server: this.#connection.server,
      origin: this.#connection.origin,
      tls: this.#transport.native ? "deno" : "node",
    });
    const pending = new Set(this.#resources.map((r) => r.kind));
    const onListed = (kind: ObjectKind) => {
      if (!pending.delete(kind) || pending.size > 0 || signal.aborted) return;
      logger.info("Initial lists complete");
      listener({ type: "synced" });
    };
    try {
      await Promise.all(
        this.#resources.map((resource) => this.#run(resource, { listener, signal, onListed })),
      );
    } finally {
      this.#transport.close();
    }
  }

  /** The list+watch loop of one resource. */
  async #run(
    resource: ResourceSpec,
    context: {
      listener: SourceListener;
      signal: AbortSignal;
      onListed: (kind: ObjectKind) => void;
    },
  ): Promise<void> {
    const { listener, signal } = context;
    /** The resourceVersion of each object last reported, by namespace/name. */
    const known = new Map<string, string>();
    const backoff = new Backoff(this.#backoff);
    let resourceVersion = "";
    let needList = true;
    let listed = false;
    let goneInARow = 0;
    while (!signal.aborted) {
      try {
        if (needList) {
          const seen = new Set<string>();
          const list = await this.#list(resource, signal, (object) => {
            seen.add(keyOf(object));
            this.#upsertListed(resource, known, object, listener);
          });
          this.#deleteUnseen(resource, known, seen, listener);
          if (list === null) {
            if (!listed) {
              logger.info("No {kind} API on the apiserver, treating as empty", {
                kind: resource.kind,
              });
            }
            listed = true;
            context.onListed(resource.kind);
            await sleep(this.#missingRetryMs, signal);
            continue;
          }
          resourceVersion = list.resourceVersion;
          needList = false;
          backoff.reset();
          if (!listed) {
            listed = true;
            context.onListed(resource.kind);
          }
        }
        const started = systemClock.now();
        const outcome = await this.#watch(resource, resourceVersion, signal, (type, object) => {
          const rv = resourceVersionOf(object);
          if (rv !== "") resourceVersion = rv;
          if (type === "BOOKMARK") return;
          object.kind ??= resource.kind;
          const key = keyOf(object);
          if (type === "DELETED") {
            if (known.delete(key)) listener({ type: "delete", kind: resource.kind, object });
          } else {
            known.set(key, resourceVersionOf(object));
            listener({ type: "upsert", kind: resource.kind, object });
          }
        });
        const healthy = outcome.received || systemClock.now() - started >= HEALTHY_WATCH_MS;
        if (healthy) {
          backoff.reset();
          goneInARow = 0;
        }
        if (outcome.ending === "idle") {
          logger.warn("Watch of {kind} sent nothing for {ms} ms, re-establishing it", {
            kind: resource.kind,
            ms: this.#idleMs,
          });
        } else if (!healthy && !signal.aborted) {
          await sleep(backoff.next(), signal);
        }
      } catch (error) {
        if (signal.aborted) break;
        // Missing permissions never heal by retrying: fail loudly.
        if (error instanceof Deno.errors.NotCapable) throw error;
        if (error instanceof GoneError) {
          logger.info("Watch of {kind} expired (410 Gone), relisting", { kind: resource.kind });
          needList = true;
          if (++goneInARow > 1) await sleep(backoff.next(), signal);
          continue;
        }
        const wait = backoff.next();
        logger.warn("Cannot {phase} {kind}, retrying in {wait} ms: {error}", {
          phase: needList ? "list" : "watch",
          kind: resource.kind,
          wait,
          error: describe(error),
        });
        await sleep(wait, signal);
      }
    }
  }

  /**
   * Emits an upsert for a listed object, unless the listener already has it
   * at the same resourceVersion (a list restarted after its continuation
   * expired, or a relist after 410 Gone, repeats unchanged objects).
   */
  #upsertListed(
    resource: ResourceSpec,
    known: Map<string, string>,
    object: Json,
    listener: SourceListener,
  ): void {
    const key = keyOf(object);
    const version = resourceVersionOf(object);
    if (version !== "" && known.get(key) === version) return;
    known.set(key, version);
    listener({ type: "upsert", kind: resource.kind, object });
  }

  /** Emits deletes for known objects a complete list did not contain. */
  #deleteUnseen(
    resource: ResourceSpec,
    known: Map<string, string>,
    seen: ReadonlySet<string>,
    listener: SourceListener,
  ): void {
    for (const [key, version] of known) {
      if (seen.has(key)) continue;
      known.delete(key);
      listener({
        type: "delete",
        kind: resource.kind,
        object: deletedObject(resource, key, version),
      });
    }
  }

  /**
   * Lists a resource page by page, handing each item to `onItem` as it is
   * parsed: no more than one page of JSON text and one raw object are held at
   * a time. A page whose text is not JSON fails the list, after the items
   * before the fault were handed on. Returns the list's resourceVersion, or
   * null when the API does not exist and the resource is optional.
   *
   * @throws {GoneError} when a continuation expired: the list must restart.
   */
  async #list(
    resource: ResourceSpec,
    signal: AbortSignal,
    onItem: (object: Json) => void,
  ): Promise<{ resourceVersion: string } | null> {
    const pages = new BodyReader();
    let resourceVersion = "";
    let continueToken = "";
    let listed = 0;
    do {
      const query = new URLSearchParams();
      if (resource.labelSelector) query.set("labelSelector", resource.labelSelector);
      if (resource.fieldSelector) query.set("fieldSelector", resource.fieldSelector);
      if (this.#pageSize > 0) {
        const small = listed < this.#smallListItems && this.#smallPageSize > 0;
        query.set("limit", String(small ? this.#smallPageSize : this.#pageSize));
      }
      if (continueToken !== "") query.set("continue", continueToken);
      const response = await this.#request(
        `${resource.path}?${query}`,
        signal,
        this.#connection.compress,
      );
      if (response.status === 404 && resource.optional) {
        await response.body?.cancel();
        return null;
      }
      if (response.status === 410 && continueToken !== "") {
        await response.body?.cancel();
        throw new GoneError("list continuation expired");
      }
      if (response.status !== 200) throw await this.#statusError(response);
      const text = await pages.text(response);
      this.#garbage.listed(text.length);
      const { envelope: list, items } = splitListPage(text);
      listed += items.length;
      const apiVersion = typeof list.apiVersion === "string" ? list.apiVersion : undefined;
      for (let i = 0; i < items.length; i++) {
        const item = JSON.parse(withoutManagedFields(items[i]!));
        items[i] = "";
        if (typeof item !== "object" || item === null || Array.isArray(item)) continue;
        // Items of a list carry no kind/apiVersion; give them their own for consumers.
        item.kind ??= resource.kind;
        if (apiVersion) item.apiVersion ??= apiVersion;
        onItem(item);
      }
      if (continueToken === "") resourceVersion = resourceVersionOf(list);
      const next = metadataOf(list).continue;
      continueToken = typeof next === "string" ? next : "";
    } while (continueToken !== "");
    this.#garbage.ended();
    return { resourceVersion };
  }

  /**
   * Watches from `resourceVersion` until the stream ends, fails, or stays
   * idle too long.
   *
   * @throws {GoneError} on 410 Gone; {RequestError} on other failures.
   */
  async #watch(
    resource: ResourceSpec,
    resourceVersion: string,
    signal: AbortSignal,
    onEvent: (type: string, object: Json) => void,
  ): Promise<{ received: boolean; ending: "end" | "idle" | "aborted" }> {
    const query = new URLSearchParams({
      watch: "1",
      resourceVersion,
      allowWatchBookmarks: "true",
      timeoutSeconds: String(this.#timeoutSeconds),
    });
    if (resource.labelSelector) query.set("labelSelector", resource.labelSelector);
    if (resource.fieldSelector) query.set("fieldSelector", resource.fieldSelector);
    const local = new AbortController();
    let idle = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        idle = true;
        local.abort();
      }, this.#idleMs);
    };
    let received = false;
    try {
      arm();
      const response = await this.#request(
        `${resource.path}?${query}`,
        AbortSignal.any([signal, local.signal]),
      );
      if (response.status === 410) {
        await response.body?.cancel();
        throw new GoneError("410 Gone");
      }
      if (response.status !== 200 || !response.body) throw await this.#statusError(response);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      while (true) {
        const { value, done } = await reader.read();
        if (done) break;
        arm();
        buffer += value;
        let newline: number;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, newline).trim();
          buffer = buffer.slice(newline + 1);
          if (line === "") continue;
          const event = JSON.parse(line) as Json;
          const type = String(event.type);
          const object = (event.object ?? {}) as Json;
          if (type === "ERROR") {
            if (object.code === 410) throw new GoneError(String(object.message ?? "410 Gone"));
            throw new RequestError(Number(object.code) || 0, `watch error: ${object.message}`);
          }
          received = true;
          onEvent(type, object);
        }
      }
      return { received, ending: "end" };
    } catch (error) {
      if (idle) return { received, ending: "idle" };
      if (signal.aborted) return { received, ending: "aborted" };
      throw error;
    } finally {
      clearTimeout(timer);
      local.abort();
    }
  }

  async #statusError(response: Response): Promise<RequestError> {
    let message = "";
    try {
      const body = await response.json() as Json;
      message = typeof body.message === "string" ? body.message : "";
    } catch {
      // not a Status object
    }
    return new RequestError(
      response.status,
      `HTTP ${response.status}${message === "" ? "" : `: ${message}`}`,
    );
  }

  async #request(pathAndQuery: string, signal: AbortSignal, compressed = false): Promise<Response> {
    const credentials = await this.#connection.credentials();
    const url = `${this.#connection.server}${pathAndQuery}`;
    if (url.startsWith("https:") && credentials.insecureSkipTLSVerify && !this.#warnedInsecure) {
      this.#warnedInsecure = true;
      logger.warn("insecure-skip-tls-verify is not supported; verifying the apiserver certificate");
    }
    const { ca, cert, key } = credentials;
    return await this.#transport.get({
      url,
      headers: { Accept: "application/json", ...credentials.headers },
      signal,
      tls: { ca, cert, key },
      compressed,
    });
  }
}
