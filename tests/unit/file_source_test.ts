import assert from "node:assert/strict";
import { FileSource, parseManifest } from "../../lib/source/file.ts";
import type { SourceEvent } from "../../lib/source/source.ts";
import { Tracker } from "../../lib/tracker.ts";

const SERVICE = `apiVersion: v1
kind: Service
metadata: { namespace: default, name: web }
spec:
  clusterIP: 10.96.0.10
  ports: [{ name: http, port: 80, targetPort: 8080 }]
`;

const CONFIGMAP_AND_NODE = `apiVersion: v1
kind: ConfigMap
metadata: { namespace: default, name: ignored }
---
apiVersion: v1
kind: Node
metadata: { name: node-a }
`;

const SLICE_JSON = JSON.stringify({
  apiVersion: "discovery.k8s.io/v1",
  kind: "EndpointSlice",
  metadata: {
    namespace: "default",
    name: "web-1",
    labels: { "kubernetes.io/service-name": "web" },
  },
  addressType: "IPv4",
  endpoints: [{ addresses: ["10.244.1.10"] }],
});

function describe(event: SourceEvent): string {
  if (event.type === "synced") return "synced";
  const metadata = event.object.metadata as Record<string, string>;
  return `${event.type} ${event.kind} ${metadata.namespace ?? ""}/${metadata.name}`;
}

/** Runs a FileSource on a temp dir; `next(n)` waits for n more events. */
async function withSource(
  files: Record<string, string>,
  body: (
    ctx: { dir: string; next: (count: number, timeoutMs?: number) => Promise<string[]> },
  ) => Promise<void>,
) {
  const dir = await Deno.makeTempDir({ prefix: "kp-ingest-file-" });
  const controller = new AbortController();
  const events: string[] = [];
  let waiter: (() => void) | undefined;
  let consumed = 0;
  try {
    for (const [name, text] of Object.entries(files)) {
      await Deno.writeTextFile(`${dir}/${name}`, text);
    }
    const source = new FileSource({ dir, pollIntervalMs: 200, debounceMs: 20 });
    const running = source.start((event) => {
      events.push(describe(event));
      waiter?.();
    }, controller.signal);
    const next = async (count: number, timeoutMs = 3000) => {
      const deadline = Date.now() + timeoutMs;
      while (events.length < consumed + count && Date.now() < deadline) {
        await new Promise<void>((resolve) => {
          waiter = resolve;
          setTimeout(resolve, 50);
        });
      }
      const got = events.slice(consumed, consumed + count);
      consumed += got.length;
      return got;
    };
    await body({ dir, next });
    controller.abort();
    await running;
    assert.deepEqual(events.slice(consumed), [], "no unexpected events");
  } finally {
    controller.abort();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("parseManifest() reads multi-document YAML and List items", () => {
  const objects = parseManifest(
    `${SERVICE}---\nkind: List\nitems: [{ kind: Node }, { kind: Service }]\n---\n`,
    "x.yaml",
  );
  assert.deepEqual(objects.map((o) => o.kind), ["Service", "Node", "Service"]);
  assert.throws(() => parseManifest("a: [", "bad.yaml"), /Cannot parse bad\.yaml/);
});

Deno.test("FileSource.start() loads every manifest, then reports synced", async () => {
  await withSource(
    { "a.yaml": SERVICE, "b.yml": CONFIGMAP_AND_NODE, "c.json": SLICE_JSON, "notes.txt": "x" },
    async ({ next }) => {
      assert.deepEqual(await next(4), [
        "upsert Service default/web",
        "upsert Node /node-a",
        "upsert EndpointSlice default/web-1",
        "synced",
      ]);
    },
  );
});

Deno.test("FileSource.start() skips a file that fails to parse and loads the rest", async () => {
  await withSource({ "a.yaml": SERVICE, "bad.yaml": "kind: [unclosed" }, async ({ next }) => {
    assert.deepEqual(await next(2), ["upsert Service default/web", "synced"]);
  });
});

Deno.test("FileSource follows changes, additions and deletions", async () => {
  await withSource({ "a.yaml": SERVICE, "b.yaml": CONFIGMAP_AND_NODE }, async ({ dir, next }) => {
    assert.equal((await next(3)).at(-1), "synced");

    await Deno.writeTextFile(`${dir}/a.yaml`, SERVICE.replace("10.96.0.10", "10.96.0.11"));
    assert.deepEqual(await next(1), ["upsert Service default/web"]);

    await Deno.writeTextFile(`${dir}/c.json`, SLICE_JSON);
    assert.deepEqual(await next(1), ["upsert EndpointSlice default/web-1"]);

    await Deno.remove(`${dir}/b.yaml`);
    assert.deepEqual(await next(1), ["delete Node /node-a"]);

    await Deno.writeTextFile(`${dir}/a.yaml`, "kind: [broken");
    assert.deepEqual(await next(1, 600), [], "a broken file keeps its last objects");
  });
});

Deno.test("FileSource loads scripts/manifests into a valid tracker state", async () => {
  const tracker = new Tracker({ nodeName: "node-a" });
  const controller = new AbortController();
  const dir = new URL("../../scripts/manifests", import.meta.url).pathname;
  const done = new FileSource({ dir }).start((event) => {
    tracker.apply(event);
    if (event.type === "synced") controller.abort();
  }, controller.signal);
  await done;
  assert.equal(tracker.synced, true);
  const { state, globalChange } = tracker.drain();
  assert.equal(globalChange, true);
  assert.deepEqual([...state.services.keys()].sort(), [
    "default/draining",
    "default/dual-stack",
    "default/local-only",
    "default/no-endpoints",
    "default/prefer-close",
    "default/sticky",
    "default/topology-keys",
    "default/web",
    "default/web-external",
    "default/web-lb",
    "default/web-nodeport",
    "kube-system/kube-dns",
  ]);
  assert.deepEqual(state.services.get("default/dual-stack")?.clusterIPs, [
    "10.96.0.18",
    "fd00:96::10",
  ]);
  assert.equal(state.slicesByService.get("default/dual-stack")?.length, 2);
  assert.deepEqual([...state.nodes.keys()].sort(), ["node-a", "node-b"]);
  assert.deepEqual(state.serviceCIDRs, [{
    name: "kubernetes",
    cidrs: ["10.96.0.0/16", "fd00:96::/112"],
  }]);
  assert.equal(state.services.get("default/web-lb")?.healthCheckNodePort, 32001);
});
