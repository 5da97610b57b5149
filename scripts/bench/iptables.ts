/**
 * Benchmarks the iptables mode at scale: time of the first (full) sync and of
 * a sync after one endpoint change, with the nft and the legacy binaries, each
 * in a throwaway network namespace (`kp-ipt-bench-*`, deleted afterwards).
 *
 * ```sh
 * deno run --allow-all scripts/bench/iptables.ts 1000 10000
 * ```
 *
 * @module
 */

import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { renderFull } from "../../backends/iptables/render.ts";
import { renderPartialSync } from "../../backends/iptables/partial.ts";
import type { IptablesVariant } from "../../backends/iptables/detect.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { benchPlan, moveEndpoints, type SyncBenchRow } from "./plan.ts";
import { PatientExecutor, timeFullThenOneChange } from "./harness.ts";
import { HostExecutor } from "../netns.ts";

/** One measurement: a backend variant at one size. */
export type BenchRow = SyncBenchRow;

/** Options of {@linkcode benchIptables}. */
export interface BenchIptablesOptions {
  /** Numbers of services to measure. */
  sizes: number[];
  endpointsPerService: number;
  /** @default {["nft", "legacy"]} */
  variants?: IptablesVariant[];
  /** Passed to the backend: per-service chains per iptables-nft-restore input. */
  nftChainsPerRestore?: number;
}

/**
 * Measures full and one-change partial syncs of the iptables backend at each
 * size, per variant, inside a fresh network namespace each time. Needs root.
 */
export async function benchIptables(options: BenchIptablesOptions): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const host = new HostExecutor();
  for (const variant of options.variants ?? ["nft", "legacy"]) {
    for (const size of options.sizes) {
      const plan = benchPlan(size, options.endpointsPerService);
      const middle = Math.floor(size / 2);
      const next = benchPlan(size, options.endpointsPerService, { shift: middle });
      const renderStart = performance.now();
      const rules = renderFull(plan).ruleCount;
      const renderMs = performance.now() - renderStart;

      const namespace = `kp-ipt-bench-${crypto.randomUUID().slice(0, 8)}`;
      const added = await host.run({ program: "ip", args: ["netns", "add", namespace] });
      if (added.code !== 0) {
        throw new Error(`Cannot create namespace ${namespace}: ${added.stderr}`);
      }
      try {
        const config = defaultConfig("node-a");
        config.iptables.backend = variant;
        const backend = createIptablesBackend({
          executor: new PatientExecutor(namespace),
          config,
          families: ["IPv4"],
          nftChainsPerRestore: options.nftChainsPerRestore,
        });
        const { fullMs, partialMs } = await timeFullThenOneChange(
          backend,
          plan,
          next,
          next.services[middle]!.id,
        );
        rows.push({
          backend: "iptables",
          variant,
          services: size,
          endpointsPerService: options.endpointsPerService,
          rules,
          renderMs,
          fullMs,
          partialMs,
        });
      } finally {
        await host.run({ program: "ip", args: ["netns", "del", namespace] });
      }
    }
  }
  return rows;
}

/** One partial iptables sync of `changed` service ports on a loaded table. */
export interface PartialSyncRow {
  variant: IptablesVariant;
  services: number;
  changed: number;
  /** Nat chains the restore input declares. */
  chains: number;
  ms: number;
  /** The backend turned it into a (chunked) full sync. */
  full: boolean;
  /** Why the restore failed (e.g. its 300 s timeout), when it did. */
  error?: string;
}

/**
 * What a partial sync costs as the change grows: loads `services` services
 * once, then syncs `changed[i]` services whose endpoint moved, one size after
 * the other, chunked as the backend chunks them (at most its default chains
 * per iptables-nft-restore input). Answers what a storm costs per change.
 */
export async function benchPartialSizes(options: {
  services: number;
  endpointsPerService: number;
  changed: number[];
  variant?: IptablesVariant;
}): Promise<PartialSyncRow[]> {
  const variant = options.variant ?? "nft";
  const host = new HostExecutor();
  const namespace = `kp-ipt-bench-${crypto.randomUUID().slice(0, 8)}`;
  const added = await host.run({ program: "ip", args: ["netns", "add", namespace] });
  if (added.code !== 0) throw new Error(`Cannot create namespace ${namespace}: ${added.stderr}`);
  try {
    const config = defaultConfig("node-a");
    config.iptables.backend = variant;
    const backend = createIptablesBackend({
      executor: new PatientExecutor(namespace),
      config,
      families: ["IPv4"],
    });
    let plan = benchPlan(options.services, options.endpointsPerService);
    await backend.sync({ plans: [plan], changed: new Set(), full: true });
    const rows: PartialSyncRow[] = [];
    for (const [i, count] of options.changed.entries()) {
      const step = options.services / count;
      const indexes = Array.from({ length: count }, (_, k) => Math.floor(k * step));
      const next = moveEndpoints(plan, indexes, i + 1);
      const changed = new Set(indexes.map((index) => next.services[index]!.id));
      const chains = renderPartialSync({ previous: plan, next, changed }).commit
        .reduce((sum, script) => sum + script.chainNames("nat").length, 0);
      const start = performance.now();
      try {
        const result = await backend.sync({
          plans: [next],
          changed,
          full: false,
        });
        rows.push({
          variant,
          services: options.services,
          changed: count,
          chains,
          ms: performance.now() - start,
          full: result.full,
        });
      } catch (error) {
        // The table is in an unknown state now: report the failure and stop.
        const message = error instanceof Error ? error.message : String(error);
        rows.push({
          variant,
          services: options.services,
          changed: count,
          chains,
          ms: performance.now() - start,
          full: false,
          error: message.split("\n")[0],
        });
        break;
      }
      plan = next;
    }
    return rows;
  } finally {
    await host.run({ program: "ip", args: ["netns", "del", namespace] });
  }
}

if (import.meta.main) {
  const sizes = Deno.args.length > 0 ? Deno.args.map(Number) : [1000, 10000];
  const chunk = Number(Deno.env.get("KPROXY_BENCH_NFT_CHAINS") ?? "") || undefined;
  const variant = Deno.env.get("KPROXY_BENCH_VARIANT") as IptablesVariant | undefined;
  const rows = await benchIptables({
    sizes,
    endpointsPerService: 10,
    nftChainsPerRestore: chunk,
    variants: variant ? [variant] : undefined,
  });
  console.log("variant  services  eps  rules    render ms  full ms   partial ms");
  for (const row of rows) {
    console.log(
      [
        row.variant.padEnd(8),
        String(row.services).padEnd(9),
        String(row.endpointsPerService).padEnd(4),
        String(row.rules).padEnd(8),
        row.renderMs.toFixed(0).padEnd(10),
        row.fullMs.toFixed(0).padEnd(9),
        row.partialMs.toFixed(0),
      ].join(" "),
    );
  }
}
