/**
 * Arrays kept in long-lived state (the tracker's objects, the plan) at their
 * exact size. V8 gives an array grown by `push` or made by `filter` spare
 * capacity: one element built by `push` holds 184 bytes against 56 for an
 * exact array, ten 184 against 128. At 10k Services × 10 endpoints the parsed
 * objects' and the plan's arrays held ~16 MiB of such slack (heap snapshot).
 *
 * @module
 */

/** An exact-size copy of `items` (a new array, also when empty). */
export function exactArray<T>(items: readonly T[]): T[] {
  return items.slice();
}
