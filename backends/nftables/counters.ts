/**
 * Reading the service counters of kproxy's tables: one `nft -j list counters`
 * for every family, parsed into packet counts by object name. Pure.
 *
 * @module
 */

import type { Command } from "../../lib/core/executor.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { counterSamples, type ServiceCounterSample } from "../../lib/core/service_counters.ts";
import { nftFamily } from "./context.ts";
import { counterName, serviceNameSuffix } from "./names.ts";

/** The one command that lists every named counter of every table. */
export const LIST_COUNTERS: Command = { program: "nft", args: ["-j", "list", "counters"] };

/**
 * Packets per counter of `table`, keyed `family name` (`ip conn-ns/web/tcp/_`),
 * from `nft -j list counters` output.
 *
 * @throws {SyntaxError} when the output is not nft's JSON
 */
export function parseCounterListing(json: string, table: string): Map<string, number> {
  const parsed = JSON.parse(json) as { nftables?: unknown };
  if (!Array.isArray(parsed.nftables)) {
    throw new SyntaxError('Cannot parse nft counters: no "nftables" array');
  }
  const packets = new Map<string, number>();
  for (const item of parsed.nftables) {
    const counter = (item as { counter?: Record<string, unknown> }).counter;
    if (counter === undefined || counter.table !== table) continue;
    if (typeof counter.name !== "string" || typeof counter.packets !== "number") continue;
    packets.set(`${counter.family} ${counter.name}`, counter.packets);
  }
  return packets;
}

/** The samples of the counters `plans` name, from a {@linkcode parseCounterListing} result. */
export function nftCounterSamples(
  plans: Iterable<Plan>,
  packets: ReadonlyMap<string, number>,
): ServiceCounterSample[] {
  return counterSamples(plans, (plan, service, counter) => {
    try {
      const name = counterName(counter, serviceNameSuffix(service));
      return packets.get(`${nftFamily(plan.family)} ${name}`);
    } catch (error) {
      if (error instanceof TypeError) return undefined; // a port the renderer skipped
      throw error;
    }
  });
}
