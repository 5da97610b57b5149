/**
 * The takeover gap: kproxy takes a node over from kube-proxy (each of its
 * modes) and hands it back, while a client opens a connection every 15 ms
 * through a ClusterIP and a NodePort (`scripts/takeover.ts`, the scenario of
 * the takeover kernel tests). Counts the failed connections and the longest
 * time between two answers per target, in each run.
 *
 * @module
 */

import {
  handBackScenario,
  KUBE_PROXY_MODES,
  type KubeProxyMode,
  type PacedResult,
  SCENARIO_TARGETS,
  takeOver,
} from "../takeover.ts";
import { Topology } from "../netns.ts";
import { NAMESPACE_PREFIX } from "./harness.ts";

/** One switch, measured `runs` times. */
export interface TakeoverRow {
  /** e.g. "kube-proxy nftables → kproxy nftables". */
  switch: string;
  connectionsPerRun: number;
  failedPerRun: number[];
  longestClusterIPGapMs: number[];
  longestNodePortGapMs: number[];
}

/** Options for {@linkcode benchTakeover}. */
export interface TakeoverBenchOptions {
  /** @default {4} */
  runs?: number;
  /** How long the client runs in each run. @default {5000} */
  durationMs?: number;
}

const HAND_BACK_TO: readonly KubeProxyMode[] = ["nftables", "iptables-nft"];

/** Measures every takeover and hand-back; logs each run. */
export async function benchTakeover(options: TakeoverBenchOptions = {}): Promise<TakeoverRow[]> {
  const switches: { name: string; run: (topology: Topology) => Promise<PacedResult> }[] = [
    ...KUBE_PROXY_MODES.map((from) => ({
      name: `kube-proxy ${from} → kproxy nftables`,
      run: (topology: Topology) => takeOver({ topology, from, durationMs: options.durationMs }),
    })),
    ...HAND_BACK_TO.map((to) => ({
      name: `kproxy nftables → kube-proxy ${to} (hand-back)`,
      run: (topology: Topology) =>
        handBackScenario({ topology, to, durationMs: options.durationMs }),
    })),
  ];
  const rows: TakeoverRow[] = [];
  for (const { name, run } of switches) {
    const results: PacedResult[] = [];
    for (let i = 0; i < (options.runs ?? 4); i++) {
      const topology = await Topology.create({
        prefix: `${NAMESPACE_PREFIX}to${Topology.randomTag()}-`,
        localPods: 3,
        remotePods: 0,
      });
      try {
        results.push(await run(topology));
      } finally {
        await topology.destroy();
      }
    }
    const gap = (target: { ip: string; port: number }) =>
      results.map((result) => result.longestGapMs[`${target.ip}:${target.port}`] ?? Infinity);
    const row: TakeoverRow = {
      switch: name,
      connectionsPerRun: Math.round(
        results.reduce((sum, result) => sum + result.attempts, 0) / results.length,
      ),
      failedPerRun: results.map((result) => result.failures.length),
      longestClusterIPGapMs: gap(SCENARIO_TARGETS.clusterIP),
      longestNodePortGapMs: gap(SCENARIO_TARGETS.nodePort),
    };
    console.error(
      `[bench takeover] ${name}: failed ${row.failedPerRun.join(", ")}; longest NodePort gap ${
        row.longestNodePortGapMs.map((ms) => ms.toFixed(0)).join(", ")
      } ms`,
    );
    rows.push(row);
  }
  return rows;
}
