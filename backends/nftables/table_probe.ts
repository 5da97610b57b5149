/**
 * Which nftables tables exist, each asked for by name.
 *
 * Neither `nft list tables` nor `nft -t list table FAMILY NAME` is used to
 * find out: nft 1.0.6 reads every chain of the node into its cache for both,
 * iptables-nft's included. `nft list tables` beside 10k Services in iptables
 * mode (110k chains) ran past kproxy's 60 s command time-out; `nft -t list
 * table` beside 30k (330k chains, 990k rules) took 3.3–6 s each, and the
 * leftover check's eight of them held a one-endpoint change for 30–40 s.
 * Asking for one chain of the table reads only that table's chains (~30 ms
 * there): kproxy asks for a chain no table holds, and nft's error marks the
 * missing object, the table or the chain:
 *
 * ```
 * Error: No such file or directory
 * list chain ip kproxy kproxy-table-probe
 *               ^^^^^^                       (the table is missing)
 * ```
 *
 * An answer that marks neither is settled by `nft -t list table`.
 *
 * @module
 */

import type { Command, CommandResult, Executor } from "../../lib/core/executor.ts";
import { CommandError } from "../../lib/shell/exec.ts";

/** nft's words for a missing table or chain. */
const ABSENT = /No such file or directory/;

/** The chain asked for: no table holds it (a table holding it counts as present). */
export const PROBE_CHAIN = "kproxy-table-probe";

/**
 * The `family name` pairs of `families` × `names` that exist, in that order.
 *
 * @throws {CommandError} when nft fails for another reason than a missing table
 */
export async function existingTables(
  executor: Executor,
  families: readonly string[],
  names: readonly string[],
): Promise<string[]> {
  const present: string[] = [];
  for (const family of families) {
    for (const name of names) {
      if (await tableExists(executor, family, name)) present.push(`${family} ${name}`);
    }
  }
  return present;
}

async function tableExists(executor: Executor, family: string, name: string): Promise<boolean> {
  const probe = { program: "nft", args: ["list", "chain", family, name, PROBE_CHAIN] };
  const answer = await executor.run(probe);
  if (answer.code === 0) return true;
  if (!ABSENT.test(answer.stderr)) throw failure(probe, answer);
  const marked = markedColumn(answer.stderr, probe.args.join(" "));
  if (marked === `list chain ${family} `.length) return false;
  if (marked === `list chain ${family} ${name} `.length) return true;
  const listing = { program: "nft", args: ["-t", "list", "table", family, name] };
  const listed = await executor.run(listing);
  if (listed.code === 0) return true;
  if (ABSENT.test(listed.stderr)) return false;
  throw failure(listing, listed);
}

/** The column of the first `^` under nft's echo of `input` in `stderr`, or -1. */
function markedColumn(stderr: string, input: string): number {
  const lines = stderr.split("\n");
  const echo = lines.indexOf(input);
  return echo === -1 ? -1 : (lines[echo + 1] ?? "").indexOf("^");
}

function failure(command: Command, result: CommandResult): CommandError {
  return new CommandError(
    command,
    result,
    `Cannot run "${command.program} ${command.args.join(" ")}": exit status ${result.code}: ${
      result.stderr.trim() || "no output"
    }`,
  );
}
