import assert from "node:assert/strict";
import { merge, parseBenchArgs } from "../../scripts/bench/main.ts";
import { benchPlan, moveEndpoints } from "../../scripts/bench/plan.ts";
import type { BesideResults } from "../../scripts/bench/beside.ts";
import {
  type BenchResults,
  renderMarkdown,
  renderSvg,
  renderTable,
} from "../../scripts/bench/report.ts";

/** kube-proxy's rows of a beside run: first sync, change and peak RSS per nftables size. */
function kubeProxyBeside(
  figures: Record<number, { firstSyncMs: number; changeMs: number; peakMiB: number }>,
): BesideResults {
  return {
    date: "2026-11-28T01:00:00.000Z",
    rows: Object.entries(figures).map(([services, figure]) => ({
      proxy: "kube-proxy",
      mode: "nftables",
      services: Number(services),
      runs: 3,
      timeoutS: 300,
      firstSyncRunsMs: [figure.firstSyncMs],
      changeRunsMs: [figure.changeMs],
      peakRunsMiB: [figure.peakMiB],
      rssMiB: figure.peakMiB,
      ...figure,
    })),
    loads: [],
    loadAverages: {},
    versions: {},
  };
}

function results(overrides: Partial<BenchResults> = {}): BenchResults {
  return {
    date: "2026-11-23T12:00:00.000Z",
    machine: {
      cpus: 2,
      cpuModel: "test CPU",
      kernel: "6.1",
      memoryGiB: 4,
      tools: { nft: "1.0.6" },
    },
    sizes: [1000, 10000],
    endpointsPerService: 10,
    sections: ["fullsync", "change"],
    nftables: [
      {
        backend: "nftables",
        variant: "kproxy",
        services: 1000,
        endpointsPerService: 10,
        rules: 12000,
        renderMs: 80,
        fullMs: 500,
        partialMs: 30,
        floorMs: 12,
      },
      {
        backend: "nftables",
        variant: "kproxy",
        services: 10000,
        endpointsPerService: 10,
        rules: 120000,
        renderMs: 500,
        fullMs: 2900,
        partialMs: 140,
        floorMs: 95,
      },
      {
        backend: "nftables",
        variant: "upstream-style",
        services: 1000,
        endpointsPerService: 10,
        rules: 30000,
        renderMs: 50,
        fullMs: 1000,
        partialMs: NaN,
        floorMs: NaN,
      },
    ],
    iptables: [
      {
        backend: "iptables",
        variant: "legacy",
        services: 1000,
        endpointsPerService: 10,
        rules: 32000,
        renderMs: 90,
        fullMs: 1500,
        partialMs: 60,
      },
    ],
    iptablesBaseline: [{
      variant: "legacy",
      services: 1000,
      endpointsPerService: 10,
      rules: 32000,
      fullMs: 3000,
    }],
    change: [
      {
        mode: "nftables",
        services: 1000,
        endpointsPerService: 10,
        samples: 5,
        wallMs: 40,
        metricMs: 35,
        applyMs: 30,
        syncMs: 35,
        initialSyncMs: 1500,
      },
      {
        mode: "nftables",
        services: 10000,
        endpointsPerService: 10,
        samples: 5,
        wallMs: 90,
        metricMs: 80,
        applyMs: 70,
        syncMs: 80,
        initialSyncMs: 7000,
      },
    ],
    process: [],
    storm: [],
    datapath: [],
    errors: [],
    notes: [],
    ...overrides,
  };
}

Deno.test("renderMarkdown() shows each figure beside kube-proxy's, the layout model and the nft floor", () => {
  const markdown = renderMarkdown(results({
    beside: kubeProxyBeside({ 10000: { firstSyncMs: 9986, changeMs: 3700, peakMiB: 424 } }),
  }));
  assert.match(markdown, /Date of the latest run: 2026-11-23T12:00:00.000Z/);
  assert.match(
    markdown,
    /\| nftables \| 1k \| 0.50 s \(render 80.0 ms\) \| – \| – \| 1.00 s \| 30.0 ms \| 12.0 ms \|/,
  );
  assert.match(
    markdown,
    /\| nftables \| 10k \| 2.90 s \(render 500 ms\) \| – \| 9.99 s \| – \| 140 ms \| 95.0 ms \|/,
  );
  assert.match(
    markdown,
    /\| iptables \(legacy\) \| 1k \| 1.50 s \(render 90.0 ms\) \| {2}\| – \| 3.00 s \| 60.0 ms \| {2}\|/,
  );
  assert.match(markdown, /layout model: upstream-style ruleset, not kube-proxy/);
  assert.match(markdown, /\| nftables full sync 10k × 10 \| ≤ 3 s \| 2.90 s \| met \|/);
  assert.match(
    markdown,
    /\| one endpoint change at 10k, end to end \| ≤ 100 ms, same as at 1k \| 90.0 ms \(1k: 40.0 ms\) \| met \|/,
  );
  assert.match(markdown, /peak RSS .* \| not run \|/);
});

Deno.test("renderMarkdown() shows a stopped baseline as a lower bound", () => {
  const markdown = renderMarkdown(results({
    iptablesBaseline: [{
      variant: "legacy",
      services: 1000,
      endpointsPerService: 10,
      rules: 32000,
      fullMs: 180_000,
      stopped: true,
    }],
  }));
  assert.match(markdown, /\| > 180.00 s \(stopped\) \| 60.0 ms \|/);
});

Deno.test("renderMarkdown() shows the conntrack reconcile beside its listing floor", () => {
  const row = {
    scenario: "nothing stale",
    entries: 100_000,
    udpEntries: 50_000,
    services: 10_000,
    stalePairs: 0,
    deleted: 0,
    reconcileMs: 640,
    repeatMs: 600,
    listMs: 500,
    netlinkAllMs: 300,
    netlinkUdpMs: 150,
    runs: 5,
    rssBeforeMiB: 100,
    rssPeakMiB: 130,
    heapGrowthMiB: 0.1,
  };
  const markdown = renderMarkdown(results({ conntrack: [row] }));
  assert.match(
    markdown,
    /\| conntrack reconcile, 100k entries, 10k UDP Services \| ≤ 200 ms \| 640 ms \| \*\*missed\*\* \|/,
  );
  assert.match(
    markdown,
    /\| nothing stale \| 100k \(50k\) \| 10k \| 0 \| 0 \| 640 ms \| 600 ms \| 500 ms \| 300 ms \/ 150 ms \| 100 → 130 MiB \| 0.1 MiB \|/,
  );
  assert.doesNotMatch(renderMarkdown(results()), /## Conntrack reconcile/);
});

Deno.test("renderTable() flags missed targets and failed sections", () => {
  const table = renderTable(results({
    nftables: [{ ...results().nftables[1]!, fullMs: 4800 }],
    errors: ["full sync, iptables: boom"],
  }));
  assert.match(table, /^!! nftables full sync 10k × 10\s+≤ 3 s\s+4.80 s$/m);
  assert.match(table, /^!! full sync, iptables: boom$/m);
});

Deno.test("renderSvg() draws one polyline per measured series", () => {
  const svg = renderSvg(results());
  assert.match(svg, /^<svg /);
  assert.ok((svg.match(/<polyline/g) ?? []).length >= 2);
});

Deno.test("parseBenchArgs() names the bad flag", () => {
  assert.deepEqual(parseBenchArgs(["--quick"]).sizes, [1000, 10000]);
  assert.deepEqual(parseBenchArgs(["--only=change"]).sections, ["change"]);
  assert.throws(() => parseBenchArgs(["--sizes=1000,abc"]), /--sizes 1000,abc/);
  assert.throws(() => parseBenchArgs(["--only=fullsync,speed"]), /"speed" is not one of/);
});

Deno.test("benchPlan() shifts one endpoint of one service and marks affinity services", () => {
  const plan = benchPlan(20, 3, { shift: 5, affinityEvery: 10 });
  const before = benchPlan(20, 3);
  assert.equal(plan.services.length, 20);
  const changed = plan.services.filter((s, i) =>
    JSON.stringify(s.internal) !== JSON.stringify(before.services[i]!.internal)
  );
  assert.deepEqual(changed.map((s) => s.name), ["svc-000005"]);
  assert.deepEqual(
    plan.services.filter((s) => s.affinityTimeoutSeconds > 0).map((s) => s.name),
    ["svc-000000", "svc-000010"],
  );
});

Deno.test("merge() keeps what was not re-measured and drops errors of what was", () => {
  const base = results({
    errors: [
      "full sync, nftables: boom",
      "full sync, iptables-legacy, 30000 services: ENOMEM",
      "full sync, iptables-nft upstream-style, 10000 services: timeout",
      "one change, nftables, 1000 services: boom",
    ],
  });
  const fresh = results({
    nftables: [],
    iptables: [],
    iptablesBaseline: [{
      variant: "nft",
      services: 10000,
      endpointsPerService: 10,
      rules: 1,
      fullMs: 180_000,
      stopped: true,
    }],
    errors: [],
  });
  const options = parseBenchArgs(["--only=fullsync", "--fullsync-modes=iptables-baseline"]);
  const merged = merge(base, fresh, options);
  assert.deepEqual(merged.errors, [
    "full sync, nftables: boom",
    "full sync, iptables-legacy, 30000 services: ENOMEM",
    "one change, nftables, 1000 services: boom",
  ]);
  assert.equal(merged.nftables.length, base.nftables.length);
  assert.equal(merged.iptables.length, base.iptables.length);
  assert.deepEqual(merged.iptablesBaseline, [
    ...base.iptablesBaseline,
    ...fresh.iptablesBaseline,
  ]);
});

Deno.test("merge() replaces only the rows of the sizes re-measured", () => {
  const row = (services: number, peakRssMiB: number) => ({
    mode: "nftables" as const,
    services,
    endpointsPerService: 10,
    startupMs: 1000,
    peakRssMiB,
    rssMiB: peakRssMiB,
    listFloorMs: 10,
  });
  const base = results({ sizes: [1000, 10000], process: [row(1000, 130), row(10000, 200)] });
  const fresh = results({ sizes: [100000], process: [row(100000, 900)] });
  const options = parseBenchArgs(["--only=startup", "--sizes=100000"]);
  const merged = merge(base, fresh, options);
  assert.deepEqual(merged.process.map((r) => [r.services, r.peakRssMiB]), [
    [1000, 130],
    [10000, 200],
    [100000, 900],
  ]);
  assert.deepEqual(merged.sizes, [1000, 10000, 100000]);
  const again = merge(merged, results({ process: [row(1000, 120)] }), options);
  assert.deepEqual(again.process.map((r) => r.peakRssMiB), [200, 900, 120]);
});

Deno.test("renderMarkdown() checks issue 23's targets on realistic objects beside kube-proxy 1.36", () => {
  const process = (services: number, peakRssMiB: number, startupMs: number) => ({
    mode: "nftables" as const,
    services,
    endpointsPerService: 10,
    shape: "realistic" as const,
    startupMs,
    peakRssMiB,
    rssMiB: peakRssMiB,
    listFloorMs: 10,
  });
  const markdown = renderMarkdown(results({
    process: [process(1000, 120, 900), { ...process(10000, 140, 1900), shape: "minimal" }],
    storm: [{
      mode: "iptables",
      services: 10000,
      endpointsPerService: 10,
      shape: "realistic",
      changes: 10000,
      sendMs: 9900,
      syncs: 3,
      fullSyncs: 2,
      totalMs: 110_000,
      maxSyncMs: 4400,
      missing: 0,
      stale: 0,
    }],
    beside: kubeProxyBeside({
      1000: { firstSyncMs: 790, changeMs: 153, peakMiB: 105 },
      10000: { firstSyncMs: 11_200, changeMs: 3700, peakMiB: 424 },
    }),
  }));
  assert.match(
    markdown,
    /\| peak RSS, 1k services × 10 \| ≤ 90 MiB \| 130 MiB \| 120 MiB \| 105 MiB \| \*\*missed\*\* \|/,
  );
  assert.match(
    markdown,
    /\| peak RSS, 10k services × 10 \| ≤ 150 MiB \| 211 MiB \| 140 MiB \(minimal objects\) \| 424 MiB \| met \|/,
  );
  assert.match(
    markdown,
    /\| peak RSS, 100k services × 10 \| ≤ 1 GiB \| – \| not run \| – \| not run \|/,
  );
  assert.match(
    markdown,
    /\| start-up to first sync at 10k \| ≤ 2 s \| 2.6–4.5 s \| 1.90 s \(minimal objects\) \| 11.20 s \| met \|/,
  );
  assert.match(markdown, /110.00 s to converge, 3 syncs \(2 full\) \| – \| \*\*missed\*\* \|/);
  assert.match(
    markdown,
    /\| nftables full sync, 100k × 10 \| ≤ 30 s, no step quadratic in services \| – \| not run \| 10k, start → first sync: 11.20 s \|/,
  );
});

Deno.test("renderMarkdown() shows the manifests loads beside the code before, and their target", () => {
  const figures = { services: 10000, endpointsPerService: 10, bytes: 18_800_000, runs: 3 };
  const run = results({
    manifests: [
      {
        format: "yaml",
        ...figures,
        seconds: 1.9,
        peakMiB: 250,
        before: { checkout: "/tmp/old", seconds: 27.2, peakMiB: 950 },
      },
      { format: "json", ...figures, bytes: 49_000_000, seconds: 2.5, peakMiB: 240 },
    ],
  });
  const markdown = renderMarkdown(run);
  assert.match(markdown, /## Manifests: `kproxy plan` on a dump/);
  assert.match(
    markdown,
    /\| multi-document YAML \| 10k × 10 \| 18\.8 MB \| 3 \| 1\.90 s \| 262 MB \| 27\.20 s \| 996 MB \|/,
  );
  assert.match(
    markdown,
    /\| `kind: List` JSON \| 10k × 10 \| 49\.0 MB \| 3 \| 2\.50 s \| 252 MB \| – \| – \|/,
  );
  const table = renderTable(run);
  assert.match(table, /ok kproxy plan, 10k × 10 dump \(yaml\)/);
  assert.match(table, /!! kproxy plan, 10k × 10 dump \(json\)/);
  assert.doesNotMatch(renderMarkdown(results()), /## Manifests/);
});

Deno.test("moveEndpoints() moves the first endpoint of the services named, and only theirs", () => {
  const plan = benchPlan(20, 3);
  const moved = moveEndpoints(plan, [2, 7], 1);
  const differs = moved.services.filter((service, i) => service !== plan.services[i]);
  assert.deepEqual(differs.map((service) => service.name), ["svc-000002", "svc-000007"]);
  const ips = (i: number, p = moved) => p.services[i]!.internal.endpoints.map((e) => e.ip);
  assert.equal(ips(2).filter((ip) => !ips(2, plan).includes(ip)).length, 1);
  assert.deepEqual(ips(2), [...ips(2)].sort());
});

Deno.test("renderMarkdown() extrapolates a storm of chunked iptables partial syncs", () => {
  const markdown = renderMarkdown(results({
    iptablesPartial: [{
      variant: "nft",
      services: 1000,
      changed: 100,
      chains: 1300,
      ms: 800,
      full: false,
    }],
  }));
  assert.match(markdown, /\| nft \| 1k \| 100 \| 1300 \| 800 ms \| 8\.0 ms \| 80\.00 s \| – \|/);
});
