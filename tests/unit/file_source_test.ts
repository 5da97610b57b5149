import assert from "node:assert/strict";
import { FileSource, type FileSourceOptions } from "../../lib/shell/source/file.ts";
import { parseManifest } from "../../lib/shell/source/manifest.ts";
import type { SourceEvent } from "../../lib/core/source.ts";
import { Tracker } from "../../lib/core/tracker.ts";
import { withLogRecords } from "../support/logs.ts";
import { dump, loadAll } from "js-yaml";

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
  files: Record<string, string | { link: string } | { directory: true }>,
  body: (
    ctx: { dir: string; next: (count: number, timeoutMs?: number) => Promise<string[]> },
  ) => Promise<void>,
  options: Partial<FileSourceOptions> = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "kp-ingest-file-" });
  const controller = new AbortController();
  const events: string[] = [];
  let waiter: (() => void) | undefined;
  let consumed = 0;
  try {
    for (const [name, entry] of Object.entries(files)) {
      if (typeof entry === "string") await Deno.writeTextFile(`${dir}/${name}`, entry);
      else if ("link" in entry) await Deno.symlink(entry.link, `${dir}/${name}`);
      else await Deno.mkdir(`${dir}/${name}`);
    }
    const source = new FileSource({ dir, pollIntervalMs: 200, debounceMs: 20, ...options });
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

Deno.test("FileSource.start() rejects a directory it cannot read, reporting no synced", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kp-ingest-file-" });
  await Deno.remove(dir);
  const events: string[] = [];
  const source = new FileSource({ dir, pollIntervalMs: 50 });
  await assert.rejects(
    source.start((event) => events.push(describe(event)), AbortSignal.timeout(2000)),
    (error: Error) => error.message.includes(dir),
  );
  assert.deepEqual(events, []);
});

Deno.test("FileSource keeps every object while its directory is gone, and resumes when it returns", async () => {
  const parent = await Deno.makeTempDir({ prefix: "kp-ingest-parent-" });
  try {
    await withLogRecords(["kproxy", "source", "file"], async (records) => {
      await withSource({ "a.yaml": SERVICE }, async ({ dir, next }) => {
        assert.deepEqual(await next(2), ["upsert Service default/web", "synced"]);
        await Deno.rename(dir, `${parent}/moved`);
        assert.deepEqual(await next(1, 800), [], "no delete while the directory is gone");
        const errors = records.filter((record) => record.level === "error");
        assert.equal(errors.length, 1, "logged once");
        assert.match(String(errors[0]!.message.join("")), /Cannot read manifests directory/);
        await Deno.rename(`${parent}/moved`, dir);
        await Deno.writeTextFile(`${dir}/a.yaml`, SERVICE.replace("10.96.0.10", "10.96.0.11"));
        assert.deepEqual(await next(1), ["upsert Service default/web"]);
      });
    });
  } finally {
    await Deno.remove(parent, { recursive: true });
  }
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
  const tracker = new Tracker({ nodeName: "node-a", clock: { now: () => 0 } });
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

/** Neither YAML nor JSON: the parse error is where contents would leak. */
const SECRET = "token: kproxy-test-secret\n- root:$6$kproxy-test-secret:20228:0:99999:7:::\n";

function messages(records: { message: readonly unknown[] }[]): string[] {
  return records.map((record) => record.message.map(String).join(""));
}

Deno.test("parseManifest() errors name file:line:column and never quote the file", () => {
  const cases: [string, string][] = [
    [SECRET, "x.yaml:2:1: "],
    ['a: b\nkey: "kproxy-test-secret\n', "x.yaml:3:1: "],
    ["a: b\nkey: !<!kproxy-test-secret> x\n", "x.yaml:2:"],
  ];
  for (const [text, where] of cases) {
    assert.throws(
      () => parseManifest(text, "x.yaml"),
      (error: Error) => {
        assert.ok(error.message.startsWith(`Cannot parse ${where}`), error.message);
        assert.doesNotMatch(error.message, /kproxy-test-secret|root|daemon/);
        return true;
      },
    );
  }
  assert.throws(
    () => parseManifest(`{"kind": "List", "items": [kproxy-test-secret}`, "x.json"),
    (error: Error) => {
      assert.match(error.message, /^Cannot parse x\.json:1:\d+: /);
      assert.doesNotMatch(error.message, /kproxy-test-secret/);
      return true;
    },
  );
});

Deno.test("parseManifest() reads List JSON as kubectl prints it, and typed *List kinds", () => {
  const kubectlJson = JSON.stringify(
    {
      apiVersion: "v1",
      kind: "List",
      metadata: { resourceVersion: "" },
      items: [JSON.parse(SLICE_JSON), { apiVersion: "v1", kind: "Node", metadata: { name: "n" } }],
    },
    null,
    4,
  );
  assert.deepEqual(parseManifest(kubectlJson, "dump.json").map((o) => o.kind), [
    "EndpointSlice",
    "Node",
  ]);
  // The same dump saved as .yaml, and a YAML List.
  assert.equal(parseManifest(kubectlJson, "dump.yaml").length, 2);
  // What the API itself serves: items of a typed list carry no kind.
  const serviceList = parseManifest(
    `apiVersion: v1\nkind: ServiceList\nmetadata: {resourceVersion: "1"}\nitems:\n` +
      `  - metadata: {namespace: default, name: web}\n    spec: {clusterIP: 10.96.0.10}\n`,
    "services.yaml",
  );
  assert.deepEqual(serviceList.map((o) => [o.kind, o.apiVersion]), [["Service", "v1"]]);
});

Deno.test("parseManifest() refuses YAML aliases (no alias expansion bomb)", () => {
  const bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n" +
    "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n";
  assert.throws(() => parseManifest(bomb, "bomb.yaml"), /Cannot parse bomb\.yaml:2:\d+: /);
});

Deno.test("FileSource refuses a symlink that leaves the directory", async () => {
  const outside = await Deno.makeTempDir({ prefix: "kp-outside-" });
  const base = outside.split("/").at(-1);
  try {
    await Deno.writeTextFile(`${outside}/secret.yaml`, SECRET);
    await Deno.writeTextFile(`${outside}/svc.yaml`, SERVICE.replace("name: web", "name: stolen"));
    await withLogRecords(["kproxy", "source", "file"], async (records) => {
      await withSource({
        "a.yaml": SERVICE,
        "shadow.yaml": { link: `${outside}/secret.yaml` },
        "relative.yaml": { link: `../${base}/svc.yaml` },
        "sub": { directory: true },
        "dots.yaml": { link: `sub/../../${base}/svc.yaml` },
        "inside.yml": { link: "sub/../b.json" },
        "b.json": SLICE_JSON.replace("web-1", "web-2"),
      }, async ({ next }) => {
        assert.deepEqual(await next(3), [
          "upsert Service default/web",
          "upsert EndpointSlice default/web-2",
          "synced",
        ]);
      });
      const text = messages(records).join("\n");
      assert.doesNotMatch(text, /kproxy-test-secret|root:|stolen/);
      for (const name of ["shadow", "relative", "dots"]) {
        assert.match(text, new RegExp(`Refusing manifest \\S*/${name}\\.yaml: .*leaves`));
      }
    });
  } finally {
    await Deno.remove(outside, { recursive: true });
  }
});

Deno.test("FileSource reads through a symlinked directory and a dir path with ..", async () => {
  const real = await Deno.makeTempDir({ prefix: "kp-real-" });
  const link = `${real}-link`;
  try {
    await Deno.mkdir(`${real}/m`);
    await Deno.mkdir(`${real}/other`);
    await Deno.writeTextFile(`${real}/m/a.yaml`, SERVICE);
    await Deno.writeTextFile(`${real}/other/x.yaml`, SERVICE.replace("name: web", "name: stolen"));
    await Deno.symlink(`${real}/other/x.yaml`, `${real}/m/x.yaml`);
    await Deno.symlink(`${real}/m`, link);
    for (const dir of [link, `${real}/other/../m`]) {
      const seen: string[] = [];
      const controller = new AbortController();
      await new FileSource({ dir }).start((event) => {
        seen.push(describe(event));
        if (event.type === "synced") controller.abort();
      }, controller.signal);
      assert.deepEqual(seen, ["upsert Service default/web", "synced"], dir);
    }
  } finally {
    await Deno.remove(link).catch(() => {});
    await Deno.remove(real, { recursive: true });
  }
});

/** Log records of `level` whose message mentions `text`. */
function logged(
  records: { level: string; message: readonly unknown[] }[],
  level: string,
  text: RegExp,
) {
  return records.filter((r) => r.level === level && text.test(r.message.map(String).join("")));
}

Deno.test("FileSource does not re-read files that did not change", async () => {
  await withLogRecords(["kproxy", "source", "file"], async (records) => {
    await withSource({ "a.yaml": SERVICE, "b.yaml": CONFIGMAP_AND_NODE }, async ({ dir, next }) => {
      assert.equal((await next(3)).at(-1), "synced");
      await new Promise((resolve) => setTimeout(resolve, 700)); // three polls
      assert.equal(logged(records, "debug", /^Read .*\/a\.yaml/).length, 1, "a.yaml read once");
      assert.equal(logged(records, "debug", /^Read .*\/b\.yaml/).length, 1, "b.yaml read once");

      await Deno.writeTextFile(`${dir}/a.yaml`, SERVICE.replace("10.96.0.10", "10.96.0.11"));
      assert.deepEqual(await next(1), ["upsert Service default/web"]);
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.equal(logged(records, "debug", /^Read .*\/a\.yaml/).length, 2, "a.yaml read again");
      assert.equal(logged(records, "debug", /^Read .*\/b\.yaml/).length, 1, "b.yaml not re-read");
    });
  });
});

Deno.test("FileSource emits only the changed objects of a file, and deletes a removed document", async () => {
  const two = `${SERVICE}---\n${SERVICE.replace("name: web", "name: api")}`;
  await withSource({ "a.yaml": two }, async ({ dir, next }) => {
    assert.deepEqual(await next(3), [
      "upsert Service default/web",
      "upsert Service default/api",
      "synced",
    ]);
    await Deno.writeTextFile(`${dir}/a.yaml`, two.replace("name: api", "name: api2"));
    assert.deepEqual(await next(2), ["upsert Service default/api2", "delete Service default/api"]);
    await Deno.writeTextFile(`${dir}/a.yaml`, SERVICE);
    assert.deepEqual(await next(1), ["delete Service default/api2"]);
  });
});

Deno.test("FileSource refuses a file above the size limit with a log line naming it", async () => {
  await withLogRecords(["kproxy", "source", "file"], async (records) => {
    const big = `${SERVICE}# ${"x".repeat(400)}\n`;
    await withSource(
      { "a.yaml": SERVICE, "big.yaml": big.replace("name: web", "name: big") },
      async ({ next }) => {
        assert.deepEqual(await next(2), ["upsert Service default/web", "synced"]);
        await new Promise((resolve) => setTimeout(resolve, 500));
      },
      { maxFileBytes: 400 },
    );
    const refused = logged(records, "error", /big\.yaml.*above the limit of 400 bytes/);
    assert.equal(refused.length, 1, messages(records).join("\n"));
  });
});

Deno.test("FileSource logs a broken file once per change, not on every poll", async () => {
  await withLogRecords(["kproxy", "source", "file"], async (records) => {
    await withSource({ "a.yaml": SERVICE, "bad.yaml": "kind: [broken" }, async ({ dir, next }) => {
      assert.deepEqual(await next(2), ["upsert Service default/web", "synced"]);
      await new Promise((resolve) => setTimeout(resolve, 700));
      assert.equal(logged(records, "error", /bad\.yaml/).length, 1);
      // Replaced whole (a rename), so that no poll can read a half-written file on a busy machine.
      const staged = await Deno.makeTempFile({ dir: `${dir}/..` });
      await Deno.writeTextFile(staged, "kind: [still broken");
      await Deno.rename(staged, `${dir}/bad.yaml`);
      await new Promise((resolve) => setTimeout(resolve, 700));
      assert.equal(logged(records, "error", /bad\.yaml/).length, 2);
    });
  });
});

Deno.test("FileSource lets timers run while it loads a large file", async () => {
  const docs: string[] = [];
  for (let i = 0; i < 300; i++) docs.push(SERVICE.replace("name: web", `name: web-${i}`));
  const dir = await Deno.makeTempDir({ prefix: "kp-ingest-file-" });
  try {
    await Deno.writeTextFile(`${dir}/many.yaml`, docs.join("---\n"));
    let ticks = 0;
    let first = -1;
    let last = -1;
    const timer = setInterval(() => ticks++, 0);
    const controller = new AbortController();
    try {
      await new FileSource({ dir, sliceMs: 0 }).start((event) => {
        if (event.type === "synced") controller.abort();
        else if (first < 0) first = ticks;
        else last = ticks;
      }, controller.signal);
    } finally {
      clearInterval(timer);
    }
    assert.ok(last > first, `timers ran between the first and the last object (${first}, ${last})`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** What a whole-document parse gives: each document, List items expanded (the reference). */
function wholeParse(text: string): unknown[] {
  return loadAll(text).flatMap((doc) => {
    if (doc === null || typeof doc !== "object") return [];
    const list = doc as { kind?: string; items?: unknown[] };
    return list.kind?.endsWith("List") && Array.isArray(list.items)
      ? list.items.filter((item) => item !== null && typeof item === "object")
      : [doc];
  });
}

Deno.test("parseManifest() reads a YAML List item by item as a whole parse would", async (t) => {
  const items = [
    { apiVersion: "v1", kind: "Service", metadata: { name: "a" }, spec: { ports: [{ port: 80 }] } },
    { apiVersion: "v1", kind: "Node", metadata: { name: "b", annotations: { note: "x\n- y\nz" } } },
    { apiVersion: "v1", kind: "Service", metadata: { name: "c" }, spec: { clusterIPs: [] } },
  ];
  const list = { apiVersion: "v1", kind: "List", metadata: { resourceVersion: "" }, items };
  for (const seqNoIndent of [true, false]) {
    await t.step(`js-yaml dump, seqNoIndent ${seqNoIndent}`, () => {
      const text = dump(list, { seqNoIndent });
      assert.deepEqual(parseManifest(text, "l.yaml"), wholeParse(text));
    });
  }
  const odd = [
    // kubectl's order, comments and blank lines inside, an entry starting on its own line
    "apiVersion: v1\nitems:\n- kind: Service\n  metadata: {name: a}\n# between\n\n-\n  kind: Node\n" +
    "  metadata:\n    name: b\n    annotations:\n      text: |\n        - not an entry\n" +
    '        items:\nkind: List\nmetadata:\n  resourceVersion: ""\n',
    // items: inside a quoted scalar continued at column 0 (invalid YAML): an error, as whole
    'a: "foo\nitems:\n- kind: Service\n  metadata: {name: x}\n"\nkind: List\n',
    // a non-List document with an items key keeps its items
    "kind: Thing\nitems:\n- kind: Service\n",
    // a typed list: items without kind take the list's
    "apiVersion: v1\nkind: ServiceList\nitems:\n  - metadata: {name: a}\n  - metadata: {name: b}\n",
  ];
  for (const [i, text] of odd.entries()) {
    await t.step(`odd list ${i}`, () => {
      if (i === 1) {
        assert.throws(() => wholeParse(text));
        assert.throws(() => parseManifest(text, "l.yaml"), /^SyntaxError: Cannot parse l\.yaml:2:/);
        return;
      }
      const want = i === 3
        ? [
          { apiVersion: "v1", kind: "Service", metadata: { name: "a" } },
          { apiVersion: "v1", kind: "Service", metadata: { name: "b" } },
        ]
        : wholeParse(text);
      assert.deepEqual(parseManifest(text, "l.yaml"), want);
    });
  }
  await t.step("an error in an entry names its line", () => {
    const text =
      "apiVersion: v1\nkind: List\nitems:\n- kind: Service\n- kind: [broken\n- kind: Node\n";
    assert.throws(
      () => parseManifest(text, "l.yaml"),
      /^SyntaxError: Cannot parse l\.yaml:[56]:\d+: /,
    );
  });
});

Deno.test("FileSource sees a file written while its first read runs (file events only)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kp-ingest-file-" });
  const controller = new AbortController();
  const seen: string[] = [];
  try {
    await Deno.writeTextFile(`${dir}/a.yaml`, SERVICE);
    const done = new FileSource({ dir, pollIntervalMs: 3_600_000, debounceMs: 20 }).start(
      (event) => {
        seen.push(describe(event));
        if (seen.length === 1) {
          Deno.writeTextFileSync(`${dir}/b.yaml`, SERVICE.replace("name: web", "name: api"));
        }
        if (event.type !== "synced" && seen.includes("synced")) controller.abort();
      },
      controller.signal,
    );
    const timeout = setTimeout(() => controller.abort(), 10_000);
    await done;
    clearTimeout(timeout);
    assert.deepEqual(seen, ["upsert Service default/web", "synced", "upsert Service default/api"]);
  } finally {
    controller.abort();
    await Deno.remove(dir, { recursive: true });
  }
});
