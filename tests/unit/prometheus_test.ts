import assert from "node:assert/strict";
import * as prom from "prom-client";
import {
  Counter,
  exponentialBuckets,
  formatValue,
  Gauge,
  Histogram,
  linearBuckets,
  Registry,
} from "../../lib/shell/prometheus.ts";

/** The classes of one implementation: kproxy's, or prom-client's as the oracle. */
interface Implementation {
  Registry: new () => { metrics(): Promise<string> };
  Counter: new (config: object) => {
    inc(...args: unknown[]): void;
    reset(): void;
  };
  Gauge: new (config: object) => {
    set(...args: unknown[]): void;
    inc(...args: unknown[]): void;
    dec(...args: unknown[]): void;
    reset(): void;
  };
  Histogram: new (config: object) => {
    observe(...args: unknown[]): void;
    zero(labels: object): void;
    reset(): void;
  };
}

const OURS = { Registry, Counter, Gauge, Histogram } as unknown as Implementation;
const PROM_CLIENT = prom as unknown as Implementation;

/** Scenarios written the way kproxy uses metrics; each must read the same from both. */
const SCENARIOS: Record<string, (impl: Implementation) => Promise<string>> = {
  "counters with and without labels, escaped help and values": (impl) => {
    const registry = new impl.Registry();
    const registers = [registry];
    const plain = new impl.Counter({ name: "plain_total", help: "A\\b\nc", registers });
    plain.inc();
    plain.inc(2.5);
    const labelled = new impl.Counter({
      name: "labelled_total",
      help: "L",
      labelNames: ["ip_family", "code"],
      registers,
    });
    labelled.inc({ ip_family: "IPv4", code: 200 });
    labelled.inc({ ip_family: "IPv6", code: 503 }, 0);
    labelled.inc({ ip_family: "IPv4", code: 200 }, 3);
    labelled.inc({ ip_family: 'a"b\\c\nd', code: 1 });
    new impl.Counter({ name: "unused_total", help: "U", labelNames: ["mode"], registers });
    return registry.metrics();
  },
  "gauges set, raised, lowered and reset": (impl) => {
    const registry = new impl.Registry();
    const registers = [registry];
    const plain = new impl.Gauge({ name: "g", help: "G", registers });
    plain.set(1e-7);
    plain.inc();
    plain.dec(0.5);
    const labelled = new impl.Gauge({
      name: "table_g",
      help: "T",
      labelNames: ["ip_family", "table"],
      registers,
    });
    labelled.set({ ip_family: "IPv4", table: "nat" }, 4);
    labelled.set({ ip_family: "IPv4", table: "filter" }, Infinity);
    labelled.set({ ip_family: "IPv6", table: "nat" }, -Infinity);
    labelled.inc({ ip_family: "IPv4", table: "nat" }, 2);
    labelled.set({ ip_family: "IPv4", table: "nat" }, 1700000000.25);
    const emptied = new impl.Gauge({ name: "emptied", help: "E", labelNames: ["x"], registers });
    emptied.set({ x: "1" }, 1);
    emptied.reset();
    const restarted = new impl.Gauge({ name: "restarted", help: "R", registers });
    restarted.set(9);
    restarted.reset();
    return registry.metrics();
  },
  "histograms zeroed, observed on and past the bounds, and reset": (impl) => {
    const registry = new impl.Registry();
    const registers = [registry];
    const family = new impl.Histogram({
      name: "sync_seconds",
      help: "S",
      labelNames: ["ip_family"],
      buckets: exponentialBuckets(0.001, 2, 15),
      registers,
    });
    family.zero({ ip_family: "IPv4" });
    family.zero({ ip_family: "IPv6" });
    for (const value of [0, 0.001, 0.0015, 0.7, 16.384, 99]) {
      family.observe({ ip_family: "IPv4" }, value);
    }
    family.zero({ ip_family: "IPv6" });
    const plain = new impl.Histogram({
      name: "latency",
      help: "L",
      buckets: [...linearBuckets(0.25, 0.25, 2), ...linearBuckets(1, 1, 3)],
      registers,
    });
    plain.observe(0.25);
    plain.observe(2.5);
    const reset = new impl.Histogram({ name: "r", help: "R", buckets: [1], registers });
    reset.observe(0.5);
    reset.reset();
    return registry.metrics();
  },
  "collect() runs before each scrape": async (impl) => {
    const registry = new impl.Registry();
    let reads = 0;
    new impl.Counter({
      name: "cpu_total",
      help: "C",
      registers: [registry],
      collect(this: { reset(): void; inc(value: number): void }) {
        this.reset();
        this.inc(++reads * 1.5);
      },
    });
    new impl.Gauge({
      name: "series",
      help: "S",
      labelNames: ["service"],
      registers: [registry],
      async collect(this: { reset(): void; set(labels: object, value: number): void }) {
        await Promise.resolve();
        this.reset();
        this.set({ service: `default/web-${reads}` }, reads);
      },
    });
    return (await registry.metrics()) + (await registry.metrics());
  },
};

for (const [name, scenario] of Object.entries(SCENARIOS)) {
  Deno.test(`prometheus: ${name} reads as prom-client writes it`, async () => {
    assert.equal(await scenario(OURS), await scenario(PROM_CLIENT));
  });
}

Deno.test("prometheus: NaN is written as Prometheus reads it (prom-client writes 'Nan')", () => {
  assert.deepEqual(
    [NaN, Infinity, -Infinity, 0, -0.5, 1e21].map(formatValue),
    ["NaN", "+Inf", "-Inf", "0", "-0.5", "1e+21"],
  );
});

Deno.test("prometheus: the bucket generators are prom-client's", () => {
  assert.deepEqual(exponentialBuckets(0.001, 2, 15), prom.exponentialBuckets(0.001, 2, 15));
  assert.deepEqual(linearBuckets(0.25, 0.25, 2), prom.linearBuckets(0.25, 0.25, 2));
  assert.deepEqual(linearBuckets(120, 30, 7), prom.linearBuckets(120, 30, 7));
  assert.throws(() => exponentialBuckets(0, 2, 3), /positive start/);
  assert.throws(() => exponentialBuckets(1, 1, 3), /factor greater than 1/);
  assert.throws(() => linearBuckets(1, 1, 0), /positive count/);
});

Deno.test("prometheus: bad names, unknown labels and bad values are refused", () => {
  const registry = new Registry();
  const registers = [registry];
  assert.throws(() => new Gauge({ name: "a-b", help: "x", registers }), /Invalid metric name/);
  assert.throws(
    () => new Gauge({ name: "a", help: "x", labelNames: ["0x"], registers }),
    /Invalid label name/,
  );
  assert.throws(
    () => new Histogram({ name: "h", help: "x", labelNames: ["le"], buckets: [1], registers }),
    /le is a reserved label/,
  );
  const counter = new Counter({ name: "c_total", help: "x", labelNames: ["mode"], registers });
  assert.throws(() => counter.inc({ other: "b" } as never), /"other" is not included/);
  assert.throws(() => counter.inc({ mode: "a" }, -1), /not possible to decrease/);
  assert.throws(() => counter.inc({ mode: "a" }, NaN), /not a valid number/);
  const histogram = new Histogram({ name: "h2", help: "x", buckets: [1], registers });
  assert.throws(() => histogram.observe(NaN), /not a valid number/);
  assert.throws(() => new Counter({ name: "c_total", help: "y", registers }), /already been/);
});
