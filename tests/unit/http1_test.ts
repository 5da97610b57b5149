import assert from "node:assert/strict";
import {
  Http1Client,
  type Http1Sockets,
  HttpProtocolError,
  MAX_HEAD_BYTES,
} from "../../lib/shell/source/http1.ts";
import {
  issueCertificate,
  makeCertificateAuthority,
  opensslUnavailableReason,
} from "../../scripts/testbed/tls.ts";

/** What a scripted server does with one connection: the response's pieces, then close or not. */
interface Script {
  /** Written one after another, each in its own write. */
  pieces: (string | Uint8Array)[];
  /** Close the connection after the last piece. */
  close?: boolean;
}

/**
 * A loopback TCP server answering the n-th request with `scripts[n]` (the
 * last one repeats); records each request head and how many connections it
 * accepted.
 */
async function withScriptedServer(
  scripts: Script[],
  fn: (url: string, seen: { heads: string[]; connections: number }) => Promise<void>,
): Promise<void> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const seen = { heads: [] as string[], connections: 0 };
  const conns = new Set<Deno.Conn>();
  const serving = (async () => {
    for await (const conn of listener) {
      seen.connections++;
      conns.add(conn);
      (async () => {
        const buffer = new Uint8Array(65536);
        let pending = new Uint8Array(0);
        const append = (read: number) => {
          const joined = new Uint8Array(pending.length + read);
          joined.set(pending);
          joined.set(buffer.subarray(0, read), pending.length);
          pending = joined;
        };
        try {
          while (true) {
            const read = await conn.read(buffer);
            if (read === null) return;
            append(read);
            const text = new TextDecoder("latin1").decode(pending);
            const end = text.indexOf("\r\n\r\n");
            if (end < 0) continue;
            const length = Number(/content-length: (\d+)/i.exec(text.slice(0, end))?.[1] ?? 0);
            while (pending.length < end + 4 + length) {
              const more = await conn.read(buffer);
              if (more === null) return;
              append(more);
            }
            seen.heads.push(new TextDecoder().decode(pending.subarray(0, end + 4 + length)));
            pending = pending.slice(end + 4 + length);
            const script = scripts[Math.min(seen.heads.length, scripts.length) - 1]!;
            for (const piece of script.pieces) {
              await conn.write(typeof piece === "string" ? new TextEncoder().encode(piece) : piece);
              await new Promise((resolve) => setTimeout(resolve, 1));
            }
            if (script.close) {
              conn.close();
              return;
            }
          }
        } catch {
          // the client closed the connection
        } finally {
          conns.delete(conn);
        }
      })();
    }
  })();
  try {
    await fn(
      `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/api/v1/services?limit=5`,
      seen,
    );
  } finally {
    listener.close();
    for (const conn of conns) {
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
    await serving.catch(() => {});
  }
}

function get(client: Http1Client, url: string, signal = AbortSignal.timeout(10_000)) {
  return client.request({ url, method: "GET", headers: { Accept: "application/json" }, signal });
}

const BODY = "x".repeat(70_000) + "é";

function chunked(text: string, size: number): string[] {
  const bytes = new TextEncoder().encode(text);
  const pieces: string[] = [];
  for (let i = 0; i < bytes.length; i += size) {
    const part = bytes.subarray(i, i + size);
    pieces.push(`${part.length.toString(16)};ext=1\r\n${new TextDecoder().decode(part)}\r\n`);
  }
  return pieces;
}

Deno.test("Http1Client reads every body framing a server may use", async (t) => {
  const length = new TextEncoder().encode(BODY).length;
  const cases: [string, Script, string][] = [
    ["Content-Length", {
      pieces: [`HTTP/1.1 200 OK\r\nContent-Length: ${length}\r\n\r\n`, BODY],
    }, BODY],
    ["chunked, with extensions and a trailer", {
      pieces: [
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        ...chunked(BODY, 30_000),
        "0\r\nX-Trailer: yes\r\n\r\n",
      ],
    }, BODY],
    ["chunked, delivered a byte at a time", {
      pieces: [
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
        ..."5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n".split(""),
      ],
    }, "hello world"],
    ["until the connection closes", {
      pieces: ["HTTP/1.1 200 OK\r\n\r\n", BODY],
      close: true,
    }, BODY],
    ["after a 100 Continue", {
      pieces: ["HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
    }, "ok"],
    ["HTTP/1.0", { pieces: ["HTTP/1.0 200 OK\r\n\r\nold"], close: true }, "old"],
  ];
  for (const [name, script, expected] of cases) {
    await t.step(name, async () => {
      await withScriptedServer([script], async (url) => {
        const client = new Http1Client();
        try {
          const response = await get(client, url);
          assert.equal(response.status, 200);
          assert.equal(await response.text(), expected);
        } finally {
          client.close();
        }
      });
    });
  }
});

Deno.test("Http1Client sends the request line, Host and headers, and a POST body", async () => {
  await withScriptedServer(
    [{ pieces: ["HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"] }],
    async (url, seen) => {
      const client = new Http1Client();
      try {
        const response = await client.request({
          url,
          method: "POST",
          headers: { Authorization: "Bearer t", "Content-Type": "application/json" },
          body: '{"é":1}',
          signal: AbortSignal.timeout(10_000),
          gzip: true,
        });
        assert.equal(response.status, 201);
        assert.equal(response.statusText, "Created");
        assert.equal(await response.text(), "");
        const port = new URL(url).port;
        assert.equal(
          seen.heads[0],
          `POST /api/v1/services?limit=5 HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
            "Authorization: Bearer t\r\nContent-Type: application/json\r\n" +
            'Accept-Encoding: gzip\r\nContent-Length: 8\r\n\r\n{"é":1}',
        );
      } finally {
        client.close();
      }
    },
  );
});

Deno.test("Http1Client keeps a connection alive unless the response says otherwise", async (t) => {
  const cases: [string, string, number][] = [
    ["HTTP/1.1: reused", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1],
    [
      "Connection: close: not reused",
      "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
      3,
    ],
    [
      "chunked: reused",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
      1,
    ],
  ];
  for (const [name, response, connections] of cases) {
    await t.step(name, async () => {
      await withScriptedServer([{ pieces: [response] }], async (url, seen) => {
        const client = new Http1Client();
        try {
          for (let i = 0; i < 3; i++) assert.equal(await (await get(client, url)).text(), "ok");
          assert.equal(seen.connections, connections);
        } finally {
          client.close();
        }
      });
    });
  }
});

Deno.test("Http1Client sends a GET again on a new connection when an idle one was closed", async () => {
  // The server answers without announcing it, then closes: as an idle time-out does.
  await withScriptedServer(
    [{ pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"], close: true }],
    async (url, seen) => {
      const client = new Http1Client();
      try {
        assert.equal(await (await get(client, url)).text(), "ok");
        await new Promise((resolve) => setTimeout(resolve, 50));
        assert.equal(await (await get(client, url)).text(), "ok");
        assert.equal(seen.connections, 2);
        assert.equal(seen.heads.length, 2);
      } finally {
        client.close();
      }
    },
  );
});

Deno.test("Http1Client fails a malformed or cut response, never hangs", async (t) => {
  const cases: [string, Script, "request" | "body"][] = [
    ["not HTTP", { pieces: ["SSH-2.0-OpenSSH\r\n\r\n"] }, "request"],
    ["a header line without a colon", { pieces: ["HTTP/1.1 200 OK\r\nbroken\r\n\r\n"] }, "request"],
    ["a head larger than the limit", {
      pieces: ["HTTP/1.1 200 OK\r\n", `X-Big: ${"a".repeat(MAX_HEAD_BYTES)}\r\n\r\n`],
    }, "request"],
    ["conflicting Content-Lengths", {
      pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"],
    }, "request"],
    ["a transfer coding other than chunked", {
      pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"],
    }, "request"],
    ["closed before the head", { pieces: ["HTTP/1.1 200"], close: true }, "request"],
    ["a body cut short", {
      pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"],
      close: true,
    }, "body"],
    ["a chunked body cut short", {
      pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"],
      close: true,
    }, "body"],
    ["a malformed chunk size", {
      pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n"],
    }, "body"],
  ];
  for (const [name, script, where] of cases) {
    await t.step(name, async () => {
      await withScriptedServer([script], async (url) => {
        const client = new Http1Client();
        try {
          if (where === "request") {
            await assert.rejects(get(client, url), HttpProtocolError);
          } else {
            const response = await get(client, url);
            await assert.rejects(response.text(), HttpProtocolError);
          }
        } finally {
          client.close();
        }
      });
    });
  }
});

Deno.test("Http1Client refuses a header that would split the request; nothing is sent", async () => {
  await withScriptedServer(
    [{ pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"] }],
    async (url, seen) => {
      const client = new Http1Client();
      try {
        await assert.rejects(
          client.request({
            url,
            method: "GET",
            headers: { Authorization: "Bearer t\r\nX-Injected: 1" },
            signal: AbortSignal.timeout(10_000),
          }),
          TypeError,
        );
        assert.equal(seen.connections, 0);
      } finally {
        client.close();
      }
    },
  );
});

Deno.test("Http1Client: an abort rejects the request or errors the body with its reason", async (t) => {
  await t.step("while the head is awaited", async () => {
    await withScriptedServer([{ pieces: [] }], async (url) => {
      const client = new Http1Client();
      const controller = new AbortController();
      try {
        const pending = get(client, url, controller.signal);
        await new Promise((resolve) => setTimeout(resolve, 20));
        controller.abort(new Error("stopping"));
        await assert.rejects(pending, /stopping/);
      } finally {
        client.close();
      }
    });
  });
  await t.step("while the body streams", async () => {
    await withScriptedServer(
      [{ pieces: ["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n"] }],
      async (url) => {
        const client = new Http1Client();
        const controller = new AbortController();
        try {
          const response = await get(client, url, controller.signal);
          const reader = response.body!.getReader();
          assert.equal(new TextDecoder().decode((await reader.read()).value), "ok");
          const next = reader.read();
          controller.abort(new Error("stopping"));
          await assert.rejects(next, /stopping/);
        } finally {
          client.close();
        }
      },
    );
  });
});

const tlsSkip = await opensslUnavailableReason();

Deno.test({
  name: "Http1Client verifies the server against the CA it is given; no request reaches another",
  ignore: tlsSkip !== undefined,
  async fn() {
    const cluster = await makeCertificateAuthority("cluster-ca");
    const other = await makeCertificateAuthority("other-ca");
    const server = await issueCertificate(cluster);
    const requests: string[] = [];
    const serve = Deno.serve(
      { hostname: "127.0.0.1", port: 0, cert: server.cert, key: server.key, onListen() {} },
      (request) => {
        requests.push(request.url);
        return new Response("ok");
      },
    );
    const url = `https://127.0.0.1:${serve.addr.port}/api/v1/nodes`;
    const client = new Http1Client();
    try {
      const request = (ca: string) =>
        client.request({
          url,
          method: "GET",
          headers: {},
          signal: AbortSignal.timeout(10_000),
          tls: { caCerts: [ca] },
        });
      await assert.rejects(request(other.cert), /certificate/i);
      assert.deepEqual(requests, []);
      assert.equal(await (await request(cluster.cert)).text(), "ok");
      assert.equal(requests.length, 1);
    } finally {
      client.close();
      await serve.shutdown();
    }
  },
});

Deno.test("Http1Client: an abort while the TLS handshake hangs rejects at once", async () => {
  // A server that accepts the connection and never answers the ClientHello.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) held.push(conn);
  })();
  const client = new Http1Client();
  const controller = new AbortController();
  try {
    const pending = client.request({
      url: `https://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/api/v1/nodes`,
      method: "GET",
      headers: {},
      signal: controller.signal,
      tls: { caCerts: [] },
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    controller.abort(new Error("stopping"));
    let fallback: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      pending.then(() => "answered", (error) => String(error)),
      new Promise<string>((resolve) => fallback = setTimeout(() => resolve("hung"), 10_000)),
    ]);
    clearTimeout(fallback);
    assert.match(outcome, /stopping/);
  } finally {
    client.close();
    listener.close();
    for (const conn of held) conn.close();
    await accepting.catch(() => {});
  }
});

Deno.test("Http1Client does not send a GET again when a reused connection answered garbage", async () => {
  await withScriptedServer(
    [
      { pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"] },
      { pieces: ["SSH-2.0-OpenSSH\r\n\r\n"] },
    ],
    async (url, seen) => {
      const client = new Http1Client();
      try {
        assert.equal(await (await get(client, url)).text(), "ok");
        await assert.rejects(get(client, url), HttpProtocolError);
        assert.equal(seen.heads.length, 2, "the request was sent again");
      } finally {
        client.close();
      }
    },
  );
});

/** Deno's own socket functions, each call recorded in order. */
function recordingSockets(): { calls: string[]; sockets: Http1Sockets } {
  const calls: string[] = [];
  const sockets: Http1Sockets = {
    async connect(options) {
      calls.push("connect");
      const conn = await Deno.connect(options);
      const setNoDelay = conn.setNoDelay.bind(conn);
      conn.setNoDelay = (noDelay?: boolean) => {
        calls.push(`setNoDelay ${noDelay}`);
        setNoDelay(noDelay);
      };
      return conn;
    },
    startTls(conn, options) {
      calls.push("startTls");
      return Deno.startTls(conn, options);
    },
    connectTls(options) {
      calls.push(
        `connectTls ${options.cert === undefined ? "without" : "with"} a client certificate`,
      );
      return Deno.connectTls(options);
    },
  };
  return { calls, sockets };
}

/**
 * `openssl s_server -www` on a free loopback port with `server`'s
 * certificate, requiring a client certificate signed by `clientCa` and
 * answering with a page that names it; `groups` limits the key exchange
 * groups (P-256 alone makes a client that offers X25519 first retry its
 * hello, as kube-apiserver does when it prefers X25519MLKEM768).
 */
async function withOpensslServer(
  options: { server: { cert: string; key: string }; clientCa: string; groups?: string },
  fn: (url: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kp-s-server-" });
  await Deno.writeTextFile(`${dir}/server.pem`, options.server.cert);
  await Deno.writeTextFile(`${dir}/server.key`, options.server.key);
  await Deno.writeTextFile(`${dir}/client-ca.pem`, options.clientCa);
  const child = new Deno.Command("openssl", {
    args: [
      "s_server",
      "-accept",
      "127.0.0.1:0",
      "-cert",
      "server.pem",
      "-key",
      "server.key",
      "-CAfile",
      "client-ca.pem",
      "-Verify",
      "1",
      ...options.groups ? ["-groups", options.groups] : [],
      "-www",
    ],
    cwd: dir,
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  try {
    let text = "";
    while (!/ACCEPT \S+:\d+\n/.test(text)) {
      const { value, done } = await lines.read();
      if (done) throw new Error(`openssl s_server ended: ${text}`);
      text += value;
    }
    const port = /ACCEPT \S+:(\d+)\n/.exec(text)![1];
    await fn(`https://127.0.0.1:${port}/`);
  } finally {
    child.kill();
    await lines.cancel().catch(() => {});
    await child.status;
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test({
  name: "Http1Client turns Nagle's algorithm off before a TLS handshake, as Go's transport does",
  ignore: tlsSkip !== undefined,
  async fn(t) {
    // kube-apiserver (Go >= 1.24) asks a client offering X25519 to retry its hello with
    // X25519MLKEM768; the client answers in two writes, and with Nagle on the second waits
    // for the server's delayed ACK: 43 ms more per connection on a 1.36 apiserver.
    const ca = await makeCertificateAuthority("cluster-ca");
    const server = await issueCertificate(ca);
    const serve = Deno.serve(
      { hostname: "127.0.0.1", port: 0, cert: server.cert, key: server.key, onListen() {} },
      () => new Response("ok"),
    );
    try {
      await t.step("https with a token", async () => {
        const { calls, sockets } = recordingSockets();
        const client = new Http1Client({ sockets });
        try {
          const response = await client.request({
            url: `https://127.0.0.1:${serve.addr.port}/api/v1/nodes`,
            method: "GET",
            headers: {},
            signal: AbortSignal.timeout(10_000),
            tls: { caCerts: [ca.cert] },
          });
          assert.equal(await response.text(), "ok");
          assert.deepEqual(calls, ["connect", "setNoDelay true", "startTls"]);
        } finally {
          client.close();
        }
      });
    } finally {
      await serve.shutdown();
    }
    await t.step("plain http", async () => {
      await withScriptedServer(
        [{ pieces: ["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"] }],
        async (url) => {
          const { calls, sockets } = recordingSockets();
          const client = new Http1Client({ sockets });
          try {
            assert.equal(await (await get(client, url)).text(), "ok");
            assert.deepEqual(calls, ["connect", "setNoDelay true"]);
          } finally {
            client.close();
          }
        },
      );
    });
  },
});

Deno.test({
  name: "Http1Client presents a kubeconfig's client certificate, across a hello retry",
  ignore: tlsSkip !== undefined,
  async fn() {
    const ca = await makeCertificateAuthority("cluster-ca");
    const server = await issueCertificate(ca);
    const clientCa = await makeCertificateAuthority("client-ca");
    const client = await issueCertificate(clientCa, "127.0.0.9");
    await withOpensslServer({ server, clientCa: clientCa.cert, groups: "P-256" }, async (url) => {
      const { calls, sockets } = recordingSockets();
      const http = new Http1Client({ sockets });
      try {
        const response = await http.request({
          url,
          method: "GET",
          headers: {},
          signal: AbortSignal.timeout(10_000),
          tls: { caCerts: [ca.cert], cert: client.cert, key: client.key },
        });
        assert.match(
          await response.text(),
          /Client certificate[\s\S]*Subject: CN\s?=\s?127\.0\.0\.9/,
        );
        // Deno.startTls presents no client certificate.
        assert.deepEqual(calls, ["connectTls with a client certificate"]);
      } finally {
        http.close();
      }
    });
  },
});
