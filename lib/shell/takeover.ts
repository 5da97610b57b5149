/**
 * Taking over a node from another proxy (kube-proxy, or kproxy in another
 * mode) without a gap: kproxy programs its own complete ruleset first, and
 * only once that sync is in the kernel removes what the other modes left
 * behind (`LEFTOVERS` in backends/registry.ts says which). `--cleanup` removes
 * every mode's rules at once.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import { splitSave } from "../../backends/iptables/cleanup.ts";
import { createBackend, LEFTOVERS, PROXY_MODES } from "../../backends/registry.ts";
import type { Config, ProxyMode } from "../config/types.ts";
import { DenoExecutor, isMissingProgram, runChecked } from "./exec.ts";
import type { Executor } from "../core/executor.ts";
import { LINUX_PROGRAMS, MODE_PROGRAMS } from "./permissions.ts";

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

  constructor(options: LeftoverRemovalOptions) {
    this.#config = options.config;
    this.#executor = options.executor ?? new DenoExecutor({ allowedPrograms: LINUX_PROGRAMS });
    this.#pending = Deno.build.os === "windows"
      ? []
      : [...LEFTOVERS[options.config.proxyMode].removes];
  }

  /** Modes whose leftovers are still to be removed. */
  get pending(): readonly ProxyMode[] {
    return this.#pending;
  }

  /** Call after every successful sync: removes what is pending after a full one. */
  async afterSync(sync: { full: boolean }): Promise<void> {
    if (!sync.full || this.#pending.length === 0) return;
    const modes = this.#pending;
    const keepChains = LEFTOVERS[this.#config.proxyMode].usesChain;
    const failed: ProxyMode[] = [];
    for (const mode of modes) {
      try {
        const other = await createBackend(mode, { executor: this.#executor, config: this.#config });
        await other.cleanup({ keepChains });
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
  const windows = config.proxyMode === "kernelspace";
  const executor = options.executor ??
    new DenoExecutor({ allowedPrograms: windows ? MODE_PROGRAMS.kernelspace : LINUX_PROGRAMS });
  const modes: ProxyMode[] = windows ? ["kernelspace"] : [
    config.proxyMode,
    ...PROXY_MODES.filter((m) => m !== config.proxyMode && m !== "kernelspace"),
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
export interface HandBackOptions {
  config: Config;
  /** @default a DenoExecutor for every Linux mode's programs */
  executor?: Executor;
  /** How long to wait for kube-proxy's rules. @default {300000} */
  timeoutMs?: number;
  /** Time between two looks at the kernel. @default {250} */
  pollMs?: number;
}

/** What {@linkcode handBack} did. */
export type HandBackOutcome = "removed" | "nothing to remove" | "timed out";

/**
 * `kproxy hand-back`, the last step of rolling back to kube-proxy: waits
 * until kube-proxy's rules are in the kernel (its `kube-proxy` nftables
 * table, or its KUBE-SERVICES jump in the iptables nat table), then removes
 * kproxy's own nftables tables in one transaction. kproxy's iptables and ipvs
 * rules carry kube-proxy's names: kube-proxy rewrites them in place, so there
 * is nothing to remove for those modes.
 */
export async function handBack(options: HandBackOptions): Promise<HandBackOutcome> {
  const executor = options.executor ?? new DenoExecutor({ allowedPrograms: LINUX_PROGRAMS });
  const { createNftablesBackend, parseTableList } = await import(
    "../../backends/nftables/applier.ts"
  );
  const tables = async () =>
    parseTableList(
      (await runChecked(executor, { program: "nft", args: ["list", "tables"] })).stdout,
    );
  const own = (await tables()).filter((entry) => /^ip6? kproxy$/.test(entry));
  if (own.length === 0) {
    logger.info("kproxy has no nftables tables here: nothing to hand back");
    return "nothing to remove";
  }
  const deadline = performance.now() + (options.timeoutMs ?? 300_000);
  while (!await kubeProxyRulesPresent(executor, await tables())) {
    if (performance.now() > deadline) return "timed out";
    await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 250));
  }
  logger.info("kube-proxy's rules are in the kernel: removing kproxy's");
  await createNftablesBackend({ executor, config: options.config }).cleanup();
  return "removed";
}

/** Whether kube-proxy's rules are in the kernel, in any of its modes. */
async function kubeProxyRulesPresent(executor: Executor, tables: string[]): Promise<boolean> {
  if (tables.includes("ip kube-proxy")) return true;
  for (const save of ["iptables-nft-save", "iptables-legacy-save"]) {
    try {
      const result = await executor.run({ program: save, args: [] });
      const nat = result.code === 0 ? splitSave(result.stdout).get("nat") : undefined;
      if (nat !== undefined && /^-A PREROUTING .*-j KUBE-SERVICES$/m.test(nat)) return true;
    } catch (error) {
      if (!isMissingProgram(error)) throw error;
    }
  }
  return false;
}
