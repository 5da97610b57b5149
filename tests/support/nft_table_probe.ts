/**
 * nft 1.0.6's answers to kproxy's table probe (`nft list chain FAMILY TABLE
 * kproxy-table-probe`, backends/nftables/table_probe.ts), as a fake
 * executor gives them: the chain never exists, and nft's error marks the
 * table when the table is missing, the chain when only the chain is.
 *
 * @module
 */

import type { CommandResult } from "../../lib/core/executor.ts";

/** Whether `args` are nft's arguments of a table probe. */
export function isTableProbe(args: readonly string[]): boolean {
  return args[0] === "list" && args[1] === "chain" && args.length === 5;
}

/** The `family name` a probe asks for. */
export function probedTable(args: readonly string[]): string {
  return `${args[2]} ${args[3]}`;
}

/** nft's answer to the probe `args` on a node holding the tables `present` (`family name`). */
export function tableProbeAnswer(
  args: readonly string[],
  present: ReadonlySet<string>,
): CommandResult {
  const [, , family = "", table = "", chain = ""] = args;
  const line = `list chain ${family} ${table} ${chain}`;
  const markTable = !present.has(`${family} ${table}`);
  const column = markTable
    ? `list chain ${family} `.length
    : `list chain ${family} ${table} `.length;
  const marks = "^".repeat(markTable ? table.length : chain.length);
  return {
    code: 1,
    stdout: "",
    stderr: `Error: No such file or directory\n${line}\n${" ".repeat(column)}${marks}\n`,
  };
}
