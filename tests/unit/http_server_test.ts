import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { type HttpLimits, HttpServer, serveHttp } from "../../lib/shell/http_server.ts";
import { CLOSING_SLACK, ConnectionLimit } from "../../lib/shell/connection_limit.ts";
import { parseRequestHead } from "../../lib/shell/request_head.ts";
import { fakeClock } from "../support/clock.ts";

const decoder = new TextDecoder();

/** A raw TCP client: what it sends and reads is exactly what crosses the wire. */
class RawClient {
  readonly #conn: Deno.TcpConn;
  #text = "";
  #ended = false;

  private constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
  }

  static async connect(server: HttpServer): Promise<RawClient> {
    return new RawClient(await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port }));
  }

  async send(text: string): Promise<void> {
    await this.#conn.write(new TextEncoder().encode(text));
  }

  /** Reads one whole response: head and `content-length` body (none for a HEAD request). */
  async response(
    options: { head?: boolean } = {},
  ): Promise<{ status: number; headers: Record<string, string>; body: string }> {
    for (;;) {
      const end = this.#text.indexOf("\r\n\r\n");
      if (end >= 0) {
        const [statusLine, ...lines] = this.#text.slice(0, end).split("\r\n");
        const headers = Object.fromEntries(lines.map((line) => {
          const colon = line.indexOf(":");
          return [line.slice(0, colon), line.slice(colon + 1).trim()];
        }));
        const length = options.head ? 0 : Number(headers["content-length"] ?? 0);
        if (this.#text.length >= end + 4 + length) {
          const body = this.#text.slice(end + 4, end + 4 + length);
          this.#text = this.#text.slice(end + 4 + length);
          return { status: Number(statusLine!.split(" ")[1]), headers, body };
        }
      }
      if (!await this.#read()) throw new Error(`Connection ended in a response: ${this.#text}`);
    }
  }

  /** Resolves true once the server has closed the connection (reading whatever comes first). */
  async closed(): Promise<boolean> {
    while (await this.#read());
    return this.#ended;
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  async #read(): Promise<boolean> {
    const chunk = new Uint8Array(4096);
    const n = await this.#conn.read(chunk).catch(() => null);
    if (n === null) {
      this.#ended = true;
      return false;
    }
    this.#text += decoder.decode(chunk.subarray(0, n));
    return true;
  }
}

const echo = (request: Request) =>
  new Response(`${request.method} ${new URL(request.url).pathname}`, {
    headers: { "content-type": "text/plain" },
  });

/** A server on 127.0.0.1 whose timers run on a fake clock. */
function fakeTimeServer(
  options: { limits?: Partial<HttpLimits>; connections?: ConnectionLimit } = {},
) {
  const clock = FakeTimers.createClock(Date.UTC(2026, 0, 1));
  const server = serveHttp({
    hostname: "127.0.0.1",
    port: 0,
    handler: echo,
    clock: fakeClock(clock),
    ...options,
  });
  return { clock, server };
}

Deno.test("parseRequestHead() accepts HTTP/1.x heads and refuses malformed ones", async (t) => {
  assert.deepEqual(parseRequestHead("GET /healthz?x=1 HTTP/1.1\r\nHost: a:1\r\nX-Y:  z "), {
    method: "GET",
    target: "/healthz?x=1",
    minorVersion: 1,
    headers: [["host", "a:1"], ["x-y", "z"]],
  });
  assert.equal(parseRequestHead("GET http://a/livez HTTP/1.0")?.target, "/livez");
  for (
    const bad of [
      "GET /x HTTP/2.0",
      "GET x HTTP/1.1",
      "GET /x y HTTP/1.1",
      "GET /x HTTP/1.1\r\n folded: value",
      "GET /x HTTP/1.1\r\nno colon",
      "GET /x HTTP/1.1\r\nbad name: v",
      "GET /x HTTP/1.1\r\nX: a\x00b",
      "",
    ]
  ) {
    await t.step(JSON.stringify(bad), () => assert.equal(parseRequestHead(bad), undefined));
  }
});

Deno.test("ConnectionLimit closes the connection waiting longest to admit a new one", () => {
  const closed: string[] = [];
  const connection = (name: string) => ({ close: () => closed.push(name) });
  const limit = new ConnectionLimit({ maxConnections: 3 });
  const [a, b, c, d, e] = ["a", "b", "c", "d", "e"].map(connection);
  for (const each of [a!, b!, c!]) assert.equal(limit.admit(each), true);
  limit.busy(a!);
  limit.waiting(b!); // b starts waiting again, after c
  assert.equal(limit.admit(d!), true);
  assert.deepEqual(closed, ["c"]);
  assert.equal(limit.open, 4, "c counts until its socket is released");
  limit.release(c!);
  limit.busy(b!);
  limit.busy(d!);
  assert.equal(limit.admit(e!), false, "every open connection is busy");
  limit.release(a!);
  assert.equal(limit.admit(e!), true);
  assert.equal(limit.open, 3);
  assert.throws(() => new ConnectionLimit({ maxConnections: 0 }), RangeError);
});

Deno.test("ConnectionLimit.settled() waits while too many closed sockets are not freed yet", async () => {
  const limit = new ConnectionLimit({ maxConnections: 1 });
  const connections = Array.from({ length: CLOSING_SLACK + 1 }, () => ({ close() {} }));
  for (const connection of connections) assert.equal(limit.admit(connection), true);
  let settled = false;
  const settling = limit.settled().then(() => settled = true);
  await Promise.resolve();
  assert.equal(settled, false);
  limit.release(connections[0]!);
  await settling;
});

Deno.test("HttpServer answers GET and HEAD, pipelined requests, and closes HTTP/1.0", async () => {
  const server = serveHttp({ hostname: "127.0.0.1", port: 0, handler: echo });
  const client = await RawClient.connect(server);
  try {
    await client.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\n\r\n");
    const first = await client.response();
    assert.equal(first.status, 200);
    assert.equal(first.body, "GET /a");
    assert.equal(first.headers["content-type"], "text/plain");
    assert.match(first.headers["date"] ?? "", /^\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$/);
    assert.equal(first.headers["connection"], undefined);
    const head = await client.response({ head: true });
    assert.equal(head.headers["content-length"], "7");
    await client.send("GET /c HTTP/1.0\r\n\r\n");
    const last = await client.response();
    assert.equal(last.body, "GET /c", "the HEAD answer had no body");
    assert.equal(last.headers["connection"], "close");
    assert.equal(await client.closed(), true);
  } finally {
    client.close();
    await server.shutdown();
  }
});

Deno.test("HttpServer closes a connection whose request head does not arrive in time", async (t) => {
  const { clock, server } = fakeTimeServer({ limits: { readHeaderTimeoutMs: 5_000 } });
  try {
    await t.step("nothing sent", async () => {
      const client = await RawClient.connect(server);
      await clock.tickAsync(4_999);
      await client.send("GET / HTTP/1.1\r\n");
      await clock.tickAsync(1);
      assert.equal(await client.closed(), true);
      client.close();
    });
    await t.step("a head trickling in, a line a second", async () => {
      const client = await RawClient.connect(server);
      await client.send("GET / HTTP/1.1\r\n");
      for (let i = 0; i < 4; i++) {
        await clock.tickAsync(1_000);
        await client.send(`X-Slow-${i}: 1\r\n`);
      }
      await clock.tickAsync(1_000);
      assert.equal(await client.closed(), true);
      client.close();
    });
  } finally {
    await server.shutdown();
  }
});

Deno.test("HttpServer closes a kept-alive connection after the idle timeout", async () => {
  const { clock, server } = fakeTimeServer({
    limits: { readHeaderTimeoutMs: 5_000, idleTimeoutMs: 10_000, writeTimeoutMs: 60_000 },
  });
  const client = await RawClient.connect(server);
  try {
    await client.send("GET /one HTTP/1.1\r\n\r\n");
    assert.equal((await client.response()).body, "GET /one");
    await clock.tickAsync(9_999);
    await client.send("GET /two HTTP/1.1\r\n\r\n");
    assert.equal((await client.response()).body, "GET /two");
    await clock.tickAsync(10_000);
    assert.equal(await client.closed(), true);
  } finally {
    client.close();
    await server.shutdown();
  }
});

Deno.test("HttpServer bounds the request: head and body size, chunked bodies, bad heads", async (t) => {
  const server = serveHttp({
    hostname: "127.0.0.1",
    port: 0,
    handler: echo,
    limits: { maxHeaderBytes: 1024, maxBodyBytes: 100 },
  });
  const cases: [string, string, number][] = [
    ["a head over maxHeaderBytes", `GET / HTTP/1.1\r\nX: ${"a".repeat(2000)}\r\n\r\n`, 431],
    ["a head that never ends", `GET / HTTP/1.1\r\nX: ${"a".repeat(2000)}`, 431],
    ["a malformed request line", "GET /\r\n\r\n", 400],
    ["a body over maxBodyBytes", "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413],
    [
      "two different lengths",
      "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
      400,
    ],
    ["a chunked body", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501],
    ["a forbidden method", "CONNECT / HTTP/1.1\r\n\r\n", 400],
  ];
  try {
    for (const [name, request, status] of cases) {
      await t.step(name, async () => {
        const client = await RawClient.connect(server);
        await client.send(request);
        const response = await client.response();
        assert.equal(response.status, status);
        assert.equal(response.headers["connection"], "close");
        assert.equal(await client.closed(), true);
        client.close();
      });
    }
    await t.step("a small body is read, dropped, and the connection kept", async () => {
      const client = await RawClient.connect(server);
      await client.send(
        "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n\r\n",
      );
      assert.equal((await client.response()).body, "POST /a");
      assert.equal((await client.response()).body, "GET /b");
      client.close();
    });
  } finally {
    await server.shutdown();
  }
});

Deno.test("HttpServer at the shared connection cap closes the longest-waiting connection for a new one", async () => {
  const connections = new ConnectionLimit({ maxConnections: 3 });
  const servers = [0, 1].map(() =>
    serveHttp({ hostname: "127.0.0.1", port: 0, handler: echo, connections })
  );
  const idle: RawClient[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      idle.push(await RawClient.connect(servers[0]!));
      while (connections.open < i + 1) await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const probe = await RawClient.connect(servers[1]!);
    await probe.send("GET /healthz HTTP/1.1\r\n\r\n");
    assert.equal((await probe.response()).body, "GET /healthz");
    assert.equal(await idle[0]!.closed(), true, "the oldest idle connection was closed");
    assert.equal(connections.open, 3);
    probe.close();
  } finally {
    for (const client of idle) client.close();
    await Promise.all(servers.map((server) => server.shutdown()));
  }
});

Deno.test("HttpServer retries failed accepts after 5 ms, doubling to 1 s, and serves on", async () => {
  const real = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const clock = FakeTimers.createClock(0);
  const attempts: number[] = [];
  let failures = 9;
  const listener = {
    addr: real.addr,
    accept() {
      attempts.push(clock.now);
      if (failures-- > 0) {
        return Promise.reject(Object.assign(new Error("Too many open files"), { code: "EMFILE" }));
      }
      return real.accept();
    },
    close: () => real.close(),
  } as unknown as Deno.TcpListener;
  const server = new HttpServer({ listener, handler: echo, clock: fakeClock(clock) });
  try {
    await clock.tickAsync(2_000);
    assert.deepEqual(attempts, [0, 5, 15, 35, 75, 155, 315, 635, 1275]);
    await clock.tickAsync(1_000);
    assert.equal(attempts.at(-1), 2275);
    const client = await RawClient.connect(server);
    await client.send("GET /after HTTP/1.1\r\n\r\n");
    assert.equal((await client.response()).body, "GET /after");
    client.close();
  } finally {
    await server.shutdown();
  }
});

Deno.test("HttpServer closes a connection that does not read its answer within the write timeout", async () => {
  const clock = FakeTimers.createClock(Date.UTC(2026, 0, 1));
  const connections = new ConnectionLimit({ maxConnections: 1 });
  const big = "x".repeat(64 * 1024 * 1024);
  const server = serveHttp({
    hostname: "127.0.0.1",
    port: 0,
    handler: (request) =>
      new URL(request.url).pathname === "/big" ? new Response(big) : echo(request),
    connections,
    clock: fakeClock(clock),
    limits: { readHeaderTimeoutMs: 60_000, writeTimeoutMs: 10_000 },
  });
  const slow = await RawClient.connect(server);
  try {
    await slow.send("GET /big HTTP/1.1\r\n\r\n");
    await new Promise((resolve) => setTimeout(resolve, 200));
    const refused = await RawClient.connect(server);
    assert.equal(await refused.closed(), true, "a busy connection is not closed to make room");
    refused.close();
    await clock.tickAsync(10_000);
    while (connections.open > 0) await new Promise((resolve) => setTimeout(resolve, 5));
    const next = await RawClient.connect(server);
    await next.send("GET /next HTTP/1.1\r\n\r\n");
    assert.equal((await next.response()).body, "GET /next");
    next.close();
  } finally {
    slow.close();
    await server.shutdown();
  }
});
