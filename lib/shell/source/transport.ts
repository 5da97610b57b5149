/**
 * The HTTP transport to the apiserver. With a CA from the kubeconfig or the
 * service account, that CA is the only trust anchor, as in client-go: no
 * Mozilla root, no `DENO_CERT`, no system store vouches for the apiserver.
 *
 * Deno's own TLS (`Deno.startTls`, `Deno.connectTls`, `fetch`) adds a
 * connection's CAs to the process's default root store, which
 * `DENO_TLS_CA_STORE` chooses (Mozilla's roots unless set) and `DENO_CERT`
 * extends. A process started with
 * `DENO_TLS_CA_STORE=""` (set and empty) and without `DENO_CERT` has an empty
 * default store: Deno reads both variables when the process first needs the
 * store, and an empty list names no store (`get_root_cert_store` in Deno's
 * `cli/lib/args.rs`). kproxy's launchers start it so (`scripts/launch.ts`,
 * the image's `kproxy.sh`, the systemd unit, the Windows service); then the
 * cluster CA given to {@linkcode Http1Client} is the only anchor, and a
 * request costs a fraction of what `node:https` costs (docs/BENCHMARKS.md:
 * ~27 MiB less resident memory for one 6 MB body).
 *
 * Any other process falls back to {@linkcode NodeTransport} (`node:https`),
 * where Node's contract makes the `ca` option replace the default roots; it
 * is imported on its first request, so a process that never needs it never
 * starts Deno's Node compatibility layer. A
 * plain `http:` apiserver (`--master=http://…`) needs no trust and always goes
 * through {@linkcode Http1Client}.
 *
 * Lists ask for a gzip body, as client-go does (Go's transport asks by
 * default); watches do not, so no event waits in a decompressor; a
 * kubeconfig's `disable-compression` turns it off (`ApiConnection.compress`).
 *
 * @module
 */

import { Http1Client } from "./http1.ts";
import type { NodeTransport } from "./node_transport.ts";
import type { ApiRequest, ApiWrite } from "./api_request.ts";

export type { ApiRequest, ApiWrite, TlsMaterial } from "./api_request.ts";

/** The variable naming Deno's default root stores; "" names none. */
export const ROOT_STORE_VARIABLE = "DENO_TLS_CA_STORE";
/** The variable naming a CA file Deno adds to its default root store. */
export const EXTRA_CA_VARIABLE = "DENO_CERT";

/**
 * Whether this process's default TLS root store is empty: `DENO_TLS_CA_STORE`
 * set to "" (or only separators) and no `DENO_CERT`. Read from the
 * environment the process was started with; a variable kproxy may not read
 * (`--ignore-env`) counts as unset, so the answer is then false.
 */
export function rootStoreIsEmpty(getEnv: (name: string) => string | undefined): boolean {
  const stores = getEnv(ROOT_STORE_VARIABLE);
  if (stores === undefined || stores.split(",").some((store) => store.trim() !== "")) return false;
  return getEnv(EXTRA_CA_VARIABLE) === undefined;
}

/** Options of {@linkcode ApiTransport}. */
export interface ApiTransportOptions {
  /**
   * Whether the process's default root store is empty, so a CA given to a
   * Deno connection is its only anchor. @default {rootStoreIsEmpty(Deno.env.get)}
   */
  rootStoreEmpty?: boolean;
}

/**
 * Sends requests to the apiserver over kept-alive connections, through
 * {@linkcode Http1Client} where the trust contract holds and
 * {@linkcode NodeTransport} otherwise.
 *
 * @example Usage
 * ```ts ignore
 * const transport = new ApiTransport();
 * const response = await transport.get({
 *   url: "https://10.0.0.1:6443/api/v1/nodes",
 *   headers: { Authorization: "Bearer …" },
 *   signal: AbortSignal.timeout(10_000),
 *   tls: { ca: clusterCaPem },
 * });
 * ```
 */
export class ApiTransport {
  readonly #rootStoreEmpty: boolean;
  readonly #native = new Http1Client();
  #node?: Promise<NodeTransport>;

  constructor(options: ApiTransportOptions = {}) {
    this.#rootStoreEmpty = options.rootStoreEmpty ??
      rootStoreIsEmpty((name) => Deno.env.get(name));
  }

  /** Whether an `https:` request with a CA goes through Deno's own TLS. */
  get native(): boolean {
    return this.#rootStoreEmpty;
  }

  /**
   * Sends a GET; resolves with the response once its headers arrived. Aborting
   * the signal rejects the request or errors the response body.
   */
  get(request: ApiRequest): Promise<Response> {
    return this.#route(request, "GET");
  }

  /** Sends a request with a body; resolves with the response once its headers arrived. */
  send(request: ApiWrite): Promise<Response> {
    return this.#route(request, request.method, request.body);
  }

  /** Closes every kept-alive connection. */
  close(): void {
    this.#native.close();
    this.#node?.then((node) => node.close(), () => {});
  }

  #route(request: ApiRequest, method: "GET" | "POST", body?: string): Promise<Response> {
    const { url, headers, signal, tls, compressed } = request;
    if (signal.aborted) return Promise.reject(signal.reason);
    const secure = url.startsWith("https:");
    if (!secure || (this.#rootStoreEmpty && tls.ca !== undefined)) {
      const caCerts = tls.ca === undefined ? [] : [tls.ca];
      return this.#native.request({
        url,
        method,
        headers,
        body,
        signal,
        tls: secure ? { caCerts, cert: tls.cert, key: tls.key } : undefined,
        gzip: compressed,
      });
    }
    if (this.#rootStoreEmpty) {
      return Promise.reject(
        new Error(
          "Cannot verify the apiserver's certificate: no certificate-authority is configured " +
            `and this process's default root store is empty (${ROOT_STORE_VARIABLE}=""); name ` +
            `the cluster's CA in the kubeconfig, or start kproxy without ${ROOT_STORE_VARIABLE}`,
        ),
      );
    }
    this.#node ??= import("./node_transport.ts").then(({ loadNodeTransport }) =>
      loadNodeTransport()
    );
    return this.#node.then((node) =>
      method === "GET" ? node.get(request) : node.send({ ...request, method, body: body ?? "" })
    );
  }
}
