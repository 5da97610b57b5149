/**
 * Shared bench plumbing: throwaway network namespaces (`kp-b-*`), an
 * executor that timestamps the commands that program the kernel, waiting
 * and small statistics.
 *
 * @module
 */

import type { Backend } from "../../lib/core/backend.ts";
import type { Command, CommandResult, Executor } from "../../lib/core/executor.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { HostExecutor, NetnsExecutor } from "../netns.ts";

/** Prefix of every namespace the bench creates. */
export const NAMESPACE_PREFIX = "kp-b-";

/** A new, unique bench namespace name with `tag` in it. */
export function namespaceName(tag: string): string {
  return `${NAMESPACE_PREFIX}${tag}-${crypto.randomUUID().slice(0, 6)}`;
}

/**
 * Runs `fn` inside a fresh network namespace with loopback up, and deletes
 * the namespace afterwards, whatever happens.
 */
export async function withNamespace<T>(
  tag: string,
  fn: (namespace: string) => Promise<T>,
): Promise<T> {
  const host = new HostExecutor();
  const namespace = namespaceName(tag);
  const added = await host.run({ program: "ip", args: ["netns", "add", namespace] });
  if (added.code !== 0) throw new Error(`Cannot create namespace ${namespace}: ${added.stderr}`);
  try {
    await host.run({ program: "ip", args: ["-n", namespace, "link", "set", "lo", "up"] });
    return await fn(namespace);
  } finally {
    await host.run({ program: "ip", args: ["netns", "del", namespace] });
  }
}

/** One command run through a {@linkcode TimingExecutor}. */
export interface TimedCommand {
  program: string;
  args: string[];
  startedAt: number;
  endedAt: number;
  /** True for the commands that load rules (`nft -f`, `*-restore`). */
  applies: boolean;
}

function loadsRules(command: Command): boolean {
  if (command.program === "nft") return command.args.includes("-f");
  return command.program.endsWith("-restore");
}

/**
 * How long the bench lets a rule load run. kproxy's own executor kills a
 * command after 60 s unless the backend asks for longer (lib/exec.ts
 * `DEFAULT_TIMEOUT_MS`; the nftables backend does not ask), and one `nft -f`
 * of 100k services × 10 takes 25–31 s on a quiet 2-core machine and over 60 s
 * under load: the bench measures the load instead of failing there.
 */
export const RULE_LOAD_TIMEOUT_MS = 900_000;

/** `command` with {@linkcode RULE_LOAD_TIMEOUT_MS} when it loads rules and sets no timeout. */
function patient(command: Command): Command {
  return loadsRules(command) && command.timeoutMs === undefined
    ? { ...command, timeoutMs: RULE_LOAD_TIMEOUT_MS }
    : command;
}

/** Runs commands in a namespace, giving rule loads {@linkcode RULE_LOAD_TIMEOUT_MS}. */
export class PatientExecutor implements Executor {
  readonly #inner: Executor;

  constructor(namespace: string) {
    this.#inner = new NetnsExecutor({ namespace, inner: new HostExecutor() });
  }

  /** Runs `command` in the namespace. */
  run(command: Command): Promise<CommandResult> {
    return this.#inner.run(patient(command));
  }
}

/**
 * Runs every command inside one namespace and records when each started and
 * ended (`performance.now()` milliseconds), so a bench can tell when rules
 * reached the kernel. Rule loads get {@linkcode RULE_LOAD_TIMEOUT_MS}.
 */
export class TimingExecutor implements Executor {
  readonly #inner: Executor;
  readonly commands: TimedCommand[] = [];

  constructor(namespace: string) {
    this.#inner = new PatientExecutor(namespace);
  }

  /** Runs `command` in the namespace, recording its timing. */
  async run(command: Command): Promise<CommandResult> {
    const startedAt = performance.now();
    try {
      return await this.#inner.run(command);
    } finally {
      this.commands.push({
        program: command.program,
        args: command.args,
        startedAt,
        endedAt: performance.now(),
        applies: loadsRules(command),
      });
    }
  }

  /** The first rule-loading command that started after `since`. */
  firstApplyAfter(since: number): TimedCommand | undefined {
    return this.commands.find((command) => command.applies && command.startedAt >= since);
  }

  /** The last rule-loading command that ended. */
  lastApply(): TimedCommand | undefined {
    return this.commands.findLast((command) => command.applies);
  }
}

/** Waits until `predicate` holds, polling every `intervalMs`; throws after `timeoutMs`. */
export async function waitFor(
  predicate: () => boolean | Promise<boolean>,
  what: string,
  options: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<void> {
  const deadline = performance.now() + (options.timeoutMs ?? 120_000);
  while (!(await predicate())) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 2));
  }
}

/** The median of `values` (NaN when empty). */
export function median(values: readonly number[]): number {
  return quantile(values, 0.5);
}

/** The `q` quantile of `values` by linear interpolation (NaN when empty). */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const position = (sorted.length - 1) * q;
  const low = Math.floor(position);
  const high = Math.ceil(position);
  return sorted[low]! + (sorted[high]! - sorted[low]!) * (position - low);
}

/**
 * Times a full sync of `plan` through `backend`, then the partial sync to
 * `next`, which differs from it in the service port `changedId` only.
 */
export async function timeFullThenOneChange(
  backend: Backend,
  plan: Plan,
  next: Plan,
  changedId: string,
): Promise<{ fullMs: number; partialMs: number }> {
  let start = performance.now();
  await backend.sync({ plans: [plan], changed: new Set(), full: true });
  const fullMs = performance.now() - start;
  start = performance.now();
  await backend.sync({
    plans: [next],
    changed: new Set([changedId]),
    full: false,
  });
  return { fullMs, partialMs: performance.now() - start };
}
