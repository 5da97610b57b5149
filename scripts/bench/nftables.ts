/**
 * Benchmarks the nftables mode at scale, each run in a throwaway network
 * namespace (`kp-nft-bench-*`, deleted afterwards): the full sync and a sync
 * after one endpoint change through `createNftablesBackend`, the same with
 * 10% of the services using session affinity, and the full load of an
 * upstream-style layout (per service an anonymous `numgen … vmap` to
 * per-endpoint chains) as a baseline. Needs root and `nft`.
 *
 * ```sh
 * deno run --allow-all scripts/bench/nftables.ts 1000 10000
 * ```
 *
 * @module
 */

import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { renderFull } from "../../backends/nftables/render.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { benchPlan, type SyncBenchRow } from "./plan.ts";
import { median, PatientExecutor, timeFullThenOneChange } from "./harness.ts";
import { HostExecutor } from "../netns.ts";

/** One measurement: a layout at one size. */
export interface BenchRow extends SyncBenchRow {
  /**
   * The smallest transaction on the loaded table (flush the one-element
   * canary set, add an element): what `nft` costs before any rule changes.
   * NaN when not measured.
   */
  floorMs: number;
}

/** The smallest useful `nft -f` input against kproxy's table: the canary set only. */
export const FLOOR_TRANSACTION = "flush set ip kproxy canary\nadd element ip kproxy canary { 1 }\n";

/** Options of {@linkcode benchNftables}. */
export interface BenchNftablesOptions {
  /** Numbers of services to measure. */
  sizes: number[];
  endpointsPerService: number;
  /** Largest size at which the (quadratic) upstream-style baseline is loaded. @default {3000} */
  baselineMaxServices?: number;
}

/** The upstream kube-proxy layout for the same plan: chains per endpoint, an anonymous vmap per service. */
export function upstreamStyleScript(plan: Plan): string {
  const lines = [
    "add table ip kproxy-baseline",
    "delete table ip kproxy-baseline",
    "add table ip kproxy-baseline",
    "add map ip kproxy-baseline service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }",
    "add chain ip kproxy-baseline nat-prerouting { type nat hook prerouting priority -100 ; }",
    "add chain ip kproxy-baseline mark-for-masquerade",
    "add rule ip kproxy-baseline mark-for-masquerade meta mark set meta mark | 0x4000",
    "add rule ip kproxy-baseline nat-prerouting ip daddr . meta l4proto . th dport vmap @service-ips",
  ];
  plan.services.forEach((service, i) => {
    const chain = `service-${i}`;
    lines.push(`add chain ip kproxy-baseline ${chain}`);
    const clusterIP = service.clusterIPs[0]!;
    lines.push(
      `add rule ip kproxy-baseline ${chain} ip daddr ${clusterIP} tcp dport ${service.port} ip saddr != 10.244.0.0/16 jump mark-for-masquerade`,
    );
    const targets: string[] = [];
    service.internal.endpoints.forEach((endpoint, j) => {
      const epChain = `endpoint-${i}-${j}`;
      lines.push(`add chain ip kproxy-baseline ${epChain}`);
      lines.push(
        `add rule ip kproxy-baseline ${epChain} ip saddr ${endpoint.ip} jump mark-for-masquerade`,
      );
      lines.push(
        `add rule ip kproxy-baseline ${epChain} meta l4proto tcp dnat to ${endpoint.ip}:${endpoint.port}`,
      );
      targets.push(`${j} : goto ${epChain}`);
    });
    lines.push(
      `add rule ip kproxy-baseline ${chain} numgen random mod ${targets.length} vmap { ${
        targets.join(" , ")
      } }`,
    );
    lines.push(
      `add element ip kproxy-baseline service-ips { ${clusterIP} . tcp . ${service.port} : goto ${chain} }`,
    );
  });
  return lines.join("\n") + "\n";
}

async function inNamespace<T>(
  host: HostExecutor,
  fn: (namespace: string) => Promise<T>,
): Promise<T> {
  const namespace = `kp-nft-bench-${crypto.randomUUID().slice(0, 8)}`;
  const added = await host.run({ program: "ip", args: ["netns", "add", namespace] });
  if (added.code !== 0) throw new Error(`Cannot create namespace ${namespace}: ${added.stderr}`);
  try {
    return await fn(namespace);
  } finally {
    await host.run({ program: "ip", args: ["netns", "del", namespace] });
  }
}

async function benchBackend(
  host: HostExecutor,
  variant: string,
  size: number,
  perService: number,
  affinityEvery: number,
  repeats: number,
): Promise<BenchRow> {
  const plan = benchPlan(size, perService, { affinityEvery });
  const middle = Math.floor(size / 2);
  const next = benchPlan(size, perService, { affinityEvery, shift: middle });
  const renderStart = performance.now();
  const rules = renderFull(plan).length;
  const renderMs = performance.now() - renderStart;
  const runs: { fullMs: number; partialMs: number; floorMs: number }[] = [];
  for (let run = 0; run < repeats; run++) {
    runs.push(
      await inNamespace(host, async (namespace) => {
        const backend = createNftablesBackend({
          executor: new PatientExecutor(namespace),
          config: defaultConfig("node-a"),
          families: ["IPv4"],
        });
        const { fullMs, partialMs } = await timeFullThenOneChange(
          backend,
          plan,
          next,
          next.services[middle]!.id,
        );
        const start = performance.now();
        await host.run({
          program: "ip",
          args: ["netns", "exec", namespace, "nft", "-f", "-"],
          stdin: FLOOR_TRANSACTION,
        });
        return { fullMs, partialMs, floorMs: performance.now() - start };
      }),
    );
  }
  return {
    floorMs: median(runs.map((r) => r.floorMs)),
    backend: "nftables",
    variant,
    services: size,
    endpointsPerService: perService,
    rules,
    renderMs,
    fullMs: median(runs.map((r) => r.fullMs)),
    partialMs: median(runs.map((r) => r.partialMs)),
  };
}

async function benchBaseline(
  host: HostExecutor,
  size: number,
  perService: number,
): Promise<BenchRow> {
  const plan = benchPlan(size, perService);
  const renderStart = performance.now();
  const script = upstreamStyleScript(plan);
  const renderMs = performance.now() - renderStart;
  return await inNamespace(host, async (namespace) => {
    const start = performance.now();
    const result = await host.run({
      program: "ip",
      args: ["netns", "exec", namespace, "nft", "-f", "-"],
      stdin: script,
      timeoutMs: 600_000,
    });
    if (result.code !== 0) {
      throw new Error(`Cannot load the upstream-style baseline: ${result.stderr}`);
    }
    return {
      backend: "nftables",
      variant: "upstream-style",
      services: size,
      endpointsPerService: perService,
      rules: script.split("\n").length - 1,
      renderMs,
      fullMs: performance.now() - start,
      partialMs: Number.NaN,
      floorMs: Number.NaN,
    };
  });
}

/** Fresh namespaces kproxy's own layout is loaded into at each size; the row holds the medians. */
export const FULL_SYNC_REPEATS = 3;

/**
 * Measures, at each size: kproxy's layout (full and one-change syncs, median
 * of {@linkcode FULL_SYNC_REPEATS} fresh namespaces), the
 * same with 10% affinity services, and the upstream-style baseline (full
 * load, up to `baselineMaxServices`). Needs root.
 */
export async function benchNftables(options: BenchNftablesOptions): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const host = new HostExecutor();
  const perService = options.endpointsPerService;
  for (const size of options.sizes) {
    rows.push(await benchBackend(host, "kproxy", size, perService, 0, FULL_SYNC_REPEATS));
    rows.push(await benchBackend(host, "kproxy-affinity-10%", size, perService, 10, 1));
    if (size <= (options.baselineMaxServices ?? 3000)) {
      rows.push(await benchBaseline(host, size, perService));
    }
  }
  return rows;
}

if (import.meta.main) {
  const sizes = Deno.args.length > 0 ? Deno.args.map(Number) : [1000, 10000];
  const rows = await benchNftables({ sizes, endpointsPerService: 10 });
  console.log("variant              services  eps  lines    render ms  full ms   partial ms");
  for (const row of rows) {
    console.log(
      [
        row.variant.padEnd(20),
        String(row.services).padEnd(9),
        String(row.endpointsPerService).padEnd(4),
        String(row.rules).padEnd(8),
        row.renderMs.toFixed(0).padEnd(10),
        row.fullMs.toFixed(0).padEnd(9),
        Number.isNaN(row.partialMs) ? "-" : row.partialMs.toFixed(0),
      ].join(" "),
    );
  }
}
