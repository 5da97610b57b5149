/**
 * Drift checks of kproxy's nftables table, cheapest first:
 *
 * 1. The canary set holds the generation of the last sync (one small list,
 *    ~0 ms at any size): catches a deleted table or a flushed ruleset.
 * 2. The skeleton chains (base chains, dispatch and masquerading; the same in
 *    every sync) are listed one by one and compared with the rule counts the
 *    renderer wrote and with their first listing after the last full sync:
 *    catches a flushed chain and a deleted, added or replaced rule, where one
 *    edit breaks every service.
 *    nft 1.0.6 runs only the last `list chain` of a batch, so each chain is
 *    one call: ~12 ms at 1k services, ~0.35 s at 30k. The check is spaced so
 *    it takes at most `budget` of the time, and as it runs inside a sync, one
 *    that took longer than `maxCheckMs` waits for the next full sync.
 *
 * Per-service chains and map elements are left to the hourly full sync:
 * listing them costs as much as listing the table.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import type { Executor } from "../../lib/exec.ts";
import type { TableRef } from "./transaction.ts";

const logger = getLogger(["kproxy", "nftables"]);

/** What the skeleton of one table should hold. */
export interface SkeletonTarget {
  ref: TableRef;
  /** Skeleton chain name to the number of rules the renderer wrote into it. */
  ruleCounts: ReadonlyMap<string, number>;
}

/** Options for {@linkcode SkeletonCheck}. */
export interface SkeletonCheckOptions {
  executor: Executor;
  /** Largest share of time the listing may take. @default {0.05} */
  budget?: number;
  /** A listing slower than this is not repeated before the next full sync. @default {1000} */
  maxCheckMs?: number;
  /** @default {performance.now} */
  now?: () => number;
}

/**
 * The lines of a chain as `nft list chain` prints them, between the braces of
 * the chain: the base chain's `type … hook …` line, then one line per rule,
 * trimmed, without handles and with counters zeroed.
 */
export function parseChainListing(listing: string): string[] {
  const lines: string[] = [];
  let inChain = false;
  for (const raw of listing.split("\n")) {
    const line = raw.trim();
    if (!inChain) {
      inChain = /^chain \S+ \{$/.test(line);
      continue;
    }
    if (line === "}") break;
    if (line === "") continue;
    lines.push(
      line.replace(/\s*# handle \d+$/, "").replace(/counter packets \d+ bytes \d+/g, "counter"),
    );
  }
  return lines;
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
  readonly #now: () => number;
  readonly #baseline = new Map<string, string>();
  #nextAt = -Infinity;

  constructor(options: SkeletonCheckOptions) {
    this.#executor = options.executor;
    this.#budget = options.budget ?? 0.05;
    this.#maxCheckMs = options.maxCheckMs ?? 1_000;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Whether the next {@linkcode check} will list chains, not skip. */
  get due(): boolean {
    return this.#now() >= this.#nextAt;
  }

  /** Forgets the baselines, after kproxy rewrote or deleted its tables. */
  reset(): void {
    this.#baseline.clear();
    this.#nextAt = -Infinity;
  }

  /** Compares the kernel's skeleton chains with `targets`; undefined when they match or it is not due. */
  async check(targets: readonly SkeletonTarget[]): Promise<string | undefined> {
    if (!this.due) return undefined;
    const started = this.#now();
    try {
      for (const target of targets) {
        for (const [chain, expected] of target.ruleCounts) {
          const drift = await this.#checkChain(target.ref, chain, expected);
          if (drift !== undefined) return drift;
        }
      }
      return undefined;
    } finally {
      const cost = this.#now() - started;
      this.#nextAt = started + cost / this.#budget;
      if (cost > this.#maxCheckMs) {
        this.#nextAt = Infinity;
        logger.info(
          "Listing the skeleton chains took {cost} ms; checking them again after the next full sync",
          { cost: Math.round(cost) },
        );
      }
    }
  }

  async #checkChain(ref: TableRef, chain: string, expected: number): Promise<string | undefined> {
    const name = `${ref.family} ${ref.table} ${chain}`;
    const result = await this.#executor.run({
      program: "nft",
      args: ["list", "chain", ref.family, ref.table, chain],
    });
    if (result.code !== 0) return `chain ${name} cannot be listed: ${result.stderr.trim()}`;
    const lines = parseChainListing(result.stdout);
    const rules = ruleLines(lines).length;
    if (rules !== expected) return `chain ${name} holds ${rules} rules, ${expected} were written`;
    const text = lines.join("\n");
    const baseline = this.#baseline.get(name);
    if (baseline === undefined) this.#baseline.set(name, text);
    else if (baseline !== text) return `chain ${name} was edited`;
    return undefined;
  }
}
