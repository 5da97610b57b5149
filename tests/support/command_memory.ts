/**
 * Runs `cat` through {@linkcode DenoExecutor} `--commands` times (1 KB of
 * stdin, its stdout captured, as kproxy runs `nft -f -`) and prints, as
 * JSON, the process's resident MiB before and after, each read after a full
 * collection: what a long-running kproxy keeps per command it ran.
 *
 * ```sh
 * deno run --allow-run=cat --allow-env --v8-flags=--expose-gc tests/support/command_memory.ts --commands=1000
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { DenoExecutor } from "../../lib/shell/exec.ts";
import { ANY_ARGUMENTS } from "../../lib/shell/command_policy.ts";

const { values } = parseArgs({ options: { commands: { type: "string", default: "1000" } } });
const commands = Number(values.commands);
const executor = new DenoExecutor({ allowedPrograms: ["cat"], policy: { cat: ANY_ARGUMENTS } });
const stdin = "x".repeat(1000);

function residentMiB(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return Deno.memoryUsage().rss / 1024 / 1024;
}

// One command first, so the runtime's own first-use costs are in the baseline.
await executor.run({ program: "cat", args: [], stdin });
const before = residentMiB();
for (let i = 0; i < commands; i++) {
  const result = await executor.run({ program: "cat", args: [], stdin });
  if (result.stdout !== stdin) throw new Error(`cat echoed ${result.stdout.length} characters`);
}
console.log(JSON.stringify({ commands, beforeMiB: before, afterMiB: residentMiB() }));
