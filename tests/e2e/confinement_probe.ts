/**
 * Run by tests/e2e/confinement_test.ts under kproxy's printed permission
 * flags: asks kproxy's Executor to run hostile commands (and one it needs)
 * and prints, per command, "ran" or "refused: REASON".
 *
 * @module
 */

import { DenoExecutor } from "../../lib/shell/exec.ts";
import type { Command } from "../../lib/core/executor.ts";
import { LINUX_PROGRAMS } from "../../lib/shell/permissions.ts";

/** The commands tried, by name. */
export const PROBES: Readonly<Record<string, Command>> = {
  "nft reads a file": { program: "nft", args: ["-f", "/etc/shadow"] },
  "nft script includes a file": {
    program: "nft",
    args: ["-f", "-"],
    stdin: 'include "/etc/shadow"\n',
  },
  "ip runs a shell": { program: "ip", args: ["netns", "exec", "kp-probe", "sh", "-c", "id"] },
  "ip reads a batch file": { program: "ip", args: ["-batch", "/etc/shadow"] },
  "iptables-restore reads a file": { program: "iptables-restore", args: ["/etc/shadow"] },
  "iptables-save writes a file": { program: "iptables-save", args: ["-f", "/etc/kp-probe"] },
  "sysctl sets a kernel key": { program: "sysctl", args: ["-w", "kernel.core_pattern=|/bin/sh"] },
  "ip deletes the ipvs dummy interface": { program: "ip", args: ["link", "del", "kube-ipvs0"] },
};

if (import.meta.main) {
  const executor = new DenoExecutor({ allowedPrograms: LINUX_PROGRAMS });
  for (const [name, command] of Object.entries(PROBES)) {
    try {
      await executor.run(command);
      console.log(`${name}: ran`);
    } catch (error) {
      console.log(`${name}: refused: ${error instanceof Error ? error.message : error}`);
    }
  }
}
