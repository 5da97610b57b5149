/**
 * The nftables proxy mode: renders Plans with `render.ts` and applies every
 * family in ONE `nft -f -` call per sync, wrapped by `atomic.ts` so that an
 * input cut short by a dying writer commits nothing (the first sync on a
 * node without kproxy's tables excepted: it loads in stages, see
 * {@linkcode NftablesBackendOptions.stagedLoad}). It keeps its own record
 * of what the kernel holds (the last applied plans) and never reads the
 * tables back on a sync; drift is checked on a one-element canary set, then
 * on the skeleton chains (`drift.ts`).
 *
 * @module
 */

import { getLogger } from "../../lib/core/logger.ts";
import type { Backend, KernelInspection, SyncRequest, SyncResult } from "../../lib/core/backend.ts";
import type { Config } from "../../lib/config/types.ts";
import { isMissingProgram, runChecked } from "../../lib/shell/exec.ts";
import type { Executor } from "../../lib/core/executor.ts";
import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { atomicInput, guardTable, renderArm, renderGuard } from "./atomic.ts";
import { SkeletonCheck } from "./drift.ts";
import { renderDeleteTable, renderFull, stageTable, type StagingTable } from "./render.ts";
import { existingTables } from "./table_probe.ts";
import {
  CANARY_SET,
  estimateElements,
  parseCanaryGeneration,
  skeletonRuleCounts,
} from "./skeleton.ts";
import { DEFAULT_TABLE, nftFamily, type RenderOptions, tableRef } from "./context.ts";
import { renderIncremental } from "./incremental.ts";
import type { TableRef, Transaction } from "./transaction.ts";
import { nftServiceOf, parseNftListing } from "./listing.ts";
import {
  type CountedElements,
  listCountedSets,
  nftCounterSamples,
  parseCountedSet,
} from "./counters.ts";
import type { ServiceCounterSample } from "../../lib/core/service_counters.ts";

const logger = getLogger(["kproxy", "nftables"]);

/** Options for {@linkcode createNftablesBackend}. */
export interface NftablesBackendOptions {
  executor: Executor;
  config: Config;
  /** Families this backend programs; plans of other families are ignored. @default {["IPv4", "IPv6"]} */
  families?: IpFamily[];
  /** Table name in each family. @default {"kproxy"} */
  table?: string;
  /** Largest share of time the skeleton drift check may take. @default {0.05} */
  driftCheckBudget?: number;
  /**
   * Tables of the program this mode replaces (kube-proxy's `kube-proxy`), in
   * each family: deleted in the same `nft -f` as the first full write, so no
   * packet ever sees neither ruleset, and by `cleanup()`. @default {[]}
   */
  replacedTables?: readonly string[];
  /**
   * The first full sync into a kernel that holds no kproxy table (a node
   * just booted) is loaded in stages when the plans hold at least
   * `minElements` set and map elements: the table without base chains,
   * then its elements in `parts` `nft` processes at once, then the base
   * chains, with the replaced tables' deletion, in one guarded batch. No
   * packet passes the table before that last batch, and the one-transaction
   * load's time is nft parsing elements, in one process. `parts` below 2
   * turns it off.
   * @default {{ minElements: 8192, parts: the CPUs, 2 to 4 }}
   */
  stagedLoad?: StagedLoadOptions;
}

/** See {@linkcode NftablesBackendOptions.stagedLoad}. */
export interface StagedLoadOptions {
  minElements: number;
  parts: number;
}

/** Waits for every one of `work`, then throws the first failure. */
async function settled(work: readonly (Promise<unknown> | undefined)[]): Promise<void> {
  const failed = (await Promise.allSettled(work)).find((result) => result.status === "rejected");
  if (failed !== undefined) throw failed.reason;
}

/** Resolves after `ms` on the event loop. */
function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * One nft input of `transactions` that says when it was read to its end:
 * {@linkcode nextRead} resolves at the first reading completed after it is
 * called (a command policy may read an input whole before the writer does).
 */
class ReadInput implements Iterable<string> {
  readonly #transactions: readonly Transaction[];
  #waiting?: PromiseWithResolvers<void>;

  constructor(transactions: readonly Transaction[]) {
    this.#transactions = transactions;
  }

  *[Symbol.iterator](): Iterator<string> {
    for (const tx of this.#transactions) yield* tx.chunks();
    this.#waiting?.resolve();
  }

  nextRead(): Promise<void> {
    this.#waiting = Promise.withResolvers();
    return this.#waiting.promise;
  }
}

function defaultStagedLoad(): StagedLoadOptions {
  return { minElements: 8192, parts: Math.min(4, Math.max(2, navigator.hardwareConcurrency)) };
}

/**
 * Creates the nftables backend.
 *
 * @example Usage
 * ```ts ignore
 * const backend = createNftablesBackend({ executor, config });
 * await backend.sync({ plans, changed: new Set(), full: true });
 * ```
 */
export function createNftablesBackend(options: NftablesBackendOptions): Backend {
  return new NftablesBackend(options);
}

class NftablesBackend implements Backend {
  readonly mode = "nftables";
  readonly #executor: Executor;
  readonly #config: Config;
  readonly #families: ReadonlySet<IpFamily>;
  readonly #table: string;
  readonly #guard: TableRef;
  /** Whether the kernel was asked to refuse an armed guard (once per process, after the first sync). */
  #guardChecked = false;
  /** That check while it runs: the next sync waits for it, so no load runs beside it. */
  #guardCheck?: Promise<void>;
  /** The warm-up, once started: the first sync waits for it. */
  #warming?: Promise<void>;
  /** Whether the warm-up set up the guard, so the next full sync need not. */
  #guardReady = false;
  /** The replaced tables the warm-up found, for the first full write's log. */
  #replacedFound?: string[];
  /** What the kernel holds, per family: the last successfully applied plans. */
  #applied = new Map<IpFamily, Plan>();
  #needFull = true;
  #generation = 0;
  readonly #skeleton: SkeletonCheck;
  readonly #replacedTables: readonly string[];
  /** Replaced tables still to delete with the next full write. */
  #replacing: boolean;
  readonly #staging: StagedLoadOptions;
  /** Whether the warm-up found none of kproxy's tables, and nothing was loaded since. */
  #tablesAbsent = false;

  constructor(options: NftablesBackendOptions) {
    this.#executor = options.executor;
    this.#config = options.config;
    this.#families = new Set(options.families ?? ["IPv4", "IPv6"]);
    this.#table = options.table ?? DEFAULT_TABLE;
    this.#replacedTables = options.replacedTables ?? [];
    this.#replacing = this.#replacedTables.length > 0;
    this.#guard = guardTable(this.#table);
    this.#staging = options.stagedLoad ?? defaultStagedLoad();
    this.#skeleton = new SkeletonCheck({
      executor: options.executor,
      budget: options.driftCheckBudget,
    });
  }

  #renderOptions(generation: number): RenderOptions {
    return {
      table: this.#table,
      masqueradeMark: 1 << this.#config.nftables.masqueradeBit,
      generation,
      dropInvalid: !this.#config.conntrack.tcpBeLiberal,
    };
  }

  async readServiceCounters(
    plans: readonly Plan[] = [...this.#applied.values()],
  ): Promise<ServiceCounterSample[]> {
    const counted = plans.filter((plan) => plan.serviceCounters === true);
    const elements = new Map<IpFamily, CountedElements>();
    for (const plan of counted) {
      const sets: CountedElements = new Map();
      for (const { set, command } of listCountedSets(plan, this.#table)) {
        sets.set(set, parseCountedSet((await runChecked(this.#executor, command)).stdout));
      }
      elements.set(plan.family, sets);
    }
    return nftCounterSamples(counted, (plan) => elements.get(plan.family)!);
  }

  /**
   * Sets up and checks the load guard (57–131 ms of `nft` at start-up, measured:
   * its hook's registration) and looks for the tables the first full write
   * replaces.
   */
  warmUp(): Promise<void> {
    this.#warming ??= Promise.all([
      this.#prepareGuard().then(
        () => {
          this.#guardReady = true;
        },
        (error) => {
          logger.debug("Cannot set up the nftables load guard before the first sync: {error}", {
            error,
          });
        },
      ),
      this.#replacing
        ? this.#existing(this.#replacedTables).then(
          (found) => {
            this.#replacedFound = found;
          },
          () => {},
        )
        : undefined,
      this.#staging.parts >= 2
        ? this.#existing([this.#table], this.#nftFamilies()).then(
          (found) => {
            this.#tablesAbsent = found.length === 0;
          },
          () => {},
        )
        : undefined,
    ]).then(() => {});
    return this.#warming;
  }

  async sync(request: SyncRequest): Promise<SyncResult> {
    await this.#guardCheck;
    await this.#warming;
    const plans = request.plans.filter((plan) => this.#families.has(plan.family));
    const generation = this.#generation + 1;
    const options = this.#renderOptions(generation);
    let full = request.full || this.#needFull;
    let transactions: Transaction[] = [];
    if (!full) {
      for (const plan of plans) {
        const previous = this.#applied.get(plan.family);
        const tx = previous === undefined
          ? undefined
          : renderIncremental({ plan, previous, changed: request.changed }, options);
        if (tx === undefined) {
          full = true;
          break;
        }
        transactions.push(tx);
      }
    }
    const staged = full && this.#stages(plans)
      ? plans.map((plan) => stageTable(plan, options))
      : undefined;
    if (staged !== undefined) {
      transactions = staged.flatMap(({ setup, hooks }) => [setup, hooks]);
    } else if (full) transactions = plans.map((plan) => renderFull(plan, options));
    const replacing = full && this.#replacing;
    // Only for the log: the deletions below hold whether or not the tables exist.
    const replaced = replacing
      ? this.#replacedFound ?? await this.#existing(this.#replacedTables).catch(() => [])
      : [];
    const deletions = replacing ? this.#deleteTables(this.#replacedTables) : [];
    transactions.push(...deletions);
    const error = transactions.find((tx) => tx.error !== undefined)?.error;
    if (error !== undefined) {
      this.#needFull = true;
      throw error;
    }
    try {
      this.#tablesAbsent = false;
      if (staged !== undefined) {
        transactions = [...await this.#loadStaged(staged, deletions), ...deletions];
      } else if (transactions.some((tx) => !tx.empty)) {
        if (full && !this.#guardReady) await this.#prepareGuard();
        this.#guardReady = false;
        const stdin = atomicInput(transactions, this.#guard);
        await runChecked(this.#executor, { program: "nft", args: ["-f", "-"], stdin });
      }
    } catch (cause) {
      this.#needFull = true;
      throw cause;
    }
    this.#generation = generation;
    if (replacing) {
      this.#replacing = false;
      for (const table of replaced) {
        logger.info("Removed nftables table {table} in the transaction of the first sync", {
          table,
        });
      }
    }
    if (full) this.#skeleton.reset();
    this.#needFull = false;
    if (!this.#guardChecked) {
      this.#guardChecked = true;
      this.#guardCheck = this.#checkGuard().catch((error) => {
        logger.debug("Cannot check that the kernel refuses an armed load guard: {error}", {
          error,
        });
      });
    }
    this.#applied = new Map(plans.map((plan) => [plan.family, plan]));
    const lines = transactions.reduce((sum, tx) => sum + tx.length, 0);
    const services = plans.reduce((sum, plan) => sum + plan.services.length, 0);
    const summary = full
      ? `${services} service ports, full, ${lines} operations`
      : `${request.changed.size} changed service ports, ${lines} operations`;
    logger.debug("Applied nftables {kind} sync: {summary}", {
      kind: full ? (staged === undefined ? "full" : "staged full") : "partial",
      summary,
    });
    return { full, summary };
  }

  /** Whether this full sync of `plans` loads in stages (see {@linkcode StagedLoadOptions}). */
  #stages(plans: readonly Plan[]): boolean {
    if (!this.#tablesAbsent || this.#applied.size > 0 || this.#staging.parts < 2) return false;
    return plans.reduce((sum, plan) => sum + estimateElements(plan), 0) >=
      this.#staging.minElements;
  }

  /**
   * Loads `staged` tables: every set-up in one batch, while the service ports
   * are rendered (nft parses and commits the set-up meanwhile); then their
   * objects, if any; the element parts in processes of their own at once;
   * then every table's hooks and the `deletions` in one guarded batch. A
   * failure before the hooks leaves tables no packet passes; the next full
   * sync replaces them in one batch. Returns the transactions loaded, but
   * for `deletions`.
   */
  async #loadStaged(
    staged: readonly StagingTable[],
    deletions: readonly Transaction[],
  ): Promise<Transaction[]> {
    const load = (transactions: readonly Transaction[]) => this.#load(new ReadInput(transactions));
    const ready = this.#guardReady;
    this.#guardReady = false;
    const setup = new ReadInput(staged.map((table) => table.setup));
    const setupLoaded = settled([ready ? undefined : this.#prepareGuard(), this.#load(setup)]);
    let rest: { services: Transaction; elements: Transaction[] }[];
    try {
      // Once nft has the whole set-up (and its end), the render below keeps the event loop busy.
      await Promise.race([setup.nextRead().then(() => delay(0)), setupLoaded]);
      rest = staged.map((table) => table.rest(this.#staging.parts));
    } finally {
      await setupLoaded;
    }
    const rendered = rest.flatMap(({ services, elements }) => [services, ...elements]);
    const error = rendered.find((tx) => tx.error !== undefined)?.error;
    if (error !== undefined) throw error;
    const services = rest.map((table) => table.services).filter((tx) => !tx.empty);
    if (services.length > 0) await load(services);
    // Every part ends before this sync does: a part left running could add
    // its elements to the table the next sync writes.
    await settled(
      Array.from(
        { length: this.#staging.parts },
        (_, part) => rest.map((table) => table.elements[part]!).filter((tx) => !tx.empty),
      ).filter((part) => part.length > 0).map(load),
    );
    await runChecked(this.#executor, {
      program: "nft",
      args: ["-f", "-"],
      stdin: atomicInput([...staged.map((table) => table.hooks), ...deletions], this.#guard),
    });
    return [...staged.map((table) => table.setup), ...rendered, ...staged.map((t) => t.hooks)];
  }

  /** Runs `nft -f -` on `input`. */
  #load(input: Iterable<string>) {
    return runChecked(this.#executor, { program: "nft", args: ["-f", "-"], stdin: input });
  }

  /** The nftables families of the IP families this backend programs. */
  #nftFamilies(): string[] {
    return [...this.#families].map((family) => nftFamily(family));
  }

  /** Sets up the load guard in a batch of its own (see `atomic.ts`). */
  async #prepareGuard(): Promise<void> {
    await runChecked(this.#executor, {
      program: "nft",
      args: ["-f", "-"],
      stdin: renderGuard(this.#guard).toString(),
    });
  }

  /**
   * Asks the kernel, without committing (`nft -c`), to refuse an armed guard:
   * a kernel that accepts one would commit a cut-short input. Only a warning
   * comes of it, so it runs once the first rules are in, not on their way
   * (on 2 CPUs it competed with the initial lists for ~50 ms).
   */
  async #checkGuard(): Promise<void> {
    const probe = await this.#executor.run({
      program: "nft",
      args: ["-c", "-f", "-"],
      stdin: renderArm(this.#guard).toString(),
    });
    if (probe.code === 0) {
      logger.warn(
        "The kernel accepted an armed nftables load guard: a sync cut short may leave a partial table",
      );
    }
  }

  async checkDrift(): Promise<boolean> {
    for (const family of this.#applied.keys()) {
      const { family: nftFamily, table } = tableRef(family, this.#table);
      const result = await this.#executor.run({
        program: "nft",
        args: ["list", "set", nftFamily, table, CANARY_SET],
      });
      const generation = result.code === 0 ? parseCanaryGeneration(result.stdout) : undefined;
      if (generation !== this.#generation) {
        logger.info(
          "nftables table {family} {table} drifted: canary generation {found}, expected {expected}",
          {
            family: nftFamily,
            table,
            found: generation ?? "missing",
            expected: this.#generation,
          },
        );
        this.#needFull = true;
        return true;
      }
    }
    if (!this.#skeleton.due) return false;
    const drift = await this.#skeleton.check(
      [...this.#applied.values()].map((plan) => ({
        ref: tableRef(plan.family, this.#table),
        ruleCounts: skeletonRuleCounts(plan, this.#renderOptions(this.#generation)),
        elements: estimateElements(plan),
      })),
    );
    if (drift === undefined) return false;
    logger.info("nftables {drift}", { drift });
    this.#needFull = true;
    return true;
  }

  inspect(plans: Plan[]): KernelInspection {
    const mine = plans.filter((plan) => this.#families.has(plan.family));
    return {
      load: [{
        program: "nft",
        args: ["-f", "-"],
        stdin: mine.map((plan) => renderFull(plan, this.#renderOptions(0)).toString()).join(""),
      }],
      list: mine.map((plan) => ({
        program: "nft",
        args: ["list", "table", nftFamily(plan.family), this.#table],
      })),
      parse: (text) => parseNftListing(text),
      serviceOf: nftServiceOf(plans),
    };
  }

  /** Removes kproxy's tables and the replaced ones (kube-proxy's) that exist, in one transaction. */
  async cleanup(): Promise<void> {
    const tables = [this.#table, this.#guard.table, ...this.#replacedTables];
    let present: string[];
    try {
      present = await this.#existing(tables);
    } catch (error) {
      if (!isMissingProgram(error)) throw error;
      logger.debug("No nftables tables to remove: {error}", { error });
      present = [];
    }
    if (present.length > 0) {
      await runChecked(this.#executor, {
        program: "nft",
        args: ["-f", "-"],
        stdin: this.#deleteTables(tables, new Set(present)).map((tx) => tx.toString()).join(""),
      });
      for (const table of present) logger.info("Removed nftables table {table}", { table });
    }
    this.#applied.clear();
    this.#skeleton.reset();
    this.#needFull = true;
  }

  /** Deletions of `tables` in both families (only those in `only`, when given). */
  #deleteTables(tables: readonly string[], only?: ReadonlySet<string>): Transaction[] {
    return (["IPv4", "IPv6"] as const).flatMap((family) =>
      tables.filter((table) => only?.has(`${nftFamily(family)} ${table}`) ?? true)
        .map((table) => renderDeleteTable(family, table))
    );
  }

  /** Which of `tables` exist, as `family table`, in `families`. */
  #existing(tables: readonly string[], families = ["ip", "ip6"]): Promise<string[]> {
    return existingTables(this.#executor, families, tables);
  }
}
