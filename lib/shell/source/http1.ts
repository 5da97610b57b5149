/**
 * A small HTTP/1.1 client over Deno's own TCP and TLS connections
 * (`Deno.connect` and `Deno.startTls`, or `Deno.connectTls` with a client
 * certificate), for the apiserver: GETs and POSTs, kept-alive connections,
 * `Content-Length`, chunked and close-delimited bodies, and an optional gzip
 * body decoded by `DecompressionStream`.
 *
 * Every connection has Nagle's algorithm off (`TCP_NODELAY`) before its TLS
 * handshake, as Go's transport has: kube-apiserver (Go 1.24 and later)
 * answers a hello that offers X25519 with a retry request for
 * X25519MLKEM768, the client sends its second hello in two writes, and with
 * Nagle on the second one waits for the server's delayed ACK, 40 ms per new
 * connection. `Deno.startTls` presents no client certificate, so a
 * connection with one goes through `Deno.connectTls`, whose socket keeps
 * Nagle on: that wait stays there, once per connection kept alive.
 *
 * Why not `node:https` or `fetch`: a Deno process that receives one 6 MB
 * body peaks at ~39 MiB over `Deno.connectTls`, ~57 MiB over `fetch` and
 * ~66 MiB over `node:https` (docs/ARCHITECTURE.md, "Apiserver TLS"). The TLS
 * trust contract is the caller's: see `ApiTransport` in `transport.ts`.
 *
 * @module
 */

/** PEM material of one TLS connection. */
export interface Http1Tls {
  /** CAs added to the process's root store for this connection. */
  caCerts: string[];
  cert?: string;
  key?: string;
}

/** One request. */
export interface Http1Request {
  url: string;
  method: "GET" | "POST";
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
  /** TLS material for an `https:` URL. */
  tls?: Http1Tls;
  /** Ask for a gzip body; the Response then carries the decoded bytes. */
  gzip?: boolean;
}

/** Deno's socket functions the client dials with (a seam for tests). */
export interface Http1Sockets {
  connect(options: Deno.ConnectOptions): Promise<Deno.TcpConn>;
  startTls(conn: Deno.TcpConn, options: Deno.StartTlsOptions): Promise<Deno.TlsConn>;
  connectTls(
    options: Deno.ConnectTlsOptions & Partial<Deno.TlsCertifiedKeyPem>,
  ): Promise<Deno.TlsConn>;
}

/** Options of {@linkcode Http1Client}. */
export interface Http1ClientOptions {
  /** @default {Deno's own} */
  sockets?: Http1Sockets;
}

const DENO_SOCKETS: Http1Sockets = {
  connect: (options) => Deno.connect(options),
  startTls: (conn, options) => Deno.startTls(conn, options),
  connectTls: (options) => Deno.connectTls(options as Deno.ConnectTlsOptions),
};

/** The largest response head (status line and headers) accepted. */
export const MAX_HEAD_BYTES = 64 * 1024;
/** Bytes read from a connection at a time. */
const READ_BYTES = 64 * 1024;
/** How long an idle kept-alive connection stays open (Go's `IdleConnTimeout`). */
export const IDLE_TIMEOUT_MS = 90_000;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const FORBIDDEN_IN_VALUE = /[\r\n\0]/;
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: (.*))?$/;
const CHUNK_SIZE = /^([0-9A-Fa-f]{1,15})[ \t]*(?:;.*)?$/;
const NULL_BODY_STATUSES = new Set([204, 205, 304]);

/** A malformed or truncated response; the connection it came on is closed. */
export class HttpProtocolError extends Error {
  override name = "HttpProtocolError";
}

/** One connection and the bytes read from it but not yet consumed. */
class Wire {
  readonly conn: Deno.Conn;
  readonly key: string;
  #buffer = new Uint8Array(READ_BYTES);
  #start = 0;
  #end = 0;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  closed = false;

  constructor(conn: Deno.Conn, key: string) {
    this.conn = conn;
    this.key = key;
  }

  get buffered(): number {
    return this.#end - this.#start;
  }

  /** Reads more bytes; false at the end of the stream. */
  async fill(): Promise<boolean> {
    if (this.#start === this.#end) {
      this.#start = 0;
      this.#end = 0;
    } else if (this.#end === this.#buffer.length) {
      if (this.#start === 0) throw new HttpProtocolError("response head too large");
      this.#buffer.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
    }
    const read = await this.conn.read(this.#buffer.subarray(this.#end));
    if (read === null) return false;
    this.#end += read;
    return true;
  }

  /** The bytes before the next CRLF, as Latin-1, consuming the CRLF; null at a clean end. */
  async line(limit: number): Promise<string | null> {
    let scanned = 0;
    while (true) {
      for (let i = this.#start + scanned; i + 1 < this.#end; i++) {
        if (this.#buffer[i] === 13 && this.#buffer[i + 1] === 10) {
          const text = latin1(this.#buffer.subarray(this.#start, i));
          this.#start = i + 2;
          return text;
        }
      }
      scanned = Math.max(0, this.#end - this.#start - 1);
      if (scanned > limit) throw new HttpProtocolError("response line too long");
      if (!await this.fill()) {
        if (this.#start === this.#end) return null;
        throw new HttpProtocolError("connection closed inside a response line");
      }
    }
  }

  /** A copy of up to `limit` bytes, reading when none is buffered; null at the end of the stream. */
  async some(limit: number): Promise<Uint8Array | null> {
    if (this.#start === this.#end && !await this.fill()) return null;
    const count = Math.min(limit, this.#end - this.#start);
    const piece = this.#buffer.slice(this.#start, this.#start + count);
    this.#start += count;
    return piece;
  }

  /** Writes all of `bytes`. */
  async write(bytes: Uint8Array): Promise<void> {
    let written = 0;
    while (written < bytes.length) written += await this.conn.write(bytes.subarray(written));
  }

  park(onExpiry: () => void): void {
    const timer = setTimeout(onExpiry, IDLE_TIMEOUT_MS);
    Deno.unrefTimer(timer);
    this.#idleTimer = timer;
  }

  unpark(): void {
    clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
  }

  close(): void {
    this.unpark();
    if (this.closed) return;
    this.closed = true;
    closeQuietly(this.conn);
  }
}

/**
 * `opening`'s connection, or the signal's reason as soon as it aborts; a
 * connection that opens after the abort is closed.
 */
async function untilAborted<T extends Deno.Conn>(
  opening: Promise<T>,
  signal: AbortSignal,
): Promise<T> {
  let onAbort = () => {};
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([opening, aborted]);
  } catch (error) {
    opening.then(closeQuietly, () => {});
    throw error;
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

/**
 * `opening`'s TLS connection once its handshake is done: the certificate is
 * checked before a byte of the request (a token) is written.
 */
async function handshake(
  opening: Promise<Deno.TlsConn>,
  signal: AbortSignal,
): Promise<Deno.TlsConn> {
  const tlsConn = await untilAborted(opening, signal);
  try {
    await untilAborted(tlsConn.handshake().then(() => tlsConn), signal);
  } catch (error) {
    closeQuietly(tlsConn);
    throw error;
  }
  return tlsConn;
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // already closed
  }
}

function latin1(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; i += 4096) {
    text += String.fromCharCode(...bytes.subarray(i, Math.min(bytes.length, i + 4096)));
  }
  return text;
}

/** How a response body ends. */
type Framing =
  | { kind: "none" }
  | { kind: "length"; remaining: number }
  | { kind: "chunked" }
  | { kind: "close" };

interface Head {
  minor: number;
  status: number;
  reason: string;
  headers: Headers;
  /** Raw values of the headers that frame the body, lower-cased names. */
  contentLength: string[];
  transferEncoding: string[];
  connection: string;
}

async function readHead(wire: Wire): Promise<Head | null> {
  let budget = MAX_HEAD_BYTES;
  const statusLine = await wire.line(budget);
  if (statusLine === null) return null;
  budget -= statusLine.length + 2;
  const match = STATUS_LINE.exec(statusLine);
  if (!match) {
    throw new HttpProtocolError(`not an HTTP/1.x status line: ${statusLine.slice(0, 80)}`);
  }
  const head: Head = {
    minor: Number(match[1]),
    status: Number(match[2]),
    reason: match[3] ?? "",
    headers: new Headers(),
    contentLength: [],
    transferEncoding: [],
    connection: "",
  };
  while (true) {
    const line = await wire.line(budget);
    if (line === null) throw new HttpProtocolError("connection closed inside the response head");
    budget -= line.length + 2;
    if (budget < 0) throw new HttpProtocolError("response head too large");
    if (line === "") return head;
    const colon = line.indexOf(":");
    const name = colon > 0 ? line.slice(0, colon) : "";
    if (!TOKEN.test(name)) {
      throw new HttpProtocolError(`malformed header line: ${line.slice(0, 80)}`);
    }
    const value = line.slice(colon + 1).trim();
    const lower = name.toLowerCase();
    if (lower === "content-length") head.contentLength.push(value);
    else if (lower === "transfer-encoding") head.transferEncoding.push(value);
    else if (lower === "connection") head.connection += `,${value.toLowerCase()}`;
    try {
      head.headers.append(name, value);
    } catch {
      // a value Headers refuses (control characters): not one kproxy reads
    }
  }
}

function framingOf(head: Head): Framing {
  if (NULL_BODY_STATUSES.has(head.status)) return { kind: "none" };
  if (head.transferEncoding.length > 0) {
    const codings = head.transferEncoding.join(",").split(",").map((c) => c.trim().toLowerCase());
    if (codings.at(-1) !== "chunked" || codings.some((c) => c !== "chunked" && c !== "identity")) {
      throw new HttpProtocolError(
        `unsupported Transfer-Encoding: ${head.transferEncoding.join(", ")}`,
      );
    }
    return { kind: "chunked" };
  }
  if (head.contentLength.length > 0) {
    const values = new Set(head.contentLength.join(",").split(",").map((v) => v.trim()));
    const [value = ""] = values;
    if (values.size !== 1 || !/^\d{1,15}$/.test(value)) {
      throw new HttpProtocolError(`invalid Content-Length: ${head.contentLength.join(", ")}`);
    }
    const length = Number(value);
    return length === 0 ? { kind: "none" } : { kind: "length", remaining: length };
  }
  return { kind: "close" };
}

function reusable(head: Head, framing: Framing): boolean {
  if (framing.kind === "close") return false;
  const tokens = head.connection.split(",").map((t) => t.trim());
  if (tokens.includes("close")) return false;
  return head.minor === 1 || tokens.includes("keep-alive");
}

/** The request's bytes. @throws {TypeError} for a header that could split the request */
function requestBytes(url: URL, request: Http1Request): Uint8Array {
  let text = `${request.method} ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n`;
  const headers: Record<string, string> = { ...request.headers };
  if (request.gzip) headers["Accept-Encoding"] = "gzip";
  const body = request.body === undefined ? undefined : new TextEncoder().encode(request.body);
  if (body !== undefined) headers["Content-Length"] = String(body.length);
  for (const [name, value] of Object.entries(headers)) {
    if (!TOKEN.test(name) || FORBIDDEN_IN_VALUE.test(value)) {
      throw new TypeError(`Cannot send header "${name}": invalid name or value`);
    }
    text += `${name}: ${value}\r\n`;
  }
  const head = new TextEncoder().encode(`${text}\r\n`);
  if (body === undefined) return head;
  const bytes = new Uint8Array(head.length + body.length);
  bytes.set(head);
  bytes.set(body, head.length);
  return bytes;
}

/**
 * Sends HTTP/1.1 requests, keeping idle connections open per origin and TLS
 * material for {@linkcode IDLE_TIMEOUT_MS}. A GET that fails on a reused
 * connection before any response byte arrived (the server closed it while
 * idle) is sent once more on a new connection, as Go's transport does.
 *
 * @example Usage
 * ```ts ignore
 * const client = new Http1Client();
 * const response = await client.request({
 *   url: "https://10.0.0.1:6443/api/v1/nodes",
 *   method: "GET",
 *   headers: { Accept: "application/json" },
 *   signal: AbortSignal.timeout(10_000),
 *   tls: { caCerts: [clusterCaPem] },
 * });
 * ```
 */
export class Http1Client {
  readonly #idle = new Map<string, Wire[]>();
  readonly #open = new Set<Wire>();
  readonly #sockets: Http1Sockets;

  constructor(options: Http1ClientOptions = {}) {
    this.#sockets = options.sockets ?? DENO_SOCKETS;
  }

  /**
   * Sends a request; resolves once the response head arrived. Aborting the
   * signal closes the connection: the promise rejects, or the body errors,
   * with the signal's reason.
   */
  async request(request: Http1Request): Promise<Response> {
    const { signal } = request;
    signal.throwIfAborted();
    const url = new URL(request.url);
    if (url.protocol !== "https:" && url.protocol !== "http:") {
      throw new TypeError(`Cannot request ${url.protocol} URLs`);
    }
    const bytes = requestBytes(url, request);
    const key = `${url.protocol}//${url.host} ${JSON.stringify(request.tls ?? null)}`;
    while (true) {
      const reused = this.#checkOut(key);
      const wire = reused ?? await this.#dial(url, key, request);
      const abort = () => this.#discard(wire);
      signal.addEventListener("abort", abort, { once: true });
      let head: Head | null;
      try {
        signal.throwIfAborted();
        await wire.write(bytes);
        do head = await readHead(wire); while (
          head !== null && head.status >= 100 && head.status < 200 && head.status !== 101
        );
      } catch (error) {
        this.#discard(wire, abort, signal);
        if (signal.aborted) throw signal.reason;
        // A protocol error means the server answered: only a dead connection is retried.
        if (reused && request.method === "GET" && !(error instanceof HttpProtocolError)) continue;
        throw error;
      }
      if (head === null) {
        this.#discard(wire, abort, signal);
        if (reused && request.method === "GET") continue;
        throw new HttpProtocolError("connection closed before a response");
      }
      try {
        return this.#response(wire, head, request, abort);
      } catch (error) {
        this.#discard(wire, abort, signal);
        throw error;
      }
    }
  }

  /** Closes every connection, idle or in use. */
  close(): void {
    for (const wire of this.#open) wire.close();
    this.#open.clear();
    this.#idle.clear();
  }

  async #dial(url: URL, key: string, request: Http1Request): Promise<Wire> {
    const { signal } = request;
    const hostname = url.hostname.replace(/^\[(.*)\]$/, "$1");
    const secure = url.protocol === "https:";
    const port = Number(url.port || (secure ? 443 : 80));
    const tls = request.tls ?? { caCerts: [] };
    let conn: Deno.Conn;
    if (secure && tls.cert !== undefined && tls.key !== undefined) {
      const { cert, key, caCerts } = tls;
      conn = await handshake(
        this.#sockets.connectTls({ hostname, port, caCerts, cert, key }),
        signal,
      );
    } else {
      const tcp = await untilAborted(this.#sockets.connect({ hostname, port, signal }), signal);
      tcp.setNoDelay(true);
      conn = secure
        ? await handshake(
          this.#sockets.startTls(tcp, { hostname, caCerts: tls.caCerts }).catch((error) => {
            closeQuietly(tcp);
            throw error;
          }),
          signal,
        )
        : tcp;
    }
    const wire = new Wire(conn, key);
    this.#open.add(wire);
    return wire;
  }

  #checkOut(key: string): Wire | undefined {
    const idle = this.#idle.get(key);
    const wire = idle?.pop();
    if (idle?.length === 0) this.#idle.delete(key);
    wire?.unpark();
    return wire;
  }

  #release(wire: Wire): void {
    if (wire.closed || !this.#open.has(wire)) return;
    const idle = this.#idle.get(wire.key) ?? [];
    idle.push(wire);
    this.#idle.set(wire.key, idle);
    wire.park(() => {
      const list = this.#idle.get(wire.key);
      const at = list?.indexOf(wire) ?? -1;
      if (at >= 0) list!.splice(at, 1);
      if (list?.length === 0) this.#idle.delete(wire.key);
      this.#discard(wire);
    });
  }

  #discard(wire: Wire, abort?: () => void, signal?: AbortSignal): void {
    if (abort) signal?.removeEventListener("abort", abort);
    wire.close();
    this.#open.delete(wire);
  }

  #response(wire: Wire, head: Head, request: Http1Request, abort: () => void): Response {
    if (head.status === 101 || head.status > 599) {
      throw new HttpProtocolError(`unexpected status ${head.status}`);
    }
    const framing = framingOf(head);
    const keep = reusable(head, framing);
    const { signal } = request;
    const finish = (clean: boolean) => {
      signal.removeEventListener("abort", abort);
      if (clean && keep && wire.buffered === 0) this.#release(wire);
      else this.#discard(wire);
    };
    const reason = /^[\t\x20-\x7e\x80-\xff]*$/.test(head.reason) ? head.reason : "";
    if (framing.kind === "none") {
      finish(true);
      return new Response(null, { status: head.status, statusText: reason, headers: head.headers });
    }
    const read = framedReader(wire, framing);
    let body: ReadableStream<Uint8Array> = new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const piece = await read();
          if (piece === null) {
            finish(true);
            controller.close();
          } else {
            controller.enqueue(piece);
          }
        } catch (error) {
          finish(false);
          controller.error(signal.aborted ? signal.reason : error);
        }
      },
      cancel() {
        finish(false);
      },
    }, { highWaterMark: 0 });
    const headers = head.headers;
    if (request.gzip && headers.get("content-encoding")?.toLowerCase() === "gzip") {
      headers.delete("content-encoding");
      headers.delete("content-length");
      body = body.pipeThrough<Uint8Array>(
        new DecompressionStream("gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>,
      );
    }
    return new Response(body, { status: head.status, statusText: reason, headers });
  }
}

/** Reads a body's next piece under its framing; null once it ended. */
function framedReader(wire: Wire, framing: Framing): () => Promise<Uint8Array | null> {
  switch (framing.kind) {
    case "none":
      return () => Promise.resolve(null);
    case "close":
      return () => wire.some(READ_BYTES);
    case "length": {
      let remaining = framing.remaining;
      return async () => {
        if (remaining === 0) return null;
        const piece = await wire.some(remaining);
        if (piece === null) throw new HttpProtocolError("connection closed before the body's end");
        remaining -= piece.length;
        return piece;
      };
    }
    case "chunked": {
      let remaining = 0;
      let ended = false;
      return async () => {
        if (ended) return null;
        if (remaining === 0) {
          const line = await wire.line(4096);
          if (line === null) throw new HttpProtocolError("connection closed before the body's end");
          const size = CHUNK_SIZE.exec(line);
          if (!size) throw new HttpProtocolError(`malformed chunk size: ${line.slice(0, 40)}`);
          remaining = parseInt(size[1]!, 16);
          if (remaining === 0) {
            // Trailer fields, then the empty line.
            while (true) {
              const trailer = await wire.line(MAX_HEAD_BYTES);
              if (trailer === null) throw new HttpProtocolError("connection closed in the trailer");
              if (trailer === "") break;
            }
            ended = true;
            return null;
          }
        }
        const piece = await wire.some(remaining);
        if (piece === null) throw new HttpProtocolError("connection closed inside a chunk");
        remaining -= piece.length;
        if (remaining === 0) {
          const end = await wire.line(2);
          if (end !== "") throw new HttpProtocolError("chunk not followed by CRLF");
        }
        return piece;
      };
    }
  }
}
