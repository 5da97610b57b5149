/**
 * A partial iptables sync: the chains of the changed service ports whose
 * rules differ, rewritten in place, and the top-level chains only when their
 * rules differ. Pure.
 *
 * @module
 */

import type { Plan } from "../../lib/core/plan.ts";
import type { IptablesTable } from "./chains.ts";
import { alternateChainName } from "./names.ts";
import { IptablesRestoreScript } from "./script.ts";
import { renamed, type SyncInputs, widenFilter } from "./render.ts";
import { type ChainRules, type IptablesRenderOptions, sameRules, writeChains } from "./rules.ts";
import { isLargeCluster, renderServiceChains } from "./service_chains.ts";
import { renderTopLevelChains } from "./top_level.ts";

/** The plans a partial sync moves between. */
export interface PartialChange {
  /** The plan the kernel holds now (last applied). */
  previous: Plan;
  next: Plan;
  /** Ids of service ports whose plan may differ. */
  changed: ReadonlySet<string>;
}

function writeChangedChains(
  script: IptablesRestoreScript,
  table: IptablesTable,
  previous: ChainRules,
  next: ChainRules,
): void {
  const changed: ChainRules = new Map();
  for (const [chain, rules] of next) {
    if (!sameRules(previous.get(chain), rules)) changed.set(chain, rules);
  }
  writeChains(script, table, changed);
}

function deleteRemovedChains(
  script: IptablesRestoreScript,
  table: IptablesTable,
  previous: ChainRules,
  next: ChainRules,
): void {
  for (const chain of previous.keys()) {
    if (!next.has(chain)) script.deleteChain(table, chain);
  }
}

/** Options of {@linkcode renderPartialSync}. */
export interface PartialSyncOptions extends IptablesRenderOptions {
  /** Upstream names of the per-service chains that live under their alternate name. */
  alternates?: ReadonlySet<string>;
}

/**
 * Renders the changes from `previous` to `next` as one switching input
 * ({@linkcode SyncInputs.commit}): the per-service chains of changed
 * services whose rules differ, rewritten in place under the names they
 * have, top-level chains only when their rules differ (an endpoint-only
 * change leaves KUBE-SERVICES alone), and `-X` for chains of removed
 * services and endpoints. Empty when nothing changed.
 */
export function renderPartialSync(
  change: PartialChange,
  options: PartialSyncOptions = {},
): SyncInputs {
  const { previous, next } = change;
  const live = options.alternates ?? new Set<string>();
  const name = (chain: string) => live.has(chain) ? alternateChainName(chain) : chain;
  const oldTop = renderTopLevelChains(previous, options);
  const newTop = renderTopLevelChains(next, options);
  const oldServices = new Map(previous.services.map((service) => [service.id, service]));
  const newServices = new Map(next.services.map((service) => [service.id, service]));
  const oldChains: ChainRules = new Map();
  const newChains: ChainRules = new Map();
  const wasLarge = isLargeCluster(previous);
  const isLarge = isLargeCluster(next);
  for (const id of [...change.changed].sort()) {
    const before = oldServices.get(id);
    const after = newServices.get(id);
    if (before) {
      for (const [c, r] of renderServiceChains(before, previous, wasLarge)) oldChains.set(c, r);
    }
    if (after) {
      for (const [c, r] of renderServiceChains(after, next, isLarge)) newChains.set(c, r);
    }
  }
  const alternates = new Set(
    [...live].filter((chain) => !oldChains.has(chain) || newChains.has(chain)),
  );
  const widen = new IptablesRestoreScript(next.family);
  widenFilter(widen, oldTop.filter, newTop.filter, new Set(oldTop.filter.keys()));
  const nat = new IptablesRestoreScript(next.family);
  writeChangedChains(nat, "nat", renamed(oldTop.nat, name), renamed(newTop.nat, name));
  const [oldNamed, newNamed] = [renamed(oldChains, name), renamed(newChains, name)];
  writeChangedChains(nat, "nat", oldNamed, newNamed);
  deleteRemovedChains(nat, "nat", oldNamed, newNamed);
  const narrow = new IptablesRestoreScript(next.family);
  writeChangedChains(narrow, "filter", oldTop.filter, newTop.filter);
  deleteRemovedChains(narrow, "filter", oldTop.filter, newTop.filter);
  const commit = [widen, nat, narrow].filter((script) => !script.isEmpty || script.error);
  return { staging: [], commit, cleanup: [], alternates };
}
