import assert from "node:assert/strict";
import { ProxyMetrics } from "../../lib/shell/metrics.ts";
import { registerProcessMetrics } from "../../lib/shell/process_metrics.ts";

/** kube-proxy 1.36's metric families: see `source` in the file. */
const UPSTREAM: {
  families: { name: string; type: string; labels: string[]; modes: string[] }[];
  notServed: Record<string, string>;
} = JSON.parse(
  await Deno.readTextFile(new URL("../data/kube_proxy_1.36_metrics.json", import.meta.url)),
);

/** Each family of an exposition: its type and the label names its samples carry. */
function familiesOf(text: string): Map<string, { type: string; labels: string[] }> {
  const families = new Map<string, { type: string; labels: Set<string> }>();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    families.set(name!, { type: type!, labels: new Set() });
  }
  for (const [, series, labels] of text.matchAll(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? \S+$/gm)) {
    const family = families.get(series!) ??
      families.get(series!.replace(/_(bucket|sum|count)$/, ""));
    if (!family) throw new Error(`Cannot find the family of ${series}`);
    for (const [, label] of (labels ?? "").matchAll(/(\w+)="(?:[^"\\]|\\.)*"/g)) {
      if (label !== "le") family.labels.add(label!);
    }
  }
  return new Map(
    [...families].map(([name, f]) => [name, { type: f.type, labels: [...f.labels].sort() }]),
  );
}

/** kproxy's /metrics in one mode, every labelled family with a sample. */
async function served(mode: string) {
  const metrics = new ProxyMetrics({ mode });
  registerProcessMetrics(metrics.registry, {
    cpuSeconds: () => 1,
    residentMemoryBytes: () => 1,
    startTimeSeconds: () => 1,
    openFds: () => 1,
    maxFds: () => 1,
  });
  metrics.proxyHealthzTotal.inc({ code: "200" });
  metrics.proxyLivezTotal.inc({ code: "200" });
  return familiesOf(await metrics.registry.metrics());
}

for (const mode of ["nftables", "iptables", "ipvs"]) {
  Deno.test(`kproxy in ${mode} mode serves kube-proxy 1.36's families with their types and labels`, async () => {
    const families = await served(mode);
    const differences: string[] = [];
    for (const upstream of UPSTREAM.families) {
      if (!upstream.modes.includes(mode) || upstream.name in UPSTREAM.notServed) continue;
      const mine = families.get(upstream.name);
      const want = { type: upstream.type, labels: [...upstream.labels].sort() };
      if (JSON.stringify(mine) !== JSON.stringify(want)) {
        differences.push(
          `${upstream.name}: kproxy ${JSON.stringify(mine)}, kube-proxy ${JSON.stringify(want)}`,
        );
      }
    }
    assert.deepEqual(differences, []);
    for (const name of Object.keys(UPSTREAM.notServed)) {
      assert.equal(families.has(name), false, name);
    }
    const foreign = [...families.keys()].filter((name) =>
      !name.startsWith("kproxy_") && !UPSTREAM.families.some((f) => f.name === name)
    );
    assert.deepEqual(foreign, [], "every kubeproxy_/process_ family kproxy serves is kube-proxy's");
  });
}

Deno.test("kproxy serves no kube-proxy family in a mode kube-proxy does not", async () => {
  const families = await served("nftables");
  const other = UPSTREAM.families.filter((f) =>
    f.modes.every((m) => m === "iptables" || m === "ipvs")
  );
  const wrong = other.filter((f) =>
    families.has(f.name) && !f.name.includes("_proxy_rules_duration")
  );
  assert.deepEqual(wrong.map((f) => f.name), []);
});
