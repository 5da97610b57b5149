/**
 * A partial iptables sync: the chains of the changed service ports whose
 * rules differ, rewritten in place, and the top-level chains only when their
 * rules differ; or, when that declares more chains than one input may hold,
 * the same change chunked: new chains staged under free names, one switching
 * commit, the old chains deleted after. Pure.
 *
 * @module
 */

import { findServicePort, type Plan } from "../../lib/core/plan.ts";
import type { IptablesTable } from "./chains.ts";
import { alternateChainName } from "./names.ts";
import { IptablesRestoreScript } from "./script.ts";
import { callerRank, chunks, renamed, type SyncInputs, widenFilter } from "./render.ts";
import { type ChainRules, type IptablesRenderOptions, sameRules, writeChains } from "./rules.ts";
import { isLargeCluster, renderServiceChains } from "./service_chains.ts";
import { renderEntryRules, renderTopLevelChains, type TopLevelChains } from "./top_level.ts";

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
  /**
   * Chains one input may declare (iptables-nft-restore is quadratic in
   * them); a change declaring more is chunked. `Infinity` never chunks.
   * @default {Infinity}
   */
  maxChainsPerChunk?: number;
}

/** One changed service port's chains on each side, under their upstream names. */
interface ServiceChange {
  before: ChainRules;
  after: ChainRules;
}

function differs(change: ServiceChange): boolean {
  if (change.before.size !== change.after.size) return true;
  for (const [chain, rules] of change.after) {
    if (!sameRules(change.before.get(chain), rules)) return true;
  }
  return false;
}

function merged(groups: readonly ChainRules[]): ChainRules {
  return new Map(groups.flatMap((chains) => [...chains]));
}

/**
 * Renders the changes from `previous` to `next`. Unchunked, one switching
 * input ({@linkcode SyncInputs.commit}): the per-service chains of changed
 * services whose rules differ, rewritten in place under the names they
 * have, top-level chains only when their rules differ (an endpoint-only
 * change leaves KUBE-SERVICES alone), and `-X` for chains of removed
 * services and endpoints. Empty when nothing changed. When that commit would
 * declare more than `maxChainsPerChunk` nat chains, see
 * {@linkcode renderChunkedPartialSync}.
 */
export function renderPartialSync(
  change: PartialChange,
  options: PartialSyncOptions = {},
): SyncInputs {
  const { previous, next } = change;
  const wasLarge = isLargeCluster(previous);
  const isLarge = isLargeCluster(next);
  const changes: ServiceChange[] = [];
  for (const id of [...change.changed].sort()) {
    const before = findServicePort(previous, id);
    const after = findServicePort(next, id);
    const service = {
      before: before ? renderServiceChains(before, previous, wasLarge) : new Map(),
      after: after ? renderServiceChains(after, next, isLarge) : new Map(),
    };
    if (differs(service)) changes.push(service);
  }
  const declared = changes.reduce(
    (sum, service) => sum + new Set([...service.before.keys(), ...service.after.keys()]).size,
    0,
  );
  const max = options.maxChainsPerChunk ?? Infinity;
  return declared > max
    ? renderChunkedPartialSync(change, changes, { ...options, maxChainsPerChunk: max })
    : renderInPlace(change, changes, options);
}

function sameChainRules(a: ChainRules, b: ChainRules): boolean {
  return a.size === b.size && [...a].every(([chain, rules]) => sameRules(b.get(chain), rules));
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((item, i) => item === b[i]);
}

/**
 * Whether the top-level chains stay as they are: the changed service ports
 * add the same entry rules before and after (an endpoint change within a
 * service port, the common case), and the node-wide inputs are the same.
 * Saves rendering every service's entry rules twice.
 */
function sameTopLevel({ previous, next, changed }: PartialChange): boolean {
  if (
    !sameList(previous.nodePortAddresses, next.nodePortAddresses) ||
    !sameList(previous.serviceCIDRs, next.serviceCIDRs)
  ) return false;
  for (const id of changed) {
    const before = findServicePort(previous, id);
    const after = findServicePort(next, id);
    if (before === undefined || after === undefined) {
      if (before !== after) return false;
      continue;
    }
    const [was, is] = [renderEntryRules(before, previous), renderEntryRules(after, next)];
    if (!sameChainRules(was.nat, is.nat) || !sameChainRules(was.filter, is.filter)) return false;
  }
  return true;
}

const NO_TOP_LEVEL_CHAINS: TopLevelChains = { nat: new Map(), filter: new Map() };

function renderInPlace(
  change: PartialChange,
  changes: readonly ServiceChange[],
  options: PartialSyncOptions,
): SyncInputs {
  const { previous, next } = change;
  const live = options.alternates ?? new Set<string>();
  const name = (chain: string) => live.has(chain) ? alternateChainName(chain) : chain;
  const unchanged = sameTopLevel(change);
  const oldTop = unchanged ? NO_TOP_LEVEL_CHAINS : renderTopLevelChains(previous, options);
  const newTop = unchanged ? NO_TOP_LEVEL_CHAINS : renderTopLevelChains(next, options);
  const oldChains = merged(changes.map((service) => service.before));
  const newChains = merged(changes.map((service) => service.after));
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

/**
 * A partial sync too big for one iptables-nft-restore input, in the order a
 * chunked full sync uses ({@linkcode SyncInputs}). Bounded staging inputs
 * write the chains nothing references yet: new chains under their upstream
 * name, and chains whose rules differ (or that jump to such a chain) under
 * the spelling the kernel does not hold (the alternate name while the
 * upstream one lives, else the upstream one); the commit switches the
 * top-level chains to them (per table, as a full sync's commit); bounded
 * cleanup inputs then delete the old spellings and the chains of removed
 * services and endpoints, callers first. Chains whose rules and callees are
 * the same keep their names and are not written.
 */
function renderChunkedPartialSync(
  { previous, next }: PartialChange,
  changes: readonly ServiceChange[],
  options: PartialSyncOptions & { maxChainsPerChunk: number },
): SyncInputs {
  const live = options.alternates ?? new Set<string>();
  const current = (chain: string) => live.has(chain) ? alternateChainName(chain) : chain;
  const oldChains = merged(changes.map((service) => service.before));
  const newChains = merged(changes.map((service) => service.after));
  const moving = new Set<string>();
  const target = (chain: string) => {
    if (!oldChains.has(chain)) return newChains.has(chain) ? chain : current(chain);
    if (!moving.has(chain)) return current(chain);
    return live.has(chain) ? chain : alternateChainName(chain);
  };
  // Callees first (SEP, SVC/SVL, EXT, FW): a chain moves when its rules, callees renamed, differ.
  const byCallee = [...newChains.keys()].sort((a, b) => callerRank(b) - callerRank(a));
  for (const chain of byCallee) {
    const before = oldChains.get(chain);
    if (before === undefined) continue;
    const [after] = renamed(new Map([[chain, newChains.get(chain)!]]), target).values();
    const [was] = renamed(new Map([[chain, before]]), current).values();
    if (!sameRules(was, after!)) moving.add(chain);
  }
  const written = (chain: string) => !oldChains.has(chain) || moving.has(chain);

  const staging: IptablesRestoreScript[] = [];
  let chunk: ChainRules = new Map();
  const flush = () => {
    if (chunk.size === 0) return;
    const script = new IptablesRestoreScript(next.family);
    writeChains(script, "nat", chunk);
    staging.push(script);
    chunk = new Map();
  };
  for (const { after } of changes) {
    const chains = [...after].filter(([chain]) => written(chain));
    if (chunk.size > 0 && chunk.size + chains.length > options.maxChainsPerChunk) flush();
    for (const [chain, rules] of renamed(new Map(chains), target)) chunk.set(chain, rules);
  }
  flush();

  const oldTop = renderTopLevelChains(previous, options);
  const newTop = renderTopLevelChains(next, options);
  const widen = new IptablesRestoreScript(next.family);
  widenFilter(widen, oldTop.filter, newTop.filter, new Set(oldTop.filter.keys()));
  const nat = new IptablesRestoreScript(next.family);
  writeChangedChains(nat, "nat", renamed(oldTop.nat, current), renamed(newTop.nat, target));
  const narrow = new IptablesRestoreScript(next.family);
  writeChangedChains(narrow, "filter", oldTop.filter, newTop.filter);
  deleteRemovedChains(narrow, "filter", oldTop.filter, newTop.filter);
  const commit = [widen, nat, narrow].filter((script) => !script.isEmpty || script.error);

  // Callers before callees: an input deletes chains whose callers went in it or before.
  const stale = [...oldChains.keys()]
    .filter((chain) => !newChains.has(chain) || moving.has(chain))
    .sort((a, b) => callerRank(a) - callerRank(b));
  const cleanup = chunks(stale, options.maxChainsPerChunk).map((group) => {
    const script = new IptablesRestoreScript(next.family);
    for (const chain of group) script.deleteChain("nat", current(chain));
    return script;
  });

  const alternates = new Set([...live].filter((chain) => !oldChains.has(chain)));
  for (const chain of newChains.keys()) {
    if (target(chain) !== chain) alternates.add(chain);
  }
  return { staging, commit, cleanup, alternates };
}
