/**
 * Frees the response buffers of list pages while a large list is read.
 *
 * `node:https` hands each list page over as many `Buffer`s whose bytes live
 * outside V8's heap. They survive a scavenge or two while the page is decoded,
 * are promoted, and are then only freed by a full collection, which V8 starts
 * by the size of its own heap, not by those bytes: at 10k services × 10 the
 * process held 50–60 MiB of dead page buffers at its peak. A full collection
 * every so many listed bytes frees them. The budget grows with what was listed,
 * so the collections' total cost stays proportional to the list (each costs
 * about the live heap, which grows with it too); one more at the end of a
 * list of a MiB or more frees its last pages before the first sync plans and
 * renders.
 *
 * {@linkcode GarbageBudget} does the same for other work whose garbage is
 * promoted before it dies (the iptables mode's restore inputs).
 *
 * V8's `gc` is global with kproxy's V8 flags (`--expose-gc`); without them,
 * `--expose-gc` set at run time installs a `gc` in contexts created
 * afterwards, such as `node:vm`'s ({@linkcode fullCollector}).
 *
 * @module
 */

/** Listed bytes between two collections, at least. */
const MIN_BUDGET = 16 * 1024 * 1024;

/** Of all bytes listed so far, the share read between two collections. */
const BUDGET_SHARE = 1 / 4;

/**
 * Listed bytes since the last collection below which a list's end collects
 * nothing: a collection costs about the whole live heap (~20 ms a
 * mark-compact at start-up), whatever a small list (the Node, the
 * ServiceCIDRs) left behind.
 */
const MIN_AT_END = 1024 * 1024;

/**
 * Deno's `gc` of a `node:vm` context, installed once `--expose-gc` is set at
 * run time. `node:v8` and `node:vm` are imported on the first call, so a
 * process with V8's own `gc` never starts Deno's Node compatibility layer;
 * the calls made while they load collect nothing.
 */
function contextCollector(): () => void {
  let viaContext: (() => void) | undefined;
  let loading: Promise<void> | undefined;
  return () => {
    if (viaContext !== undefined) return viaContext();
    loading ??= Promise.all([import("node:v8"), import("node:vm")]).then(([v8, vm]) => {
      v8.default.setFlagsFromString("--expose-gc");
      viaContext = vm.default.runInNewContext("gc") as () => void;
      viaContext();
    }).catch(() => {
      viaContext = () => {};
    });
  };
}

/**
 * A full collection: V8's own `gc` when the process runs with `--expose-gc`
 * (kproxy's V8 flags, `lib/shell/v8_flags.ts`), one mark-compact that keeps
 * the heap's pages; else the `gc` a `node:vm` context gets once
 * `--expose-gc` is set at run time, which in Deno is a low-memory
 * notification: two mark-compacts or more, each costing about the live heap
 * (measured with `--trace-gc`).
 */
export function fullCollector(
  scope: { gc?: unknown } = globalThis as { gc?: unknown },
): () => void {
  const own = scope.gc;
  return typeof own === "function" ? () => own() : contextCollector();
}

/**
 * A memory-reducing collection: two mark-compacts or more that also give the
 * heap's emptied pages back (V8's `last-resort` flavour; Deno's `node:vm`
 * `gc` without the flag). At the end of the 1k Services' lists the regular
 * one left V8's heap 39 MB committed where this one shrinks it to ~19 MB
 * (steady RSS 109 → 104.5 MiB, medians of 8 runs).
 */
export function reducingCollector(
  scope: { gc?: unknown } = globalThis as { gc?: unknown },
): () => void {
  const own = scope.gc;
  return typeof own === "function"
    ? () => own({ type: "major", execution: "sync", flavor: "last-resort" })
    : contextCollector();
}

let sharedCollection: (() => void) | undefined;
let sharedReduction: (() => void) | undefined;

function fullCollection(): void {
  sharedCollection ??= fullCollector();
  sharedCollection();
}

function reducingCollection(): void {
  sharedReduction ??= reducingCollector();
  sharedReduction();
}

/** Options of {@linkcode GarbageBudget}. */
export interface GarbageBudgetOptions {
  /** Bytes between two collections, at least. */
  minBytes: number;
  /** Of all bytes counted so far, the share between two collections. */
  share: number;
  /** Runs a full collection (tests pass a counter). @default {V8's full GC} */
  collect?: () => void;
}

/**
 * Runs a full collection each time enough bytes were handled since the last
 * one: at least `minBytes`, and at least `share` of all bytes so far, so the
 * collections' total cost stays proportional to the work.
 *
 * @example Usage
 * ```ts ignore
 * const garbage = new GarbageBudget({ minBytes: 2 * 1024 * 1024, share: 1 / 4 });
 * garbage.spent(input.length);
 * ```
 */
export class GarbageBudget {
  #total = 0;
  #sinceCollection = 0;
  readonly #minBytes: number;
  readonly #share: number;
  readonly #collect: () => void;

  constructor(options: GarbageBudgetOptions) {
    this.#minBytes = options.minBytes;
    this.#share = options.share;
    this.#collect = options.collect ?? fullCollection;
  }

  /** Records `bytes` handled; collects when the budget is spent. */
  spent(bytes: number): void {
    this.#total += bytes;
    this.#sinceCollection += bytes;
    if (this.#sinceCollection < Math.max(this.#minBytes, this.#total * this.#share)) return;
    this.#sinceCollection = 0;
    this.#collect();
  }

  /**
   * Collects what was handled since the last collection, if it is at least
   * `atLeast` (≥ 1) bytes, with `collect` (by default the budget's).
   */
  settle(atLeast = 1, collect: () => void = this.#collect): void {
    if (this.#sinceCollection < Math.max(1, atLeast)) return;
    this.#sinceCollection = 0;
    collect();
  }
}

/**
 * Counts listed bytes and runs a full collection when enough were read since
 * the last one (16 MiB, or a quarter of all listed).
 *
 * @example Usage
 * ```ts ignore
 * const garbage = new ListGarbage();
 * garbage.listed(pageText.length);
 * ```
 */
export class ListGarbage extends GarbageBudget {
  readonly #collectAtEnd: () => void;

  /**
   * `collect` runs a full collection while a list goes on, `collectAtEnd` when
   * it ends (tests pass counters): by default V8's regular one for both. The
   * memory-reducing one waits for the first sync ({@linkcode StartupRelease}):
   * run at the lists' ends, it gave back pages the first sync's plan and
   * ruleset text took again at once.
   */
  constructor(collect?: () => void, collectAtEnd?: () => void) {
    super({ minBytes: MIN_BUDGET, share: BUDGET_SHARE, collect: collect ?? fullCollection });
    this.#collectAtEnd = collectAtEnd ?? collect ?? fullCollection;
  }

  /** Records one page of `bytes` read; collects when the budget is spent. */
  listed(bytes: number): void {
    this.spent(bytes);
  }

  /** A list ended: collects what its pages left since the last collection, from 1 MiB up. */
  ended(): void {
    this.settle(MIN_AT_END, this.#collectAtEnd);
  }
}

/**
 * Heap in use from which the first sync's plan is collected before its ruleset
 * is rendered: at 10k Services × 10 (~75 MiB after the lists) that collection
 * lowered the first sync's peak by ~9 MiB (lab, 4 runs each); at 1k (~20 MiB)
 * there is little to gain for its ~15 ms.
 */
const BEFORE_APPLY_MIN_HEAP = 48 * 1024 * 1024;

/** What {@linkcode StartupRelease} collects before the first sync, for tests. */
export interface BeforeApplyCollection {
  /** A regular full collection. @default {V8's full GC} */
  collect?: () => void;
  /** Bytes of V8's heap in use. @default {Deno.memoryUsage().heapUsed} */
  heapUsed?: () => number;
}

/**
 * The start-up's garbage, once: a regular full collection before the first
 * sync is applied, when the lists left a large heap (the plan's working
 * garbage goes before the ruleset's text is made), and a memory-reducing one
 * after it, when the list pages and the first ruleset's text are garbage and
 * what stays is the state kproxy keeps; that one gives the emptied heap pages
 * back to the system.
 *
 * @example Usage
 * ```ts ignore
 * const release = new StartupRelease();
 * release.beforeApply(); // before every applied sync; collects before the first
 * release.afterSync(); // after every applied sync; collects after the first
 * ```
 */
export class StartupRelease {
  #done = false;
  #prepared = false;
  readonly #collect: () => void;
  readonly #collectBefore: () => void;
  readonly #heapUsed: () => number;

  /**
   * @param collect the memory-reducing collection (tests pass a counter).
   * @param before the collection before the first sync and the heap reading (tests pass fakes).
   */
  constructor(collect: () => void = reducingCollection, before: BeforeApplyCollection = {}) {
    this.#collect = collect;
    this.#collectBefore = before.collect ?? fullCollection;
    this.#heapUsed = before.heapUsed ?? (() => Deno.memoryUsage().heapUsed);
  }

  /** Collects before the first sync is applied, from a large heap up; does nothing later. */
  beforeApply(): void {
    if (this.#prepared) return;
    this.#prepared = true;
    if (this.#heapUsed() >= BEFORE_APPLY_MIN_HEAP) this.#collectBefore();
  }

  /** Collects after the first applied sync; does nothing after later ones. */
  afterSync(): void {
    this.#prepared = true;
    if (this.#done) return;
    this.#done = true;
    this.#collect();
  }
}

/** Work that follows every applied sync. */
export interface AfterSyncStep<S> {
  afterSync(sync: S): Promise<void> | void;
}

/**
 * What runs after every applied sync: `release`'s collection first, then
 * each step in order. The steps (the conntrack reconcile, the removal of
 * another mode's leftovers) spawn programs; after the first sync they ran on
 * the heap the lists and the first ruleset left, and at 1k Services that was
 * the start's peak (lab: median 76.9 MiB, 75.9 with the collection first).
 */
export function releaseThen<S>(
  release: Pick<StartupRelease, "afterSync">,
  steps: readonly (AfterSyncStep<S> | undefined)[],
): (sync: S) => Promise<void> {
  return async (sync) => {
    release.afterSync();
    for (const step of steps) await step?.afterSync(sync);
  };
}
