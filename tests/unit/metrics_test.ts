import assert from "node:assert/strict";
import { ProxyHealth } from "../../lib/shell/health.ts";
import {
  exponentialBuckets,
  NETWORK_PROGRAMMING_BUCKETS,
  ProxyMetrics,
  Registry,
  SYNC_DURATION_BUCKETS,
} from "../../lib/shell/metrics.ts";
import { startMetricsServer } from "../../lib/shell/servers.ts";

Deno.test("Registry.expose() writes counters and gauges with HELP, TYPE and escaped labels", () => {
  const registry = new Registry();
  const counter = registry.counter({ name: "b_total", help: "Things\nseen", labelNames: ["kind"] });
  const gauge = registry.gauge({ name: "a_value", help: "A value" });
  counter.inc({ kind: 'say "hi"\\' });
  counter.inc({ kind: "plain" }, 2);
  gauge.set(1.5);
  assert.equal(
    registry.expose(),
    [
      "# HELP a_value A value",
      "# TYPE a_value gauge",
      "a_value 1.5",
      "# HELP b_total Things\\nseen",
      "# TYPE b_total counter",
      'b_total{kind="plain"} 2',
      'b_total{kind="say \\"hi\\"\\\\"} 1',
      "",
    ].join("\n"),
  );
});

Deno.test("Histogram.observe() fills cumulative buckets, sum and count", () => {
  const registry = new Registry();
  const histogram = registry.histogram({ name: "h_seconds", help: "H", buckets: [0.1, 1] });
  histogram.observe(0.05);
  histogram.observe(0.5);
  histogram.observe(3);
  assert.equal(
    registry.expose(),
    [
      "# HELP h_seconds H",
      "# TYPE h_seconds histogram",
      'h_seconds_bucket{le="0.1"} 1',
      'h_seconds_bucket{le="1"} 2',
      'h_seconds_bucket{le="+Inf"} 3',
      "h_seconds_sum 3.55",
      "h_seconds_count 3",
      "",
    ].join("\n"),
  );
  assert.deepEqual(histogram.get(), { count: 3, sum: 3.55 });
});

Deno.test("Registry rejects bad names, duplicate metrics and wrong labels", () => {
  const registry = new Registry();
  assert.throws(() => registry.counter({ name: "bad-name", help: "" }), TypeError);
  registry.counter({ name: "x_total", help: "", labelNames: ["mode"] });
  assert.throws(() => registry.gauge({ name: "x_total", help: "" }), /already registered/);
  const c = registry.counter({ name: "y_total", help: "", labelNames: ["mode"] });
  assert.throws(() => c.inc({}), /missing label "mode"/);
  assert.throws(() => c.inc({ mode: "a", other: "b" }), /labels must be exactly/);
  assert.throws(() => c.inc({ mode: "a" }, -1), RangeError);
  assert.throws(
    () => registry.histogram({ name: "z", help: "", buckets: [1, 1] }),
    /buckets must increase/,
  );
});

Deno.test("exponentialBuckets() matches upstream's sync duration buckets", () => {
  assert.deepEqual(exponentialBuckets(1, 2, 4), [1, 2, 4, 8]);
  assert.equal(SYNC_DURATION_BUCKETS.length, 15);
  assert.equal(SYNC_DURATION_BUCKETS[0], 0.001);
  assert.equal(SYNC_DURATION_BUCKETS[14], 0.001 * 2 ** 14);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS[0], 0.25);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS.at(-1), 300);
});

Deno.test("ProxyMetrics registers kube-proxy's metric names", () => {
  const metrics = new ProxyMetrics();
  const text = metrics.registry.expose();
  const names = [
    "kubeproxy_sync_proxy_rules_duration_seconds",
    "kubeproxy_sync_full_proxy_rules_duration_seconds",
    "kubeproxy_sync_partial_proxy_rules_duration_seconds",
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
    "kubeproxy_network_programming_duration_seconds",
    "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
    "kubeproxy_sync_proxy_rules_endpoint_changes_total",
    "kubeproxy_sync_proxy_rules_service_changes_pending",
    "kubeproxy_sync_proxy_rules_service_changes_total",
    "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    "kubeproxy_proxy_healthz_total",
    "kubeproxy_proxy_livez_total",
    "kproxy_sync_failures_total",
    "kproxy_drift_repairs_total",
    "kubeproxy_conntrack_reconciler_sync_duration_seconds",
    "kubeproxy_conntrack_reconciler_deleted_entries_total",
  ];
  for (const name of names) assert.match(text, new RegExp(`^# TYPE ${name} `, "m"), name);
  assert.match(
    text,
    /^kubeproxy_sync_proxy_rules_no_local_endpoints_total\{traffic_policy="internal"\} 0$/m,
  );
});

Deno.test("ProxyMetrics has upstream's conntrack reconciler metrics, labelled ip_family", () => {
  const metrics = new ProxyMetrics();
  metrics.conntrackReconcilerSyncDuration.observe(0.003, { ip_family: "IPv4" });
  metrics.conntrackReconcilerDeletedEntriesTotal.inc({ ip_family: "IPv6" }, 2);
  const text = metrics.registry.expose();
  assert.match(
    text,
    /^# TYPE kubeproxy_conntrack_reconciler_sync_duration_seconds histogram$/m,
  );
  assert.match(
    text,
    /^kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket\{ip_family="IPv4",le="0.004"\} 1$/m,
  );
  assert.deepEqual(metrics.conntrackReconcilerSyncDuration.buckets, SYNC_DURATION_BUCKETS);
  assert.match(text, /^# TYPE kubeproxy_conntrack_reconciler_deleted_entries_total counter$/m);
  assert.match(
    text,
    /^kubeproxy_conntrack_reconciler_deleted_entries_total\{ip_family="IPv6"\} 2$/m,
  );
});

Deno.test("startMetricsServer() serves /metrics, /healthz and /livez", async () => {
  const metrics = new ProxyMetrics();
  const health = new ProxyHealth({ healthTimeoutMs: 60_000 });
  metrics.syncFailuresTotal.inc({ mode: "nftables" });
  const server = startMetricsServer({
    address: "127.0.0.1:0",
    registry: metrics.registry,
    health,
    metrics,
  });
  try {
    const url = `http://127.0.0.1:${server.addr.port}`;
    let response = await fetch(`${url}/metrics`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/plain; version=0.0.4/);
    assert.match(await response.text(), /^kproxy_sync_failures_total\{mode="nftables"\} 1$/m);
    response = await fetch(`${url}/healthz`);
    assert.equal(response.status, 200);
    assert.equal((await response.json()).nodeEligible, true);
    response = await fetch(`${url}/livez`);
    assert.equal(response.status, 200);
    await response.body?.cancel();
    response = await fetch(`${url}/nope`);
    assert.equal(response.status, 404);
    await response.body?.cancel();
    assert.match(metrics.registry.expose(), /^kubeproxy_proxy_healthz_total\{code="200"\} 1$/m);
  } finally {
    await server.shutdown();
  }
});
