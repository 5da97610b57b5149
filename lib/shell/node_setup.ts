/**
 * What kube-proxy 1.36 does to the node before it proxies: the conntrack
 * sysctls (a failure stops it, as `platformSetup` does) and its own OOM score
 * (a failure is only logged, as `Run` does).
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
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
  /** @default {the host's online CPUs ({@linkcode ONLINE_CPUS_FILE}), else navigator.hardwareConcurrency} */
  cpus?: number;
  /** The process whose OOM score to set. @default {Deno.pid} */
  pid?: number;
}

/** Where Linux lists its online CPUs ("0-3,6"); kube-proxy's cadvisor reads the same /sys tree. */
export const ONLINE_CPUS_FILE = "/sys/devices/system/cpu/online";

/** The number of CPUs in a kernel CPU list such as "0-3,6"; undefined when it is not one. */
export function countCpuList(list: string): number | undefined {
  let count = 0;
  for (const range of list.trim().split(",")) {
    const match = /^(\d+)(?:-(\d+))?$/.exec(range);
    if (!match) return undefined;
    const first = Number(match[1]);
    const last = Number(match[2] ?? match[1]);
    if (last < first) return undefined;
    count += last - first + 1;
  }
  return count;
}

/**
 * The number of CPUs as kube-proxy counts them: all of the host's online
 * CPUs (cadvisor's topology from /sys), where Deno lets this process read
 * /sys (only with every permission); else the CPUs it may use
 * (`navigator.hardwareConcurrency`: its CPU affinity, as Go's
 * `runtime.NumCPU`, and a cgroup CPU limit, which kube-proxy's count
 * ignores — the two differ only for a kproxy given a CPU limit). `node:os`
 * would count the host's, but importing it starts Deno's Node compatibility
 * layer (docs/ARCHITECTURE.md, "No Node at start-up").
 */
function hostCpus(): number {
  try {
    const count = countCpuList(Deno.readTextFileSync(ONLINE_CPUS_FILE));
    if (count !== undefined && count > 0) return count;
  } catch {
    // Refused without every permission, or no /sys: the usable CPUs.
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
