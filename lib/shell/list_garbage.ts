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
 * about the live heap, which grows with it too); one more at the end of each
 * list frees its last pages before the first sync plans and renders.
 *
 * V8's `gc` is reached without a command-line flag: `--expose-gc` set at run
 * time installs `gc` in contexts created afterwards, such as `node:vm`'s.
 *
 * @module
 */

import v8 from "node:v8";
import vm from "node:vm";

/** Listed bytes between two collections, at least. */
const MIN_BUDGET = 16 * 1024 * 1024;

/** Of all bytes listed so far, the share read between two collections. */
const BUDGET_SHARE = 1 / 4;

let collect: (() => void) | undefined;

function fullCollection(): void {
  if (collect === undefined) {
    v8.setFlagsFromString("--expose-gc");
    const gc = vm.runInNewContext("gc") as () => void;
    collect = () => gc();
  }
  collect();
}

/**
 * Counts listed bytes and runs a full collection when enough were read since
 * the last one.
 *
 * @example Usage
 * ```ts ignore
 * const garbage = new ListGarbage();
 * garbage.listed(pageText.length);
 * ```
 */
export class ListGarbage {
  #total = 0;
  #sinceCollection = 0;
  readonly #collect: () => void;

  /** `collect` runs a full collection (tests pass a counter). */
  constructor(collect: () => void = fullCollection) {
    this.#collect = collect;
  }

  /** Records one page of `bytes` read; collects when the budget is spent. */
  listed(bytes: number): void {
    this.#total += bytes;
    this.#sinceCollection += bytes;
    if (this.#sinceCollection < Math.max(MIN_BUDGET, this.#total * BUDGET_SHARE)) return;
    this.#sinceCollection = 0;
    this.#collect();
  }

  /** A list ended: collects what its pages since the last collection left. */
  ended(): void {
    if (this.#sinceCollection === 0) return;
    this.#sinceCollection = 0;
    this.#collect();
  }
}
