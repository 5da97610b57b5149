/**
 * The `kproxy explain` command: plans the node, explains DEST, prints the answer.
 *
 * @module
 */

import type { CommandLine } from "../../config/command_line.ts";
import { type PlannerOptions, planNode } from "../../core/planner.ts";
import type { ClusterState } from "../../core/state.ts";
import type { ServiceCounterSample } from "../../core/service_counters.ts";
import { formatCounters, formatExplanation } from "./format.ts";
import { explain } from "./match.ts";

// ---------------------------------------------------------------------------
// The command.

/** Options for {@linkcode runExplain}. */
export interface RunExplainOptions {
  /** The parsed command line of `kproxy explain`. */
  commandLine: Pick<CommandLine, "args" | "explain">;
  /** Where the answer and errors go. */
  io: { stdout(text: string): void; stderr(text: string): void };
  /** The cluster state, once the source listed every object. */
  state: ClusterState;
  /** The planner options of this node. */
  plannerOptions: PlannerOptions;
  /**
   * The node's Service counters (`--service-counters`), or why they cannot be
   * read; undefined when counting is off.
   */
  counters?: { samples: readonly ServiceCounterSample[] } | { unavailable: string };
}

/**
 * Runs `kproxy explain`: plans the node, explains DEST and prints the answer.
 *
 * @param options The command line, output, state and planner options.
 * @returns The exit code: 0, or 2 when DEST, `--from` or `--node` is wrong.
 */
export function runExplain(options: RunExplainOptions): number {
  const { commandLine, io, state, plannerOptions } = options;
  try {
    const plans = planNode({ state, options: plannerOptions });
    const explanation = explain({
      state,
      plans,
      options: plannerOptions,
      destination: commandLine.args[0] ?? "",
      from: commandLine.explain?.from,
      node: commandLine.explain?.node,
    });
    io.stdout(formatExplanation(explanation));
    const id = explanation.match?.id;
    if (id !== undefined && options.counters !== undefined) {
      io.stdout(formatCounters(options.counters, id, explanation.family));
    }
    return 0;
  } catch (error) {
    if (error instanceof TypeError || error instanceof RangeError) {
      io.stderr(`kproxy: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
}
