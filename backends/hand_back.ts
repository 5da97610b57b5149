/**
 * `kproxy hand-back`, the last step of rolling back to kube-proxy: which of
 * kproxy's rules are its own (not kube-proxy's names), and whether
 * kube-proxy's rules are back in the kernel.
 *
 * @module
 */

import { getLogger } from "../lib/core/logger.ts";
import type { Config } from "../lib/config/types.ts";
import type { Executor } from "../lib/core/executor.ts";
import { isMissingProgram } from "../lib/shell/exec.ts";
import { splitSave } from "./iptables/save.ts";
import { existingTables } from "./nftables/table_probe.ts";

/** What the command says while it runs: shown at -v=0 (lib/shell/log.ts). */
const logger = getLogger(["kproxy", "main"]);

/** Options for {@linkcode handBackToKubeProxy}. */
export interface HandBackToKubeProxyOptions {
  config: Config;
  executor: Executor;
  /** How long to wait for kube-proxy's rules. @default {300000} */
  timeoutMs?: number;
  /** Time between two looks at the kernel. @default {250} */
  pollMs?: number;
  /** Time between two "still waiting" lines. @default {15000} */
  progressEveryMs?: number;
}

/** What {@linkcode handBackToKubeProxy} did; on a timeout, a message naming what was missing. */
export type HandBackOutcome =
  | { outcome: "removed" | "nothing to remove" }
  | { outcome: "timed out"; message: string };

/** kube-proxy's rules as the hand-back looks for them. */
const KUBE_PROXY_RULES =
  "kube-proxy's rules (the nftables table ip kube-proxy, or a KUBE-SERVICES jump in iptables' nat PREROUTING)";

/**
 * `kproxy hand-back`, the last step of rolling back to kube-proxy: waits
 * until kube-proxy's rules are in the kernel (its `kube-proxy` nftables
 * table, or its KUBE-SERVICES jump in the iptables nat table), then removes
 * kproxy's own nftables tables in one transaction. kproxy's iptables and ipvs
 * rules carry kube-proxy's names: kube-proxy rewrites them in place, so there
 * is nothing to remove for those modes. Says what it waits for at start and
 * how long is left every `progressEveryMs`.
 */
export async function handBackToKubeProxy(
  options: HandBackToKubeProxyOptions,
): Promise<HandBackOutcome> {
  const { executor } = options;
  const { createNftablesBackend } = await import("./nftables/applier.ts");
  const own = await existingTables(executor, ["ip", "ip6"], ["kproxy"]);
  if (own.length === 0) {
    logger.info("kproxy has no nftables tables here: nothing to hand back");
    return { outcome: "nothing to remove" };
  }
  const timeoutMs = options.timeoutMs ?? 300_000;
  const progressEveryMs = options.progressEveryMs ?? 15_000;
  logger.info("Waiting up to {timeout} for {rules} before removing kproxy's tables {tables}", {
    timeout: formatDuration(timeoutMs),
    rules: KUBE_PROXY_RULES,
    tables: own.join(", "),
  });
  const startedAt = performance.now();
  let lastProgressAt = startedAt;
  for (;;) {
    const look = await lookForKubeProxy(
      executor,
      await existingTables(executor, ["ip"], ["kube-proxy"]),
    );
    if (look.found) break;
    const now = performance.now();
    if (now - startedAt > timeoutMs) {
      return {
        outcome: "timed out",
        message: `Cannot hand back: after ${formatDuration(timeoutMs)} kube-proxy's rules are ` +
          `not in the kernel (${look.missing.join("; ")}); kproxy's rules stay`,
      };
    }
    if (now - lastProgressAt >= progressEveryMs) {
      lastProgressAt = now;
      const leftMs = Math.max(0, timeoutMs - (now - startedAt));
      logger.info("Still waiting for kube-proxy's rules: {left} left", {
        left: formatDuration(Math.round(leftMs / 100) * 100),
        missing: look.missing.join("; "),
      });
    }
    await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 250));
  }
  logger.info("kube-proxy's rules are in the kernel: removing kproxy's");
  await createNftablesBackend({ executor, config: options.config }).cleanup();
  return { outcome: "removed" };
}

/**
 * Whether kube-proxy's rules are in the kernel, in any of its modes; when not, what each
 * place looked at lacks.
 */
async function lookForKubeProxy(
  executor: Executor,
  tables: string[],
): Promise<{ found: boolean; missing: string[] }> {
  if (tables.includes("ip kube-proxy")) return { found: true, missing: [] };
  const missing = ["no nftables table ip kube-proxy"];
  for (const save of ["iptables-nft-save", "iptables-legacy-save"]) {
    try {
      const result = await executor.run({ program: save, args: [] });
      if (result.code !== 0) {
        missing.push(`${save}: exit status ${result.code}`);
        continue;
      }
      const nat = splitSave(result.stdout).get("nat");
      if (nat !== undefined && /^-A PREROUTING .*-j KUBE-SERVICES$/m.test(nat)) {
        return { found: true, missing: [] };
      }
      missing.push(`${save}: no KUBE-SERVICES jump in nat PREROUTING`);
    } catch (error) {
      if (!isMissingProgram(error)) throw error;
      missing.push(`${save}: not installed`);
    }
  }
  return { found: false, missing };
}

/** A duration as Go prints one: `300ms`, `4.5s`, `5m0s`. */
function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = (ms % 60_000) / 1000;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}
