/**
 * `kproxy diff`: what the next sync would change in the kernel, compared with
 * what the kernel holds now. The desired rules are loaded into a scratch
 * network namespace so both sides are listed by the same tool in the same
 * canonical form, then compared per service (lib/kernel_diff.ts).
 *
 * @module
 */

import type { Backend } from "../core/backend.ts";
import { runChecked } from "../shell/exec.ts";
import type { Command, Executor } from "../core/executor.ts";
import {
  diffListings,
  elementOwners,
  groupByService,
  type Listing,
  parseIptablesSave,
  parseNftListing,
  type ServiceDiff,
} from "./kernel_diff.ts";
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
  const parse: (text: string) => Listing = inspection.format === "nft"
    ? (text) => parseNftListing(text)
    : parseIptablesSave;
  return groupByService(
    diffListings(parse(desiredText), parse(kernelText)),
    elementOwners(options.plans),
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
