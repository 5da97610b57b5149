/**
 * A small Prometheus registry (counters, gauges, histograms and the text
 * exposition format) and the metrics kube-proxy exports, under the same names.
 *
 * @module
 */

/** Label names to values. */
export type Labels = Record<string, string>;

/** Options shared by every metric. */
export interface MetricOptions {
  /** Full metric name, e.g. `kubeproxy_sync_proxy_rules_duration_seconds`. */
  name: string;
  help: string;
  /** Names of the labels every sample must carry, in exposition order. */
  labelNames?: readonly string[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** Returns `count` buckets: start, start·factor, start·factor², … */
export function exponentialBuckets(start: number, factor: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => start * factor ** i);
}

/** Returns `count` buckets: start, start+width, start+2·width, … */
export function linearBuckets(start: number, width: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => start + width * i);
}

function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

function escapeLabelValue(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

function escapeHelp(help: string): string {
  return help.replaceAll("\\", "\\\\").replaceAll("\n", "\\n");
}

function formatLabels(names: readonly string[], values: readonly string[]): string {
  if (names.length === 0) return "";
  const pairs = names.map((name, i) => `${name}="${escapeLabelValue(values[i] ?? "")}"`);
  return `{${pairs.join(",")}}`;
}

/** The common part of every metric: name, help, labels and the series keyed by label values. */
abstract class Metric<Series> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly string[];
  abstract readonly type: "counter" | "gauge" | "histogram";
  protected readonly series: Map<string, { values: string[]; data: Series }> = new Map();

  constructor(options: MetricOptions) {
    if (!METRIC_NAME.test(options.name)) {
      throw new TypeError(`Cannot register metric "${options.name}": invalid name`);
    }
    for (const label of options.labelNames ?? []) {
      if (!LABEL_NAME.test(label) || label === "le") {
        throw new TypeError(`Cannot register metric "${options.name}": invalid label "${label}"`);
      }
    }
    this.name = options.name;
    this.help = options.help;
    this.labelNames = [...(options.labelNames ?? [])];
  }

  protected abstract newSeries(): Series;
  protected abstract formatSeries(labels: string[], data: Series): string[];

  protected seriesFor(labels: Labels = {}): Series {
    const values = this.labelNames.map((name) => {
      const value = labels[name];
      if (value === undefined) {
        throw new TypeError(`Cannot record metric "${this.name}": missing label "${name}"`);
      }
      return value;
    });
    if (Object.keys(labels).length !== this.labelNames.length) {
      throw new TypeError(
        `Cannot record metric "${this.name}": labels must be exactly ${
          JSON.stringify(this.labelNames)
        }`,
      );
    }
    const key = JSON.stringify(values);
    let entry = this.series.get(key);
    if (!entry) {
      entry = { values, data: this.newSeries() };
      this.series.set(key, entry);
    }
    return entry.data;
  }

  /** The exposition text of this metric: HELP, TYPE and samples sorted by labels. */
  expose(): string {
    const lines = [
      `# HELP ${this.name} ${escapeHelp(this.help)}`,
      `# TYPE ${this.name} ${this.type}`,
    ];
    const entries = [...this.series.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    for (const [, entry] of entries) lines.push(...this.formatSeries(entry.values, entry.data));
    return lines.join("\n") + "\n";
  }
}

/** A monotonically increasing count. */
export class Counter extends Metric<{ value: number }> {
  readonly type = "counter" as const;

  constructor(options: MetricOptions) {
    super(options);
    if (this.labelNames.length === 0) this.seriesFor();
  }

  /** Adds `amount` (default 1, never negative). */
  inc(labels?: Labels, amount = 1): void {
    if (!(amount >= 0)) {
      throw new RangeError(`Cannot decrease counter "${this.name}" by ${amount}`);
    }
    this.seriesFor(labels).value += amount;
  }

  /** Current value of one series. */
  get(labels?: Labels): number {
    return this.seriesFor(labels).value;
  }

  protected newSeries(): { value: number } {
    return { value: 0 };
  }

  protected formatSeries(values: string[], data: { value: number }): string[] {
    return [`${this.name}${formatLabels(this.labelNames, values)} ${formatValue(data.value)}`];
  }
}

/** A value that goes up and down. */
export class Gauge extends Metric<{ value: number }> {
  readonly type = "gauge" as const;

  constructor(options: MetricOptions) {
    super(options);
    if (this.labelNames.length === 0) this.seriesFor();
  }

  /** Sets the value of one series. */
  set(value: number, labels?: Labels): void {
    this.seriesFor(labels).value = value;
  }

  /** Adds `amount` (may be negative). */
  inc(labels?: Labels, amount = 1): void {
    this.seriesFor(labels).value += amount;
  }

  /** Current value of one series. */
  get(labels?: Labels): number {
    return this.seriesFor(labels).value;
  }

  protected newSeries(): { value: number } {
    return { value: 0 };
  }

  protected formatSeries(values: string[], data: { value: number }): string[] {
    return [`${this.name}${formatLabels(this.labelNames, values)} ${formatValue(data.value)}`];
  }
}

/** Options for {@linkcode Histogram}. */
export interface HistogramOptions extends MetricOptions {
  /** Upper bounds, strictly increasing; `+Inf` is implied. */
  buckets: readonly number[];
}

interface HistogramSeries {
  counts: number[];
  sum: number;
  count: number;
}

/** Observations counted into cumulative buckets. */
export class Histogram extends Metric<HistogramSeries> {
  readonly type = "histogram" as const;
  readonly buckets: readonly number[];

  constructor(options: HistogramOptions) {
    super(options);
    for (let i = 1; i < options.buckets.length; i++) {
      if (!(options.buckets[i]! > options.buckets[i - 1]!)) {
        throw new RangeError(`Cannot register histogram "${this.name}": buckets must increase`);
      }
    }
    this.buckets = [...options.buckets];
    if (this.labelNames.length === 0) this.seriesFor();
  }

  /** Records one observation. */
  observe(value: number, labels?: Labels): void {
    const series = this.seriesFor(labels);
    const index = this.buckets.findIndex((bound) => value <= bound);
    if (index >= 0) series.counts[index]!++;
    series.sum += value;
    series.count++;
  }

  /** Count and sum of one series. */
  get(labels?: Labels): { count: number; sum: number } {
    const { count, sum } = this.seriesFor(labels);
    return { count, sum };
  }

  protected newSeries(): HistogramSeries {
    return { counts: this.buckets.map(() => 0), sum: 0, count: 0 };
  }

  protected formatSeries(values: string[], data: HistogramSeries): string[] {
    const names = [...this.labelNames, "le"];
    const lines: string[] = [];
    let cumulative = 0;
    this.buckets.forEach((bound, i) => {
      cumulative += data.counts[i]!;
      lines.push(
        `${this.name}_bucket${formatLabels(names, [...values, formatValue(bound)])} ${cumulative}`,
      );
    });
    lines.push(`${this.name}_bucket${formatLabels(names, [...values, "+Inf"])} ${data.count}`);
    const labels = formatLabels(this.labelNames, values);
    lines.push(`${this.name}_sum${labels} ${formatValue(data.sum)}`);
    lines.push(`${this.name}_count${labels} ${data.count}`);
    return lines;
  }
}

/** A set of metrics exposed together. */
export class Registry {
  readonly #metrics = new Map<string, Metric<unknown>>();
  readonly #collectors: (() => Promise<string>)[] = [];

  /** Adds exposition text made at scrape time (e.g. kernel counters, lib/shell/service_counters.ts). */
  collector(collect: () => Promise<string>): void {
    this.#collectors.push(collect);
  }

  /** {@linkcode Registry.expose} followed by every collector's text. */
  async scrape(): Promise<string> {
    const collected = await Promise.all(this.#collectors.map((collect) => collect()));
    return this.expose() + collected.join("");
  }

  /** Registers and returns a counter. */
  counter(options: MetricOptions): Counter {
    return this.#register(new Counter(options));
  }

  /** Registers and returns a gauge. */
  gauge(options: MetricOptions): Gauge {
    return this.#register(new Gauge(options));
  }

  /** Registers and returns a histogram. */
  histogram(options: HistogramOptions): Histogram {
    return this.#register(new Histogram(options));
  }

  /** The Prometheus text exposition (format 0.0.4) of every metric, sorted by name. */
  expose(): string {
    return [...this.#metrics.values()]
      .sort((a, b) => (a.name < b.name ? -1 : 1))
      .map((metric) => metric.expose())
      .join("");
  }

  #register<M extends Metric<any>>(metric: M): M {
    if (this.#metrics.has(metric.name)) {
      throw new TypeError(`Cannot register metric "${metric.name}": already registered`);
    }
    this.#metrics.set(metric.name, metric);
    return metric;
  }
}

/** Buckets of sync durations, as upstream: 1 ms doubling 15 times (to ~16 s). */
export const SYNC_DURATION_BUCKETS: readonly number[] = exponentialBuckets(0.001, 2, 15);

/** Buckets of network programming latency, as upstream: 0.25 s … 5 min. */
export const NETWORK_PROGRAMMING_BUCKETS: readonly number[] = [
  ...linearBuckets(0.25, 0.25, 2),
  ...linearBuckets(1, 1, 59),
  ...linearBuckets(60, 5, 12),
  ...linearBuckets(120, 30, 7),
];

/** Every metric kproxy exports: kube-proxy's (`kubeproxy_`) and its own (`kproxy_`). */
export class ProxyMetrics {
  readonly registry: Registry;
  readonly syncProxyRulesDuration: Histogram;
  readonly syncFullProxyRulesDuration: Histogram;
  readonly syncPartialProxyRulesDuration: Histogram;
  readonly syncProxyRulesLastTimestamp: Gauge;
  readonly networkProgrammingDuration: Histogram;
  readonly endpointChangesPending: Gauge;
  readonly endpointChangesTotal: Counter;
  readonly serviceChangesPending: Gauge;
  readonly serviceChangesTotal: Counter;
  readonly noLocalEndpointsTotal: Gauge;
  readonly lastQueuedTimestamp: Gauge;
  readonly proxyHealthzTotal: Counter;
  readonly proxyLivezTotal: Counter;
  readonly syncFailuresTotal: Counter;
  readonly driftRepairsTotal: Counter;
  readonly conntrackReconcilerSyncDuration: Histogram;
  readonly conntrackReconcilerDeletedEntriesTotal: Counter;

  constructor(registry: Registry = new Registry()) {
    this.registry = registry;
    const histogram = (name: string, help: string, buckets: readonly number[]) =>
      registry.histogram({ name: `kubeproxy_${name}`, help, buckets });
    this.syncProxyRulesDuration = histogram(
      "sync_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds",
      SYNC_DURATION_BUCKETS,
    );
    this.syncFullProxyRulesDuration = histogram(
      "sync_full_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for full resyncs",
      SYNC_DURATION_BUCKETS,
    );
    this.syncPartialProxyRulesDuration = histogram(
      "sync_partial_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for partial resyncs",
      SYNC_DURATION_BUCKETS,
    );
    this.networkProgrammingDuration = histogram(
      "network_programming_duration_seconds",
      "In Cluster Network Programming Latency in seconds",
      NETWORK_PROGRAMMING_BUCKETS,
    );
    this.syncProxyRulesLastTimestamp = registry.gauge({
      name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
      help: "The last time proxy rules were successfully synced",
    });
    this.endpointChangesPending = registry.gauge({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
      help: "Pending proxy rules Endpoint changes",
    });
    this.endpointChangesTotal = registry.counter({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      help: "Cumulative proxy rules Endpoint changes",
    });
    this.serviceChangesPending = registry.gauge({
      name: "kubeproxy_sync_proxy_rules_service_changes_pending",
      help: "Pending proxy rules Service changes",
    });
    this.serviceChangesTotal = registry.counter({
      name: "kubeproxy_sync_proxy_rules_service_changes_total",
      help: "Cumulative proxy rules Service changes",
    });
    this.noLocalEndpointsTotal = registry.gauge({
      name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
      help: "Number of services with a Local traffic policy and no endpoints",
      labelNames: ["traffic_policy"],
    });
    this.noLocalEndpointsTotal.set(0, { traffic_policy: "internal" });
    this.noLocalEndpointsTotal.set(0, { traffic_policy: "external" });
    this.lastQueuedTimestamp = registry.gauge({
      name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
      help: "The last time a sync of proxy rules was queued",
    });
    this.proxyHealthzTotal = registry.counter({
      name: "kubeproxy_proxy_healthz_total",
      help: "Cumulative proxy healthz HTTP status",
      labelNames: ["code"],
    });
    this.proxyLivezTotal = registry.counter({
      name: "kubeproxy_proxy_livez_total",
      help: "Cumulative proxy livez HTTP status",
      labelNames: ["code"],
    });
    this.syncFailuresTotal = registry.counter({
      name: "kproxy_sync_failures_total",
      help: "Syncs of proxy rules that failed and will be retried",
      labelNames: ["mode"],
    });
    this.driftRepairsTotal = registry.counter({
      name: "kproxy_drift_repairs_total",
      help: "Full syncs triggered because the kernel no longer held the applied rules",
      labelNames: ["mode"],
    });
    this.conntrackReconcilerSyncDuration = registry.histogram({
      name: "kubeproxy_conntrack_reconciler_sync_duration_seconds",
      help: "ReconcileConntrackFlowsLatency latency in seconds",
      buckets: SYNC_DURATION_BUCKETS,
      labelNames: ["ip_family"],
    });
    this.conntrackReconcilerDeletedEntriesTotal = registry.counter({
      name: "kubeproxy_conntrack_reconciler_deleted_entries_total",
      help: "Cumulative conntrack flows deleted by conntrack reconciler",
      labelNames: ["ip_family"],
    });
  }
}
