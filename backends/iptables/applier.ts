/**
 * The iptables proxy mode: renders each family's Plan with `render.ts` and
 * applies it with `iptables-restore --noflush`: one input per family and
 * sync, whose table blocks commit one by one in an order that keeps every
 * service old or new (`SyncInputs`), plus, for a chunked full sync, inputs
 * or a partial sync too big for one iptables-nft input, inputs before it
 * that fill chains no rule uses yet and inputs after it that delete the
 * ones left behind. The first sync, a sync after a failure and
 * every `request.full` sync rewrite everything kproxy owns; other syncs
 * write only the chains that changed.
 *
 * @module
 */

import { getLogger } from "../../lib/core/logger.ts";
import {
  type Backend,
  type CleanupOptions,
  IPTABLES_COUNTED_TABLES,
  type IptablesRuleCount,
  type KernelInspection,
  type SyncRequest,
  type SyncResult,
} from "../../lib/core/backend.ts";
import type { Config } from "../../lib/config/types.ts";
import { isMissingProgram, runChecked } from "../../lib/shell/exec.ts";
import { ChainRuleCounts } from "./rule_counts.ts";
import { CountersUnavailableError } from "../../lib/core/backend.ts";
import type { ServiceCounterSample } from "../../lib/core/service_counters.ts";
import {
  isFamilyNfacct,
  NFACCT_NAME,
  nfacctRestoreInput,
  nfacctSamples,
  parseNfacctList,
  planNfacctNames,
} from "./counters.ts";
import type { Executor } from "../../lib/core/executor.ts";
import type { IpFamily } from "../../lib/core/model.ts";
import { findServicePort, type Plan } from "../../lib/core/plan.ts";
import { setSysctls } from "../../lib/shell/sysctl.ts";
import { GarbageBudget } from "../../lib/shell/list_garbage.ts";
import {
  BASE_JUMPS,
  type BaseJump,
  baseJumpArgs,
  Chains,
  type IptablesTable,
  isIptablesModeChain,
  LOCALHOST_FIREWALL_JUMPS,
  missingJumps,
} from "./chains.ts";
import { removeChains } from "./cleanup.ts";
import {
  detectVariant,
  type IptablesPrograms,
  iptablesPrograms,
  type IptablesVariant,
} from "./detect.ts";
import {
  fullSyncInputs,
  type FullSyncStream,
  inputText,
  type KernelChains,
  renderFull,
  type SyncInputs,
} from "./render.ts";
import type { IptablesRenderOptions } from "./rules.ts";
import { isLargeCluster } from "./service_chains.ts";
import { parseSavedChains, parseSavedTargets } from "./save.ts";
import { renderPartialSync } from "./partial.ts";
import type { IptablesRestoreScript } from "./script.ts";
import { iptablesServiceOf, parseIptablesSave } from "./save.ts";

const logger = getLogger(["kproxy", "iptables"]);

/** Seconds iptables waits for the xtables lock. */
const LOCK_WAIT_SECONDS = "5";
const RESTORE_ARGS = ["-w", LOCK_WAIT_SECONDS, "--noflush", "--counters"];
/** A full restore at tens of thousands of services takes tens of seconds with iptables-nft. */
const RESTORE_TIMEOUT_MS = 300_000;
const NFT_CHAINS_PER_RESTORE = 2000;
/** Restore input between two full collections during a sync, at least. */
const GARBAGE_MIN_BYTES = 1024 * 1024;
const CANARY_TABLES: readonly IptablesTable[] = ["mangle", "nat", "filter"];
/** One read of every nfacct object of the namespace. */
const NFACCT_LIST = { program: "nfacct", args: ["list"] };

/** Options of {@linkcode createIptablesBackend}. */
export interface IptablesBackendOptions {
  /** Runs every program; wrap it (e.g. `ip netns exec NS`) to act elsewhere. */
  executor: Executor;
  config: Config;
  /** Families this backend programs; plans of other families are ignored. @default {["IPv4", "IPv6"]} */
  families?: IpFamily[];
  /**
   * Per-service chains per iptables-nft-restore input on full and partial
   * syncs: its time is quadratic in the chains declared in one input (see
   * `renderFullSync`, `renderPartialSync`).
   * @default {2000}
   */
  nftChainsPerRestore?: number;
  /**
   * Full collections while a sync runs: one each time `minBytes` of restore
   * input (or a quarter of all so far) went out since the last. The inputs'
   * rules and text are promoted to V8's old generation while the next input
   * renders and are freed only by a full collection.
   * @default {{ minBytes: 1 MiB, collect: V8's full collection }}
   */
  garbage?: { minBytes: number; collect?: () => void };
}

/**
 * Creates the iptables backend (`mode: "iptables"`).
 *
 * @example Usage
 * ```ts ignore
 * const backend = createIptablesBackend({ executor, config });
 * await backend.sync({ plans, changed: new Set(), full: true });
 * ```
 */
export function createIptablesBackend(options: IptablesBackendOptions): Backend {
  return new IptablesBackend(options);
}

/** What one family's sync applied. */
interface Applied {
  rules: number;
  /** The restore inputs run. */
  inputs: number;
  /** Rules appended per counted table. */
  written: Record<(typeof IPTABLES_COUNTED_TABLES)[number], number>;
}

/**
 * Brings `counts` (rules per `table chain` kproxy owns) up to date with a
 * script just applied: a declared chain is flushed, appended rules add, a
 * deleted chain goes. Adds the rules it appended per table to `written`.
 */
function countChainRules(
  counts: ChainRuleCounts,
  script: IptablesRestoreScript,
  written: Applied["written"],
): void {
  for (const table of IPTABLES_COUNTED_TABLES) {
    for (const chain of script.chainNames(table)) counts.flushed(table, chain);
    for (const [chain, rules] of script.appendedRules(table)) {
      counts.appended(table, chain, rules);
      written[table] += rules;
    }
    for (const chain of script.deletedChains(table)) counts.deleted(table, chain);
  }
}

class IptablesBackend implements Backend {
  readonly mode = "iptables";
  readonly #executor: Executor;
  readonly #config: Config;
  readonly #families: ReadonlySet<IpFamily>;
  readonly #renderOptions: IptablesRenderOptions;
  readonly #nftChainsPerRestore: number;
  readonly #garbage: { minBytes: number; collect?: () => void };
  #variant?: IptablesVariant;
  /** Plans the kernel holds, per family; absent means the next sync must be full. */
  readonly #applied = new Map<IpFamily, Plan>();
  /** Per family, upstream names of the per-service chains living under their alternate name. */
  readonly #alternates = new Map<IpFamily, ReadonlySet<string>>();
  /** Per family, the rules in each chain kproxy owns (`table chain`), for the rule gauges. */
  readonly #chainRules = new Map<IpFamily, ChainRuleCounts>();
  #routeLocalnetSet = false;
  /** Whether the other variant still has to be rid of this mode's chains (kube-proxy's or kproxy's). */
  #otherVariantPending = true;

  constructor(options: IptablesBackendOptions) {
    this.#executor = options.executor;
    this.#config = options.config;
    this.#families = new Set(options.families ?? ["IPv4", "IPv6"]);
    this.#nftChainsPerRestore = options.nftChainsPerRestore ?? NFT_CHAINS_PER_RESTORE;
    this.#garbage = options.garbage ?? { minBytes: GARBAGE_MIN_BYTES };
    this.#renderOptions = {
      masqueradeBit: options.config.iptables.masqueradeBit,
      localhostNodePorts: options.config.iptables.localhostNodePorts,
      conntrackTcpBeLiberal: options.config.conntrack.tcpBeLiberal,
    };
  }

  async preflight(): Promise<void> {
    if (!this.#config.serviceCounters) return;
    try {
      await this.#listNfacct();
    } catch (error) {
      if (!isMissingProgram(error)) throw error;
      throw new CountersUnavailableError(
        "Cannot count Service traffic in iptables mode: nfacct is not installed " +
          "(install it, or set --service-counters=false)",
      );
    }
  }

  async readServiceCounters(
    plans: readonly Plan[] = [...this.#applied.values()],
  ): Promise<ServiceCounterSample[]> {
    if (!plans.some((plan) => plan.serviceCounters === true)) return [];
    return nfacctSamples(plans, await this.#listNfacct());
  }

  async #listNfacct(): Promise<Map<string, number>> {
    return parseNfacctList((await runChecked(this.#executor, NFACCT_LIST)).stdout);
  }

  /** Creates the nfacct objects in `names` in one `nfacct restore`; none may exist yet. */
  async #addNfacct(names: ReadonlySet<string>): Promise<void> {
    if (names.size === 0) return;
    await runChecked(this.#executor, {
      program: "nfacct",
      args: ["restore"],
      stdin: nfacctRestoreInput(names),
    });
  }

  /** Deletes nfacct objects no rule names any more; one still in use is left for the next full sync. */
  async #deleteNfacct(names: Iterable<string>): Promise<void> {
    for (const name of names) {
      const result = await this.#executor.run({ program: "nfacct", args: ["del", name] });
      if (result.code !== 0) {
        logger.debug("Cannot delete nfacct object {name}: {stderr}", {
          name,
          stderr: result.stderr.trim(),
        });
      }
    }
  }

  async sync(request: SyncRequest): Promise<SyncResult> {
    const variant = await this.#resolveVariant();
    const parts: string[] = [];
    let full = false;
    const iptablesRules: IptablesRuleCount[] = [];
    for (const plan of request.plans) {
      if (!this.#families.has(plan.family)) continue;
      const programs = iptablesPrograms(variant, plan.family);
      const previous = this.#applied.get(plan.family);
      this.#applied.delete(plan.family);
      const counted = this.#chainRules.get(plan.family);
      this.#chainRules.delete(plan.family);
      // Entering or leaving large cluster mode changes the rules of every service.
      const rewriteAll = request.full || !previous ||
        isLargeCluster(previous) !== isLargeCluster(plan);
      // After a partial sync the counts start from the last ones; a full sync rewrites every chain.
      const counts = rewriteAll ? new ChainRuleCounts() : counted;
      const applied = rewriteAll
        ? await this.#syncFull(plan, programs, {
          hadCounters: previous?.serviceCounters === true,
          counts: counts!,
        })
        : await this.#syncPartial(
          { previous, next: plan, changed: request.changed },
          programs,
          counts ?? new ChainRuleCounts(),
        );
      this.#applied.set(plan.family, plan);
      full ||= rewriteAll;
      const kind = rewriteAll ? "full" : "partial";
      if (counts !== undefined) {
        this.#chainRules.set(plan.family, counts);
        for (const table of IPTABLES_COUNTED_TABLES) {
          iptablesRules.push({
            family: plan.family,
            table,
            written: applied.written[table],
            total: counts.total(table),
          });
        }
      }
      parts.push(
        `${plan.family}: ${plan.services.length} services, ${applied.rules} rules in ${applied.inputs} scripts (${kind})`,
      );
    }
    if (full && this.#otherVariantPending) await this.#cleanOtherVariant(variant);
    return { full, summary: parts.join("; "), iptablesRules };
  }

  /**
   * Once this variant holds the rules, removes the mode's chains from the
   * other one (a kube-proxy that used legacy binaries while kproxy uses nft):
   * they would still hook the same packets. Retried after the next full sync
   * when it fails.
   */
  async #cleanOtherVariant(variant: IptablesVariant): Promise<void> {
    try {
      await removeChains(this.#executor, {
        owns: isIptablesModeChain,
        owner: "iptables mode",
        families: [...this.#families],
        variants: [variant === "nft" ? "legacy" : "nft"],
      });
      this.#otherVariantPending = false;
    } catch (error) {
      logger.warn(
        "Cannot remove the iptables mode's chains from the other iptables variant: {error}",
        {
          error,
        },
      );
    }
  }

  async checkDrift(): Promise<boolean> {
    if (this.#variant === undefined) return false;
    for (const family of this.#applied.keys()) {
      const { iptables } = iptablesPrograms(this.#variant, family);
      for (const table of CANARY_TABLES) {
        const result = await this.#executor.run({
          program: iptables,
          args: ["-w", LOCK_WAIT_SECONDS, "-t", table, "-n", "-L", Chains.canary],
        });
        if (result.code !== 0) {
          logger.warn("Canary chain {chain} missing in {family} table {table}: rules drifted", {
            chain: Chains.canary,
            family,
            table,
          });
          return true;
        }
      }
    }
    return false;
  }

  inspect(plans: Plan[]): KernelInspection {
    const variant = this.#config.iptables.backend === "legacy" ? "legacy" : "nft";
    const mine = plans.filter((plan) => this.#families.has(plan.family));
    // The rules name nfacct objects, which must exist before they load.
    const counters = new Set(mine.flatMap((plan) => [...planNfacctNames(plan)]));
    return {
      load: [
        ...(counters.size === 0
          ? []
          : [{ program: "nfacct", args: ["restore"], stdin: nfacctRestoreInput(counters) }]),
        ...mine.map((plan) => ({
          program: iptablesPrograms(variant, plan.family).restore,
          args: ["-w", "5"],
          stdin: renderFull(plan, this.#renderOptions).toString(),
        })),
      ],
      list: mine.map((plan) => ({
        program: iptablesPrograms(variant, plan.family).save,
        args: [],
      })),
      parse: parseIptablesSave,
      serviceOf: iptablesServiceOf,
    };
  }

  async cleanup(options: CleanupOptions = {}): Promise<void> {
    this.#applied.clear();
    this.#chainRules.clear();
    this.#alternates.clear();
    await removeChains(this.#executor, {
      owns: isIptablesModeChain,
      keep: options.keepChains,
      owner: "iptables mode",
    });
    const counters = this.#listNfacct().catch(() => new Map<string, number>())
      .then((listed) =>
        this.#deleteNfacct([...listed.keys()].filter((name) => NFACCT_NAME.test(name)))
      );
    if (options.defer) options.defer(counters);
    else await counters;
  }

  async #resolveVariant(): Promise<IptablesVariant> {
    if (this.#variant === undefined) {
      this.#variant = await detectVariant(this.#executor, this.#config.iptables.backend);
      logger.info("Using iptables {variant} binaries", { variant: this.#variant });
    }
    return this.#variant;
  }

  async #syncFull(
    plan: Plan,
    programs: IptablesPrograms,
    options: { hadCounters: boolean; counts: ChainRuleCounts },
  ): Promise<Applied> {
    const localhost = plan.family === "IPv4" && this.#renderOptions.localhostNodePorts === true;
    if (localhost && !this.#routeLocalnetSet) {
      await setSysctls(this.#executor, { "net.ipv4.conf.all.route_localnet": "1" });
      this.#routeLocalnetSet = true;
    }
    const jumps: BaseJump[] = [...BASE_JUMPS, ...(localhost ? LOCALHOST_FIREWALL_JUMPS : [])];
    const { kernel, known, insertJumps } = await this.#readTables(programs, jumps);
    const counters = planNfacctNames(plan);
    // With counters off from the start nfacct is not run at all: objects an
    // earlier process left go with --cleanup.
    const existing = plan.serviceCounters === true || options.hadCounters
      ? new Set((await this.#listNfacct()).keys())
      : new Set<string>();
    await this.#addNfacct(new Set([...counters].filter((name) => !existing.has(name))));
    const stream = fullSyncInputs(plan, {
      ...this.#renderOptions,
      kernel,
      insertJumps,
      maxChainsPerChunk: this.#maxChainsPerChunk(),
    });
    const applied = await this.#apply(programs, stream, options.counts);
    this.#alternates.set(plan.family, applied.alternates);
    for (const jump of jumps) {
      if (!known.includes(jump)) await this.#ensureJump(programs, jump);
    }
    await this.#deleteNfacct(
      [...existing].filter((name) => isFamilyNfacct(name, plan.family) && !counters.has(name)),
    );
    return applied;
  }

  /**
   * What a full sync needs from the nat and filter tables, read with one
   * save per table (which replaces a -C per jump: each reads the whole
   * table); the saved text is not kept.
   */
  async #readTables(programs: IptablesPrograms, jumps: readonly BaseJump[]): Promise<{
    kernel: KernelChains;
    known: BaseJump[];
    insertJumps: BaseJump[];
  }> {
    const nat = await this.#save(programs, "nat");
    const filter = await this.#save(programs, "filter");
    const known = jumps.filter((jump) => (jump.table === "nat" ? nat : filter) !== undefined);
    const read = {
      kernel: {
        nat: parseSavedChains(nat ?? ""),
        natTargets: parseSavedTargets(nat ?? ""),
        filter: parseSavedChains(filter ?? ""),
      },
      known,
      insertJumps: missingJumps({ nat, filter }, known),
    };
    // A node's tables of 1k Services are ~3.4 MB of saved text, dead once
    // parsed: collected now, it is not under the restore input rendered next.
    new GarbageBudget({ ...this.#garbage, share: 0 }).spent(
      (nat?.length ?? 0) + (filter?.length ?? 0),
    );
    return read;
  }

  /**
   * Runs a sync's inputs in order: staging (each rendered once the one
   * before it ran), the switching input, cleanup; counts each input's rules
   * into `counts` once it ran.
   */
  async #apply(
    programs: IptablesPrograms,
    sync: SyncInputs | FullSyncStream,
    counts: ChainRuleCounts,
  ): Promise<Applied & { alternates: Set<string> }> {
    const applied: Applied = { rules: 0, inputs: 0, written: { filter: 0, nat: 0 } };
    const garbage = new GarbageBudget({ ...this.#garbage, share: 1 / 4 });
    const run = async (blocks: readonly IptablesRestoreScript[], writes: boolean) => {
      if (blocks.length === 0) return;
      garbage.spent(await this.#restore(programs, blocks));
      applied.inputs++;
      for (const script of blocks) {
        if (writes) applied.rules += script.ruleCount;
        countChainRules(counts, script, applied.written);
      }
    };
    for (const script of sync.staging) await run([script], true);
    const rest = "finish" in sync ? sync.finish() : sync;
    await run(rest.commit, true);
    for (const script of rest.cleanup) await run([script], false);
    return { ...applied, alternates: rest.alternates };
  }

  /** Restores only what changed, chunked like a full sync when it declares too many chains. */
  async #syncPartial(
    change: { previous: Plan; next: Plan; changed: ReadonlySet<string> },
    programs: IptablesPrograms,
    counts: ChainRuleCounts,
  ): Promise<Applied> {
    const sync = renderPartialSync(change, {
      ...this.#renderOptions,
      alternates: this.#alternates.get(change.next.family),
      maxChainsPerChunk: this.#maxChainsPerChunk(),
    });
    const changedPorts = (plan: Plan) =>
      [...change.changed].sort().flatMap((id) => findServicePort(plan, id) ?? []);
    const before = planNfacctNames(change.previous, changedPorts(change.previous));
    const after = planNfacctNames(change.next, changedPorts(change.next));
    await this.#addNfacct(new Set([...after].filter((name) => !before.has(name))));
    const applied = await this.#apply(programs, sync, counts);
    this.#alternates.set(change.next.family, applied.alternates);
    await this.#deleteNfacct([...before].filter((name) => !after.has(name)));
    return applied;
  }

  /** iptables-legacy-restore rewrites whole tables: only the nft variant gains from chunks. */
  #maxChainsPerChunk(): number {
    return this.#variant === "nft" ? this.#nftChainsPerRestore : Infinity;
  }

  async #save(programs: IptablesPrograms, table: IptablesTable): Promise<string | undefined> {
    const result = await this.#executor.run({ program: programs.save, args: ["-t", table] });
    if (result.code === 0) return result.stdout;
    logger.warn("Cannot read table {table} with {program}: {stderr}", {
      table,
      program: programs.save,
      stderr: result.stderr.trim(),
    });
    return undefined;
  }

  /**
   * Runs one iptables-restore input made of `blocks` and returns its length;
   * a block with a pending error runs nothing.
   */
  async #restore(
    programs: IptablesPrograms,
    blocks: readonly IptablesRestoreScript[],
  ): Promise<number> {
    const error = blocks.find((script) => script.error)?.error;
    if (error) throw error;
    const stdin = inputText(blocks);
    await runChecked(this.#executor, {
      program: programs.restore,
      args: RESTORE_ARGS,
      stdin,
      timeoutMs: RESTORE_TIMEOUT_MS,
    });
    return stdin.length;
  }

  async #ensureJump(programs: IptablesPrograms, jump: BaseJump): Promise<void> {
    const rule = baseJumpArgs(jump);
    const base = [programs.iptables, ["-w", LOCK_WAIT_SECONDS, "-t", jump.table]] as const;
    const check = await this.#executor.run({
      program: base[0],
      args: [...base[1], "-C", jump.from, ...rule],
    });
    if (check.code === 0) return;
    await runChecked(this.#executor, {
      program: base[0],
      args: [...base[1], "-I", jump.from, ...rule],
    });
  }
}
