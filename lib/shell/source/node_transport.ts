/**
 * The apiserver transport over `node:https`, for processes whose default root
 * store is not empty (see `ApiTransport` in `transport.ts`): Node's contract, where
 * the `ca` option replaces the default roots, makes the cluster CA the only
 * trust anchor there; verification is forced on (`rejectUnauthorized`), so
 * `NODE_TLS_REJECT_UNAUTHORIZED=0` cannot turn it off. Responses come back as
 * web {@linkcode Response}s.
 *
 * Lists ask for a gzip body, as client-go does: a tenth of the bytes go
 * through TLS and node's streams, whose pieces, freed only by the next
 * collections, had left ~50 MiB of glibc heap behind the 64 MB of a
 * 10k-Service list (docs/BENCHMARKS.md).
 *
 * The `node:` modules are imported by {@linkcode loadNodeTransport}, on the
 * first request that needs them: a bundle hoists every static import of a
 * `node:` module to its top, and any of them starts Deno's Node
 * compatibility layer.
 *
 * @module
 */

import type http from "node:http";
import type https from "node:https";
import type stream from "node:stream";
import type zlib from "node:zlib";

import type { ApiRequest, ApiWrite, TlsMaterial } from "./api_request.ts";

/** Statuses whose Response may not carry a body. */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/** Bytes of decoded body per piece a gzip body is read in: few pieces per page. */
const GUNZIP_CHUNK = 256 * 1024;

/** The `node:` modules the transport runs on. */
interface NodeModules {
  https: typeof https;
  stream: typeof stream;
  zlib: typeof zlib;
}

/** Imports the `node:` modules, then makes a transport on them. */
export async function loadNodeTransport(): Promise<NodeTransport> {
  const [httpsModule, streamModule, zlibModule] = await Promise.all([
    import("node:https"),
    import("node:stream"),
    import("node:zlib"),
  ]);
  return new NodeTransport({
    https: httpsModule.default,
    stream: streamModule.default,
    zlib: zlibModule.default,
  });
}

/** The body of a node response, decoded when it came gzip-compressed. */
function decodedBody(node: NodeModules, incoming: http.IncomingMessage): stream.Readable {
  if (incoming.headers["content-encoding"] !== "gzip") return incoming;
  // pipeline: a cut connection or an abort (destroying `incoming`) fails the decoder too.
  return node.stream.pipeline(
    incoming,
    node.zlib.createGunzip({ chunkSize: GUNZIP_CHUNK }),
    () => {},
  );
}

/** A web Response streaming a node response's body. */
function toResponse(node: NodeModules, incoming: http.IncomingMessage): Response {
  const status = incoming.statusCode ?? 0;
  const headers = new Headers();
  const gzip = incoming.headers["content-encoding"] === "gzip";
  for (const [name, value] of Object.entries(incoming.headers)) {
    if (value === undefined) continue;
    // The encoding and length describe the bytes on the wire, not the decoded body.
    if (gzip && (name === "content-encoding" || name === "content-length")) continue;
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  let body: ReadableStream<Uint8Array> | null = null;
  if (NULL_BODY_STATUSES.has(status)) incoming.resume();
  else {
    body = node.stream.Readable.toWeb(decodedBody(node, incoming)) as ReadableStream<Uint8Array>;
  }
  return new Response(body, { status, statusText: incoming.statusMessage ?? "", headers });
}

/**
 * Sends `https:` requests over keep-alive connections (plain `http:` goes
 * through `http1.ts`). One agent is kept for the current TLS material and
 * replaced when the material changes (an exec plugin's rotated client
 * certificate).
 *
 * @example Usage
 * ```ts ignore
 * const transport = await loadNodeTransport();
 * const response = await transport.get({
 *   url: "https://10.0.0.1:6443/api/v1/nodes",
 *   headers: { Authorization: "Bearer …" },
 *   signal: AbortSignal.timeout(10_000),
 *   tls: { ca: clusterCaPem },
 * });
 * ```
 */
export class NodeTransport {
  readonly #node: NodeModules;
  #https?: https.Agent;
  #httpsKey = "";

  constructor(node: NodeModules) {
    this.#node = node;
  }

  /**
   * Sends a GET; resolves with the response once its headers arrived. Aborting
   * the signal rejects the request or errors the response body.
   */
  get(request: ApiRequest): Promise<Response> {
    return this.#send(request, "GET");
  }

  /** Sends a request with a body; resolves with the response once its headers arrived. */
  send(request: ApiWrite): Promise<Response> {
    return this.#send(request, request.method, request.body);
  }

  #send(request: ApiRequest, method: string, body?: string): Promise<Response> {
    const { signal } = request;
    if (signal.aborted) return Promise.reject(signal.reason);
    if (!request.url.startsWith("https:")) {
      return Promise.reject(new TypeError(`NodeTransport sends https: only, not ${request.url}`));
    }
    const agent = this.#httpsAgent(request.tls);
    return new Promise((resolve, reject) => {
      // Deno's node:http misses an abort that comes while the response is
      // awaited, so the signal is handled here rather than passed on.
      const headers = request.compressed
        ? { ...request.headers, "Accept-Encoding": "gzip" }
        : request.headers;
      const outgoing = this.#node.https.request(request.url, { method, agent, headers });
      let incoming: http.IncomingMessage | undefined;
      const abort = () => {
        outgoing.destroy(signal.reason);
        incoming?.destroy(signal.reason);
        reject(signal.reason);
      };
      const settled = () => signal.removeEventListener("abort", abort);
      signal.addEventListener("abort", abort, { once: true });
      outgoing.on("error", (error) => {
        settled();
        reject(error);
      });
      outgoing.on("response", (response: http.IncomingMessage) => {
        incoming = response;
        response.on("close", settled);
        resolve(toResponse(this.#node, response));
      });
      outgoing.end(body);
    });
  }

  /** Closes every kept-alive connection. */
  close(): void {
    this.#https?.destroy();
    this.#https = undefined;
    this.#httpsKey = "";
  }

  #httpsAgent(tls: TlsMaterial): https.Agent {
    const key = JSON.stringify([tls.ca, tls.cert, tls.key]);
    if (this.#https !== undefined && key === this.#httpsKey) return this.#https;
    this.#https?.destroy();
    const options: https.AgentOptions = { keepAlive: true, rejectUnauthorized: true };
    if (tls.ca !== undefined) options.ca = tls.ca;
    if (tls.cert !== undefined && tls.key !== undefined) {
      options.cert = tls.cert;
      options.key = tls.key;
    }
    this.#https = new this.#node.https.Agent(options);
    this.#httpsKey = key;
    return this.#https;
  }
}
