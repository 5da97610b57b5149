/**
 * Taking over a node from another proxy (kube-proxy, or kproxy in another
 * mode) without a gap: kproxy programs its own complete ruleset first, and
 * only once that sync is in the kernel removes what the other modes left
 * behind (each mode's entry in backends/registry.ts says which). `--cleanup` removes
 * every mode's rules at once.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import {
  createBackend,
  type HandBackOutcome,
  handBackToKubeProxy,
  type HandBackToKubeProxyOptions,
  modeOf,
  programsOf,
  PROXY_MODES,
} from "../../backends/registry.ts";
import type { Config, ProxyMode } from "../config/types.ts";
import { DenoExecutor } from "./exec.ts";
import type { Executor } from "../core/executor.ts";
import { LINUX_PROGRAMS } from "./permissions.ts";

const logger = getLogger(["kproxy", "takeover"]);

/** Options for {@linkcode LeftoverRemoval}. */
export interface LeftoverRemovalOptions {
  config: Config;
  /** Runs the other modes' cleanup commands. @default a DenoExecutor for every Linux mode's programs */
  executor?: Executor;
}

/**
 * Removes the other modes' leftovers after kproxy's first successful sync
 * (wire {@linkcode afterSync} to the proxier's post-sync step). A mode whose
 * removal fails is retried after the next full sync.
 */
export class LeftoverRemoval {
  readonly #config: Config;
  readonly #executor: Executor;
  #pending: ProxyMode[];
  readonly #running = new Set<Promise<void>>();

  constructor(options: LeftoverRemovalOptions) {
    this.#config = options.config;
    this.#executor = options.executor ?? new DenoExecutor({ allowedPrograms: LINUX_PROGRAMS });
    this.#pending = Deno.build.os === "windows"
      ? []
      : [...modeOf(options.config.proxyMode).takeover.removes];
  }

  /** Modes whose leftovers are still to be removed. */
  get pending(): readonly ProxyMode[] {
    return this.#pending;
  }

  /** Call after every successful sync: removes what is pending after a full one. */
  async afterSync(sync: { full: boolean }): Promise<void> {
    if (!sync.full || this.#pending.length === 0) return;
    const modes = this.#pending;
    const keepChains = modeOf(this.#config.proxyMode).takeover.usesChain;
    const failed: ProxyMode[] = [];
    for (const mode of modes) {
      try {
        const other = await createBackend(mode, { executor: this.#executor, config: this.#config });
        await other.cleanup({ keepChains, defer: (work) => this.#defer(mode, work) });
      } catch (error) {
        failed.push(mode);
        logger.warn(
          "Cannot remove the rules the {mode} mode left behind, retrying after the next full sync: {error}",
          {
            mode,
            error,
          },
        );
      }
    }
    this.#pending = failed;
    if (failed.length === 0) {
      logger.debug("Leftovers of the {modes} modes checked", { modes: modes.join(", ") });
    }
  }

  /** How many of the removals' deferred works (counter deletions) are still running. */
  get running(): number {
    return this.#running.size;
  }

  /** Resolves once the work the removals left running (counter deletions) has ended. */
  async settled(): Promise<void> {
    while (this.#running.size > 0) await Promise.all(this.#running);
  }

  /** Lets `work` run on after the sync that started it; a failure is logged. */
  #defer(mode: ProxyMode, work: Promise<void>): void {
    const running: Promise<void> = work
      .catch((error) => {
        logger.warn("Cannot remove the counters the {mode} mode left behind: {error}", {
          mode,
          error,
        });
      })
      .finally(() => this.#running.delete(running));
    this.#running.add(running);
  }
}

/** Options for {@linkcode cleanupEveryMode}. */
export interface CleanupEveryModeOptions {
  config: Config;
  /** @default a DenoExecutor for every Linux mode's programs */
  executor?: Executor;
}

/**
 * `--cleanup`: removes the rules of every Linux mode, kproxy's and
 * kube-proxy's, touching nothing else; the configured mode first. Another
 * mode that cannot be cleaned up is logged.
 *
 * @throws the configured mode's error, after every other mode was tried
 */
export async function cleanupEveryMode(options: CleanupEveryModeOptions): Promise<void> {
  const { config } = options;
  const { platform } = modeOf(config.proxyMode);
  const executor = options.executor ??
    new DenoExecutor({
      allowedPrograms: platform === "linux" ? LINUX_PROGRAMS : programsOf(config.proxyMode),
    });
  const modes: ProxyMode[] = [
    config.proxyMode,
    ...PROXY_MODES.filter((m) => m !== config.proxyMode && modeOf(m).platform === platform),
  ];
  let failure: { error: unknown } | undefined;
  for (const mode of modes) {
    try {
      const backend = await createBackend(mode, { executor, config });
      await backend.cleanup();
      logger.info("Removed the rules of the {mode} mode", { mode });
    } catch (error) {
      if (mode === config.proxyMode) failure = { error };
      else logger.error("Cannot clean up the {mode} mode: {error}", { mode, error });
    }
  }
  if (failure) throw failure.error;
}

/** Options for {@linkcode handBack}. */
export interface HandBackOptions extends Omit<HandBackToKubeProxyOptions, "executor"> {
  /** @default a DenoExecutor for every Linux mode's programs */
  executor?: Executor;
}

/** `kproxy hand-back` (see {@linkcode handBackToKubeProxy}), with kproxy's Linux programs. */
export function handBack(options: HandBackOptions): Promise<HandBackOutcome> {
  const executor = options.executor ?? new DenoExecutor({ allowedPrograms: LINUX_PROGRAMS });
  return handBackToKubeProxy({ ...options, executor });
}
