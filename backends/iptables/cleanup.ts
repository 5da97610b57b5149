/**
 * Removes a mode's iptables chains, and the rules that jump to them, from
 * every iptables table that exists: both variants (nft and legacy) and both
 * families. It creates no table: each variant's save program runs once
 * without `-t`, which lists only the tables that exist, while
 * `iptables-legacy-save -t TABLE` would create a missing legacy table (after
 * which every `iptables-save` on the node warns about legacy tables).
 *
 * @module
 */

import { getLogger } from "../../lib/core/logger.ts";
import { runChecked } from "../../lib/shell/exec.ts";
import type { Executor } from "../../lib/core/executor.ts";
import type { IpFamily } from "../../lib/core/model.ts";
import type { ChainOwnership, IptablesTable } from "./chains.ts";
import { iptablesPrograms, type IptablesVariant } from "./detect.ts";
import { IptablesRestoreScript } from "./script.ts";
import { parseSavedChains, splitSave, splitSavedArgs } from "./save.ts";
import { isOwnedChain } from "./chains.ts";

const logger = getLogger(["kproxy", "iptables"]);

const CLEANED_TABLES: readonly IptablesTable[] = ["mangle", "filter", "nat"];

/** Options for {@linkcode removeChains}. */
export interface RemoveChainsOptions {
  /** The chains of the mode being removed. */
  owns: ChainOwnership;
  /**
   * Every chain `owns` accepts, when they are a fixed list. The nft variant is
   * then asked for each by name (`iptables-nft -t TABLE -S CHAIN`) and its
   * tables are read only when one exists: `iptables-nft-save` of a node with
   * 10k services in iptables mode reads ~110k chains for seconds.
   */
  names?: Readonly<Partial<Record<IptablesTable, readonly string[]>>>;
  /** Chains kept although `owns` accepts them: those the running mode uses. */
  keep?: ChainOwnership;
  /** Whose chains these are, for the log, e.g. "iptables mode". */
  owner: string;
  /** @default {["IPv4", "IPv6"]} */
  families?: readonly IpFamily[];
  /** @default {["nft", "legacy"]} */
  variants?: readonly IptablesVariant[];
}

/** Chains removed from one table by one program. */
export interface RemovedChains {
  program: string;
  table: IptablesTable;
  chains: string[];
}

export interface CleanupInput {
  table: IptablesTable;
  /** That table's `iptables-save` output. */
  save: string;
  /** The chains to remove. @default the chains {@linkcode isOwnedChain} accepts */
  removes?: (chain: string) => boolean;
}

/**
 * Renders the removal of chains from one table, from that table's
 * `iptables-save` output: the jumps from other chains are deleted, then every
 * removed chain is flushed and deleted. Empty when nothing is removed.
 */
export function renderCleanup(saved: CleanupInput, family: IpFamily): IptablesRestoreScript {
  const script = new IptablesRestoreScript(family);
  const owned = parseSavedChains(saved.save).filter(saved.removes ?? isOwnedChain);
  if (owned.length === 0) return script;
  const ownedSet = new Set(owned);
  const jumps: string[][] = [];
  for (const line of saved.save.split("\n")) {
    const match = /^-A (\S+) (?:(.*) )?-j (\S+)$/.exec(line);
    if (match?.[1] && match[3] && !ownedSet.has(match[1]) && ownedSet.has(match[3])) {
      jumps.push([match[1], ...splitSavedArgs(`${match[2] ?? ""} -j ${match[3]}`)]);
    }
  }
  for (const chain of owned) script.declareChain(saved.table, chain);
  for (const [chain, ...args] of jumps) script.deleteRule(saved.table, chain ?? "", args);
  for (const chain of owned) script.deleteChain(saved.table, chain);
  return script;
}

/**
 * Removes the chains `options.owns` accepts (minus `options.keep`) from every
 * existing table of both variants and the families; logs what it removed.
 * A variant whose programs are missing holds nothing.
 *
 * @throws {AggregateError} when some variant or family could not be cleaned; the others are
 */
export async function removeChains(
  executor: Executor,
  options: RemoveChainsOptions,
): Promise<RemovedChains[]> {
  const removed: RemovedChains[] = [];
  const errors: unknown[] = [];
  const removes = (table: string) => (chain: string) =>
    options.owns(table, chain) && !(options.keep?.(table, chain) ?? false);
  for (const variant of options.variants ?? ["nft", "legacy"] as const) {
    for (const family of options.families ?? ["IPv4", "IPv6"] as const) {
      const programs = iptablesPrograms(variant, family);
      if (variant === "nft" && options.names !== undefined) {
        const named = Object.entries(options.names).flatMap(([table, chains]) =>
          (chains ?? []).filter(removes(table)).map((chain) => ({ table, chain }))
        );
        if (!await anyChainMayExist(executor, programs.iptables, named)) continue;
      }
      const tables = await existingTables(executor, programs.save);
      const scripts = CLEANED_TABLES.flatMap((table) => {
        const save = tables.get(table);
        if (save === undefined) return [];
        const script = renderCleanup({ table, save, removes: removes(table) }, family);
        return script.isEmpty ? [] : [{ table, script }];
      });
      if (scripts.length === 0) continue;
      try {
        const invalid = scripts.find(({ script }) => script.error !== undefined);
        if (invalid) throw invalid.script.error;
        await runChecked(executor, {
          program: programs.restore,
          args: ["-w", "5", "--noflush"],
          stdin: scripts.map(({ script }) => script.toString()).join(""),
        });
      } catch (error) {
        errors.push(error);
        continue;
      }
      for (const { table, script } of scripts) {
        const chains = script.deletedChains(table);
        removed.push({ program: programs.restore, table, chains });
        logger.info(
          "Removed {count} chains of the {owner} from {variant} table {family} {table}: {chains}",
          {
            count: chains.length,
            owner: options.owner,
            variant: `iptables-${variant}`,
            family,
            table,
            chains: summarize(chains),
          },
        );
      }
    }
  }
  if (errors.length > 0) {
    throw new AggregateError(
      errors,
      `Cannot remove the ${options.owner} chains: ${errors.length} restores failed: ${
        errors.map((error) => error instanceof Error ? error.message : String(error)).join("; ")
      }`,
    );
  }
  return removed;
}

/** iptables-nft 1.8.9's answers to `-S CHAIN` when the chain or its table does not exist. */
const NO_SUCH_CHAIN =
  /is incompatible, use 'nft' tool|No chain\/target\/match by that name|does not exist/;

/**
 * Whether any of `chains` exists, asking `program` (an nft variant's
 * iptables) for each by name; true also when an answer is not a clear "no".
 */
async function anyChainMayExist(
  executor: Executor,
  program: string,
  chains: readonly { table: string; chain: string }[],
): Promise<boolean> {
  const answers = await Promise.all(chains.map(async ({ table, chain }) => {
    try {
      const result = await executor.run({ program, args: ["-w", "5", "-t", table, "-S", chain] });
      return result.code !== 0 && NO_SUCH_CHAIN.test(result.stderr) ? "absent" : "maybe";
    } catch (error) {
      logger.debug("Cannot ask {program} for chain {chain}: {error}", { program, chain, error });
      return "maybe";
    }
  }));
  return answers.includes("maybe");
}

/** The tables `save` (run without `-t`) lists; none when the program is missing or fails. */
async function existingTables(executor: Executor, save: string): Promise<Map<string, string>> {
  try {
    const result = await executor.run({ program: save, args: [] });
    if (result.code === 0) return splitSave(result.stdout);
    logger.debug("Cannot list tables with {program}: {stderr}", {
      program: save,
      stderr: result.stderr.trim(),
    });
  } catch (error) {
    logger.debug("Cannot list tables with {program}: {error}", { program: save, error });
  }
  return new Map();
}

function summarize(chains: readonly string[]): string {
  const shown = chains.slice(0, 8).join(", ");
  return chains.length > 8 ? `${shown} and ${chains.length - 8} more` : shown;
}
