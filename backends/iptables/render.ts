/**
 * Renders a {@linkcode Plan} as `iptables-restore` input with kube-proxy's
 * chain structure. Pure: no I/O. A full script declares every chain kproxy
 * owns; a partial script holds only the chains whose rules changed, so an
 * endpoint change rewrites that service's chains and nothing else.
 *
 * The parts: `rules.ts` (rule pieces every part shares), `top_level.ts`
 * (KUBE-SERVICES & co.), `service_chains.ts` (one service port's chains),
 * `partial.ts` (a partial sync); this file renders a full sync.
 *
 * @module
 */

import type { Plan } from "../../lib/core/plan.ts";
import { type BaseJump, baseJumpArgs, Chains, isOwnedChain } from "./chains.ts";
import { alternateChainName, isServiceChainName } from "./names.ts";
import { IptablesRestoreScript } from "./script.ts";
import { type ChainRules, type IptablesRenderOptions, sameRules, writeChains } from "./rules.ts";
import { isLargeCluster, renderServiceChains } from "./service_chains.ts";
import { renderTopLevelChains } from "./top_level.ts";

/** Options of {@linkcode renderFull}. */
export interface RenderFullOptions extends IptablesRenderOptions {
  /** Per-service chains found in the kernel; those the plan no longer uses are deleted. */
  existingChains?: readonly string[];
  /** Jumps from built-in chains to insert (those not yet in the kernel), in the last script. */
  insertJumps?: readonly BaseJump[];
}

/**
 * Renders the complete ruleset of a plan in one script: every chain kproxy
 * owns is declared (so flushed) and refilled, and per-service chains listed
 * in `existingChains` that the plan no longer uses are deleted. What a
 * scratch load (`kproxy diff`) and the golden files use; a sync applies
 * {@linkcode renderFullSync}.
 *
 * @example Usage
 * ```ts ignore
 * const script = renderFull(plan, { masqueradeBit: 14 });
 * await executor.run({ program: "iptables-restore", args: ["-w", "5", "--noflush", "--counters"], stdin: script.toString() });
 * ```
 */
export function renderFull(plan: Plan, options: RenderFullOptions = {}): IptablesRestoreScript {
  const script = new IptablesRestoreScript(plan.family);
  const top = renderTopLevelChains(plan, options);
  const services = serviceChainGroups(plan);
  script.declareChain("mangle", Chains.canary);
  writeChains(script, "filter", top.filter);
  writeChains(script, "nat", new Map([...top.nat, ...services.flatMap((chains) => [...chains])]));
  for (const jump of options.insertJumps ?? []) {
    script.insertRule(jump.table, jump.from, baseJumpArgs(jump));
  }
  const used = new Set([...top.nat.keys(), ...services.flatMap((chains) => [...chains.keys()])]);
  for (const chain of options.existingChains ?? []) {
    if (!used.has(chain) && isOwnedChain(chain) && !top.filter.has(chain)) {
      script.deleteChain("nat", chain);
    }
  }
  return script;
}

/** The per-service chains of every service port of `plan`, one map per service port. */
function serviceChainGroups(plan: Plan): ChainRules[] {
  const largeCluster = isLargeCluster(plan);
  return plan.services.map((service) => renderServiceChains(service, plan, largeCluster));
}

/**
 * The same chains with per-service chains renamed by `name` (upstream name
 * to the name written), as declared and as jump targets. A rule whose jump
 * keeps its name is shared, not copied.
 */
export function renamed(chains: ChainRules, name: (chain: string) => string): ChainRules {
  const out: ChainRules = new Map();
  for (const [chain, rules] of chains) {
    out.set(name(chain), rules.map((rule) => renamedRule(rule, name)));
  }
  return out;
}

function renamedRule(rule: string[], name: (chain: string) => string): string[] {
  let copy: string[] | undefined;
  for (let i = 1; i < rule.length; i++) {
    if (rule[i - 1] !== "-j") continue;
    const to = name(rule[i]!);
    if (to === rule[i]) continue;
    copy ??= [...rule];
    copy[i] = to;
  }
  return copy ?? rule;
}

/** What a full sync found in the kernel, from `iptables-save` of nat and filter. */
export interface KernelChains {
  /** The chains of the nat table. */
  nat: readonly string[];
  /** The chains some nat rule jumps to: a per-service chain among them is in use. */
  natTargets: ReadonlySet<string>;
  /** The chains of the filter table. */
  filter: readonly string[];
}

/** Options of {@linkcode renderFullSync}. */
export interface FullSyncOptions extends IptablesRenderOptions {
  kernel: KernelChains;
  /** Jumps from built-in chains to insert (those not yet in the kernel). */
  insertJumps?: readonly BaseJump[];
  /**
   * Per-service chains per staging input, each service port whole in one;
   * `Infinity` writes them all in the switching nat commit.
   */
  maxChainsPerChunk: number;
}

/**
 * The restore inputs of one sync, in the order they run. iptables-restore
 * commits each `*table … COMMIT` block of an input atomically, one after
 * the other, in both the legacy and the nft variant; no input is ever
 * atomic across tables. So a sync is a sequence of table commits, arranged
 * so that a writer that stops anywhere leaves every service address
 * behaving as before the sync or as after it.
 */
export interface SyncInputs {
  /** Inputs that only create chains nothing references yet. */
  staging: IptablesRestoreScript[];
  /**
   * The switching input, as blocks: the filter table widened (rules added,
   * none removed), nat (the switch), then filter narrowed to the new rules
   * and mangle's canary. The filter table holds only REJECT, DROP and
   * ACCEPT rules for un-DNATed destinations, so while it is widened the old
   * nat table still decides every address as before.
   */
  commit: IptablesRestoreScript[];
  /** Inputs that delete chains nothing references any more. */
  cleanup: IptablesRestoreScript[];
  /** Upstream names of the per-service chains written under their alternate name. */
  alternates: Set<string>;
}

/** The blocks of an input as its text. */
export function inputText(blocks: readonly IptablesRestoreScript[]): string {
  return blocks.map(String).join("");
}

export function widenFilter(
  script: IptablesRestoreScript,
  previous: ChainRules | undefined,
  next: ChainRules,
  kernel: ReadonlySet<string>,
): void {
  for (const [chain, rules] of next) {
    const before = previous?.get(chain);
    if (previous !== undefined && sameRules(before, rules)) continue;
    if (kernel.has(chain)) script.keepChain("filter", chain);
    else script.declareChain("filter", chain);
    const old = new Set((before ?? []).map((rule) => rule.join(" ")));
    for (const rule of rules) {
      if (!old.has(rule.join(" "))) script.appendRule("filter", chain, rule);
    }
  }
}

/** Where a per-service chain stands in the jumps between them: callers first. */
export function callerRank(chain: string): number {
  const kind = /^KUBE-([A-Z]+)-/.exec(chain)?.[1];
  return kind === "FW" ? 0 : kind === "EXT" ? 1 : kind === "SEP" ? 3 : 2;
}

/** `items` cut into consecutive runs of at most `size`. */
export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** A full sync rendered as it runs: {@linkcode fullSyncInputs}. */
export interface FullSyncStream {
  /** The staging inputs, each rendered only when asked for. */
  staging: Iterable<IptablesRestoreScript>;
  /** The switching commit and the cleanup inputs; call once `staging` was iterated through. */
  finish(): Omit<SyncInputs, "staging">;
}

/**
 * Renders a full sync. With `maxChainsPerChunk` finite (iptables-nft-restore
 * is quadratic in the chains one input declares: 2k services × 10 endpoints
 * took 68 s in one input), the per-service chains are first written in
 * bounded staging inputs under names no rule uses yet (the upstream name, or
 * its alternate while the upstream one is in use), the commit switches the
 * top-level chains to them, and the chains left behind are deleted after.
 * A live chain is never rewritten before the switch.
 */
export function renderFullSync(plan: Plan, options: FullSyncOptions): SyncInputs {
  const stream = fullSyncInputs(plan, options);
  const staging = [...stream.staging];
  return { staging, ...stream.finish() };
}

/**
 * {@linkcode renderFullSync} one staging input at a time: each service
 * port's chains are rendered when the input that holds them is asked for,
 * so a sync holds one input's text and rules at a time, not the ruleset's.
 */
export function fullSyncInputs(plan: Plan, options: FullSyncOptions): FullSyncStream {
  const { kernel } = options;
  const chunked = options.maxChainsPerChunk !== Infinity;
  const alternates = new Set<string>();
  const name = (chain: string) => {
    if (!chunked || !isServiceChainName(chain) || !kernel.natTargets.has(chain)) return chain;
    alternates.add(chain);
    return alternateChainName(chain);
  };
  const largeCluster = isLargeCluster(plan);
  const top = renderTopLevelChains(plan, options);
  const topNat = renamed(top.nat, name);
  const used = new Set(topNat.keys());
  const nat = new IptablesRestoreScript(plan.family);
  if (!chunked) writeChains(nat, "nat", topNat);

  function* staging(): Generator<IptablesRestoreScript> {
    // Service chains jump to KUBE-MARK-MASQ: create it, if missing, before them.
    let chunk: ChainRules = new Map();
    if (chunked && !kernel.nat.includes(Chains.markMasq)) {
      chunk.set(Chains.markMasq, topNat.get(Chains.markMasq) ?? []);
    }
    for (const service of plan.services) {
      const chains = renamed(renderServiceChains(service, plan, largeCluster), name);
      for (const chain of chains.keys()) used.add(chain);
      if (!chunked) {
        writeChains(nat, "nat", chains);
        continue;
      }
      if (chunk.size > 0 && chunk.size + chains.size > options.maxChainsPerChunk) {
        yield chunkScript(chunk);
        chunk = new Map();
      }
      for (const [chain, rules] of chains) chunk.set(chain, rules);
    }
    if (chunk.size > 0) yield chunkScript(chunk);
  }
  const chunkScript = (chunk: ChainRules) => {
    const script = new IptablesRestoreScript(plan.family);
    writeChains(script, "nat", chunk);
    return script;
  };

  const finish = (): Omit<SyncInputs, "staging"> => {
    const widen = new IptablesRestoreScript(plan.family);
    widenFilter(widen, undefined, top.filter, new Set(kernel.filter));
    if (chunked) writeChains(nat, "nat", topNat);
    const narrow = new IptablesRestoreScript(plan.family);
    narrow.declareChain("mangle", Chains.canary);
    writeChains(narrow, "filter", top.filter);
    for (const jump of options.insertJumps ?? []) {
      (jump.table === "nat" ? nat : narrow).insertRule(jump.table, jump.from, baseJumpArgs(jump));
    }
    const stale = kernel.nat.filter((chain) =>
      !used.has(chain) && isOwnedChain(chain) && !top.filter.has(chain)
    );
    const cleanup: IptablesRestoreScript[] = [];
    if (chunked) {
      // Callers before callees (FW → EXT → SVC/SVL → SEP): an input flushes
      // and deletes chains whose callers went in the same input or earlier.
      const sorted = [...stale].sort((a, b) => callerRank(a) - callerRank(b));
      for (const group of chunks(sorted, options.maxChainsPerChunk)) {
        const script = new IptablesRestoreScript(plan.family);
        for (const chain of group) script.deleteChain("nat", chain);
        cleanup.push(script);
      }
    } else {
      for (const chain of stale) nat.deleteChain("nat", chain);
    }
    const commit = [widen, nat, narrow].filter((script) => !script.isEmpty || script.error);
    return { commit, cleanup, alternates };
  };
  return { staging: staging(), finish };
}
