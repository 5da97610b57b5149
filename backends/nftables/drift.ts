/**
 * Drift checks of kproxy's nftables table, cheapest first:
 *
 * 1. The canary set holds the generation of the last sync (one small list,
 *    ~0 ms at any size): catches a deleted table or a flushed ruleset.
 * 2. The skeleton chains (base chains, dispatch and masquerading; the same in
 *    every sync) are compared with the rule counts the renderer wrote and
 *    with their first listing after the last full sync: catches a flushed
 *    chain and a deleted, added or replaced rule, where one edit breaks every
 *    service. nft 1.0.6 fetches every element of the table before it lists
 *    any chain, so the check lists the whole table once: 0.43 s at 1k
 *    services × 10 endpoints, 0.88 s at 3k. It is spaced so it takes at most
 *    `budget` of the time; as it runs inside a sync, it is skipped when the
 *    element count predicts more than `maxCheckMs`, and after one listing
 *    that took longer, it waits for the next full sync.
 *
 * Slot-map elements and per-service chains are left to the hourly full sync,
 * as is the skeleton of a table too large to list within `maxCheckMs`.
 *
 * @module
 */

import { getLogger } from "../../lib/core/logger.ts";
import { systemClock } from "../../lib/shell/clock.ts";
import type { Clock } from "../../lib/core/clock.ts";
import type { Executor } from "../../lib/core/executor.ts";
import type { TableRef } from "./transaction.ts";
import { readNftBlocks } from "./listing.ts";

const logger = getLogger(["kproxy", "nftables"]);

/** What the skeleton of one table should hold. */
export interface SkeletonTarget {
  ref: TableRef;
  /** Skeleton chain name to the number of rules the renderer wrote into it. */
  ruleCounts: ReadonlyMap<string, number>;
  /** About how many set and map elements the table holds: what listing it costs. */
  elements: number;
}

/** Listing cost per element before one was measured: 0.88 s for ~33k elements. */
const DEFAULT_MS_PER_ELEMENT = 0.03;

/** Options for {@linkcode SkeletonCheck}. */
export interface SkeletonCheckOptions {
  executor: Executor;
  /** Largest share of time the listing may take. @default {0.05} */
  budget?: number;
  /** A listing slower than this is not repeated before the next full sync. @default {1000} */
  maxCheckMs?: number;
  /** Monotonic time that spaces the listings. @default {systemClock} */
  clock?: Pick<Clock, "now">;
}

/**
 * The chains of an `nft list table` listing, by name: each chain's lines
 * between its braces (the base chain's `type … hook …` line, then one line
 * per rule), trimmed, without handles and with counters zeroed. Sets and
 * maps are skipped.
 */
export function parseTableChains(listing: string): Map<string, string[]> {
  const chains = new Map<string, string[]>();
  for (const block of readNftBlocks(listing)) {
    if (block.kind !== "chain") continue;
    chains.set(
      block.name,
      block.lines.map((line) =>
        line.replace(/\s*# handle \d+$/, "").replace(/counter packets \d+ bytes \d+/g, "counter")
      ),
    );
  }
  return chains;
}

/** Rule lines of a parsed chain: all but the base chain's declaration. */
export function ruleLines(lines: readonly string[]): string[] {
  return lines.filter((line) => !/^type \S+ hook \S+ /.test(line));
}

/**
 * Lists the skeleton chains and tells what drifted, or undefined. Its first
 * listing of a chain after a full sync is the baseline later listings must
 * equal, so a replaced rule is caught as well as a missing or extra one. A
 * rule replaced before that first listing goes unseen until the next full
 * sync, which takes a fresh baseline.
 */
export class SkeletonCheck {
  readonly #executor: Executor;
  readonly #budget: number;
  readonly #maxCheckMs: number;
  readonly #clock: Pick<Clock, "now">;
  readonly #baseline = new Map<string, string>();
  #nextAt = -Infinity;
  #msPerElement = DEFAULT_MS_PER_ELEMENT;

  constructor(options: SkeletonCheckOptions) {
    this.#executor = options.executor;
    this.#budget = options.budget ?? 0.05;
    this.#maxCheckMs = options.maxCheckMs ?? 1_000;
    this.#clock = options.clock ?? systemClock;
  }

  /** Whether the next {@linkcode check} will list chains, not skip. */
  get due(): boolean {
    return this.#clock.now() >= this.#nextAt;
  }

  /** Forgets the baselines, after kproxy rewrote or deleted its tables. */
  reset(): void {
    this.#baseline.clear();
    this.#nextAt = -Infinity;
  }

  /** Compares the kernel's skeleton chains with `targets`; undefined when they match or it is not due. */
  async check(targets: readonly SkeletonTarget[]): Promise<string | undefined> {
    if (!this.due) return undefined;
    const elements = targets.reduce((sum, target) => sum + target.elements, 0);
    const predicted = elements * this.#msPerElement;
    if (predicted > this.#maxCheckMs) {
      this.#nextAt = Infinity;
      logger.info(
        "Not listing the skeleton chains: {elements} elements would take ~{predicted} ms; the next full sync rewrites them",
        { elements, predicted: Math.round(predicted) },
      );
      return undefined;
    }
    const started = this.#clock.now();
    try {
      for (const target of targets) {
        const drift = await this.#checkTable(target);
        if (drift !== undefined) return drift;
      }
      return undefined;
    } finally {
      const cost = this.#clock.now() - started;
      this.#nextAt = started + cost / this.#budget;
      if (elements >= 1_000) this.#msPerElement = cost / elements;
      if (cost > this.#maxCheckMs) {
        this.#nextAt = Infinity;
        logger.info(
          "Listing the skeleton chains took {cost} ms; checking them again after the next full sync",
          { cost: Math.round(cost) },
        );
      }
    }
  }

  async #checkTable(target: SkeletonTarget): Promise<string | undefined> {
    const { family, table } = target.ref;
    const result = await this.#executor.run({
      program: "nft",
      args: ["list", "table", family, table],
    });
    if (result.code !== 0) {
      return `table ${family} ${table} cannot be listed: ${result.stderr.trim()}`;
    }
    const chains = parseTableChains(result.stdout);
    for (const [chain, expected] of target.ruleCounts) {
      const name = `${family} ${table} ${chain}`;
      const lines = chains.get(chain);
      if (lines === undefined) return `chain ${name} is missing`;
      const rules = ruleLines(lines).length;
      if (rules !== expected) return `chain ${name} holds ${rules} rules, ${expected} were written`;
      const text = lines.join("\n");
      const baseline = this.#baseline.get(name);
      if (baseline === undefined) this.#baseline.set(name, text);
      else if (baseline !== text) return `chain ${name} was edited`;
    }
    return undefined;
  }
}
