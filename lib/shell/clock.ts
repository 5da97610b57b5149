/**
 * The real {@linkcode Clock}: `performance.now()` for monotonic time,
 * `Date.now()` for wall time, and the runtime's (monotonic) timers.
 *
 * @module
 */

import type { Clock } from "../core/clock.ts";

/** The real clock: `performance.now()`, `Date.now()` and the runtime's (monotonic) timers. */
export const systemClock: Clock = {
  now: () => performance.now(),
  wallNow: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (id) => clearTimeout(id as number),
};
