import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { modelService } from "../support/model_fixtures.ts";
import { RecordingBackend } from "../support/recording_backend.ts";
import { handleHealthRequest, ProxyHealth } from "../../lib/shell/health.ts";
import { histogramTotals, ProxyMetrics, valueOf } from "../../lib/shell/metrics.ts";
import type { EndpointSlice, Node, Service, ServiceKey } from "../../lib/core/model.ts";
import type { PlannerOptions } from "../../lib/core/planner.ts";
import {
  Proxier,
  type ProxierOptions,
  type ServiceHealthSink,
  type StateTracker,
} from "../../lib/shell/proxier.ts";
import { BoundedFrequencyRunner } from "../../lib/shell/runner.ts";
import { withLogRecords } from "../support/logs.ts";
import { CommandError } from "../../lib/shell/exec.ts";
import type { SourceEvent } from "../../lib/core/source.ts";
import type { ClusterState, StateChange } from "../../lib/core/state.ts";
import type { SyncRequest, SyncResult } from "../../lib/core/backend.ts";
import type { ServiceHealthInfo } from "../../lib/shell/servers.ts";

const IPV4 = { ip_family: "IPv4" };

/** The error `runChecked` throws when `program` exits 1. */
function commandFailed(program: string, stderr: string): CommandError {
  return new CommandError(
    { program, args: [] },
    { code: 1, stdout: "", stderr },
    `Cannot run "${program}": exit status 1: ${stderr}`,
  );
}
const IPV6 = { ip_family: "IPv6" };

const NODE = "node-a";

function service(name: string, clusterIP: string, extra: Partial<Service> = {}): Service {
  return modelService({ name, clusterIPs: [clusterIP], ...extra });
}

function slice(serviceName: string, ips: string[], nodeName = NODE): EndpointSlice {
  return {
    namespace: "default",
    name: `${serviceName}-abc`,
    serviceName,
    family: "IPv4",
    ports: [{ name: "", protocol: "TCP", port: 8080 }],
    endpoints: ips.map((ip) => ({
      ip,
      ready: true,
      serving: true,
      terminating: false,
      nodeName,
      zone: "",
    })),
  };
}

const node: Node = {
  name: NODE,
  labels: {},
  addresses: ["192.168.0.10"],
  podCIDRs: ["10.244.0.0/24"],
  deleting: false,
};

/** A tracker holding state set directly by the test. */
class FakeTracker implements StateTracker {
  synced = false;
  services = new Map<ServiceKey, Service>();
  slices = new Map<ServiceKey, EndpointSlice[]>();
  nodes = new Map<string, Node>([[NODE, node]]);
  changed = new Set<ServiceKey>();
  globalChange = false;
  oldestChangeAt?: number;
  events: SourceEvent[] = [];

  apply(event: SourceEvent): boolean {
    this.events.push(event);
    if (event.type === "synced") this.synced = true;
    return event.type !== "synced";
  }

  set(svc: Service, endpointIps: string[] = [], at?: number): void {
    const key = `${svc.namespace}/${svc.name}`;
    this.services.set(key, svc);
    this.slices.set(key, [slice(svc.name, endpointIps)]);
    this.changed.add(key);
    this.oldestChangeAt ??= at;
  }

  drain(): StateChange {
    const state: ClusterState = {
      services: new Map(this.services),
      slicesByService: new Map(this.slices),
      nodes: new Map(this.nodes),
      serviceCIDRs: [],
    };
    const change: StateChange = {
      state,
      changedServices: this.changed,
      globalChange: this.globalChange,
      serviceChanges: this.changed.size,
      endpointChanges: this.changed.size,
      oldestChangeAt: this.oldestChangeAt,
    };
    this.changed = new Set();
    this.globalChange = false;
    this.oldestChangeAt = undefined;
    return change;
  }
}

const plannerOptions: PlannerOptions = {
  nodeName: NODE,
  nodePortAddresses: ["primary"],
  localAddresses: ["192.168.0.10"],
  clusterCIDRs: ["10.244.0.0/16"],
  detectLocalMode: "ClusterCIDR",
  bridgeInterface: "",
  interfaceNamePrefix: "",
  masqueradeAll: false,
  serviceClusterIPRange: ["10.96.0.0/12"],
  externalIPAllowedCIDRs: [],
  featureGates: {},
};

interface Harness {
  proxier: Proxier;
  tracker: FakeTracker;
  backend: RecordingBackend;
  health: ProxyHealth;
  metrics: ProxyMetrics;
  clock: { t: number; now(): number; wallNow(): number };
  pokes: number;
  serviceHealth: ReadonlyMap<number, ServiceHealthInfo>[];
}

function setup(
  options: {
    backend?: RecordingBackend;
    syncPeriodMs?: number;
    fullSyncPeriodMs?: number;
    plannerOptions?: Partial<PlannerOptions>;
    readLocalAddresses?: () => string[];
    beforeApply?: ProxierOptions["beforeApply"];
    afterSync?: ProxierOptions["afterSync"];
  } = {},
): Harness {
  const clock = { t: 1_000_000, now: () => clock.t, wallNow: () => clock.t };
  const backend = options.backend ?? new RecordingBackend({ mode: "nftables" });
  const h = {
    tracker: new FakeTracker(),
    backend,
    health: new ProxyHealth({ healthTimeoutMs: 60_000, clock }),
    metrics: new ProxyMetrics({ mode: backend.mode }),
    clock,
    pokes: 0,
    serviceHealth: [] as ReadonlyMap<number, ServiceHealthInfo>[],
  } as Harness;
  const sink: ServiceHealthSink = {
    sync: (services) => {
      h.serviceHealth.push(new Map(services));
      return Promise.resolve();
    },
  };
  h.proxier = new Proxier({
    backend: h.backend,
    tracker: h.tracker,
    plannerOptions: { ...plannerOptions, ...options.plannerOptions },
    readLocalAddresses: options.readLocalAddresses,
    health: h.health,
    metrics: h.metrics,
    syncPeriodMs: options.syncPeriodMs ?? 30_000,
    fullSyncPeriodMs: options.fullSyncPeriodMs,
    requestSync: () => h.pokes++,
    serviceHealth: sink,
    families: ["ipv4"],
    clock,
    beforeApply: options.beforeApply,
    afterSync: options.afterSync,
  });
  return h;
}

Deno.test("Proxier.sync() does nothing before the tracker is synced", async () => {
  const h = setup();
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"]);
  assert.deepEqual(await h.proxier.sync(), { kind: "waiting" });
  assert.equal(h.backend.requests.length, 0);
  assert.equal(h.proxier.lastSynced, undefined);
});

Deno.test("Proxier stays live while the apiserver sends nothing, as kube-proxy", () => {
  // kube-proxy queues an update only when an informer delivers one: a node that cannot reach
  // the apiserver yet must not be restarted by its liveness probe.
  const h = setup();
  h.clock.t += 10 * 60_000;
  assert.equal(h.health.status().healthy, true);
  assert.equal(h.health.status().nodeEligible, false, "the Node is not known yet");
});

Deno.test("Proxier turns unhealthy when listed changes wait 2 × syncPeriod for the initial sync", () => {
  const h = setup();
  h.proxier.onEvent({ type: "upsert", kind: "Service", object: {} });
  h.clock.t += 59_999;
  assert.equal(h.health.status().healthy, true);
  h.clock.t += 1;
  assert.equal(h.health.status().healthy, false);
});

Deno.test("Proxier.onEvent() applies the event, queues a health update and pokes the runner once synced", async () => {
  const h = setup();
  h.proxier.onEvent({ type: "upsert", kind: "EndpointSlice", object: {} });
  h.proxier.onEvent({ type: "upsert", kind: "Service", object: {} });
  assert.equal(h.pokes, 0);
  h.proxier.onEvent({ type: "synced" });
  assert.equal(h.pokes, 1);
  h.proxier.onEvent({ type: "upsert", kind: "Service", object: {} });
  assert.equal(h.pokes, 2);
  assert.equal(h.tracker.events.length, 4);
  assert.equal(await valueOf(h.metrics.endpointChangesPending), 1);
  assert.equal(await valueOf(h.metrics.serviceChangesTotal), 2);
  assert.equal(await valueOf(h.metrics.lastQueuedTimestamp, IPV4), 1000);
  assert.equal(await valueOf(h.metrics.lastQueuedTimestamp, IPV6), 0, "IPv6 is not programmed");
  h.clock.t += 60_000;
  assert.equal(h.health.status().healthy, false);
});

Deno.test("Proxier.sync() syncs fully first, then partially with the changed ids", async () => {
  const h = setup();
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"], h.clock.t);
  h.tracker.set(service("api", "10.96.0.11"), ["10.244.0.6"], h.clock.t);
  h.proxier.onEvent({ type: "synced" });
  h.clock.t += 250;
  const first = await h.proxier.sync();
  assert.equal(first.kind, "applied");
  const [full] = h.backend.requests;
  assert.equal(full?.full, true);
  assert.deepEqual([...full!.changed].sort(), ["default/api:/TCP", "default/web:/TCP"]);
  assert.deepEqual(full?.plans[0]?.services.map((s) => s.id), [
    "default/api:/TCP",
    "default/web:/TCP",
  ]);
  assert.equal((await histogramTotals(h.metrics.networkProgrammingDuration, IPV4)).sum, 0.25);

  h.clock.t += 1000;
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5", "10.244.0.7"]);
  await h.proxier.sync();
  const partial = h.backend.requests[1]!;
  assert.equal(partial.full, false);
  assert.deepEqual([...partial.changed], ["default/web:/TCP"]);
  assert.equal(
    h.proxier.lastSynced?.ipv4.services.find((s) => s.name === "web")?.internal.endpoints.length,
    2,
  );
  assert.equal((await histogramTotals(h.metrics.syncFullProxyRulesDuration, IPV4)).count, 1);
  assert.equal((await histogramTotals(h.metrics.syncPartialProxyRulesDuration, IPV4)).count, 1);
  assert.equal(await valueOf(h.metrics.syncProxyRulesLastTimestamp, IPV4), h.clock.t / 1000);
  assert.equal(h.health.status().lastUpdated, h.clock.t);
});

Deno.test("Proxier.sync() skips the backend when nothing changed", async () => {
  const h = setup();
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"]);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  h.clock.t += 1000;
  assert.deepEqual(await h.proxier.sync(), { kind: "unchanged" });
  assert.equal(h.backend.requests.length, 1);
});

Deno.test("Proxier.sync() with nothing changed is a successful sync: timestamp, duration, health", async () => {
  // kube-proxy sets these on every sync; a quiet node must not look stale (KproxyRulesStale).
  const h = setup({ fullSyncPeriodMs: 3_600_000 });
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"], h.clock.t);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  for (let i = 0; i < 3; i++) {
    h.clock.t += 30_000;
    assert.deepEqual(await h.proxier.sync(), { kind: "unchanged" });
    assert.equal(await valueOf(h.metrics.syncProxyRulesLastTimestamp, IPV4), h.clock.t / 1000);
    assert.equal(h.health.status().lastUpdated, h.clock.t);
  }
  assert.equal((await histogramTotals(h.metrics.syncProxyRulesDuration, IPV4)).count, 4);
  assert.equal((await histogramTotals(h.metrics.syncPartialProxyRulesDuration, IPV4)).count, 3);
  assert.equal((await histogramTotals(h.metrics.networkProgrammingDuration, IPV4)).count, 1);
  assert.equal(h.backend.requests.length, 1);
});

Deno.test("Proxier.sync() keeps the previous plans after a failure and syncs fully next", async () => {
  const backend = new RecordingBackend({
    mode: "nftables",
    failWith: (_request, index) => (index === 1 ? commandFailed("nft", "syntax error") : undefined),
  });
  const h = setup({ backend });
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"]);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  const applied = h.proxier.lastSynced;

  h.clock.t += 1000;
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.9"], h.clock.t);
  await assert.rejects(h.proxier.sync(), /"nft": exit status 1: syntax error/);
  assert.equal(h.proxier.lastSynced, applied);
  assert.equal(await valueOf(h.metrics.syncFailuresTotal, { mode: "nftables" }), 1);
  assert.equal(await valueOf(h.metrics.nftablesSyncFailuresTotal!, IPV4), 1);
  assert.equal(await valueOf(h.metrics.nftablesSyncFailuresTotal!, IPV6), 0);

  h.clock.t += 1000;
  await h.proxier.sync();
  const retry = h.backend.requests[2]!;
  assert.equal(retry.full, true);
  assert.deepEqual(
    retry.plans[0]?.services[0]?.internal.endpoints.map((e) => e.ip),
    ["10.244.0.9"],
  );
  assert.equal((await histogramTotals(h.metrics.networkProgrammingDuration, IPV4)).sum, 1);
});

Deno.test("Proxier.sync() syncs fully once the full sync period has passed", async () => {
  const h = setup({ syncPeriodMs: 30_000 });
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"]);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  h.clock.t += 29_000;
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.6"]);
  await h.proxier.sync();
  h.clock.t += 1_000;
  await h.proxier.sync();
  assert.deepEqual(h.backend.requests.map((r) => r.full), [true, false, true]);
});

Deno.test("Proxier.sync() re-reads the node's addresses and replans node ports when they change", async () => {
  let local = ["127.0.0.1", "192.168.0.10"];
  let reads = 0;
  const h = setup({
    plannerOptions: { nodePortAddresses: ["192.168.0.0/16"] },
    readLocalAddresses: () => (reads++, local),
  });
  h.tracker.set(service("web", "10.96.0.10", { type: "NodePort" }), ["10.244.0.5"]);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  assert.deepEqual(h.backend.requests.at(-1)!.plans[0]!.nodePortAddresses, ["192.168.0.10"]);
  h.clock.t += 1_000;
  assert.deepEqual(await h.proxier.sync(), { kind: "unchanged" }, "same addresses: nothing to do");
  local = ["127.0.0.1", "192.168.0.10", "192.168.7.7"];
  h.clock.t += 1_000;
  await h.proxier.sync();
  const last = h.backend.requests.at(-1)!;
  assert.deepEqual(last.plans[0]!.nodePortAddresses, ["192.168.0.10", "192.168.7.7"]);
  assert.equal(last.full, true, "node port addresses are in every rule set's header");
  assert.equal(reads, 3, "read on every sync, as kube-proxy's GetNodeIPs");
});

Deno.test("Proxier.sync() checks drift once per sync period and repairs it with a full sync", async () => {
  let drifted = false;
  const backend = new RecordingBackend({ mode: "iptables", drift: () => drifted });
  const h = setup({ backend, syncPeriodMs: 10_000, fullSyncPeriodMs: 3_600_000 });
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"]);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  h.clock.t += 5_000;
  assert.deepEqual(await h.proxier.sync(), { kind: "unchanged" });
  assert.equal(backend.driftChecks, 0);
  h.clock.t += 5_000;
  assert.deepEqual(await h.proxier.sync(), { kind: "unchanged" });
  assert.equal(backend.driftChecks, 1);
  drifted = true;
  h.clock.t += 10_000;
  await h.proxier.sync();
  assert.equal(backend.driftChecks, 2);
  assert.deepEqual(backend.requests.map((r) => r.full), [true, true]);
  assert.equal(await valueOf(h.metrics.driftRepairsTotal, { mode: "iptables" }), 1);
});

Deno.test("Proxier.sync() reports node deletion and serves health check node ports", async () => {
  const h = setup();
  h.tracker.set(
    service("lb", "10.96.0.20", {
      type: "LoadBalancer",
      externalTrafficPolicy: "Local",
      healthCheckNodePort: 32000,
      ports: [{ name: "", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 31000 }],
    }),
    ["10.244.0.5"],
  );
  h.tracker.nodes.set(NODE, { ...node, deleting: true });
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  assert.equal(h.health.status().nodeEligible, false);
  assert.deepEqual(
    h.serviceHealth.at(-1),
    new Map([[32000, { namespace: "default", name: "lb", localEndpoints: 1 }]]),
  );
});

Deno.test("Proxier.sync() counts Local services without local endpoints", async () => {
  const h = setup();
  const local = service("local", "10.96.0.30", { internalTrafficPolicy: "Local" });
  h.tracker.set(local, []);
  h.tracker.slices.set("default/local", [slice("local", ["10.244.1.5"], "node-b")]);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  assert.equal(
    await valueOf(h.metrics.noLocalEndpointsTotal, { ...IPV4, traffic_policy: "internal" }),
    1,
  );
  assert.equal(
    await valueOf(h.metrics.noLocalEndpointsTotal, { ...IPV4, traffic_policy: "external" }),
    0,
  );
});

Deno.test("Proxier.sync() runs afterSync with the applied change and survives its failure", async () => {
  const seen: { previous: number; changed: string[]; full: boolean }[] = [];
  const { tracker, proxier } = setup({
    afterSync: (sync) => {
      seen.push({ previous: sync.previous.length, changed: [...sync.changed], full: sync.full });
      return Promise.reject(new Error("conntrack missing"));
    },
  });
  tracker.set(service("dns", "10.96.0.53"), ["10.244.0.5"]);
  proxier.onEvent({ type: "synced" });
  assert.equal((await proxier.sync()).kind, "applied");
  tracker.set(service("dns", "10.96.0.53"), ["10.244.0.6"]);
  assert.equal((await proxier.sync()).kind, "applied");
  assert.deepEqual(seen, [
    { previous: 0, changed: ["default/dns:/TCP"], full: true },
    { previous: 1, changed: ["default/dns:/TCP"], full: false },
  ]);
});

Deno.test("Proxier.sync() runs beforeApply once planned, before the backend applies", async () => {
  const seen: string[] = [];
  const backend = new RecordingBackend({ mode: "nftables" });
  const { tracker, proxier } = setup({
    backend,
    beforeApply: (sync) =>
      seen.push(`before ${sync.full ? "full" : "partial"}, ${backend.applied.length} applied`),
    afterSync: () => (seen.push("after"), Promise.resolve()),
  });
  tracker.set(service("dns", "10.96.0.53"), ["10.244.0.5"]);
  proxier.onEvent({ type: "synced" });
  await proxier.sync();
  tracker.set(service("dns", "10.96.0.53"), ["10.244.0.6"]);
  await proxier.sync();
  assert.equal((await proxier.sync()).kind, "unchanged");
  assert.deepEqual(seen, [
    "before full, 0 applied",
    "after",
    "before partial, 1 applied",
    "after",
  ]);
});

Deno.test("Proxier, runner and health keep their schedule when the wall clock steps", async (t) => {
  const T0 = Date.UTC(2026, 0, 1);
  const HOUR = 3_600_000;
  const clock = FakeTimers.install({
    now: T0,
    toFake: ["Date", "performance", "setTimeout", "clearTimeout"],
  });
  const controller = new AbortController();
  let looping: Promise<void> | undefined;
  try {
    let failing = false;
    const backend = new RecordingBackend({
      mode: "nftables",
      drift: () => false,
      failWith: () => failing ? new Error("nft: injected failure") : undefined,
    });
    const tracker = new FakeTracker();
    const health = new ProxyHealth({ healthTimeoutMs: 60_000 });
    const proxier: Proxier = new Proxier({
      backend,
      tracker,
      plannerOptions,
      health,
      metrics: new ProxyMetrics(),
      syncPeriodMs: 30_000,
      fullSyncPeriodMs: HOUR,
      requestSync: () => runner.run(),
      families: ["ipv4"],
    });
    const runner = new BoundedFrequencyRunner({
      name: "sync",
      fn: async () => {
        await proxier.sync().catch(() => {});
      },
      minIntervalMs: 1_000,
      maxIntervalMs: 30_000,
      retryIntervalMs: 1_000,
    });
    looping = runner.loop(controller.signal);
    const healthz = () => handleHealthRequest(new Request("http://x/healthz"), { health }).status;
    const change = (ip: string) => {
      tracker.set(service("web", "10.96.0.10"), [ip]);
      proxier.onEvent({ type: "upsert", kind: "Service", object: {} });
    };
    tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"]);
    proxier.onEvent({ type: "synced" });
    await clock.tickAsync(0);
    assert.deepEqual(backend.requests.map((r) => r.full), [true]);

    await t.step("a change after a step back of an hour is applied at once", async () => {
      clock.setSystemTime(Date.now() - HOUR);
      await clock.tickAsync(1_000);
      change("10.244.0.6");
      await clock.tickAsync(1_000);
      assert.deepEqual(backend.requests.map((r) => r.full), [true, false]);
      assert.equal(healthz(), 200);
    });

    await t.step("drift is still checked once per sync period", async () => {
      const checks = backend.driftChecks;
      await clock.tickAsync(30_000);
      assert.equal(backend.driftChecks, checks + 1);
    });

    await t.step(
      "a sync failing across a step back turns /healthz 503 after the timeout",
      async () => {
        failing = true;
        change("10.244.0.7");
        clock.setSystemTime(Date.now() - HOUR);
        await clock.tickAsync(59_000);
        assert.equal(healthz(), 200);
        await clock.tickAsync(1_000);
        assert.equal(healthz(), 503);
        failing = false;
        await clock.tickAsync(30_000);
        assert.equal(healthz(), 200);
      },
    );

    await t.step(
      "a step forward of two hours neither fails health nor forces a full sync",
      async () => {
        const before = backend.requests.length;
        change("10.244.0.8");
        clock.setSystemTime(Date.now() + 2 * HOUR);
        assert.equal(healthz(), 200);
        await clock.tickAsync(1_000);
        assert.deepEqual(backend.requests.slice(before).map((r) => r.full), [false]);
      },
    );
  } finally {
    controller.abort();
    await clock.tickAsync(0);
    await looping;
    clock.uninstall();
  }
});

Deno.test("Proxier counts iptables restore failures, partial ones apart, and sets the rule gauges", async () => {
  const backend = new class extends RecordingBackend {
    override async sync(request: SyncRequest): Promise<SyncResult> {
      const result = await super.sync(request);
      return {
        ...result,
        iptablesRules: [
          { family: "IPv4", table: "nat", written: 7, total: request.full ? 40 : 41 },
        ],
      };
    }
  }({ mode: "iptables", failWith: () => failure });
  let failure: Error | undefined;
  const h = setup({ backend, fullSyncPeriodMs: 3_600_000 });
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"]);
  h.proxier.onEvent({ type: "synced" });
  await h.proxier.sync();
  const nat = { ...IPV4, table: "nat" };
  assert.equal(await valueOf(h.metrics.iptablesRulesTotal!, nat), 40);
  assert.equal(await valueOf(h.metrics.iptablesRulesLast!, nat), 7);

  // A partial sync whose restore fails counts both; its retry is a full sync.
  failure = commandFailed("iptables-nft-restore", "line 3 failed");
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.6"]);
  await assert.rejects(h.proxier.sync(), /line 3 failed/);
  assert.equal(await valueOf(h.metrics.iptablesRestoreFailuresTotal!, IPV4), 1);
  assert.equal(await valueOf(h.metrics.iptablesPartialRestoreFailuresTotal!, IPV4), 1);
  await assert.rejects(h.proxier.sync(), /line 3 failed/);
  assert.equal(await valueOf(h.metrics.iptablesRestoreFailuresTotal!, IPV4), 2);
  assert.equal(await valueOf(h.metrics.iptablesPartialRestoreFailuresTotal!, IPV4), 1);

  // Another program's failure, or an IPv6 restore, is no IPv4 restore failure.
  for (const other of [commandFailed("iptables-nft-save", "no table"), new Error("bad script")]) {
    failure = other;
    await assert.rejects(h.proxier.sync());
  }
  failure = commandFailed("ip6tables-legacy-restore", "line 1 failed");
  await assert.rejects(h.proxier.sync());
  assert.equal(await valueOf(h.metrics.iptablesRestoreFailuresTotal!, IPV4), 2);
  assert.equal(await valueOf(h.metrics.syncFailuresTotal, { mode: "iptables" }), 5);
  assert.equal(h.metrics.nftablesSyncFailuresTotal, undefined);
});

Deno.test("Proxier logs a frontend one Service takes from another once per change, and counts it", async () => {
  const SHARED = "192.0.2.1";
  const EXTERNAL = { ip_family: "IPv4", kind: "externalIP" };
  await withLogRecords(["kproxy", "proxier"], async (records) => {
    const shadowLogs = () =>
      records.filter((record) => /frontend/.test(String(record.rawMessage)))
        .map((record) => ({ level: record.level, ...record.properties }));
    const h = setup();
    h.tracker.set(service("alpha", "10.96.0.10", { externalIPs: [SHARED] }), ["10.244.0.5"]);
    h.tracker.set(service("beta", "10.96.0.11", { externalIPs: [SHARED] }), ["10.244.0.6"]);
    h.tracker.set(service("gamma", "10.96.0.12"), ["10.244.0.7"]);
    h.proxier.onEvent({ type: "synced" });
    await h.proxier.sync();
    assert.deepEqual(shadowLogs(), [{
      level: "warning",
      lost: "default/beta:/TCP",
      holder: "default/alpha:/TCP",
      frontend: "externalIP 192.0.2.1:80/TCP",
      family: "IPv4",
    }]);
    assert.equal(await valueOf(h.metrics.shadowedFrontends, EXTERNAL), 1);

    h.clock.t += 1000;
    h.tracker.set(service("gamma", "10.96.0.12"), ["10.244.0.8"]);
    await h.proxier.sync();
    h.clock.t += 1000;
    h.tracker.set(service("beta", "10.96.0.11", { externalIPs: [SHARED] }), ["10.244.0.9"]);
    await h.proxier.sync();
    h.clock.t += 60_000;
    await h.proxier.sync(); // full
    assert.equal(shadowLogs().length, 1, "logged once, not per sync");
    assert.equal(await valueOf(h.metrics.shadowedFrontends, EXTERNAL), 1);

    h.clock.t += 1000;
    h.tracker.services.delete("default/alpha");
    h.tracker.changed.add("default/alpha");
    await h.proxier.sync();
    assert.deepEqual(shadowLogs().slice(1), [{
      level: "info",
      lost: "default/beta:/TCP",
      holder: "default/alpha:/TCP",
      frontend: "externalIP 192.0.2.1:80/TCP",
      family: "IPv4",
    }]);
    assert.equal(await valueOf(h.metrics.shadowedFrontends, EXTERNAL), 0);
  });
});

Deno.test("Proxier stays unhealthy when a change arrives during a sync that succeeds and the syncs after it fail", async () => {
  const h: Harness = setup({
    backend: new RecordingBackend({
      mode: "nftables",
      failWith: (_, index) => {
        if (index === 1) {
          // A change delivered while this sync's load runs: the next sync's to apply.
          h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.7"], h.clock.t);
          h.proxier.onEvent({ type: "upsert", kind: "EndpointSlice", object: {} });
        }
        return index >= 2 ? new Error("nft: exit status 1") : undefined;
      },
    }),
  });
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"], h.clock.t);
  h.proxier.onEvent({ type: "synced" });
  assert.equal((await h.proxier.sync()).kind, "applied");
  h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.6"], h.clock.t);
  h.proxier.onEvent({ type: "upsert", kind: "EndpointSlice", object: {} });
  assert.equal((await h.proxier.sync()).kind, "applied");
  await assert.rejects(h.proxier.sync(), /exit status 1/);
  h.clock.t += 60_000;
  assert.equal(h.health.status().healthy, false, "the change after the last success waits");
});

Deno.test("Proxier logs each sync's duration and the time since the oldest change it programs", async () => {
  await withLogRecords(["kproxy", "proxier"], async (records) => {
    const h = setup({ beforeApply: () => void (h.clock.t += 12) });
    h.proxier.onEvent({ type: "synced" });
    h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.5"], h.clock.t - 5);
    await h.proxier.sync();
    h.tracker.set(service("web", "10.96.0.10"), ["10.244.0.6"]);
    await h.proxier.sync();
    const synced = records.filter((record) => /^Synced/.test(String(record.rawMessage)))
      .map(({ properties }) => [properties.kind, properties.durationMs, properties.sinceChangeMs]);
    assert.deepEqual(synced, [["full", 12, 17], ["partial", 12, undefined]]);
  });
});
