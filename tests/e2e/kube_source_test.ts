import assert from "node:assert/strict";
import { KubeSource, type KubeSourceOptions } from "../../lib/shell/source/kube.ts";
import type { SourceEvent } from "../../lib/core/source.ts";
import { Tracker } from "../../lib/core/tracker.ts";
import {
  type ApiObject,
  FakeApiServer,
  type FakeApiServerOptions,
  writeKubeconfig,
} from "../../scripts/testbed/fake_apiserver.ts";
import { testCertificates } from "../../scripts/testbed/tls.ts";
import { withLogRecords } from "../support/logs.ts";

function service(name: string, extra: ApiObject = {}): ApiObject {
  return {
    metadata: { namespace: "default", name },
    spec: { clusterIP: "10.96.0.10", ports: [{ port: 80 }], ...extra },
  };
}

function describe(event: SourceEvent): string {
  if (event.type === "synced") return "synced";
  const metadata = event.object.metadata as Record<string, string>;
  const key = metadata.namespace ? `${metadata.namespace}/${metadata.name}` : metadata.name;
  return `${event.type} ${event.kind} ${key}`;
}

interface Harness {
  server: FakeApiServer;
  events: SourceEvent[];
  /** Event descriptions since the start. */
  seen(): string[];
  /** Waits until `predicate` holds, failing after `timeoutMs`. */
  until(predicate: () => boolean, what: string, timeoutMs?: number): Promise<void>;
  /** Waits until the event `description` has been seen after index `from`. */
  saw(description: string, from?: number, timeoutMs?: number): Promise<void>;
}

async function withSource(
  setup: (server: FakeApiServer) => void,
  body: (h: Harness) => Promise<void>,
  options: {
    server?: FakeApiServerOptions;
    source?: Partial<KubeSourceOptions>;
    /** Record the Starting event as `kproxy` does at start. */
    recordStarting?: boolean;
  } = {},
) {
  const server = await FakeApiServer.start(options.server);
  const kubeconfig = await writeKubeconfig(server);
  const controller = new AbortController();
  const events: SourceEvent[] = [];
  let running: Promise<void> | undefined;
  try {
    setup(server);
    const source = new KubeSource({
      kubeconfig,
      master: "",
      nodeName: "node-a",
      watchIdleTimeoutMs: 5000,
      watchTimeoutSeconds: 30,
      backoff: { initialMs: 20, maxMs: 200, jitter: 0 },
      missingApiRetryMs: 60_000,
      ...options.source,
    });
    running = source.start((event) => events.push(event), controller.signal);
    const recording = options.recordStarting ? source.recordStarting(controller.signal) : undefined;
    running = Promise.all([running, recording]).then(() => undefined);
    const seen = () => events.map(describe);
    const until = async (predicate: () => boolean, what: string, timeoutMs = 3000) => {
      const deadline = Date.now() + timeoutMs;
      while (!predicate()) {
        if (Date.now() > deadline) {
          assert.fail(`timed out waiting for ${what}; events: ${JSON.stringify(seen())}`);
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    const saw = (description: string, from = 0, timeoutMs?: number) =>
      until(() => seen().slice(from).includes(description), description, timeoutMs);
    await body({ server, events, seen, until, saw });
  } finally {
    controller.abort();
    await running;
    await server.stop();
    await Deno.remove(kubeconfig);
  }
}

function fillCluster(server: FakeApiServer) {
  server.create("services", service("web", { topologyKeys: ["topology.kubernetes.io/zone", "*"] }));
  server.create("endpointslices", {
    metadata: {
      namespace: "default",
      name: "web-1",
      labels: { "kubernetes.io/service-name": "web" },
    },
    addressType: "IPv4",
    endpoints: [{ addresses: ["10.244.1.10"] }],
  });
  server.create("nodes", { metadata: { name: "node-a" } });
  server.create("servicecidrs", {
    metadata: { name: "kubernetes" },
    spec: { cidrs: ["10.96.0.0/16"] },
  });
}

Deno.test("KubeSource.start() lists and watches only this node's Node, as kube-proxy", async () => {
  await withSource((server) => {
    fillCluster(server);
    server.create("nodes", { metadata: { name: "node-b" } });
  }, async ({ server, seen, until, saw }) => {
    await until(() => seen().includes("synced"), "synced");
    await until(() => server.openWatches("nodes") === 1, "the Node watch");
    const requests = server.requestsFor("nodes");
    assert.ok(requests.length >= 2, JSON.stringify(requests));
    for (const request of requests) {
      assert.equal(request.params.fieldSelector, "metadata.name=node-a", JSON.stringify(request));
    }
    assert.ok(!seen().includes("upsert Node node-b"), JSON.stringify(seen()));
    const mark = seen().length;
    server.update("nodes", { metadata: { name: "node-b", labels: { changed: "yes" } } });
    server.update("nodes", { metadata: { name: "node-a", labels: { changed: "yes" } } });
    await saw("upsert Node node-a", mark);
    assert.ok(!seen().slice(mark).includes("upsert Node node-b"), JSON.stringify(seen()));
  });
});

Deno.test("KubeSource.recordStarting() creates kube-proxy's Starting event on this Node", async () => {
  await withSource(fillCluster, async ({ server, until }) => {
    await until(() => server.events.length === 1, "the Starting event");
    const [request] = server.requests.filter((r) => r.method === "POST");
    assert.equal(request?.path, "/apis/events.k8s.io/v1/namespaces/default/events");
    assert.equal(request?.authorization, "Bearer fake-token");
    const event = server.events[0]!;
    assert.equal(event.apiVersion, "events.k8s.io/v1");
    assert.equal(event.kind, "Event");
    assert.match(event.metadata.name, /^node-a\.[0-9a-f]+$/);
    assert.equal(event.metadata.namespace, "default");
    assert.match(event.eventTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    assert.deepEqual(
      {
        reason: event.reason,
        action: event.action,
        type: event.type,
        note: event.note,
        regarding: event.regarding,
        reportingController: event.reportingController,
      },
      {
        reason: "Starting",
        action: "StartKubeProxy",
        type: "Normal",
        note: "",
        regarding: { apiVersion: "v1", kind: "Node", name: "node-a" },
        reportingController: "kproxy",
      },
    );
    assert.match(event.reportingInstance, /^kproxy-.+/);
  }, { recordStarting: true });
});

Deno.test("KubeSource.recordStarting() is best effort: a refused event neither blocks nor fails the start", async () => {
  await withLogRecords(["kproxy", "source"], async (records) => {
    await withSource(fillCluster, async ({ server, seen, until }) => {
      await until(() => seen().includes("synced"), "synced");
      await until(
        () => records.some((r) => String(r.message.join("")).includes("Starting event")),
        "the log of the refused event",
      );
      assert.equal(server.events.length, 0);
      const logged = records.find((r) => String(r.message.join("")).includes("Starting event"));
      assert.equal(logged?.level, "info");
    }, { recordStarting: true, server: { refuseEvents: 403 } });
  });
});

Deno.test("KubeSource.start() lists every kind, then reports synced once", async () => {
  await withSource(fillCluster, async ({ server, seen, until, events }) => {
    await until(() => seen().includes("synced"), "synced");
    assert.deepEqual(seen().sort(), [
      "synced",
      "upsert EndpointSlice default/web-1",
      "upsert Node node-a",
      "upsert Service default/web",
      "upsert ServiceCIDR kubernetes",
    ]);
    assert.equal(seen().at(-1), "synced");
    const web = events.find((e) => e.type === "upsert" && e.kind === "Service");
    assert.ok(web && web.type === "upsert");
    assert.deepEqual((web.object.spec as ApiObject).topologyKeys, [
      "topology.kubernetes.io/zone",
      "*",
    ]);
    assert.equal(web.object.kind, "Service");
    await until(() => server.openWatches() === 4, "4 watches");
    const requests = server.requestsFor("services");
    assert.ok(requests.every((r) => r.authorization === "Bearer fake-token"));
    assert.equal(
      requests[0]?.params.labelSelector,
      "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless",
    );
    const watch = server.requestsFor("services", "watch")[0];
    assert.equal(watch?.params.allowWatchBookmarks, "true");
    assert.equal(watch?.params.timeoutSeconds, "30");
    // As client-go: a gzip list is a tenth of the bytes through TLS and node's streams.
    assert.equal(server.requestsFor("services", "list")[0]?.acceptEncoding, "gzip");
    assert.equal(watch?.acceptEncoding, null, "a watch's events are not held back by compression");
  });
});

Deno.test("KubeSource feeds a Tracker objects that keep spec.topologyKeys", async () => {
  await withSource(fillCluster, async ({ events, saw }) => {
    await saw("synced");
    const tracker = new Tracker({ nodeName: "node-a", clock: { now: () => 0 } });
    for (const event of events) tracker.apply(event);
    const { state, globalChange } = tracker.drain();
    assert.equal(tracker.synced, true);
    assert.equal(globalChange, true);
    assert.deepEqual(state.services.get("default/web")?.topologyKeys, [
      "topology.kubernetes.io/zone",
      "*",
    ]);
    assert.equal(state.slicesByService.get("default/web")?.[0]?.endpoints[0]?.ip, "10.244.1.10");
    assert.deepEqual(state.serviceCIDRs, [{ name: "kubernetes", cidrs: ["10.96.0.0/16"] }]);
  });
});

Deno.test("KubeSource reports creates, updates and deletes from the watch", async () => {
  await withSource(fillCluster, async ({ server, seen, saw, until, events }) => {
    await saw("synced");
    await until(() => server.openWatches() === 4, "4 watches");
    const from = seen().length;
    server.create("services", service("api", { clusterIP: "10.96.0.11" }));
    server.update("services", service("web", { clusterIP: "10.96.0.12" }));
    server.delete("endpointslices", "web-1", "default");
    server.update("nodes", { metadata: { name: "node-a", labels: { zone: "a" } } });
    await until(() => seen().length >= from + 4, "4 events");
    const got = seen().slice(from);
    assert.deepEqual([...got].sort(), [
      "delete EndpointSlice default/web-1",
      "upsert Node node-a",
      "upsert Service default/api",
      "upsert Service default/web",
    ]);
    assert.ok(
      got.indexOf("upsert Service default/api") < got.indexOf("upsert Service default/web"),
    );
    const last = events.findLast((e) => e.type === "upsert" && e.kind === "Node");
    assert.ok(last?.type === "upsert");
    assert.deepEqual((last.object.metadata as ApiObject).labels, { zone: "a" });
  });
});

Deno.test("KubeSource re-watches from the resourceVersion of a bookmark", async () => {
  await withSource(fillCluster, async ({ server, seen, until, saw }) => {
    await saw("synced");
    await until(() => server.openWatches("services") === 1, "services watch");
    const mark = seen().length;
    server.update("nodes", { metadata: { name: "node-a", labels: { moved: "yes" } } });
    await saw("upsert Node node-a", mark);
    const bookmarkRV = server.resourceVersion;
    server.bookmark("services");
    await new Promise((r) => setTimeout(r, 50));
    server.dropWatches({ resource: "services" });
    await until(() => server.requestsFor("services", "watch").length === 2, "second watch");
    assert.equal(server.requestsFor("services", "watch")[1]?.params.resourceVersion, bookmarkRV);
    assert.equal(server.requestsFor("services", "list").length, 1, "no relist");
  });
});

Deno.test("KubeSource relists on 410 Gone and reconciles what changed meanwhile", async (t) => {
  for (const http of [false, true]) {
    await t.step(http ? "HTTP 410" : "ERROR event 410", async () => {
      await withSource(fillCluster, async ({ server, seen, saw, until }) => {
        await saw("synced");
        await until(() => server.openWatches() === 4, "4 watches");
        const from = seen().length;
        server.silently(() => {
          server.delete("services", "web", "default");
          server.create("services", service("api", { clusterIP: "10.96.0.11" }));
        });
        server.compact();
        if (http) server.goneOnNextWatch({ resource: "services", http: true });
        server.dropWatches({ resource: "services" });
        await saw("delete Service default/web", from);
        await saw("upsert Service default/api", from);
        assert.equal(server.requestsFor("services", "list").length, 2);
        assert.ok(
          !seen().slice(from).some((e) => e.includes("Node") || e.includes("EndpointSlice")),
        );
        assert.equal(seen().filter((e) => e === "synced").length, 1);
      });
    });
  }
});

Deno.test("KubeSource resumes a cut watch stream without relisting", async () => {
  await withSource(fillCluster, async ({ server, saw, until }) => {
    await saw("synced");
    await until(() => server.openWatches() === 4, "4 watches");
    server.dropWatches({ abrupt: true });
    server.create("services", service("api", { clusterIP: "10.96.0.11" }));
    await saw("upsert Service default/api");
    assert.equal(server.requestsFor("services", "list").length, 1);
  });
});

Deno.test("KubeSource retries 500s with backoff and never deletes meanwhile", async () => {
  await withSource((server) => {
    fillCluster(server);
    server.failNext(4);
  }, async ({ server, seen, saw, until }) => {
    await saw("synced");
    await until(() => server.openWatches() === 4, "4 watches");
    const from = seen().length;
    const before = server.requests.length;
    server.failNext(6);
    server.dropWatches();
    await until(() => server.openWatches() === 4, "watches back", 5000);
    assert.ok(server.requests.length - before >= 10, "failed requests were retried");
    server.create("services", service("api", { clusterIP: "10.96.0.11" }));
    await saw("upsert Service default/api", from);
    assert.ok(!seen().slice(from).some((e) => e.startsWith("delete")));
  });
});

Deno.test("KubeSource re-establishes a watch that stalls silently", async () => {
  await withSource(fillCluster, async ({ server, saw, until }) => {
    await saw("synced");
    await until(() => server.openWatches() === 4, "4 watches");
    server.stallWatches({ resource: "services" });
    server.create("services", service("api", { clusterIP: "10.96.0.11" }));
    await saw("upsert Service default/api", 0, 3000);
    assert.ok(server.requestsFor("services", "watch").length >= 2);
    assert.equal(server.requestsFor("services", "list").length, 1);
  }, { source: { watchIdleTimeoutMs: 300 } });
});

Deno.test("KubeSource survives an apiserver restart keeping its state", async () => {
  await withSource(fillCluster, async ({ server, seen, saw, until }) => {
    await saw("synced");
    await until(() => server.openWatches() === 4, "4 watches");
    const from = seen().length;
    await server.stop();
    server.create("services", service("api", { clusterIP: "10.96.0.11" }));
    server.delete("nodes", "node-a");
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(seen().slice(from), [], "nothing happens while unreachable");
    await server.restart();
    await saw("upsert Service default/api", from);
    await saw("delete Node node-a", from);
    assert.ok(!seen().slice(from).includes("delete Service default/web"));
  });
});

Deno.test("KubeSource lists in pages and restarts a list whose continuation expired", async () => {
  await withSource((server) => {
    fillCluster(server);
    for (let i = 0; i < 6; i++) {
      server.create("services", service(`svc-${i}`, { clusterIP: `10.96.1.${i}` }));
    }
    server.expireNextContinue();
  }, async ({ server, seen, saw }) => {
    await saw("synced");
    const services = seen().filter((e) => e.startsWith("upsert Service "));
    assert.equal(services.length, 7);
    assert.equal(new Set(services).size, 7);
    const lists = server.requestsFor("services", "list");
    assert.ok(lists.every((r) => r.params.limit === "3"));
    assert.deepEqual(lists.map((r) => r.params.continue !== undefined), [
      false,
      true,
      false,
      true,
      true,
    ]);
  }, { source: { listPageSize: 3 } });
});

Deno.test("KubeSource lists its first items in small pages, then in full ones", async () => {
  await withSource((server) => {
    fillCluster(server);
    for (let i = 0; i < 10; i++) {
      server.create("services", service(`svc-${i}`, { clusterIP: `10.96.1.${i}` }));
    }
  }, async ({ server, seen, saw }) => {
    await saw("synced");
    assert.equal(seen().filter((e) => e.startsWith("upsert Service ")).length, 11);
    const limits = server.requestsFor("services", "list").map((r) => r.params.limit);
    assert.deepEqual(limits, ["2", "2", "5", "5"], "2 + 2 small, then 5 + 2 of 5");
  }, { source: { listPageSize: 5, smallListPageSize: 2, smallListItems: 4 } });
});

Deno.test("KubeSource waits for slow responses", async () => {
  await withSource((server) => {
    fillCluster(server);
    server.slowResponses(150);
  }, async ({ server, saw }) => {
    await saw("synced");
    server.slowResponses(0);
    server.create("services", service("api", { clusterIP: "10.96.0.11" }));
    await saw("upsert Service default/api");
  });
});

Deno.test("KubeSource treats a missing ServiceCIDR API as empty", async () => {
  await withSource(fillCluster, async ({ seen, saw }) => {
    await saw("synced");
    assert.ok(!seen().some((e) => e.includes("ServiceCIDR")));
    assert.ok(seen().includes("upsert Service default/web"));
  }, { server: { missing: ["servicecidrs"] } });
});

Deno.test("KubeSource skips ServiceCIDRs when disabled and honours master", async () => {
  const server = await FakeApiServer.start();
  const controller = new AbortController();
  const events: string[] = [];
  try {
    fillCluster(server);
    const source = new KubeSource({
      kubeconfig: "",
      master: server.url,
      nodeName: "node-a",
      serviceCIDRs: false,
    });
    assert.equal(source.server, server.url);
    const running = source.start((event) => {
      events.push(describe(event));
      if (event.type === "synced") controller.abort();
    }, controller.signal);
    await running;
    assert.equal(events.at(-1), "synced");
    assert.ok(!events.some((e) => e.includes("ServiceCIDR")));
    assert.equal(server.requestsFor("servicecidrs").length, 0);
  } finally {
    controller.abort();
    await server.stop();
  }
});

Deno.test("KubeSource constructor fails without any apiserver configured", () => {
  assert.throws(
    () => new KubeSource({ kubeconfig: "", master: "", nodeName: "node-a" }),
    /Cannot configure the apiserver client/,
  );
});

const tls = await testCertificates();
if (!tls) console.log("KubeSource TLS test skipped: openssl cannot make a certificate");

Deno.test({
  name: "KubeSource talks to an https apiserver trusting the kubeconfig's CA",
  ignore: !tls,
  fn: async () => {
    await withSource(fillCluster, async ({ server, saw }) => {
      assert.ok(server.url.startsWith("https://"));
      await saw("synced");
      await saw("upsert Service default/web");
      server.create("services", service("api", { clusterIP: "10.96.0.11" }));
      await saw("upsert Service default/api");
    }, { server: { tls } });
  },
});
