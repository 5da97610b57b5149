/**
 * `deno task bench`: measures kproxy against upstream-style baselines in one
 * run and writes `docs/BENCHMARKS.md` and `docs/bench-sync.svg`. Needs root
 * (network namespaces), nft, iptables-{nft,legacy}-restore and python3.
 *
 * ```sh
 * deno task bench                                 # 1k, 10k, 30k; every section
 * deno task bench --quick                         # 1k and 10k only
 * deno task bench --sizes=1000,5000 --only=fullsync,change
 * deno task bench --only=storm --modes=iptables  # one mode of the change and storm sections
 * deno task bench --only=takeover                # the takeover gap from each kube-proxy mode
 * deno task bench --from-json=/tmp/kp-bench.json  # re-render the docs from a saved run
 * deno task bench --only=manifests --manifests-before=/tmp/old-checkout  # kproxy plan on a dump, old vs new
 * deno task bench --only=startup --sizes=1000,10000,100000 --runs=3  # medians of 3 processes
 * deno task bench --only=change --objects=minimal  # the objects of runs before 2026-11-26
 * deno task bench --only=beside --sizes=1000,10000 --modes=nftables --beside-runs=3
 *                                                 # beside kube-proxy on a real kube-apiserver
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { benchIptables, benchPartialSizes } from "./iptables.ts";
import { benchNftables } from "./nftables.ts";
import { benchPlan } from "./plan.ts";
import { loadIptablesBaseline } from "./baseline.ts";
import { benchChange, benchStorm } from "./latency.ts";
import { benchFloor, benchProcess } from "./process.ts";
import { benchDatapath } from "./datapath.ts";
import { benchTakeover } from "./takeover.ts";
import { benchManifests, DUMP_FORMATS } from "./manifests.ts";
import { benchConntrack } from "./conntrack.ts";
import { benchBeside, emptyBeside, mergeBeside, type Proxy } from "./beside.ts";
import { benchCounters } from "./counters.ts";
import { PROFILE_NOTES } from "./findings.ts";
import {
  type BenchResults,
  describeMachine,
  renderMarkdown,
  renderSvg,
  renderTable,
} from "./report.ts";
import { NAMESPACE_PREFIX } from "./harness.ts";
import { OBJECT_SHAPES, type ObjectShape } from "./cluster.ts";

/** The sections a run can measure. */
export const SECTIONS = [
  "fullsync",
  "change",
  "startup",
  "storm",
  "memory",
  "datapath",
  "takeover",
  "manifests",
  "conntrack",
  "counters",
  "beside",
] as const;
/** One of {@linkcode SECTIONS}. */
export type Section = typeof SECTIONS[number];

/** Whether a run with `options` re-measured what the (earlier) error `name` was about. */
function remeasures(options: BenchOptions, name: string): boolean {
  const has = (section: Section) => options.sections.includes(section);
  const mode = (m: string) => options.fullsyncModes.includes(m);
  if (name.startsWith("full sync, nftables")) return has("fullsync") && mode("nftables");
  if (name.startsWith("full sync, iptables")) {
    return has("fullsync") &&
      mode(name.includes("upstream-style") ? "iptables-baseline" : "iptables");
  }
  const measuredMode = options.modes.some((mode) => name.includes(`, ${mode}`));
  if (name.startsWith("one change")) return has("change") && measuredMode;
  if (name.startsWith("floor process") || name.startsWith("start-up and memory")) {
    return has("startup") || has("memory");
  }
  if (name.startsWith("event storm")) return has("storm") && measuredMode;
  if (name.startsWith("data path")) return has("datapath");
  if (name.startsWith("takeover")) return has("takeover");
  if (name.startsWith("manifests")) return has("manifests");
  if (name.startsWith("conntrack reconcile")) return has("conntrack");
  if (name.startsWith("service counters")) return has("counters");
  if (name.startsWith("beside kube-proxy")) return has("beside");
  return false;
}

const DOCS = new URL("../../docs/", import.meta.url);
const ENDPOINTS_PER_SERVICE = 10;
/** Largest size at which the quadratic upstream-style nftables layout is loaded. */
const NFT_BASELINE_MAX = 10_000;
/** Largest size at which the data path loads the iptables ruleset too. */
const IPTABLES_DATAPATH_MAX = 30_000;
/** Changed services per partial iptables sync measured in the storm section. */
const PARTIAL_SIZES = [10, 30, 100, 170, 300, 1000];
/** A baseline load slower than this is stopped and reported as such. */
const BASELINE_TIMEOUT_MS = 180_000;

/** Parsed command line of the bench. */
export interface BenchOptions {
  sizes: number[];
  sections: Section[];
  /** Re-render from this saved run; with `--only`, re-measure those sections into it. */
  fromJson?: string;
  json: string;
  /** Modes the fullsync section measures. */
  fullsyncModes: string[];
  /** Modes the change and storm sections measure. */
  modes: ("nftables" | "iptables")[];
  /** Whether `--only` was given. */
  only: boolean;
  /** Another kproxy checkout whose `kproxy plan` the manifests section measures too. */
  manifestsBefore?: string;
  /** Shape of the API objects the fake apiserver serves and the dumps hold. */
  objects: ObjectShape;
  /** Fresh kproxy processes per size in the start-up and memory section (medians). */
  runs: number;
  /** Runs of each proxy per mode and size beside kube-proxy (medians). */
  besideRuns: number;
  /** How long each proxy gets for its first sync beside kube-proxy, in seconds. */
  besideTimeoutS: number;
  /** The proxies the beside section runs. */
  besideProxies: Proxy[];
}

/** Parses the bench's flags. */
export function parseBenchArgs(argv: string[]): BenchOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      sizes: { type: "string" },
      quick: { type: "boolean", default: false },
      only: { type: "string" },
      "from-json": { type: "string" },
      json: { type: "string", default: "/tmp/kp-bench-results.json" },
      "fullsync-modes": { type: "string", default: "nftables,iptables,iptables-baseline" },
      modes: { type: "string", default: "nftables,iptables" },
      "manifests-before": { type: "string" },
      objects: { type: "string", default: "realistic" },
      runs: { type: "string", default: "1" },
      "beside-runs": { type: "string", default: "3" },
      "beside-timeout": { type: "string", default: "300" },
      "beside-proxies": { type: "string", default: "kproxy,kube-proxy" },
    },
  });
  const objects = values.objects as ObjectShape;
  if (!OBJECT_SHAPES.includes(objects)) {
    throw new Error(
      `Cannot parse --objects ${values.objects}: "${objects}" is not one of ${OBJECT_SHAPES}`,
    );
  }
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1) {
    throw new Error(`Cannot parse --runs ${values.runs}: want an integer ≥ 1`);
  }
  const besideRuns = Number(values["beside-runs"]);
  if (!Number.isInteger(besideRuns) || besideRuns < 1) {
    throw new Error(`Cannot parse --beside-runs ${values["beside-runs"]}: want an integer ≥ 1`);
  }
  const besideTimeoutS = Number(values["beside-timeout"]);
  if (!Number.isFinite(besideTimeoutS) || besideTimeoutS <= 0) {
    throw new Error(
      `Cannot parse --beside-timeout ${values["beside-timeout"]}: want seconds > 0`,
    );
  }
  const sizes = values.sizes
    ? values.sizes.split(",").map((s) => Number(s.trim()))
    : values.quick
    ? [1000, 10000]
    : [1000, 10000, 30000];
  if (sizes.some((n) => !Number.isInteger(n) || n < 2)) {
    throw new Error(`Cannot parse --sizes ${values.sizes}: want integers ≥ 2, comma-separated`);
  }
  const sections = values.only
    ? values.only.split(",").map((s) => s.trim()) as Section[]
    : [...SECTIONS];
  for (const section of sections) {
    if (!SECTIONS.includes(section)) {
      throw new Error(`Cannot parse --only ${values.only}: "${section}" is not one of ${SECTIONS}`);
    }
  }
  return {
    sizes,
    sections,
    fromJson: values["from-json"],
    json: values.json,
    fullsyncModes: values["fullsync-modes"].split(","),
    modes: values.modes.split(",").map((mode) => {
      if (mode !== "nftables" && mode !== "iptables") {
        throw new Error(
          `Cannot parse --modes ${values.modes}: "${mode}" is not nftables or iptables`,
        );
      }
      return mode;
    }),
    only: values.only !== undefined,
    manifestsBefore: values["manifests-before"],
    objects,
    runs,
    besideRuns,
    besideTimeoutS,
    besideProxies: values["beside-proxies"].split(",").map((proxy) => {
      if (proxy !== "kproxy" && proxy !== "kube-proxy") {
        throw new Error(
          `Cannot parse --beside-proxies ${
            values["beside-proxies"]
          }: "${proxy}" is not kproxy or kube-proxy`,
        );
      }
      return proxy;
    }),
  };
}

function log(text: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${text}`);
}

/** Sizes for the data path: 10k and up (else the largest size). */
function largeSizes(sizes: number[]): number[] {
  const large = sizes.filter((n) => n >= 10_000);
  return large.length > 0 ? large : [Math.max(...sizes)];
}

async function section(
  results: BenchResults,
  name: string,
  fn: () => Promise<void>,
): Promise<void> {
  const start = performance.now();
  log(`${name}…`);
  try {
    await fn();
    log(`${name} done in ${((performance.now() - start) / 1000).toFixed(0)} s`);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    results.errors.push(`${name}: ${message.split("\n")[0]}`);
    log(`${name} FAILED: ${message}`);
  }
}

/** Runs the chosen sections and returns everything measured. */
export async function runBench(options: BenchOptions): Promise<BenchResults> {
  const { sizes, sections } = options;
  const size = (services: number) => ({
    services,
    endpointsPerService: ENDPOINTS_PER_SERVICE,
    shape: options.objects,
  });
  const results: BenchResults = {
    date: new Date().toISOString(),
    machine: await describeMachine(),
    sizes,
    endpointsPerService: ENDPOINTS_PER_SERVICE,
    sections,
    nftables: [],
    iptables: [],
    iptablesBaseline: [],
    change: [],
    process: [],
    storm: [],
    datapath: [],
    manifests: [],
    conntrack: [],
    errors: [],
    notes: [...PROFILE_NOTES],
  };
  const has = (s: Section) => sections.includes(s);
  const tenK = Math.min(10_000, Math.max(...sizes));

  if (has("fullsync") && options.fullsyncModes.includes("nftables")) {
    for (const services of sizes) {
      await section(results, `full sync, nftables, ${services} services`, async () => {
        results.nftables.push(
          ...await benchNftables({
            sizes: [services],
            endpointsPerService: ENDPOINTS_PER_SERVICE,
            baselineMaxServices: NFT_BASELINE_MAX,
          }),
        );
      });
    }
  }
  if (has("fullsync") && options.fullsyncModes.includes("iptables")) {
    for (const variant of ["nft", "legacy"] as const) {
      for (const services of sizes) {
        await section(results, `full sync, iptables-${variant}, ${services} services`, async () => {
          results.iptables.push(
            ...await benchIptables({
              sizes: [services],
              endpointsPerService: ENDPOINTS_PER_SERVICE,
              variants: [variant],
            }),
          );
        });
      }
    }
  }
  if (has("fullsync") && options.fullsyncModes.includes("iptables-baseline")) {
    for (const variant of ["nft", "legacy"] as const) {
      for (const services of sizes) {
        await section(
          results,
          `full sync, iptables-${variant} upstream-style, ${services} services`,
          async () => {
            const { ms, rules, stopped } = await loadIptablesBaseline(
              benchPlan(services, ENDPOINTS_PER_SERVICE),
              variant,
              BASELINE_TIMEOUT_MS,
            );
            results.iptablesBaseline.push({
              variant,
              services,
              endpointsPerService: ENDPOINTS_PER_SERVICE,
              rules,
              fullMs: ms,
              stopped,
            });
          },
        );
      }
    }
  }
  if (has("change")) {
    for (const mode of options.modes) {
      for (const services of [...new Set([1000, ...sizes])].sort((a, b) => a - b)) {
        await section(results, `one change, ${mode}, ${services} services`, async () => {
          results.change.push(await benchChange({ mode, size: size(services) }));
        });
      }
    }
  }
  if (has("startup") || has("memory")) {
    await section(results, "floor process", async () => {
      results.floor = await benchFloor();
    });
    for (const services of sizes) {
      await section(results, `start-up and memory, ${services} services`, async () => {
        results.process.push(
          await benchProcess({ mode: "nftables", size: size(services), runs: options.runs }),
        );
      });
    }
  }
  if (has("storm")) {
    for (const mode of options.modes) {
      await section(results, `event storm, ${mode}`, async () => {
        results.storm.push(
          await benchStorm({ mode, size: size(tenK), changes: tenK, windowMs: 10_000 }),
        );
      });
    }
    if (options.modes.includes("iptables")) {
      await section(results, "event storm, iptables partial syncs by size", async () => {
        results.iptablesPartial = await benchPartialSizes({
          services: tenK,
          endpointsPerService: ENDPOINTS_PER_SERVICE,
          changed: PARTIAL_SIZES.filter((count) => count <= tenK),
        });
      });
    }
  }
  if (has("datapath")) {
    for (const services of largeSizes(sizes)) {
      await section(results, `data path, ${services} services`, async () => {
        // iptables at 100k: over a million chains, hours of iptables-nft-restore to load and remove.
        const modes = services <= IPTABLES_DATAPATH_MAX
          ? ["nftables", "iptables"] as const
          : ["nftables"] as const;
        results.datapath.push(...await benchDatapath({ services, rounds: 300, modes }));
      });
    }
  }
  if (has("takeover")) {
    await section(results, "takeover and hand-back", async () => {
      results.takeover = await benchTakeover();
    });
  }
  if (has("manifests")) {
    results.manifests = [];
    for (const format of DUMP_FORMATS) {
      await section(results, `manifests, kproxy plan on a ${format} dump`, async () => {
        results.manifests!.push(
          ...await benchManifests({
            size: size(tenK),
            runs: 3,
            before: options.manifestsBefore,
            formats: [format],
          }),
        );
      });
    }
  }
  if (has("conntrack")) {
    await section(results, "conntrack reconcile", async () => {
      results.conntrack = await benchConntrack();
    });
  }
  if (has("counters")) {
    await section(results, "service counters, off vs on", async () => {
      // Five alternating runs: one-change times vary by ±20 % between runs of three here.
      results.counters = await benchCounters({
        services: tenK,
        endpointsPerService: ENDPOINTS_PER_SERVICE,
        runs: 5,
      });
    });
  }
  if (has("beside")) {
    await section(results, "beside kube-proxy on a real kube-apiserver", async () => {
      results.beside = emptyBeside();
      await benchBeside({
        sizes,
        modes: options.modes,
        runs: options.besideRuns,
        proxies: options.besideProxies,
        timeoutMs: options.besideTimeoutS * 1000,
        endpointsPerService: ENDPOINTS_PER_SERVICE,
        log,
      }, results.beside);
      if (results.beside.skipped) log(`beside kube-proxy skipped: ${results.beside.skipped}`);
    });
  }
  return results;
}

async function leftoverNamespaces(): Promise<string[]> {
  const output = await new Deno.Command("ip", { args: ["netns", "list"], stdout: "piped" })
    .output();
  return new TextDecoder().decode(output.stdout).split("\n")
    .map((line) => line.split(" ")[0] ?? "")
    .filter((name) => name.startsWith(NAMESPACE_PREFIX));
}

/** `base`'s rows without those `fresh` re-measured (same key), then `fresh`'s rows. */
function replaceRows<R>(base: readonly R[], fresh: readonly R[], key: (row: R) => string): R[] {
  const measured = new Set(fresh.map(key));
  return [...base.filter((row) => !measured.has(key(row))), ...fresh];
}

/**
 * Replaces in `base` what `fresh` measured (the rows of the sections, modes
 * and sizes of `options`), errors included; rows of other sizes stay.
 */
export function merge(
  base: BenchResults,
  fresh: BenchResults,
  options: BenchOptions,
): BenchResults {
  const merged: BenchResults = { ...base, date: fresh.date, machine: fresh.machine };
  const has = (s: Section) => options.sections.includes(s);
  const sized = (row: { services: number }) => String(row.services);
  const variantAt = (row: { variant: string; services: number }) =>
    `${row.variant} ${row.services}`;
  const modeAt = (row: { mode: string; services: number }) => `${row.mode} ${row.services}`;
  if (has("fullsync")) {
    if (options.fullsyncModes.includes("nftables")) {
      merged.nftables = replaceRows(base.nftables, fresh.nftables, variantAt);
    }
    if (options.fullsyncModes.includes("iptables")) {
      merged.iptables = replaceRows(base.iptables, fresh.iptables, variantAt);
    }
    if (options.fullsyncModes.includes("iptables-baseline")) {
      merged.iptablesBaseline = replaceRows(
        base.iptablesBaseline,
        fresh.iptablesBaseline,
        variantAt,
      );
    }
  }
  if (has("change")) merged.change = replaceRows(base.change, fresh.change, modeAt);
  if (has("startup") || has("memory")) {
    merged.process = replaceRows(base.process, fresh.process, modeAt);
    merged.floor = fresh.floor ?? base.floor;
  }
  if (has("storm")) {
    merged.storm = replaceRows(base.storm, fresh.storm, modeAt);
    merged.iptablesPartial = replaceRows(
      base.iptablesPartial ?? [],
      fresh.iptablesPartial ?? [],
      (row) => `${row.variant} ${row.services} ${row.changed}`,
    );
  }
  if (has("datapath")) {
    merged.datapath = replaceRows(
      base.datapath,
      fresh.datapath,
      (row) => `${modeAt(row)} ${row.target}`,
    );
  }
  if (has("takeover")) merged.takeover = fresh.takeover;
  if (has("manifests")) {
    merged.manifests = replaceRows(
      base.manifests ?? [],
      fresh.manifests ?? [],
      (row) => `${row.format} ${sized(row)}`,
    );
  }
  if (has("conntrack")) merged.conntrack = fresh.conntrack;
  if (has("counters")) merged.counters = fresh.counters;
  if (has("beside") && fresh.beside) merged.beside = mergeBeside(base.beside, fresh.beside);
  merged.errors = [
    ...base.errors.filter((error) => !remeasures(options, error.split(":")[0]!)),
    ...fresh.errors,
  ];
  merged.sections = [...new Set([...base.sections, ...fresh.sections])];
  merged.sizes = [...new Set([...base.sizes, ...fresh.sizes])].sort((a, b) => a - b);
  return merged;
}

if (import.meta.main) {
  const options = parseBenchArgs(Deno.args);
  let results: BenchResults | undefined;
  if (options.fromJson) results = JSON.parse(await Deno.readTextFile(options.fromJson));
  if (!options.fromJson || options.only) {
    if (Deno.uid() !== 0) {
      console.error("bench: needs root to create network namespaces");
      Deno.exit(1);
    }
    const started = performance.now();
    const fresh = await runBench(options);
    log(`all sections done in ${((performance.now() - started) / 1000).toFixed(0)} s`);
    const left = await leftoverNamespaces();
    if (left.length > 0) fresh.errors.push(`namespaces left behind: ${left.join(", ")}`);
    results = results ? merge(results, fresh, options) : fresh;
    await Deno.writeTextFile(options.json, JSON.stringify(results, null, 2));
    log(`raw results in ${options.json}`);
  }
  results!.notes = [...PROFILE_NOTES];
  await Deno.writeTextFile(new URL("BENCHMARKS.md", DOCS), renderMarkdown(results!));
  await Deno.writeTextFile(new URL("bench-sync.svg", DOCS), renderSvg(results!));
  console.log(renderTable(results!));
  console.log("\nwrote docs/BENCHMARKS.md and docs/bench-sync.svg");
}
