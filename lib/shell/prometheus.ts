/**
 * Counters, gauges and histograms, and the registry that writes them in
 * Prometheus' text exposition format 0.0.4 — the part of prom-client kproxy
 * uses, with its API and its output.
 *
 * kproxy writes these itself so that nothing on its way to the first sync
 * loads Deno's Node.js compatibility layer: prom-client is CommonJS and needs
 * `node:util`, and the layer costs resident memory for the process' life
 * (docs/BENCHMARKS.md, findings).
 *
 * A metric read at scrape time has a `collect()` callback, called by
 * {@linkcode Registry.metrics} before its samples are written:
 *
 * ```ts ignore
 * new Gauge({
 *   name: "kproxy_example",
 *   help: "An example",
 *   labelNames: ["service"],
 *   registers: [registry],
 *   collect() {
 *     this.reset();
 *     this.set({ service: "default/web" }, 1);
 *   },
 * });
 * ```
 *
 * @module
 */

/** Label values of one series, by label name. */
export type LabelValues<L extends string> = Partial<Record<L, string | number>>;

/** One line of a metric: its sample name when not the metric's, labels and value. */
export interface Sample {
  /** Set on a histogram's `_bucket`, `_sum` and `_count` samples. */
  metricName?: string;
  labels: Record<string, string | number>;
  value: number;
}

/** What a metric holds at a scrape, as prom-client's `get()` returns it. */
export interface MetricSnapshot {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  values: Sample[];
}

/** Options every metric takes. */
export interface MetricConfiguration<L extends string, M> {
  name: string;
  help: string;
  labelNames?: readonly L[];
  /** Registries the metric is written by. @default {[]} */
  registers?: readonly Registry[];
  /** Called before each scrape writes the metric's samples. */
  collect?: (this: M) => void | Promise<void>;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** The samples a scrape writes, and the series they are kept in. */
abstract class Metric<L extends string, V> {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
  abstract readonly type: MetricSnapshot["type"];
  /** Series by a key of their label values, in the order they were first written. */
  protected series: Map<string, { labels: LabelValues<L>; value: V }> = new Map();
  readonly #collect?: () => void | Promise<void>;

  constructor(config: MetricConfiguration<L, unknown>) {
    if (!METRIC_NAME.test(config.name)) throw new Error("Invalid metric name");
    const labelNames = config.labelNames ?? [];
    if (!labelNames.every((label) => LABEL_NAME.test(label))) {
      throw new Error("Invalid label name");
    }
    this.name = config.name;
    this.help = config.help;
    this.labelNames = labelNames;
    this.#collect = config.collect?.bind(this);
    for (const registry of config.registers ?? []) registry.registerMetric(this);
  }

  /** Drops every series; a metric without labels starts again at zero. */
  reset(): void {
    this.series.clear();
    if (this.labelNames.length === 0) this.series.set("", { labels: {}, value: this.initial() });
  }

  /** Runs `collect()`, then returns every sample. */
  async get(): Promise<MetricSnapshot> {
    await this.#collect?.();
    const values: Sample[] = [];
    for (const { labels, value } of this.series.values()) this.samples(labels, value, values);
    return { name: this.name, help: this.help, type: this.type, values };
  }

  protected abstract initial(): V;
  protected abstract samples(labels: LabelValues<L>, value: V, into: Sample[]): void;

  /** The series of `labels`, created at its initial value when new. */
  protected seriesOf(labels: LabelValues<L>): { labels: LabelValues<L>; value: V } {
    const key = this.keyOf(labels);
    let series = this.series.get(key);
    if (series === undefined) {
      series = { labels, value: this.initial() };
      this.series.set(key, series);
    }
    return series;
  }

  protected keyOf(labels: LabelValues<L>): string {
    let key = "";
    for (const label in labels) {
      if (!this.labelNames.includes(label)) {
        throw new Error(
          `Added label "${label}" is not included in initial labelset: ${
            JSON.stringify(this.labelNames)
          }`,
        );
      }
    }
    for (const label of this.labelNames) {
      const value = labels[label];
      if (value !== undefined) key += `${label}\u0000${value}\u0000`;
    }
    return key;
  }
}

/** Splits prom-client's `(labels, value)` or `(value)` arguments. */
function labelsAndValue<L extends string>(
  labelsOrValue: LabelValues<L> | number | undefined,
  value: number | undefined,
): [LabelValues<L>, number | undefined] {
  return typeof labelsOrValue === "object" ? [labelsOrValue, value] : [{}, labelsOrValue];
}

/** A counter; `inc()` adds 1 or the value given, never less than 0. */
export class Counter<L extends string = string> extends Metric<L, number> {
  readonly type = "counter";

  constructor(config: MetricConfiguration<L, Counter<L>>) {
    super(config as MetricConfiguration<L, unknown>);
    this.reset();
  }

  /** Adds `value` (1 when absent) to the series of `labels`. */
  inc(labels?: LabelValues<L>, value?: number): void;
  /** Adds `value` (1 when absent) to the series without labels. */
  inc(value?: number): void;
  inc(labelsOrValue?: LabelValues<L> | number, maybeValue?: number): void {
    const [labels, value = 1] = labelsAndValue(labelsOrValue, maybeValue);
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    if (value < 0) throw new Error("It is not possible to decrease a counter");
    this.seriesOf(labels).value += value;
  }

  protected initial(): number {
    return 0;
  }

  protected samples(labels: LabelValues<L>, value: number, into: Sample[]): void {
    into.push({ labels: labels as Record<string, string | number>, value });
  }
}

/** A gauge: a value set, raised or lowered. */
export class Gauge<L extends string = string> extends Metric<L, number> {
  readonly type = "gauge";

  constructor(config: MetricConfiguration<L, Gauge<L>>) {
    super(config as MetricConfiguration<L, unknown>);
    this.reset();
  }

  /** Sets the series of `labels` to `value`. */
  set(labels: LabelValues<L>, value: number): void;
  /** Sets the series without labels to `value`. */
  set(value: number): void;
  set(labelsOrValue: LabelValues<L> | number, maybeValue?: number): void {
    const [labels, value] = labelsAndValue(labelsOrValue, maybeValue);
    if (typeof value !== "number") throw new TypeError(`Value is not a valid number: ${value}`);
    const series = this.seriesOf(labels);
    series.labels = labels;
    series.value = value;
  }

  /** Adds `value` (1 when absent) to the series of `labels`. */
  inc(labels?: LabelValues<L>, value?: number): void;
  /** Adds `value` (1 when absent) to the series without labels. */
  inc(value?: number): void;
  inc(labelsOrValue?: LabelValues<L> | number, maybeValue?: number): void {
    const [labels, value = 1] = labelsAndValue(labelsOrValue, maybeValue);
    this.seriesOf(labels).value += value;
  }

  /** Subtracts `value` (1 when absent) from the series of `labels`. */
  dec(labels?: LabelValues<L>, value?: number): void;
  /** Subtracts `value` (1 when absent) from the series without labels. */
  dec(value?: number): void;
  dec(labelsOrValue?: LabelValues<L> | number, maybeValue?: number): void {
    const [labels, value = 1] = labelsAndValue(labelsOrValue, maybeValue);
    this.seriesOf(labels).value -= value;
  }

  protected initial(): number {
    return 0;
  }

  protected samples(labels: LabelValues<L>, value: number, into: Sample[]): void {
    into.push({ labels: labels as Record<string, string | number>, value });
  }
}

/** Options of a {@linkcode Histogram}. */
export interface HistogramConfiguration<L extends string>
  extends MetricConfiguration<L, Histogram<L>> {
  /** Upper bounds of the buckets, ascending; `+Inf` is implied. */
  buckets: readonly number[];
}

interface Observations {
  /** Observations per bucket (not cumulative); the last is the `+Inf` bucket's own. */
  buckets: number[];
  sum: number;
  count: number;
}

/** A histogram with cumulative buckets, a sum and a count per series. */
export class Histogram<L extends string = string> extends Metric<L, Observations> {
  readonly type = "histogram";
  readonly upperBounds: readonly number[];

  constructor(config: HistogramConfiguration<L>) {
    super(withoutLe(config) as MetricConfiguration<L, unknown>);
    this.upperBounds = [...config.buckets];
    super.reset();
  }

  /** Drops every series, that of a histogram without labels too (as prom-client). */
  override reset(): void {
    this.series.clear();
  }

  /** Records `value` in the series of `labels`. */
  observe(labels: LabelValues<L>, value: number): void;
  /** Records `value` in the series without labels. */
  observe(value: number): void;
  observe(labelsOrValue: LabelValues<L> | number, maybeValue?: number): void {
    const [labels, value] = labelsAndValue(labelsOrValue, maybeValue);
    if (typeof value !== "number" || Number.isNaN(value)) {
      throw new TypeError(`Value is not a valid number: ${value}`);
    }
    const { value: observed } = this.seriesOf(labels);
    let bucket = this.upperBounds.findIndex((bound) => value <= bound);
    if (bucket < 0) bucket = this.upperBounds.length;
    observed.buckets[bucket]! += 1;
    observed.sum += value;
    observed.count += 1;
  }

  /** Creates the series of `labels` at zero, or sets it back to zero. */
  zero(labels: LabelValues<L>): void {
    this.series.set(this.keyOf(labels), { labels, value: this.initial() });
  }

  protected initial(): Observations {
    return { buckets: new Array(this.upperBounds.length + 1).fill(0), sum: 0, count: 0 };
  }

  protected samples(labels: LabelValues<L>, observed: Observations, into: Sample[]): void {
    const metricName = `${this.name}_bucket`;
    let cumulative = 0;
    this.upperBounds.forEach((bound, index) => {
      cumulative += observed.buckets[index]!;
      into.push({ metricName, labels: { le: bound, ...labels }, value: cumulative });
    });
    const plain = labels as Record<string, string | number>;
    into.push(
      { metricName, labels: { le: "+Inf", ...labels }, value: observed.count },
      { metricName: `${this.name}_sum`, labels: { ...plain }, value: observed.sum },
      { metricName: `${this.name}_count`, labels: { ...plain }, value: observed.count },
    );
  }
}

function withoutLe<C extends { labelNames?: readonly string[] }>(config: C): C {
  if (config.labelNames?.includes("le")) throw new Error("le is a reserved label keyword");
  return config;
}

/** Anything a registry writes. */
type AnyMetric = Counter | Gauge | Histogram;

/** The metrics one endpoint serves, written in registration order. */
export class Registry {
  /** The content type of {@linkcode Registry.metrics}'s text. */
  readonly contentType = "text/plain; version=0.0.4; charset=utf-8";
  readonly #metrics = new Map<string, AnyMetric>();

  /** Adds `metric`; a different metric of the same name is refused. */
  registerMetric(metric: Metric<string, unknown>): void {
    const existing = this.#metrics.get(metric.name);
    if (existing !== undefined && existing !== metric) {
      throw new Error(`A metric with the name ${metric.name} has already been registered.`);
    }
    this.#metrics.set(metric.name, metric as AnyMetric);
  }

  /** Every metric in the text exposition format, each collected first. */
  async metrics(): Promise<string> {
    const texts = await Promise.all([...this.#metrics.values()].map(exposition));
    return `${texts.join("\n\n")}\n`;
  }
}

async function exposition(metric: AnyMetric): Promise<string> {
  const { name, help, type, values } = await metric.get();
  const lines = [`# HELP ${name} ${escapeText(help)}`, `# TYPE ${name} ${type}`];
  for (const { metricName = name, labels, value } of values) {
    const pairs = Object.entries(labels).map(([label, labelValue]) =>
      `${label}="${escapeLabelValue(labelValue)}"`
    );
    const labelText = pairs.length === 0 ? "" : `{${pairs.join(",")}}`;
    lines.push(`${metricName}${labelText} ${formatValue(value)}`);
  }
  return lines.join("\n");
}

function escapeText(text: string): string {
  return text.replaceAll("\\", "\\\\").replaceAll("\n", "\\n");
}

function escapeLabelValue(value: string | number): string {
  return typeof value === "string" ? escapeText(value).replaceAll('"', '\\"') : `${value}`;
}

/** A sample value as Prometheus reads it: `NaN`, `+Inf`, `-Inf` or the number. */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return `${value}`;
}

/** `count` bucket bounds from `start`, `width` apart. */
export function linearBuckets(start: number, width: number, count: number): number[] {
  if (count < 1) throw new Error("Linear buckets needs a positive count");
  return Array.from({ length: count }, (_, index) => start + index * width);
}

/** `count` bucket bounds from `start`, each `factor` times the one before. */
export function exponentialBuckets(start: number, factor: number, count: number): number[] {
  if (start <= 0) throw new Error("Exponential buckets needs a positive start");
  if (count < 1) throw new Error("Exponential buckets needs a positive count");
  if (factor <= 1) throw new Error("Exponential buckets needs a factor greater than 1");
  const buckets: number[] = [];
  for (let bound = start; buckets.length < count; bound *= factor) buckets.push(bound);
  return buckets;
}
