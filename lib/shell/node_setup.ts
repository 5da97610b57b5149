/**
 * What kube-proxy 1.36 does to the node before it proxies: the conntrack
 * sysctls (a failure stops it, as `platformSetup` does) and its own OOM score
 * (a failure is only logged, as `Run` does).
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import os from "node:os";
import type { Config } from "../config/types.ts";
import { conntrackSysctls } from "../core/conntrack_sysctls.ts";
import type { Executor } from "../core/executor.ts";
import { runChecked } from "./exec.ts";
import { readSysctl } from "./sysctl.ts";

const logger = getLogger(["kproxy", "node"]);

/** Options for {@linkcode setUpNode}. */
export interface NodeSetupOptions {
  config: Config;
  executor: Executor;
  /** @default {the host's CPUs (os.cpus, as cadvisor counts them), else navigator.hardwareConcurrency} */
  cpus?: number;
  /** The process whose OOM score to set. @default {Deno.pid} */
  pid?: number;
}

/** The number of CPUs as kube-proxy counts them: all of the host's, else the usable ones. */
function hostCpus(): number {
  try {
    const count = os.cpus().length;
    if (count > 0) return count;
  } catch {
    // Without --allow-sys=cpus: the CPUs this process may use, as Go's runtime.NumCPU.
  }
  return navigator.hardwareConcurrency;
}

/**
 * Applies the configuration's conntrack settings, then its OOM score.
 *
 * @throws {Error} "Cannot set conntrack parameters from the configuration: …"
 *   when a conntrack sysctl cannot be read or set
 */
export async function setUpNode(options: NodeSetupOptions): Promise<void> {
  const { config, executor } = options;
  const cpus = options.cpus ?? hostCpus();
  for (const sysctl of conntrackSysctls(config.conntrack, cpus)) {
    try {
      const current = await readSysctl(executor, sysctl.key);
      const keep = sysctl.only === "raise"
        ? Number(current) >= Number(sysctl.value)
        : current === sysctl.value;
      if (keep) continue;
      logger.info("Setting sysctl {key} to {value}", { key: sysctl.key, value: sysctl.value });
      const result = await runChecked(executor, {
        program: "sysctl",
        args: ["-w", `${sysctl.key}=${sysctl.value}`],
      });
      // procps' sysctl exits 0 when the kernel refuses a value; read it back.
      const after = await readSysctl(executor, sysctl.key);
      if (after !== sysctl.value) {
        throw new Error(
          `${sysctl.key} is ${after} after setting ${sysctl.value}: ${
            result.stderr.trim() || "the kernel kept its value"
          }`,
        );
      }
    } catch (error) {
      const detail = error instanceof Error ? error.message : String(error);
      throw new Error(`Cannot set conntrack parameters from the configuration: ${detail}`, {
        cause: error,
      });
    }
  }
  await setOomScoreAdj(executor, config.oomScoreAdj, options.pid ?? Deno.pid);
}

/** Sets the process's oom_score_adj with `choom`; kube-proxy logs a failure at -v=2 and goes on. */
async function setOomScoreAdj(executor: Executor, value: number, pid: number): Promise<void> {
  try {
    await runChecked(executor, {
      program: "choom",
      args: ["-n", String(value), "-p", String(pid)],
    });
  } catch (error) {
    logger.debug("Cannot set the OOM score to {value}: {error}", { value, error });
  }
}
