/**
 * The cost of the per-Service counters (`--service-counters`, issue 28): at
 * one size, with counters off and on in the same run and in alternating
 * fresh namespaces, the full sync and the one-change sync of the nftables
 * and iptables-nft modes, the size of the full input, and, in a process of
 * its own, one kernel read of the counters (what the background refresh does
 * once per interval) and one scrape's text from it (what /metrics waits
 * for), whose extra peak RSS is measured from a reset high-water mark.
 *
 * ```sh
 * deno run --allow-all scripts/bench/counters.ts 10000   # prints one row per mode and setting
 * ```
 *
 * @module
 */

import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { renderFull as renderNftables } from "../../backends/nftables/render.ts";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { renderFull as renderIptables } from "../../backends/iptables/render.ts";
import type { Backend } from "../../lib/core/backend.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { exposeServiceCounters } from "../../lib/shell/service_counters.ts";
import { HostExecutor, NetnsExecutor } from "../netns.ts";
import { median, timeFullThenOneChange, withNamespace } from "./harness.ts";
import { benchPlan } from "./plan.ts";

/** The modes measured. */
export type CountersMode = "nftables" | "iptables-nft";

/** One mode with counters off or on. */
export interface CountersRow {
  mode: CountersMode;
  counters: boolean;
  services: number;
  endpointsPerService: number;
  /** Medians over `runs` fresh namespaces. */
  fullMs: number;
  partialMs: number;
  runs: number;
  /** Bytes and lines of the full input. */
  inputBytes: number;
  inputLines: number;
  /**
   * One kernel read of every counter, parsed into samples (counters on only; NaN otherwise):
   * what the background refresh does once per interval.
   */
  readMs: number;
  /** One scrape's counter text from the last reading: what /metrics waits for. */
  scrapeMs: number;
  /** Peak RSS of the read and the scrape above the process's RSS before them, in MiB. */
  scrapeExtraPeakMiB: number;
  /** Series the scrape produced. */
  series: number;
}

/** Options of {@linkcode benchCounters}. */
export interface CountersBenchOptions {
  /** @default {10_000} */
  services?: number;
  /** @default {10} */
  endpointsPerService?: number;
  /** Fresh namespaces per mode and setting. @default {3} */
  runs?: number;
}

function createBackend(mode: CountersMode, namespace: string): Backend {
  const executor = new NetnsExecutor({ namespace, inner: new HostExecutor() });
  const config = defaultConfig("node-a");
  if (mode === "nftables") return createNftablesBackend({ executor, config, families: ["IPv4"] });
  config.iptables.backend = "nft";
  return createIptablesBackend({ executor, config, families: ["IPv4"] });
}

function fullInput(mode: CountersMode, counters: boolean, services: number, perService: number) {
  const plan = benchPlan(services, perService, { counters });
  const text = mode === "nftables"
    ? renderNftables(plan).toString()
    : renderIptables(plan).toString();
  return { bytes: new TextEncoder().encode(text).length, lines: text.split("\n").length - 1 };
}

interface ScrapeResult {
  readMs: number;
  scrapeMs: number;
  extraPeakMiB: number;
  series: number;
}

/** Runs {@linkcode scrapeOnce} in a child process against `namespace`. */
async function scrapeInChild(
  mode: CountersMode,
  namespace: string,
  services: number,
  perService: number,
): Promise<ScrapeResult> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      "--v8-flags=--expose-gc",
      new URL(import.meta.url).pathname,
      "--scrape",
      mode,
      namespace,
      String(services),
      String(perService),
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(output.stdout);
  if (!output.success) {
    throw new Error(`Cannot scrape the counters: ${new TextDecoder().decode(output.stderr)}`);
  }
  return JSON.parse(text.trim().split("\n").at(-1)!) as ScrapeResult;
}

function highWaterMiB(): number {
  const status = Deno.readTextFileSync("/proc/self/status");
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? NaN) / 1024;
}

/**
 * One read and one scrape as kproxy does them, in this process: the plan (as
 * the backend keeps it) is built and read once first, as in steady state,
 * then the high-water mark is reset (`/proc/self/clear_refs`), so the peak
 * counts the measured read and scrape only.
 */
async function scrapeOnce(
  mode: CountersMode,
  namespace: string,
  services: number,
  perService: number,
): Promise<ScrapeResult> {
  const plan = benchPlan(services, perService, { counters: true });
  const backend = createBackend(mode, namespace);
  // Steady state: kproxy reads the plans it rendered, whose names are computed already.
  await exposeServiceCounters(await backend.readServiceCounters!([plan]));
  (globalThis as { gc?: () => void }).gc?.();
  Deno.writeTextFileSync("/proc/self/clear_refs", "5");
  const before = Deno.memoryUsage().rss / 2 ** 20;
  let start = performance.now();
  const samples = await backend.readServiceCounters!([plan]);
  const readMs = performance.now() - start;
  start = performance.now();
  const text = await exposeServiceCounters(samples);
  const scrapeMs = performance.now() - start;
  const series = text.split("\n").filter((line) => line.startsWith("kproxy_")).length;
  return { readMs, scrapeMs, extraPeakMiB: Math.max(0, highWaterMiB() - before), series };
}

/** Measures both modes with counters off and on, alternating, in fresh namespaces. */
export async function benchCounters(options: CountersBenchOptions = {}): Promise<CountersRow[]> {
  const services = options.services ?? 10_000;
  const perService = options.endpointsPerService ?? 10;
  const runs = options.runs ?? 3;
  const middle = Math.floor(services / 2);
  const rows: CountersRow[] = [];
  for (const mode of ["nftables", "iptables-nft"] as const) {
    const times = new Map<boolean, { fullMs: number; partialMs: number }[]>([
      [false, []],
      [true, []],
    ]);
    let scrape: ScrapeResult | undefined;
    for (let run = 0; run < runs; run++) {
      // Off then on, then on then off: neither setting always runs on a warmer machine.
      const order = run % 2 === 0 ? [false, true] : [true, false];
      for (const counters of order) {
        const plan = benchPlan(services, perService, { counters });
        const next = benchPlan(services, perService, { counters, shift: middle });
        await withNamespace("counters", async (namespace) => {
          const backend = createBackend(mode, namespace);
          times.get(counters)!.push(
            await timeFullThenOneChange(backend, plan, next, next.services[middle]!.id),
          );
          if (counters && scrape === undefined) {
            scrape = await scrapeInChild(mode, namespace, services, perService);
          }
        });
      }
    }
    for (const counters of [false, true]) {
      const measured = times.get(counters)!;
      const input = fullInput(mode, counters, services, perService);
      rows.push({
        mode,
        counters,
        services,
        endpointsPerService: perService,
        fullMs: median(measured.map((t) => t.fullMs)),
        partialMs: median(measured.map((t) => t.partialMs)),
        runs,
        inputBytes: input.bytes,
        inputLines: input.lines,
        readMs: counters ? scrape!.readMs : NaN,
        scrapeMs: counters ? scrape!.scrapeMs : NaN,
        scrapeExtraPeakMiB: counters ? scrape!.extraPeakMiB : NaN,
        series: counters ? scrape!.series : 0,
      });
    }
  }
  return rows;
}

if (import.meta.main) {
  if (Deno.args[0] === "--scrape") {
    const [, mode, namespace, services, perService] = Deno.args;
    const result = await scrapeOnce(
      mode as CountersMode,
      namespace!,
      Number(services),
      Number(perService),
    );
    console.log(JSON.stringify(result));
  } else {
    const services = Number(Deno.args[0] ?? 10_000);
    for (const row of await benchCounters({ services })) console.log(JSON.stringify(row));
  }
}
