/**
 * Which nftables tables exist, each asked for by name.
 *
 * `nft list tables` is not used: nft 1.0.6 reads every table of the node into
 * its cache before it prints the names, iptables-nft's chains and rules
 * included. Beside 10k Services in iptables mode (110k chains) it ran past
 * kproxy's 60 s command time-out, and the sync waiting behind it held a
 * one-endpoint change for 62 s. `nft -t list table FAMILY NAME` reads only
 * that table, without its set elements.
 *
 * @module
 */

import type { Executor } from "../../lib/core/executor.ts";
import { CommandError } from "../../lib/shell/exec.ts";

/** nft's words for a table that does not exist. */
const ABSENT = /No such file or directory/;

/**
 * The `family name` pairs of `families` × `names` that exist, in that order.
 *
 * @throws {CommandError} when nft fails for another reason than an absent table
 */
export async function existingTables(
  executor: Executor,
  families: readonly string[],
  names: readonly string[],
): Promise<string[]> {
  const present: string[] = [];
  for (const family of families) {
    for (const name of names) {
      const command = { program: "nft", args: ["-t", "list", "table", family, name] };
      const result = await executor.run(command);
      if (result.code === 0) present.push(`${family} ${name}`);
      else if (!ABSENT.test(result.stderr)) {
        throw new CommandError(
          command,
          result,
          `Cannot run "nft -t list table ${family} ${name}": exit status ${result.code}: ${
            result.stderr.trim() || "no output"
          }`,
        );
      }
    }
  }
  return present;
}
