/**
 * The beside-kube-proxy section of `docs/BENCHMARKS.md`, and kube-proxy's
 * measured figures for the other sections' columns. Pure functions of
 * {@linkcode BesideResults}.
 *
 * @module
 */

import type { BesideMode, BesideResults, BesideRow, Proxy } from "./beside.ts";

/** A figure both proxies have in a row. */
export type BesideMeasure = "firstSync" | "change" | "peak" | "rss" | "cpu";

const fmtK = (n: number) => n >= 1000 ? `${n / 1000}k` : String(n);

/** Milliseconds as "153 ms" or "1.34 s". */
export function fmtDuration(ms: number): string {
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  return ms >= 100 ? `${ms.toFixed(0)} ms` : `${ms.toFixed(1)} ms`;
}

/** `kproxy / kube-proxy` as "0.42×", or "–" when either is missing. */
export function ratio(kproxy: number | undefined, kubeProxy: number | undefined): string {
  if (kproxy === undefined || kubeProxy === undefined || !(kubeProxy > 0)) return "–";
  const value = kproxy / kubeProxy;
  return `${value >= 10 ? value.toFixed(0) : value >= 1 ? value.toFixed(1) : value.toFixed(2)}×`;
}

function value(row: BesideRow | undefined, measure: BesideMeasure): number | undefined {
  if (row === undefined) return undefined;
  switch (measure) {
    case "firstSync":
      return row.firstSyncMs;
    case "change":
      return row.changeMs;
    case "peak":
      return row.peakMiB;
    case "rss":
      return row.firstSyncMs === undefined ? undefined : row.rssMiB;
    case "cpu":
      return row.cpuS === undefined ? undefined : row.cpuS + (row.childCpuS ?? 0);
  }
}

/** The fastest of a row's runs for a time measure: a median met only against slow runs is not robust. */
function fastestRun(row: BesideRow, measure: BesideMeasure): number | undefined {
  const runs = measure === "firstSync"
    ? row.firstSyncRunsMs
    : measure === "change"
    ? row.changeRunsMs
    : undefined;
  const known = (runs ?? []).filter((run): run is number => run !== null && run > 0);
  return known.length === 0 ? undefined : Math.min(...known);
}

function cell(row: BesideRow | undefined, measure: BesideMeasure): string {
  if (row === undefined) return "not run";
  if (row.firstSyncMs === undefined && measure !== "peak") {
    return measure === "firstSync" ? `no sync within ${row.timeoutS} s` : "–";
  }
  const figure = value(row, measure);
  if (figure === undefined) return measure === "change" ? "not seen within 120 s" : "–";
  switch (measure) {
    case "firstSync":
    case "change":
      return fmtDuration(figure);
    case "peak":
      return row.firstSyncMs === undefined
        ? `${figure.toFixed(0)} MiB (at the time-out)`
        : `${figure.toFixed(0)} MiB`;
    case "rss":
      return `${figure.toFixed(0)} MiB`;
    case "cpu":
      return `${figure.toFixed(2)} s (${row.cpuS!.toFixed(2)} + children ${
        (row.childCpuS ?? 0).toFixed(2)
      })`;
  }
}

/** The row of `proxy` in `mode` at `services`, if measured. */
export function besideRow(
  beside: BesideResults | undefined,
  key: { proxy: Proxy; mode: string; services: number },
): BesideRow | undefined {
  return beside?.rows.find((row) =>
    row.proxy === key.proxy && row.mode === key.mode && row.services === key.services
  );
}

/**
 * kube-proxy's figure of `measure` in `mode` at `services` from the beside
 * run, as a table cell ("–" when not measured).
 */
export function kubeProxyCell(
  beside: BesideResults | undefined,
  key: { mode: string; services: number; measure: BesideMeasure },
): string {
  const row = besideRow(beside, { proxy: "kube-proxy", ...key });
  return row === undefined ? "–" : cell(row, key.measure);
}

const MEASURES: readonly [BesideMeasure, string][] = [
  ["firstSync", "start → first sync"],
  ["change", "one change → kernel"],
  ["peak", "peak RSS (VmHWM)"],
  ["rss", "steady RSS (VmRSS)"],
  ["cpu", "CPU to first sync"],
];

function markdownTable(header: string[], rows: string[][]): string {
  return [
    `| ${header.join(" | ")} |`,
    `| ${header.map(() => "---").join(" | ")} |`,
    ...rows.map((row) => `| ${row.join(" | ")} |`),
  ].join("\n");
}

/** The comparison table: one line per mode, size and measure, with the ratio. */
export function besideTable(beside: BesideResults): string {
  const rows: string[][] = [];
  const keys = [...new Set(beside.rows.map((row) => `${row.mode} ${row.services}`))]
    .map((key) => key.split(" ") as [BesideMode, string])
    .sort((a, b) => Number(a[1]) - Number(b[1]) || a[0].localeCompare(b[0]));
  for (const [mode, size] of keys) {
    const services = Number(size);
    const kproxy = besideRow(beside, { proxy: "kproxy", mode, services });
    const kubeProxy = besideRow(beside, { proxy: "kube-proxy", mode, services });
    const runs = [...new Set([kproxy?.runs, kubeProxy?.runs].filter((n) => n !== undefined))];
    const cluster = `${fmtK(services)}, ${mode} (${runs.join("/")} run${
      runs.length === 1 && runs[0] === 1 ? "" : "s"
    })`;
    for (const [measure, name] of MEASURES) {
      rows.push([
        cluster,
        name,
        cell(kproxy, measure),
        cell(kubeProxy, measure),
        ratio(value(kproxy, measure), value(kubeProxy, measure)),
      ]);
    }
  }
  return markdownTable(
    ["cluster", "measure", "kproxy", "kube-proxy 1.36", "kproxy / kube-proxy"],
    rows,
  );
}

/** One of issue 34's targets: kproxy's figure at most `goal` × kube-proxy's. */
interface BesideTarget {
  mode: BesideMode;
  services: number;
  measure: BesideMeasure;
  goal: number;
}

/** Issue 34's targets (a 2-core machine, medians of at least 3 runs). */
export const BESIDE_TARGETS: readonly BesideTarget[] = [
  { mode: "iptables", services: 1000, measure: "peak", goal: 0.9 },
  { mode: "iptables", services: 10000, measure: "peak", goal: 0.6 },
  { mode: "nftables", services: 1000, measure: "peak", goal: 0.85 },
  { mode: "nftables", services: 1000, measure: "firstSync", goal: 0.7 },
  { mode: "nftables", services: 10000, measure: "peak", goal: 0.5 },
  { mode: "nftables", services: 10000, measure: "firstSync", goal: 0.3 },
  { mode: "nftables", services: 1000, measure: "change", goal: 0.2 },
  { mode: "nftables", services: 10000, measure: "change", goal: 0.2 },
  { mode: "iptables", services: 1000, measure: "change", goal: 0.5 },
  { mode: "iptables", services: 10000, measure: "change", goal: 0.5 },
];

const TARGET_NAMES: Record<BesideMeasure, string> = {
  firstSync: "start → first sync",
  change: "one change",
  peak: "peak RSS",
  rss: "steady RSS",
  cpu: "CPU to first sync",
};

/**
 * Each target of {@linkcode BESIDE_TARGETS} judged from the run: the ratio,
 * met or missed, or why there is none (not measured, kube-proxy never synced).
 */
export function besideTargets(beside: BesideResults): string {
  const rows = BESIDE_TARGETS.map((target) => {
    const name = `${target.mode}, ${fmtK(target.services)}: ${TARGET_NAMES[target.measure]}`;
    const key = { mode: target.mode, services: target.services };
    const kproxy = besideRow(beside, { proxy: "kproxy", ...key });
    const kubeProxy = besideRow(beside, { proxy: "kube-proxy", ...key });
    const goal = `≤ ${target.goal}×`;
    if (kproxy === undefined || kubeProxy === undefined) {
      return [name, goal, "not measured", "–"];
    }
    const timedOut = kubeProxy.firstSyncMs === undefined;
    if (timedOut && target.measure !== "peak") {
      return [name, goal, `– (kube-proxy did not sync within ${kubeProxy.timeoutS} s)`, "–"];
    }
    const ours = value(kproxy, target.measure);
    const theirs = timedOut ? kubeProxy.peakMiB : value(kubeProxy, target.measure);
    if (ours === undefined || theirs === undefined || !(theirs > 0)) {
      return [name, goal, "not measured", "–"];
    }
    const shown = (ours / theirs).toFixed(2) + "×" +
      (timedOut ? " (kube-proxy's at its time-out)" : "");
    if (ours / theirs > target.goal) return [name, goal, shown, "**missed**"];
    const fastest = fastestRun(kubeProxy, target.measure);
    if (fastest !== undefined && ours / fastest > target.goal) {
      const against = `${(ours / fastest).toFixed(2)}× against kube-proxy's fastest run`;
      return [name, goal, `${shown} (${against})`, "met by the median only"];
    }
    return [name, goal, shown, "met"];
  });
  return markdownTable(["target", "goal", "kproxy / kube-proxy", "verdict"], rows);
}

/** The load table: how long the real apiserver took to take the cluster. */
export function loadTable(beside: BesideResults): string {
  return markdownTable(
    [
      "services in the cluster",
      "created (and as many EndpointSlices)",
      "requests in flight",
      "time",
      "objects / s",
    ],
    [...beside.loads].sort((a, b) => a.services - b.services).map((load) => [
      fmtK(load.services),
      String(load.created),
      String(load.concurrency),
      fmtDuration(load.ms),
      ((2 * load.created) / (load.ms / 1000)).toFixed(0),
    ]),
  );
}

/** The section's Markdown (heading included). */
export function besideSection(beside: BesideResults | undefined, machine: string): string[] {
  const parts = ["## Beside kube-proxy on a real kube-apiserver", ""];
  parts.push(
    "`deno task bench --only=beside` (`scripts/bench/beside.ts`, `scripts/bench/real_apiserver.ts`):",
    "a real etcd and kube-apiserver (Kubernetes v1.36, built from source) in a bench namespace;",
    "N selector-less ClusterIP Services (one TCP port) with one EndpointSlice of 10 endpoints",
    "each are created through the API, as a client sends them (the bench's realistic objects;",
    "the apiserver adds managedFields), once per size and used by both proxies. Then kproxy",
    "(as its image starts it: the bundle, built by the bench and installed in a directory of its",
    "own, under `deno run` with the exact permissions, V8 flags and environment",
    "`scripts/launch.ts` computes, in `/`, with a new `DENO_DIR` holding only the bundle's",
    "analysis, as the image's launcher leaves it) and kube-proxy run in turn in that",
    "namespace, alternating run by run, the ruleset flushed before each start and each run",
    "started once the machine is quiet (under 0.3 cores busy over a second; after a load the",
    "apiserver and etcd work on for a while: up to 120 s, 15 s between runs), with the same",
    "flags (`--proxy-mode`, `--kubeconfig`, `--hostname-override`, `--cluster-cidr`,",
    "`--conntrack-max-per-core=0` and the TCP conntrack timeouts 0, since conntrack sysctls are",
    "read-only in a network namespace, `--metrics-bind-address`, `--healthz-bind-address`; no",
    "sync periods: kube-proxy 1.36 has no nftables flags for them, so both keep their defaults).",
    "Start → first sync runs from spawning",
    "the process to its own `kubeproxy_sync_proxy_rules_last_timestamp_seconds` (IPv4), read from",
    "its metrics port every 100 ms; the CPU seconds (utime + stime of the proxy, and of the",
    "children it reaped: `nft`, `iptables-restore`) are read when the bench sees that metric.",
    "Peak RSS (VmHWM) and steady RSS (VmRSS) are the proxy process's own, 3 s after the first",
    "sync. One change: an EndpointSlice PUT that moves endpoint 0 of one Service to a new",
    "address, until the end of the proxy's first sync after the PUT whose rules name it: its",
    "`kubeproxy_sync_proxy_rules_last_timestamp_seconds`, scraped every 50 ms, each new value",
    "checked (untimed) against a listing that names endpoints (`nft list map ip kproxy",
    "service-endpoints`, `nft list table ip kube-proxy`, `iptables-save -t nat`). Not `nft",
    "monitor`: nft 1.0.6's monitor prints kube-proxy's changes but none of kproxy's batches,",
    "which begin by arming kproxy's load guard; nor a timed poll of the listing, which at 10k",
    "takes seconds and competes with the proxy for the CPU.",
    "Medians of the runs. ipvs is not measured: this kernel has no",
    "IPVS. A proxy that does not sync within the time-out (`--beside-timeout`, seconds) is",
    "reported as such and not run again at larger sizes.",
    "",
  );
  if (beside === undefined) {
    parts.push("Not measured yet.", "");
    return parts;
  }
  if (beside.rows.length === 0) {
    parts.push(`Skipped in the latest run: ${beside.skipped ?? "no rows"}.`, "");
    return parts;
  }
  const loads = Object.entries(beside.loadAverages)
    .sort((a, b) => Number(a[0]) - Number(b[0]))
    .map(([size, load]) => `${load.toFixed(1)} at ${fmtK(Number(size))}`).join(", ");
  const versions = Object.entries(beside.versions).map(([name, version]) =>
    `${name}: ${version || "unknown"}`
  ).join("; ");
  // Two cores: a load average under 2 is the bench itself (the apiserver and one proxy).
  const idle = Object.values(beside.loadAverages).every((load) => load < 2);
  parts.push(
    `Measured ${beside.date ?? "(date not recorded)"} on ${machine}. Load average (1 min) as each`,
    `size started: ${loads} — ` +
      (idle
        ? "the machine was otherwise idle. "
        : "the machine was shared (other jobs ran), so figures taken under load are slower than " +
          "on a quiet machine for both proxies alike. ") +
      versions + ".",
    "",
    besideTable(beside),
    "",
    "Issue 34's targets, judged from this run:",
    "",
    besideTargets(beside),
    "",
    "Loading the cluster through the real apiserver (a Service POST, then its EndpointSlice",
    "POST, so many at a time):",
    "",
    loadTable(beside),
    "",
  );
  if ((beside.failures ?? []).length > 0) {
    parts.push("Runs that failed:", "", ...beside.failures!.map((failure) => `- ${failure}`), "");
  }
  return parts;
}
