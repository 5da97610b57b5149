import assert from "node:assert/strict";
import { ApiTransport, rootStoreIsEmpty } from "../../lib/shell/source/transport.ts";
import { launchEnvironment } from "../../scripts/launch.ts";
import { testCertificates } from "../../scripts/testbed/tls.ts";

const PAGE = JSON.stringify({
  kind: "ServiceList",
  items: Array(2000).fill({ a: "x".repeat(50) }),
});

async function gzip(text: string): Promise<Uint8Array<ArrayBuffer>> {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

const certificates = await testCertificates();
if (certificates === undefined) {
  console.warn("ApiTransport TLS tests ignored: openssl cannot make test certificates here");
}

/** Both transports, over TLS: Deno's own client (an empty root store) and node:https. */
const TRANSPORTS: [string, boolean][] = [["Deno TLS", true], ["node:https", false]];

/**
 * A loopback HTTPS server answering every GET with `respond`; records each
 * request's Accept-Encoding. The transport trusts the server's CA.
 */
async function withServer(
  respond: (request: Request) => Response | Promise<Response>,
  fn: (url: string, seen: (string | null)[]) => Promise<void>,
): Promise<void> {
  const seen: (string | null)[] = [];
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: certificates!.cert,
    key: certificates!.key,
    onListen: () => {},
  }, (request) => {
    seen.push(request.headers.get("accept-encoding"));
    return respond(request);
  });
  try {
    await fn(`https://127.0.0.1:${server.addr.port}/api/v1/services`, seen);
  } finally {
    await server.shutdown();
  }
}

function get(transport: ApiTransport, url: string, compressed: boolean, signal?: AbortSignal) {
  return transport.get({
    url,
    headers: { Accept: "application/json" },
    signal: signal ?? AbortSignal.timeout(10_000),
    tls: { ca: certificates!.ca },
    compressed,
  });
}

for (const [name, rootStoreEmpty] of TRANSPORTS) {
  const transport = () => new ApiTransport({ rootStoreEmpty });
  const ignore = certificates === undefined;

  Deno.test({
    name:
      `ApiTransport (${name}) asks for a gzip body when told to and hands back the decoded bytes`,
    ignore,
    async fn() {
      const body = await gzip(PAGE);
      await withServer(
        (request) =>
          request.headers.get("accept-encoding") === "gzip"
            ? new Response(body, { headers: { "content-encoding": "gzip" } })
            : new Response(PAGE),
        async (url, seen) => {
          const client = transport();
          try {
            const compressed = await get(client, url, true);
            assert.equal(compressed.headers.get("content-encoding"), null);
            assert.equal(await compressed.text(), PAGE);
            const plain = await get(client, url, false);
            assert.equal(await plain.text(), PAGE);
            assert.deepEqual(seen, ["gzip", null], "a watch (not compressed) does not ask");
          } finally {
            client.close();
          }
        },
      );
    },
  });

  Deno.test({
    name: `ApiTransport (${name}) fails a gzip body that is cut short or corrupt, never hangs`,
    ignore,
    async fn(t) {
      const body = await gzip(PAGE);
      const cases: [string, Uint8Array<ArrayBuffer>][] = [
        ["cut short", body.slice(0, body.length >> 1)],
        ["not gzip", new TextEncoder().encode(PAGE)],
      ];
      for (const [what, bytes] of cases) {
        await t.step(what, async () => {
          await withServer(
            () => new Response(bytes, { headers: { "content-encoding": "gzip" } }),
            async (url) => {
              const client = transport();
              try {
                const response = await get(client, url, true);
                await assert.rejects(response.text());
              } finally {
                client.close();
              }
            },
          );
        });
      }
    },
  });

  Deno.test({
    name: `ApiTransport (${name}): an abort while a gzip body streams fails the read`,
    ignore,
    async fn() {
      const body = await gzip(PAGE);
      let release = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      await withServer(
        () =>
          new Response(
            new ReadableStream({
              async start(controller) {
                controller.enqueue(body.subarray(0, 100));
                await held;
                controller.close();
              },
            }),
            { headers: { "content-encoding": "gzip" } },
          ),
        async (url) => {
          const client = transport();
          const controller = new AbortController();
          try {
            const response = await get(client, url, true, controller.signal);
            const reading = response.text();
            controller.abort(new Error("stopping"));
            await assert.rejects(reading);
          } finally {
            release();
            client.close();
          }
        },
      );
    },
  });
}

Deno.test("rootStoreIsEmpty() holds only for an empty DENO_TLS_CA_STORE without DENO_CERT", () => {
  const cases: [Record<string, string>, boolean][] = [
    [{}, false],
    [{ DENO_TLS_CA_STORE: "" }, true],
    [{ DENO_TLS_CA_STORE: "," }, true],
    [{ DENO_TLS_CA_STORE: " , " }, true],
    [{ DENO_TLS_CA_STORE: "system" }, false],
    [{ DENO_TLS_CA_STORE: ",mozilla" }, false],
    [{ DENO_TLS_CA_STORE: "", DENO_CERT: "/etc/extra.pem" }, false],
    [{ DENO_TLS_CA_STORE: "", DENO_CERT: "" }, false],
  ];
  for (const [env, expected] of cases) {
    assert.equal(rootStoreIsEmpty((name) => env[name]), expected, JSON.stringify(env));
  }
});

Deno.test("ApiTransport with an empty root store refuses an https apiserver without a CA, saying why", async () => {
  const transport = new ApiTransport({ rootStoreEmpty: true });
  try {
    await assert.rejects(
      transport.get({
        url: "https://127.0.0.1:1/api/v1/nodes",
        headers: {},
        signal: AbortSignal.timeout(10_000),
        tls: {},
      }),
      /no certificate-authority is configured.*DENO_TLS_CA_STORE/,
    );
  } finally {
    transport.close();
  }
});

Deno.test("launchEnvironment() empties Deno's root store unless the operator named the stores", () => {
  assert.deepEqual(launchEnvironment(() => undefined), { DENO_TLS_CA_STORE: "" });
  assert.deepEqual(
    launchEnvironment((name) => name === "DENO_TLS_CA_STORE" ? "system" : undefined),
    {},
  );
});
