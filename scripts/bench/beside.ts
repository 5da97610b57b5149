/**
 * kproxy beside upstream kube-proxy, in the same run, on a real
 * kube-apiserver (`real_apiserver.ts`): N selector-less ClusterIP Services
 * with one EndpointSlice of 10 endpoints each are created through the API
 * once per size, then each proxy runs in turn in the apiserver's namespace
 * (the ruleset flushed before each start), with the same flags:
 *
 * - first sync: process spawn → its own
 *   `kubeproxy_sync_proxy_rules_last_timestamp_seconds` (IPv4), read from its
 *   metrics port; CPU seconds (utime + stime, and its reaped children's) read
 *   as the bench sees that metric;
 * - peak RSS (VmHWM) and steady RSS (VmRSS) a few seconds after the first sync;
 * - one change: an EndpointSlice PUT → the new endpoint address in a line of
 *   `nft monitor` (iptables-nft rules are nf_tables rules too).
 *
 * @module
 */

import { memoryOf } from "./process.ts";
import { launchArgs, launchEnvironment } from "../launch.ts";
import { BUNDLE_PATH, bundleKproxy } from "../bundle.ts";
import { ANALYSIS_CACHE_FILE, writeAnalysisCache } from "../analysis_cache.ts";
import { median, withNamespace } from "./harness.ts";
import {
  linkToHost,
  type LoadRow,
  loadServices,
  missingBinaries,
  NODE_ADDRESS,
  putSlice,
  REAL_BINARIES,
  type RealApiserver,
  spawnLogged,
  startRealApiserver,
  stopProcess,
} from "./real_apiserver.ts";
import { untilIdle } from "./idle.ts";

/**
 * A run starts once fewer cores than this were busy over a second: after a
 * load the apiserver and etcd keep working for a while.
 */
const QUIET_CORES = 0.3;

/** The two proxies measured. */
export type Proxy = "kproxy" | "kube-proxy";
/** The modes measured (ipvs: no IPVS in this kernel). */
export type BesideMode = "nftables" | "iptables";

/** One proxy in one mode at one size: medians of its runs. */
export interface BesideRow {
  proxy: Proxy;
  mode: BesideMode;
  services: number;
  runs: number;
  /** Spawn → first sync, median of the runs that synced. */
  firstSyncMs?: number;
  /** Every run's first sync; null: none within {@linkcode BesideRow.timeoutS}. */
  firstSyncRunsMs: (number | null)[];
  /** How long a run waited for the first sync. */
  timeoutS: number;
  /** EndpointSlice PUT → the new address in the kernel. */
  changeMs?: number;
  changeRunsMs: (number | null)[];
  /** VmHWM after the first sync settled (or at the time-out). */
  peakMiB: number;
  peakRunsMiB: number[];
  /** VmRSS at the same moment. */
  rssMiB: number;
  /** The process's own CPU seconds (utime + stime) at the first sync. */
  cpuS?: number;
  /** CPU seconds of its reaped children (nft, iptables-restore…) at the first sync. */
  childCpuS?: number;
}

/** What a beside run measured. */
export interface BesideResults {
  /** When the run started (ISO 8601). */
  date?: string;
  rows: BesideRow[];
  loads: LoadRow[];
  /** Why the section did not run, when it did not. */
  skipped?: string;
  /** The 1-minute load average at the start of each size. */
  loadAverages: Record<string, number>;
  /** Versions of what ran. */
  versions: Record<string, string>;
  /** Runs that failed (the proxy exited, the change never came…), with the error. */
  failures?: string[];
}

/** Results with nothing measured yet, dated now. */
export function emptyBeside(): BesideResults {
  return {
    date: new Date().toISOString(),
    rows: [],
    loads: [],
    loadAverages: {},
    versions: {},
    failures: [],
  };
}

/** Options of {@linkcode benchBeside}. */
export interface BesideOptions {
  sizes: readonly number[];
  modes: readonly BesideMode[];
  /** Runs per proxy, mode and size. @default {3} */
  runs?: number;
  /** How long a proxy gets for its first sync. @default {300_000} */
  timeoutMs?: number;
  /** The proxies to run. @default {["kproxy", "kube-proxy"]} */
  proxies?: readonly Proxy[];
  /** Requests in flight while loading. @default {32} */
  concurrency?: number;
  endpointsPerService: number;
  log?: (text: string) => void;
}

/**
 * The IPv4 (or unlabelled) value of
 * `kubeproxy_sync_proxy_rules_last_timestamp_seconds` in a Prometheus text
 * exposition, when positive.
 */
export function lastSyncTimestamp(metrics: string): number | undefined {
  for (const line of metrics.split("\n")) {
    const match = /^kubeproxy_sync_proxy_rules_last_timestamp_seconds(\{[^}]*\})?\s+(\S+)/.exec(
      line,
    );
    if (!match) continue;
    const labels = match[1] ?? "";
    if (labels !== "" && !/ip_family="IPv4"/.test(labels)) continue;
    const value = Number(match[2]);
    if (Number.isFinite(value) && value > 0) return value;
  }
  return undefined;
}

/**
 * CPU seconds of a process from its `/proc/PID/stat` line: its own
 * (utime + stime) and its reaped children's (cutime + cstime).
 */
export function cpuSeconds(stat: string, ticksPerSecond = 100): { own: number; children: number } {
  // Fields after the command name (which may hold spaces), from field 3 (state) on.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const tick = (field: number) => Number(fields[field - 3]) / ticksPerSecond;
  return { own: tick(14) + tick(15), children: tick(16) + tick(17) };
}

/** Whether a line of `nft monitor` names `address` (not a longer one that starts with it). */
export function mentionsAddress(line: string, address: string): boolean {
  const escaped = address.replaceAll(".", "\\.");
  return new RegExp(`(?<![\\d.])${escaped}(?!\\d|\\.\\d)`).test(line);
}

/** The address the `n`-th change of a run gives endpoint 0 (10.250.0.0/16, unused otherwise). */
export function changedAddress(n: number): string {
  return `10.250.${(n >> 8) & 255}.${n & 255}`;
}

/**
 * The flags both proxies get. No sync periods: kube-proxy 1.36 has no
 * `--nftables-*-sync-period` flags, so both keep their defaults (1 s minimum).
 */
export function proxyFlags(mode: BesideMode, kubeconfig: string): string[] {
  return [
    `--proxy-mode=${mode}`,
    `--kubeconfig=${kubeconfig}`,
    "--hostname-override=node-a",
    "--cluster-cidr=10.244.0.0/16",
    "--healthz-bind-address=127.0.0.1:10256",
    `--metrics-bind-address=${NODE_ADDRESS}:10249`,
    "--conntrack-max-per-core=0",
    "--conntrack-tcp-timeout-established=0",
    "--conntrack-tcp-timeout-close-wait=0",
    "--v=2",
  ];
}

/**
 * kproxy as its container image runs it (`scripts/image/kproxy.sh`): the
 * bundle, installed where no `deno.json` is above it, under `deno run` with
 * the exact permissions, V8 flags and environment `scripts/launch.ts`
 * computes from the same flags, in `/`, with a `DENO_DIR` of its own that
 * holds only Deno's analysis of the bundle, as the image's launcher leaves it
 * at every container start.
 */
export function shippedKproxy(flags: string[], install: ImageInstall, denoDir: string): string[] {
  const env = Object.entries({ ...launchEnvironment(), DENO_DIR: denoDir })
    .map(([name, value]) => `${name}=${value}`);
  return ["env", ...env, Deno.execPath(), ...launchArgs(flags, install.bundle)];
}

/** The bundle installed as in the image, and Deno's analysis of it. */
export interface ImageInstall {
  dir: string;
  bundle: string;
  analysis: string;
}

/**
 * Installs this checkout's bundle (`deno task bundle`) and its map in a new
 * directory outside the repository, with Deno's analysis of it, as the image
 * does under /opt/kproxy: a `deno.json` above the bundle would make Deno read
 * the repository's configuration and resolve its npm packages at every start.
 */
async function installLikeImage(): Promise<ImageInstall> {
  await bundleKproxy();
  const dir = await Deno.makeTempDir({ prefix: "kp-beside-kproxy-" });
  const bundle = `${dir}/kproxy.js`;
  await Deno.copyFile(BUNDLE_PATH, bundle);
  await Deno.copyFile(`${BUNDLE_PATH}.map`, `${bundle}.map`);
  const analysis = `${dir}/${ANALYSIS_CACHE_FILE}`;
  await writeAnalysisCache(bundle, bundle, analysis);
  return { dir, bundle, analysis };
}

/** A new `DENO_DIR` holding the bundle's analysis, as the image's launcher makes one. */
async function imageDenoDir(install: ImageInstall): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "kp-beside-deno-" });
  await Deno.copyFile(install.analysis, `${dir}/${ANALYSIS_CACHE_FILE}`);
  return dir;
}

async function inNamespace(namespace: string, script: string): Promise<string> {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", namespace, "sh", "-c", script],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return new TextDecoder().decode(out.stdout);
}

/** Removes every rule from `namespace` (nf_tables: nftables, iptables-nft; legacy iptables) and every nfacct counter. */
async function flushRules(namespace: string): Promise<void> {
  await inNamespace(
    namespace,
    "nft flush ruleset; for t in $(cat /proc/net/ip_tables_names 2>/dev/null); do " +
      "iptables-legacy -t $t -F; iptables-legacy -t $t -X; done; " +
      // The iptables modes' counters: left, the next proxy's takeover would remove them.
      "nfacct flush 2>/dev/null || true",
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function ticksPerSecond(): Promise<number> {
  const out = await new Deno.Command("getconf", { args: ["CLK_TCK"], stdout: "piped" }).output()
    .catch(() => undefined);
  const value = Number(new TextDecoder().decode(out?.stdout ?? new Uint8Array()).trim());
  return Number.isFinite(value) && value > 0 ? value : 100;
}

async function scrape(): Promise<string | undefined> {
  try {
    const response = await fetch(`http://${NODE_ADDRESS}:10249/metrics`, {
      signal: AbortSignal.timeout(2000),
    });
    return await response.text();
  } catch {
    return undefined;
  }
}

/** One proxy process: first sync, memory, CPU and one change. */
interface ProxyRun {
  firstSyncMs?: number;
  changeMs?: number;
  peakMiB: number;
  rssMiB: number;
  cpuS?: number;
  childCpuS?: number;
}

/**
 * A listing that names every endpoint: kproxy's nftables map of endpoints;
 * kube-proxy's nftables table (1.36 writes the endpoints into each service
 * chain's `numgen … map`, with endpoint chains only where it needs them);
 * the nat table in iptables mode.
 */
export function kernelListing(proxy: Proxy, mode: BesideMode): string[] {
  if (mode === "iptables") return ["iptables-save", "-t", "nat"];
  return proxy === "kproxy"
    ? ["nft", "list", "map", "ip", "kproxy", "service-endpoints"]
    : ["nft", "list", "table", "ip", "kube-proxy"];
}

/** Whether `listing` in `namespace` names `address` now. */
async function kernelNames(namespace: string, listing: string[], address: string) {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", namespace, ...listing],
    stdout: "piped",
    stderr: "null",
  }).output();
  return new TextDecoder().decode(out.stdout).split("\n").some((l) => mentionsAddress(l, address));
}

/**
 * Milliseconds from `since` (wall clock) to the end of the first sync after
 * it whose rules name `address`: the proxy's own sync timestamp, scraped
 * every 50 ms, each new one checked against `listing` (untimed).
 */
async function changeSeen(options: {
  namespace: string;
  listing: string[];
  address: string;
  since: number;
  timeoutMs: number;
}): Promise<number | undefined> {
  const deadline = performance.now() + options.timeoutMs;
  let checked = options.since / 1000;
  while (performance.now() < deadline) {
    const metrics = await scrape();
    const timestamp = metrics === undefined ? undefined : lastSyncTimestamp(metrics);
    if (timestamp !== undefined && timestamp > checked) {
      checked = timestamp;
      if (await kernelNames(options.namespace, options.listing, options.address)) {
        return timestamp * 1000 - options.since;
      }
    }
    await sleep(50);
  }
  return undefined;
}

async function proxyRun(options: {
  api: RealApiserver;
  namespace: string;
  proxy: Proxy;
  mode: BesideMode;
  change: { index: number; n: number };
  endpointsPerService: number;
  timeoutMs: number;
  ticks: number;
  log: string;
  /** kproxy installed as in the image; kube-proxy's runs have none. */
  install?: ImageInstall;
}): Promise<ProxyRun> {
  const { namespace, mode, api } = options;
  await flushRules(namespace);
  const flags = proxyFlags(mode, api.kubeconfig);
  const denoDir = options.install ? await imageDenoDir(options.install) : undefined;
  const command = options.install && denoDir
    ? shippedKproxy(flags, options.install, denoDir)
    : [REAL_BINARIES.kubeProxy, ...flags];
  await Deno.writeTextFile(options.log, `=== ${options.proxy} ${command.join(" ")}\n`, {
    append: true,
  });
  const spawnedAt = Date.now();
  const child = spawnLogged(namespace, options.log, command, "/");
  const exited = child.status.then((status) => status.code);
  try {
    let syncedAt: number | undefined;
    let cpu: { own: number; children: number } | undefined;
    const deadline = performance.now() + options.timeoutMs;
    while (syncedAt === undefined && performance.now() < deadline) {
      const code = await Promise.race([exited, sleep(100).then(() => undefined)]);
      if (code !== undefined) {
        throw new Error(
          `${options.proxy} exited (${code}) before its first sync; see ${options.log}`,
        );
      }
      const metrics = await scrape();
      const timestamp = metrics === undefined ? undefined : lastSyncTimestamp(metrics);
      if (timestamp !== undefined) {
        cpu = cpuSeconds(await Deno.readTextFile(`/proc/${child.pid}/stat`), options.ticks);
        syncedAt = timestamp * 1000;
      }
    }
    if (syncedAt === undefined) {
      const memory = await memoryOf(child.pid);
      return { peakMiB: memory.peak, rssMiB: memory.rss };
    }
    await sleep(3000);
    const memory = await memoryOf(child.pid);
    const address = changedAddress(options.change.n);
    const putAt = Date.now();
    await putSlice(api, {
      index: options.change.index,
      endpointsPerService: options.endpointsPerService,
      address,
    });
    const changeMs = await changeSeen({
      namespace,
      listing: kernelListing(options.proxy, mode),
      address,
      since: putAt,
      timeoutMs: 120_000,
    });
    return {
      firstSyncMs: syncedAt - spawnedAt,
      changeMs,
      peakMiB: memory.peak,
      rssMiB: memory.rss,
      cpuS: cpu?.own,
      childCpuS: cpu?.children,
    };
  } finally {
    await stopProcess(child, 20_000);
    if (denoDir !== undefined) await Deno.remove(denoDir, { recursive: true });
  }
}

async function versionOf(program: string): Promise<string> {
  const out = await new Deno.Command(program, { args: ["--version"], stdout: "piped" }).output()
    .catch(() => undefined);
  return new TextDecoder().decode(out?.stdout ?? new Uint8Array()).split("\n")[0]!.trim();
}

async function loadAverage(): Promise<number> {
  const text = await Deno.readTextFile("/proc/loadavg").catch(() => "");
  return Number(text.split(" ")[0]);
}

function rowOf(
  base: Pick<BesideRow, "proxy" | "mode" | "services" | "timeoutS">,
  runs: ProxyRun[],
): BesideRow {
  const middle = (values: (number | undefined)[]) => {
    const known = values.filter((value): value is number => value !== undefined);
    return known.length === 0 ? undefined : median(known);
  };
  return {
    ...base,
    runs: runs.length,
    firstSyncMs: middle(runs.map((run) => run.firstSyncMs)),
    firstSyncRunsMs: runs.map((run) => run.firstSyncMs ?? null),
    changeMs: middle(runs.map((run) => run.changeMs)),
    changeRunsMs: runs.map((run) => run.changeMs ?? null),
    peakMiB: median(runs.map((run) => run.peakMiB)),
    peakRunsMiB: runs.map((run) => run.peakMiB),
    rssMiB: median(runs.map((run) => run.rssMiB)),
    cpuS: middle(runs.map((run) => run.cpuS)),
    childCpuS: middle(runs.map((run) => run.childCpuS)),
  };
}

/**
 * Starts a real apiserver in a fresh namespace, grows its cluster to each
 * size in turn and measures both proxies there, alternating them run by run,
 * into `results` as it goes (what was measured stays when a later step
 * fails). A proxy that did not sync within the time-out is not run again at
 * that size or above in that mode. Skips (with the reason) when a binary is
 * missing.
 */
export async function benchBeside(
  options: BesideOptions,
  results: BesideResults = emptyBeside(),
): Promise<BesideResults> {
  const log = options.log ?? (() => undefined);
  const proxies = options.proxies ?? ["kproxy", "kube-proxy"];
  const skipped = await missingBinaries({ kubeProxy: proxies.includes("kube-proxy") });
  if (skipped !== undefined) {
    results.skipped = skipped;
    return results;
  }
  results.versions = {
    ...proxies.includes("kube-proxy") &&
      { "kube-proxy": await versionOf(REAL_BINARIES.kubeProxy) },
    "kube-apiserver": await versionOf(REAL_BINARIES.apiserver),
    etcd: await versionOf(REAL_BINARIES.etcd),
  };
  const install = proxies.includes("kproxy") ? await installLikeImage() : undefined;
  const runs = options.runs ?? 3;
  const timeoutMs = options.timeoutMs ?? 300_000;
  const ticks = await ticksPerSecond();
  const gaveUp = new Set<string>();
  await withNamespace("beside", async (namespace) => {
    await linkToHost(namespace);
    const api = await startRealApiserver(namespace);
    const logDir = await Deno.makeTempDir({ prefix: "kp-beside-logs-" });
    log(`real apiserver up; proxy logs in ${logDir}`);
    let loaded = 0;
    let changes = 0;
    try {
      for (const services of [...options.sizes].sort((a, b) => a - b)) {
        results.loadAverages[String(services)] = await loadAverage();
        const load = await loadServices(api, {
          from: loaded,
          to: services,
          endpointsPerService: options.endpointsPerService,
          concurrency: options.concurrency ?? 32,
        });
        results.loads.push(load);
        loaded = services;
        log(`loaded ${load.created} services (to ${services}) in ${(load.ms / 1000).toFixed(1)} s`);
        const settled = await untilIdle({ maxBusyCores: QUIET_CORES, timeoutMs: 120_000 });
        log(`quiet after ${(settled.waitedMs / 1000).toFixed(1)} s`);
        for (const mode of options.modes) {
          const done: Record<Proxy, ProxyRun[]> = { kproxy: [], "kube-proxy": [] };
          for (let run = 0; run < runs; run++) {
            for (const proxy of proxies) {
              if (gaveUp.has(`${proxy} ${mode}`)) continue;
              changes++;
              await untilIdle({ maxBusyCores: QUIET_CORES, timeoutMs: 15_000 });
              const runLog = `${logDir}/${proxy}-${mode}-${services}-${run}.log`;
              const result = await proxyRun({
                api,
                namespace,
                proxy,
                mode,
                change: { index: (changes * 7919) % services, n: changes },
                endpointsPerService: options.endpointsPerService,
                timeoutMs,
                ticks,
                log: runLog,
                install: proxy === "kproxy" ? install : undefined,
              }).catch((error: Error) => {
                const failure = `${proxy} ${mode} ${services} run ${run + 1}: ${
                  error.message.split("\n")[0]
                } (${runLog})`;
                results.failures = [...results.failures ?? [], failure];
                log(`FAILED ${failure}`);
                return undefined;
              });
              if (result === undefined) continue;
              log(
                `${proxy} ${mode} ${services} run ${run + 1}: first sync ${
                  result.firstSyncMs === undefined
                    ? `none within ${timeoutMs / 1000} s`
                    : `${result.firstSyncMs.toFixed(0)} ms`
                }, change ${result.changeMs?.toFixed(0) ?? "–"} ms, peak ${
                  result.peakMiB.toFixed(0)
                } MiB, rss ${result.rssMiB.toFixed(0)} MiB, cpu ${
                  result.cpuS?.toFixed(2) ?? "–"
                } s`,
              );
              done[proxy].push(result);
              if (result.firstSyncMs === undefined) gaveUp.add(`${proxy} ${mode}`);
            }
          }
          for (const proxy of proxies) {
            if (done[proxy].length === 0) continue;
            results.rows.push(
              rowOf({ proxy, mode, services, timeoutS: timeoutMs / 1000 }, done[proxy]),
            );
          }
        }
      }
    } finally {
      await flushRules(namespace);
      await api.stop();
    }
  }).finally(() => install && Deno.remove(install.dir, { recursive: true }));
  return results;
}

/**
 * `base` with what `fresh` measured: rows of the same proxy, mode and size
 * and loads of the same size replaced, the rest kept.
 */
export function mergeBeside(
  base: BesideResults | undefined,
  fresh: BesideResults,
): BesideResults {
  if (base === undefined) return fresh;
  const key = (row: BesideRow) => `${row.proxy} ${row.mode} ${row.services}`;
  const measured = new Set(fresh.rows.map(key));
  const loaded = new Set(fresh.loads.map((load) => load.services));
  return {
    date: fresh.rows.length > 0 ? fresh.date : base.date,
    rows: [...base.rows.filter((row) => !measured.has(key(row))), ...fresh.rows],
    loads: [...base.loads.filter((load) => !loaded.has(load.services)), ...fresh.loads],
    skipped: fresh.rows.length === 0 ? fresh.skipped ?? base.skipped : undefined,
    loadAverages: { ...base.loadAverages, ...fresh.loadAverages },
    versions: Object.keys(fresh.versions).length > 0 ? fresh.versions : base.versions,
    failures: fresh.rows.length > 0 ? fresh.failures : base.failures,
  };
}
