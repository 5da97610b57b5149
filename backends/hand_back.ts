/**
 * `kproxy hand-back`, the last step of rolling back to kube-proxy: which of
 * kproxy's rules are its own (not kube-proxy's names), and whether
 * kube-proxy's rules are back in the kernel.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import type { Config } from "../lib/config/types.ts";
import type { Executor } from "../lib/core/executor.ts";
import { isMissingProgram, runChecked } from "../lib/shell/exec.ts";
import { splitSave } from "./iptables/save.ts";
import { parseTableList } from "./nftables/render.ts";

const logger = getLogger(["kproxy", "takeover"]);

/** Options for {@linkcode handBackToKubeProxy}. */
export interface HandBackToKubeProxyOptions {
  config: Config;
  executor: Executor;
  /** How long to wait for kube-proxy's rules. @default {300000} */
  timeoutMs?: number;
  /** Time between two looks at the kernel. @default {250} */
  pollMs?: number;
}

/** What {@linkcode handBackToKubeProxy} did. */
export type HandBackOutcome = "removed" | "nothing to remove" | "timed out";

/**
 * `kproxy hand-back`, the last step of rolling back to kube-proxy: waits
 * until kube-proxy's rules are in the kernel (its `kube-proxy` nftables
 * table, or its KUBE-SERVICES jump in the iptables nat table), then removes
 * kproxy's own nftables tables in one transaction. kproxy's iptables and ipvs
 * rules carry kube-proxy's names: kube-proxy rewrites them in place, so there
 * is nothing to remove for those modes.
 */
export async function handBackToKubeProxy(
  options: HandBackToKubeProxyOptions,
): Promise<HandBackOutcome> {
  const { executor } = options;
  const { createNftablesBackend } = await import("./nftables/applier.ts");
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
