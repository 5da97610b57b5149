/**
 * Runs {@linkcode KERNEL_CASES} against one backend as `t.step`s, sharing one
 * topology, and prints which cases passed in that mode.
 *
 * @module
 */

import type { Backend } from "../../lib/core/backend.ts";
import { ConntrackReconciler } from "../../lib/shell/conntrack_reconciler.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { type CaseContext, KERNEL_CASES, type KernelCase, type KernelMode } from "./cases.ts";
import { NetnsExecutor, type Topology } from "./netns.ts";

/** Commands that wipe a mode's rules from the node behind the backend's back. */
export function wipeCommands(mode: KernelMode): { program: string; args: string[] }[] {
  switch (mode) {
    case "nftables":
      return [{ program: "nft", args: ["flush", "ruleset"] }];
    case "iptables-nft":
    case "iptables-legacy": {
      const suffix = mode === "iptables-nft" ? "nft" : "legacy";
      // Flush and delete every chain, as a restart of another firewall would.
      return ["iptables", "ip6tables"].flatMap((tool) =>
        ["nat", "filter", "mangle"].flatMap((table) =>
          ["-F", "-X"].map((verb) => ({ program: `${tool}-${suffix}`, args: ["-t", table, verb] }))
        )
      );
    }
    case "ipvs":
      return [{ program: "ipvsadm", args: ["-C"] }];
  }
}

/** Options for {@linkcode runKernelCases}. */
export interface RunKernelCasesOptions {
  mode: KernelMode;
  topology: Topology;
  backend: Backend;
  /** @default {KERNEL_CASES} */
  cases?: readonly KernelCase[];
}

/** Per-mode outcome of {@linkcode runKernelCases}. */
export interface CasesSummary {
  passed: string[];
  failed: string[];
  pending: string[];
}

/** Runs each applicable case as a step; a failing case fails its step and the rest still run. */
export async function runKernelCases(
  t: Deno.TestContext,
  options: RunKernelCasesOptions,
): Promise<CasesSummary> {
  const { mode, topology, backend } = options;
  const node = new NetnsExecutor({ namespace: topology.node });
  const conntrack = new ConntrackReconciler({ executor: node });
  let previous: Plan[] = [];
  const context: CaseContext = {
    topology,
    backend,
    mode,
    async sync(plans, syncOptions = {}) {
      const sync = {
        plans,
        previous,
        changed: new Set(syncOptions.changed ?? plans.flatMap((p) => p.services.map((s) => s.id))),
        full: syncOptions.full ?? syncOptions.changed === undefined,
      };
      await backend.sync(sync);
      // What kproxy does after every successful sync.
      await conntrack.afterSync(sync);
      previous = plans;
    },
    async wipeRules() {
      for (const command of wipeCommands(mode)) {
        await node.run(command);
      }
    },
    async flushConntrack() {
      await node.run({ program: "conntrack", args: ["-F"] });
    },
  };
  const summary: CasesSummary = { passed: [], failed: [], pending: [] };
  for (const kernelCase of options.cases ?? KERNEL_CASES) {
    if (kernelCase.modes && !kernelCase.modes.includes(mode)) continue;
    const pending = await kernelCase.pending?.(mode);
    if (pending !== undefined) {
      console.warn(`[${mode}] pending: ${kernelCase.name}: ${pending}`);
      summary.pending.push(kernelCase.name);
      await t.step({ name: kernelCase.name, ignore: true, fn: () => {} });
      continue;
    }
    const ok = await t.step(kernelCase.name, async (step) => {
      await context.flushConntrack();
      await context.sync(kernelCase.plans(topology), { full: true });
      await kernelCase.expect(context);
      for (const caseStep of kernelCase.steps ?? []) {
        const stepOk = await step.step(caseStep.name, async () => {
          await caseStep.before?.(context);
          if (caseStep.plans) {
            await context.sync(caseStep.plans(topology), {
              changed: caseStep.changed,
              full: caseStep.full ?? caseStep.changed === undefined,
            });
          }
          await caseStep.expect(context);
        });
        if (!stepOk) throw new Error(`step "${caseStep.name}" failed`);
      }
    });
    (ok ? summary.passed : summary.failed).push(kernelCase.name);
  }
  console.log(
    `[${mode}] ${summary.passed.length} passed, ${summary.failed.length} failed, ` +
      `${summary.pending.length} pending` +
      (summary.failed.length > 0 ? `; failed: ${summary.failed.join(" | ")}` : ""),
  );
  return summary;
}
