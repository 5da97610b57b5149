/**
 * The HTTP/1.1 server behind kproxy's own endpoints (`/healthz`, `/livez`,
 * `/metrics`, `/statusz` and the health-check node ports), over
 * `Deno.listen`.
 *
 * `Deno.serve` (Deno 2.9) has no header or idle timeout and no connection
 * limit, and its accept loop throws on EMFILE, which ends the process
 * (denoland/deno#10148; a keep-alive timeout is only proposed, #34172). The
 * health port is reachable from the network by design, so this server
 * bounds what a client can hold, as a Go `http.Server` with
 * `ReadHeaderTimeout`, `IdleTimeout` and a connection limit would:
 *
 * - a request head must arrive within `readHeaderTimeoutMs` of the
 *   connection (or of its first byte on a kept-alive connection), and be at
 *   most `maxHeaderBytes`; a body at most `maxBodyBytes` (read and
 *   discarded: these endpoints take none), chunked bodies are refused;
 * - a kept-alive connection may stay quiet for `idleTimeoutMs`; an answer
 *   must be written within `writeTimeoutMs`;
 * - servers share a {@linkcode ConnectionLimit}: at its cap the connection
 *   that has waited longest for a request is closed to admit the new one, so
 *   a flood of idle connections cannot lock out a probe;
 * - an accept error (EMFILE, ENFILE, …) is retried after 5 ms, doubling to
 *   1 s, as Go's accept loop does, instead of ending the process.
 *
 * Requests on one connection are answered in turn.
 *
 * The connection cap is `connection_limit.ts`; request heads are parsed by
 * `request_head.ts`.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import type { Clock } from "../core/clock.ts";
import { systemClock } from "./clock.ts";
import { ConnectionLimit, type LimitedConnection } from "./connection_limit.ts";
import { parseRequestHead, type RequestHead } from "./request_head.ts";

const logger = getLogger(["kproxy", "http"]);

/** What one connection may hold; see the module documentation. */
export interface HttpLimits {
  readHeaderTimeoutMs: number;
  idleTimeoutMs: number;
  writeTimeoutMs: number;
  maxHeaderBytes: number;
  maxBodyBytes: number;
}

/** The limits kproxy serves with. */
const DEFAULT_HTTP_LIMITS: Readonly<HttpLimits> = Object.freeze({
  readHeaderTimeoutMs: 5_000,
  idleTimeoutMs: 10_000,
  writeTimeoutMs: 10_000,
  maxHeaderBytes: 16 * 1024,
  maxBodyBytes: 16 * 1024,
});

/** Answers one request; a throw answers 500. */
export type HttpHandler = (request: Request) => Response | Promise<Response>;

/** Options for {@linkcode HttpServer}. */
export interface HttpServerOptions {
  /** A bound TCP listener; the server owns and closes it. */
  listener: Deno.Listener<Deno.TcpConn, Deno.NetAddr>;
  handler: HttpHandler;
  /** Shuts the server down when aborted. */
  signal?: AbortSignal;
  /** @default {DEFAULT_HTTP_LIMITS} */
  limits?: Partial<HttpLimits>;
  /** Shared with other servers to cap their connections together. @default a limit of its own */
  connections?: ConnectionLimit;
  /** Timers of the deadlines and of the accept backoff, wall time of `Date`. @default {systemClock} */
  clock?: Clock;
}

/** Options for {@linkcode serveHttp}. */
export interface ServeHttpOptions extends Omit<HttpServerOptions, "listener"> {
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** What the server serves, for errors: "metrics (--metrics-bind-address)". @default {"HTTP"} */
  serves?: string;
}

/**
 * Listens on `hostname:port` and serves `handler` there.
 *
 * @throws {Error} "Cannot serve WHAT on HOST:PORT: REASON" when it cannot listen, with what
 * `Deno.listen` threw (e.g. `AddrInUse`) as the cause
 */
export function serveHttp(options: ServeHttpOptions): HttpServer {
  let listener: Deno.Listener<Deno.TcpConn, Deno.NetAddr>;
  try {
    listener = Deno.listen({ hostname: options.hostname, port: options.port });
  } catch (error) {
    const host = options.hostname.includes(":") ? `[${options.hostname}]` : options.hostname;
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(
      `Cannot serve ${options.serves ?? "HTTP"} on ${host}:${options.port}: ${reason}`,
      {
        cause: error,
      },
    );
  }
  return new HttpServer({ ...options, listener });
}

const FIRST_ACCEPT_RETRY_MS = 5;

const LAST_ACCEPT_RETRY_MS = 1_000;

const REASONS: Readonly<Record<number, string>> = {
  200: "OK",
  400: "Bad Request",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  413: "Content Too Large",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
};

const encoder = new TextEncoder();

const latin1 = new TextDecoder("latin1");

/** Where the empty line that ends a request head starts (at or after `from`), and its length. */
function headEnd(bytes: Uint8Array, from: number): { at: number; length: number } | undefined {
  for (let i = Math.max(0, from); i < bytes.length - 1; i++) {
    if (bytes[i] !== 10) continue;
    if (bytes[i + 1] === 10) return { at: i, length: 2 };
    if (bytes[i + 1] === 13 && bytes[i + 2] === 10) return { at: i, length: 3 };
  }
  return undefined;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Why a request gets an error answer instead of the handler's. */
class RequestError extends Error {
  constructor(readonly status: number) {
    super(REASONS[status] ?? String(status));
  }
}

/** One connection: its socket, its deadline and what it has read ahead. */
class Connection implements LimitedConnection {
  readonly conn: Deno.TcpConn;
  readonly #clock: Clock;
  #timer: unknown;
  #closed = false;
  /** Bytes read but not consumed (the start of a pipelined request). */
  buffered: Uint8Array = new Uint8Array(0);
  /** True from a complete request head to the end of its answer. */
  busy = false;

  constructor(conn: Deno.TcpConn, clock: Clock) {
    this.conn = conn;
    this.#clock = clock;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Closes the socket when `ms` pass before the next call (or {@linkcode close}). */
  deadline(ms: number): void {
    this.#clock.clearTimeout(this.#timer);
    this.#timer = this.#clock.setTimeout(() => this.close(), ms);
  }

  close(): void {
    this.#clock.clearTimeout(this.#timer);
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.conn.close();
    } catch {
      // Already closed by the peer's reset.
    }
  }

  /** Reads more bytes into {@linkcode buffered}; false at the end of the stream or when closed. */
  async readMore(): Promise<boolean> {
    const chunk = new Uint8Array(4096);
    let n: number | null;
    try {
      n = await this.conn.read(chunk);
    } catch {
      return false;
    }
    if (n === null || this.#closed) return false;
    this.buffered = concat(this.buffered, chunk.subarray(0, n));
    return true;
  }

  async write(bytes: Uint8Array): Promise<void> {
    let written = 0;
    while (written < bytes.length) written += await this.conn.write(bytes.subarray(written));
  }
}

/**
 * Serves one handler on one listener within {@linkcode HttpLimits} (see the
 * module documentation). Create it with {@linkcode serveHttp}.
 */
export class HttpServer {
  /** The bound address; `port` is the one picked when 0 was asked. */
  readonly addr: Deno.NetAddr;
  /** Resolves once the server has stopped and every connection is closed. */
  readonly finished: Promise<void>;
  readonly #listener: Deno.Listener<Deno.TcpConn, Deno.NetAddr>;
  readonly #handler: HttpHandler;
  readonly #limits: HttpLimits;
  readonly #connections: ConnectionLimit;
  readonly #clock: Clock;
  readonly #own = new Set<Connection>();
  readonly #serving = new Set<Promise<void>>();
  #stopped = false;
  /** Ends the accept loop's pause after an error. */
  #wake?: () => void;

  constructor(options: HttpServerOptions) {
    this.#listener = options.listener;
    this.addr = options.listener.addr;
    this.#handler = options.handler;
    this.#limits = { ...DEFAULT_HTTP_LIMITS, ...options.limits };
    this.#connections = options.connections ?? new ConnectionLimit();
    this.#clock = options.clock ?? systemClock;
    options.signal?.addEventListener("abort", () => this.shutdown(), { once: true });
    this.finished = this.#acceptLoop();
    if (options.signal?.aborted) this.shutdown();
  }

  /**
   * Stops accepting, closes the connections waiting for a request and lets
   * answers in progress finish; resolves with {@linkcode finished}.
   */
  shutdown(): Promise<void> {
    if (!this.#stopped) {
      this.#stopped = true;
      this.#wake?.();
      try {
        this.#listener.close();
      } catch {
        // Already closed.
      }
      for (const connection of this.#own) {
        if (!connection.busy) connection.close();
      }
    }
    return this.finished;
  }

  async #acceptLoop(): Promise<void> {
    let retryMs = 0;
    while (!this.#stopped) {
      let conn: Deno.TcpConn;
      try {
        await this.#connections.settled();
        if (this.#stopped) break;
        conn = await this.#listener.accept();
      } catch (error) {
        if (this.#stopped) break;
        retryMs = retryMs === 0
          ? FIRST_ACCEPT_RETRY_MS
          : Math.min(2 * retryMs, LAST_ACCEPT_RETRY_MS);
        logger[retryMs === FIRST_ACCEPT_RETRY_MS ? "warn" : "debug"](
          "Cannot accept a connection on {address}, retrying in {retryMs} ms: {error}",
          { address: `${this.addr.hostname}:${this.addr.port}`, retryMs, error },
        );
        await this.#pause(retryMs);
        continue;
      }
      retryMs = 0;
      const connection = new Connection(conn, this.#clock);
      if (this.#stopped || !this.#connections.admit(connection)) {
        connection.close();
        continue;
      }
      this.#own.add(connection);
      const serving = this.#serve(connection).catch((error) => {
        logger.debug("A connection ended with an error: {error}", { error });
      }).finally(() => {
        connection.close();
        this.#connections.release(connection);
        this.#own.delete(connection);
        this.#serving.delete(serving);
      });
      this.#serving.add(serving);
    }
    await Promise.all(this.#serving);
  }

  /** Waits `ms`, or less when the server stops. */
  #pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = this.#clock.setTimeout(wake, ms);
      const clock = this.#clock;
      this.#wake = wake;
      function wake() {
        clock.clearTimeout(timer);
        resolve();
      }
    }).finally(() => this.#wake = undefined);
  }

  async #serve(connection: Connection): Promise<void> {
    const limits = this.#limits;
    connection.deadline(limits.readHeaderTimeoutMs);
    for (;;) {
      const head = await this.#readHead(connection);
      if (head === undefined) return;
      connection.busy = true;
      this.#connections.busy(connection);
      const keepAlive = await this.#answer(connection, head);
      connection.busy = false;
      if (!keepAlive || this.#stopped || connection.closed) return;
      this.#connections.waiting(connection);
      if (connection.buffered.length > 0) {
        connection.deadline(limits.readHeaderTimeoutMs);
      } else {
        connection.deadline(limits.idleTimeoutMs);
        if (!await connection.readMore()) return;
        connection.deadline(limits.readHeaderTimeoutMs);
      }
    }
  }

  /**
   * Reads up to the end of a request head; undefined when the connection
   * ended or timed out first. A head too large is answered 431.
   */
  async #readHead(connection: Connection): Promise<string | RequestError | undefined> {
    let searched = 0;
    for (;;) {
      const end = headEnd(connection.buffered, searched - 3);
      if (end !== undefined && end.at > this.#limits.maxHeaderBytes) return new RequestError(431);
      if (end !== undefined) {
        const head = latin1.decode(connection.buffered.subarray(0, end.at));
        connection.buffered = connection.buffered.subarray(end.at + end.length);
        return head.replace(/\r$/, "");
      }
      if (connection.buffered.length > this.#limits.maxHeaderBytes) return new RequestError(431);
      searched = connection.buffered.length;
      if (!await connection.readMore()) return undefined;
    }
  }

  /** Answers one request; true when the connection may serve another. */
  async #answer(connection: Connection, raw: string | RequestError): Promise<boolean> {
    let request: Request;
    let head: RequestHead | undefined;
    try {
      if (raw instanceof RequestError) throw raw;
      head = parseRequestHead(raw);
      if (head === undefined) throw new RequestError(400);
      await this.#discardBody(connection, head);
      request = this.#request(head);
    } catch (error) {
      if (!(error instanceof RequestError)) throw error;
      const status = error.status;
      await this.#write(connection, {
        response: new Response(`${status} ${REASONS[status] ?? ""}\n`, {
          status,
          headers: { "content-type": "text/plain; charset=utf-8" },
        }),
        head,
        keepAlive: false,
      });
      return false;
    }
    let response: Response;
    try {
      response = await this.#handler(request);
    } catch (error) {
      logger.error("Cannot answer {method} {target}: {error}", {
        method: head.method,
        target: head.target,
        error,
      });
      response = new Response("500 Internal Server Error\n", { status: 500 });
    }
    const keepAlive = wantsKeepAlive(head);
    return await this.#write(connection, { response, head, keepAlive }) && keepAlive;
  }

  /** Reads and drops a `Content-Length` body; refuses chunked and oversized ones. */
  async #discardBody(connection: Connection, head: RequestHead): Promise<void> {
    if (head.headers.some(([name]) => name === "transfer-encoding")) throw new RequestError(501);
    const lengths = head.headers.filter(([name]) => name === "content-length").map(([, v]) => v);
    if (lengths.length === 0) return;
    if (!lengths.every((value) => /^\d{1,15}$/.test(value) && value === lengths[0])) {
      throw new RequestError(400);
    }
    let remaining = Number(lengths[0]);
    if (remaining > this.#limits.maxBodyBytes) throw new RequestError(413);
    while (connection.buffered.length < remaining) {
      remaining -= connection.buffered.length;
      connection.buffered = new Uint8Array(0);
      if (!await connection.readMore()) throw new RequestError(400);
    }
    connection.buffered = connection.buffered.subarray(remaining);
  }

  #request(head: RequestHead): Request {
    const host = head.headers.find(([name]) => name === "host")?.[1] ?? "";
    const authority = /^[A-Za-z0-9.:\[\]-]+$/.test(host) ? host : "localhost";
    try {
      return new Request(`http://${authority}${head.target}`, {
        method: head.method,
        headers: head.headers,
      });
    } catch {
      throw new RequestError(400);
    }
  }

  /** Writes `response` within the write deadline; false when the connection broke. */
  async #write(
    connection: Connection,
    answer: { response: Response; head?: RequestHead; keepAlive: boolean },
  ): Promise<boolean> {
    const { response, head, keepAlive } = answer;
    connection.deadline(this.#limits.writeTimeoutMs);
    const body = new Uint8Array(await response.arrayBuffer());
    let text = `HTTP/1.1 ${response.status} ${REASONS[response.status] ?? response.statusText}\r\n`;
    response.headers.forEach((value, name) => {
      if (!["content-length", "connection", "date", "transfer-encoding"].includes(name)) {
        text += `${name}: ${value}\r\n`;
      }
    });
    text += `content-length: ${body.length}\r\n`;
    text += `date: ${new Date(this.#clock.wallNow()).toUTCString()}\r\n`;
    if (!keepAlive) text += "connection: close\r\n";
    else if (head?.minorVersion === 0) text += "connection: keep-alive\r\n";
    const bytes = concat(
      encoder.encode(text + "\r\n"),
      head?.method === "HEAD" ? new Uint8Array(0) : body,
    );
    try {
      await connection.write(bytes);
      return true;
    } catch (error) {
      logger.debug("Cannot write an answer: {error}", { error });
      return false;
    }
  }
}

/** HTTP/1.1 keeps the connection unless it says `close`; HTTP/1.0 only when it says `keep-alive`. */
function wantsKeepAlive(head: RequestHead): boolean {
  const tokens = head.headers
    .filter(([name]) => name === "connection")
    .flatMap(([, value]) => value.toLowerCase().split(",").map((token) => token.trim()));
  if (tokens.includes("close")) return false;
  return head.minorVersion === 1 || tokens.includes("keep-alive");
}
