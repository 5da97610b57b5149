/**
 * `kproxy diff`: what the next sync would change in the kernel, compared with
 * what the kernel holds now. The desired rules are loaded into a scratch
 * network namespace so both sides are listed by the same tool in the same
 * canonical form, then compared per service. The mode's inspection reads the
 * listings and attributes what differs to services (`Backend.inspect`).
 *
 * @module
 */

import type { Backend, Listing } from "../core/backend.ts";
import { runChecked } from "../shell/exec.ts";
import type { Command, Executor } from "../core/executor.ts";
import type { Plan } from "../core/plan.ts";

/** Options of {@linkcode kernelDiff}. */
export interface KernelDiffOptions {
  backend: Backend;
  plans: Plan[];
  executor: Executor;
  /** Name of the scratch namespace. @default {"kproxy-diff-<random>"} */
  scratchNamespace?: string;
}

/**
 * Lists the differences between the rules `plans` render to and the kernel's.
 *
 * @throws {TypeError} when the backend's mode cannot be inspected
 */
export async function kernelDiff(options: KernelDiffOptions): Promise<ServiceDiff[]> {
  const { backend, executor } = options;
  if (!backend.inspect) {
    throw new TypeError(`Cannot diff in ${backend.mode} mode: it has no kernel listing`);
  }
  const inspection = backend.inspect(options.plans);
  const scratch = options.scratchNamespace ??
    `kproxy-diff-${crypto.randomUUID().slice(0, 8)}`;
  const inScratch = (command: Command): Command => ({
    ...command,
    program: "ip",
    args: ["netns", "exec", scratch, command.program, ...command.args],
  });
  let desiredText = "";
  await runChecked(executor, { program: "ip", args: ["netns", "add", scratch] });
  try {
    for (const command of inspection.load) await runChecked(executor, inScratch(command));
    desiredText = await listAll(executor, inspection.list.map(inScratch));
  } finally {
    await executor.run({ program: "ip", args: ["netns", "del", scratch] });
  }
  const kernelText = await listAll(executor, inspection.list);
  return groupByService(
    diffListings(inspection.parse(desiredText), inspection.parse(kernelText)),
    inspection.serviceOf,
  );
}

async function listAll(executor: Executor, commands: Command[]): Promise<string> {
  let text = "";
  for (const command of commands) {
    const result = await executor.run(command);
    if (result.code === 0) text += result.stdout + "\n";
  }
  return text;
}

/** Lines the next sync would add to and remove from one block. */
export interface BlockDiff {
  block: string;
  /** In the desired state, missing from the kernel. */
  added: string[];
  /** In the kernel, not in the desired state. */
  removed: string[];
}

/** The differences that concern one service, or "(global)" for shared objects. */
export interface ServiceDiff {
  service: string;
  blocks: BlockDiff[];
}

/** Compares a desired listing with the kernel's, block by block. */
export function diffListings(desired: Listing, kernel: Listing): BlockDiff[] {
  const blocks = [...new Set([...desired.keys(), ...kernel.keys()])].sort();
  const diffs: BlockDiff[] = [];
  for (const block of blocks) {
    const want = desired.get(block);
    const have = kernel.get(block);
    const added = want === undefined ? [] : [...want].filter((line) => !have?.has(line));
    const removed = have === undefined ? [] : [...have].filter((line) => !want?.has(line));
    if (want !== undefined && have === undefined) added.unshift(`(new ${block})`);
    if (have !== undefined && want === undefined) removed.unshift(`(stale ${block})`);
    if (added.length > 0 || removed.length > 0) {
      diffs.push({ block, added: added.sort(), removed: removed.sort() });
    }
  }
  return diffs;
}

/**
 * Groups block differences by the service `serviceOf` (the mode's
 * attribution) says a block, or else each of its lines, concerns; the rest
 * under "(global)".
 */
export function groupByService(
  diffs: readonly BlockDiff[],
  serviceOf: (text: string) => string | undefined,
): ServiceDiff[] {
  const groups = new Map<string, BlockDiff[]>();
  const add = (service: string, diff: BlockDiff) => {
    const list = groups.get(service) ?? [];
    const existing = list.find((entry) => entry.block === diff.block);
    if (existing) {
      existing.added.push(...diff.added);
      existing.removed.push(...diff.removed);
    } else {
      list.push({ block: diff.block, added: [...diff.added], removed: [...diff.removed] });
    }
    groups.set(service, list);
  };
  for (const diff of diffs) {
    const owner = serviceOf(diff.block);
    if (owner !== undefined) {
      add(owner, diff);
      continue;
    }
    for (const [side, lines] of [["added", diff.added], ["removed", diff.removed]] as const) {
      for (const line of lines) {
        const service = serviceOf(line) ?? "(global)";
        const entry: BlockDiff = { block: diff.block, added: [], removed: [] };
        entry[side].push(line);
        add(service, entry);
      }
    }
  }
  return [...groups.entries()]
    .sort(([a], [b]) => (a === "(global)" ? 1 : b === "(global)" ? -1 : a < b ? -1 : 1))
    .map(([service, blocks]) => ({ service, blocks }));
}

/** Renders grouped differences as readable `+`/`-` lines, or "in sync". */
export function formatServiceDiffs(groups: readonly ServiceDiff[]): string {
  if (groups.length === 0) return "in sync: the kernel holds what the next sync would program\n";
  const out: string[] = [];
  for (const { service, blocks } of groups) {
    out.push(service === "(global)" ? "shared objects:" : `service ${service}:`);
    for (const { block, added, removed } of blocks) {
      out.push(`  ${block}`);
      for (const line of removed) out.push(`    - ${line}`);
      for (const line of added) out.push(`    + ${line}`);
    }
  }
  return out.join("\n") + "\n";
}
