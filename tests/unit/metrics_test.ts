import assert from "node:assert/strict";
import { ProxyHealth } from "../../lib/shell/health.ts";
import {
  Counter,
  Gauge,
  Histogram,
  histogramTotals,
  NETWORK_PROGRAMMING_BUCKETS,
  ProxyMetrics,
  Registry,
  SYNC_DURATION_BUCKETS,
  valueOf,
} from "../../lib/shell/metrics.ts";
import {
  parseMaxOpenFiles,
  type ProcessStats,
  registerProcessMetrics,
} from "../../lib/shell/process_metrics.ts";
import { startMetricsServer } from "../../lib/shell/servers.ts";

Deno.test("Registry.metrics() writes prom-client's exposition with HELP, TYPE and escaped labels", async () => {
  const registry = new Registry();
  const registers = [registry];
  const counter = new Counter({
    name: "b_total",
    help: "Things\nseen",
    labelNames: ["kind"],
    registers,
  });
  new Gauge({ name: "a_value", help: "A value", registers }).set(1.5);
  counter.inc({ kind: 'say "hi"\\' });
  counter.inc({ kind: "plain" }, 2);
  const text = await registry.metrics();
  assert.match(text, /^# HELP b_total Things\\nseen$/m);
  assert.match(text, /^# TYPE b_total counter$/m);
  assert.match(text, /^b_total\{kind="plain"\} 2$/m);
  assert.match(text, /^b_total\{kind="say \\"hi\\"\\\\"\} 1$/m);
  assert.match(text, /^# TYPE a_value gauge\na_value 1.5$/m);
  assert.equal(registry.contentType, "text/plain; version=0.0.4; charset=utf-8");
});

Deno.test("Histogram.observe() fills cumulative buckets, sum and count", async () => {
  const registry = new Registry();
  const histogram = new Histogram({
    name: "h_seconds",
    help: "H",
    buckets: [0.1, 1],
    registers: [registry],
  });
  histogram.observe(0.05);
  histogram.observe(0.5);
  histogram.observe(3);
  assert.equal(
    await registry.metrics(),
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
  assert.deepEqual(await histogramTotals(histogram), { count: 3, sum: 3.55 });
});

Deno.test("the registry rejects bad names, duplicate metrics and wrong labels", () => {
  const registry = new Registry();
  const registers = [registry];
  assert.throws(
    () => new Counter({ name: "bad-name", help: "x", registers }),
    /Invalid metric name/,
  );
  new Counter({ name: "x_total", help: "x", labelNames: ["mode"], registers });
  assert.throws(
    () => new Gauge({ name: "x_total", help: "x", registers }),
    /already been registered/,
  );
  const c = new Counter({ name: "y_total", help: "x", labelNames: ["mode"], registers });
  assert.throws(() => c.inc({ other: "b" } as never), /Added label "other" is not included/);
  assert.throws(() => c.inc({ mode: "a" }, -1), /It is not possible to decrease a counter/);
});

Deno.test("the buckets are upstream's", () => {
  assert.equal(SYNC_DURATION_BUCKETS.length, 15);
  assert.equal(SYNC_DURATION_BUCKETS[0], 0.001);
  assert.equal(SYNC_DURATION_BUCKETS[14], 0.001 * 2 ** 14);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS.length, 2 + 59 + 12 + 7);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS[0], 0.25);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS[2], 1);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS.at(-1), 300);
});

Deno.test("ProxyMetrics registers per-family series at zero, and each mode's own metrics", async () => {
  const text = await new ProxyMetrics({ mode: "nftables" }).registry.metrics();
  assert.match(text, /^kubeproxy_sync_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} 0$/m);
  assert.match(text, /^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv6"\} 0$/m);
  assert.match(
    text,
    /^kubeproxy_sync_proxy_rules_no_local_endpoints_total\{ip_family="IPv4",traffic_policy="internal"\} 0$/m,
  );
  assert.match(
    text,
    /^kubeproxy_sync_proxy_rules_nftables_sync_failures_total\{ip_family="IPv6"\} 0$/m,
  );
  assert.match(text, /^kproxy_sync_failures_total\{mode="nftables"\} 0$/m);
  assert.doesNotMatch(text, /kubeproxy_sync_proxy_rules_iptables/);

  const iptables = await new ProxyMetrics({ mode: "iptables" }).registry.metrics();
  assert.match(
    iptables,
    /^kubeproxy_sync_proxy_rules_iptables_total\{ip_family="IPv4",table="nat"\} 0$/m,
  );
  assert.match(iptables, /^# TYPE kubeproxy_sync_proxy_rules_iptables_last gauge$/m);
  assert.match(
    iptables,
    /^# TYPE kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total counter$/m,
  );
  assert.doesNotMatch(iptables, /nftables/);

  const ipvs = await new ProxyMetrics({ mode: "ipvs" }).registry.metrics();
  assert.match(
    ipvs,
    /^# TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter$/m,
  );
  assert.doesNotMatch(ipvs, /iptables_total|partial_restore|nftables/);
});

Deno.test("ProxyMetrics has upstream's conntrack reconciler metrics, labelled ip_family", async () => {
  const metrics = new ProxyMetrics();
  metrics.conntrackReconcilerSyncDuration.observe({ ip_family: "IPv4" }, 0.003);
  metrics.conntrackReconcilerDeletedEntriesTotal.inc({ ip_family: "IPv6" }, 2);
  const text = await metrics.registry.metrics();
  assert.match(text, /^# TYPE kubeproxy_conntrack_reconciler_sync_duration_seconds histogram$/m);
  assert.match(
    text,
    /^kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket\{le="0.004",ip_family="IPv4"\} 1$/m,
  );
  assert.match(text, /^# TYPE kubeproxy_conntrack_reconciler_deleted_entries_total counter$/m);
  assert.equal(
    await valueOf(metrics.conntrackReconcilerDeletedEntriesTotal, { ip_family: "IPv6" }),
    2,
  );
});

Deno.test("parseMaxOpenFiles() reads the soft limit of /proc/self/limits", () => {
  const limits = [
    "Limit                     Soft Limit           Hard Limit           Units     ",
    "Max processes             95385                95385                processes ",
    "Max open files            1024                 524288               files     ",
  ].join("\n");
  assert.equal(parseMaxOpenFiles(limits), 1024);
  assert.equal(parseMaxOpenFiles("Max open files  unlimited  unlimited  files"), Infinity);
  assert.equal(parseMaxOpenFiles("Max processes 1 1 processes"), undefined);
});

Deno.test("registerProcessMetrics() serves kube-proxy's process_* families, read at scrape time", async () => {
  let rss = 1000;
  const stats: ProcessStats = {
    cpuSeconds: () => 1.5,
    residentMemoryBytes: () => rss,
    startTimeSeconds: () => 1700000000.25,
    openFds: () => 12,
    maxFds: () => 1024,
  };
  const registry = new Registry();
  registerProcessMetrics(registry, stats);
  let text = await registry.metrics();
  assert.match(text, /^# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5$/m);
  assert.match(text, /^process_resident_memory_bytes 1000$/m);
  assert.match(text, /^process_start_time_seconds 1700000000.25$/m);
  assert.match(text, /^process_open_fds 12$/m);
  assert.match(text, /^process_max_fds 1024$/m);
  rss = 2000;
  text = await registry.metrics();
  assert.match(text, /^process_resident_memory_bytes 2000$/m);
  assert.match(text, /^process_cpu_seconds_total 1.5$/m);

  const denied = new Registry();
  registerProcessMetrics(denied, { ...stats, openFds: () => undefined, maxFds: () => undefined });
  text = await denied.metrics();
  assert.doesNotMatch(text, /_fds/, "no family without a sample where /proc is refused");
  assert.match(text, /^process_resident_memory_bytes 2000$/m);
});

Deno.test("registerProcessMetrics() serves the other families when the CPU time cannot be read", async () => {
  const registry = new Registry();
  registerProcessMetrics(registry, {
    cpuSeconds: () => NaN,
    residentMemoryBytes: () => 1000,
    startTimeSeconds: () => 1700000000,
    openFds: () => undefined,
    maxFds: () => undefined,
  });
  const text = await registry.metrics();
  assert.match(text, /^process_resident_memory_bytes 1000$/m);
  assert.match(text, /^process_cpu_seconds_total 0$/m, "left at 0, not a failed scrape");
});

Deno.test("registerProcessMetrics() reads this Deno process by default", async () => {
  const registry = new Registry();
  registerProcessMetrics(registry);
  const text = await registry.metrics();
  const value = (name: string) => Number(text.match(new RegExp(`^${name} (\\S+)$`, "m"))?.[1]);
  assert.ok(value("process_cpu_seconds_total") > 0);
  assert.ok(value("process_resident_memory_bytes") > 10 * 2 ** 20);
  assert.ok(
    Math.abs(value("process_start_time_seconds") - (Date.now() - performance.now()) / 1000) < 5,
  );
  // Deno refuses /proc without every permission: `--ignore-env` (deno task test) is enough.
  const procReadable = await Deno.readDir("/proc/self/fd")[Symbol.asyncIterator]().next()
    .then(() => true, () => false);
  if (procReadable) {
    assert.ok(value("process_open_fds") > 2);
    assert.ok(value("process_max_fds") >= value("process_open_fds"));
  } else {
    assert.doesNotMatch(text, /_fds/);
  }
});

Deno.test("startMetricsServer() serves /metrics, /healthz and /livez", async () => {
  const metrics = new ProxyMetrics();
  const health = new ProxyHealth({ healthTimeoutMs: 60_000 });
  health.setNodeDeleting(false);
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
    assert.equal(await valueOf(metrics.proxyHealthzTotal, { code: "200" }), 1);
  } finally {
    await server.shutdown();
  }
});
