/**
 * A {@linkcode Clock} driven by `@sinonjs/fake-timers`: `tick` advances both
 * times and fires timers; `setSystemTime` steps only the wall time, as NTP or
 * an operator would.
 *
 * @module
 */

import type FakeTimers from "@sinonjs/fake-timers";
import type { Clock } from "../../lib/core/clock.ts";

/** A fake-timers clock, created or installed. */
export type FakeTimersClock = ReturnType<typeof FakeTimers.createClock>;

/** Adapts `clock`: monotonic time is its `performance.now()`, wall time its `Date`. */
export function fakeClock(clock: FakeTimersClock): Clock {
  return {
    now: () => clock.performance.now(),
    wallNow: () => clock.now,
    setTimeout: (fn, ms) => clock.setTimeout(fn, ms),
    clearTimeout: (id) => clock.clearTimeout(id as ReturnType<typeof clock.setTimeout>),
  };
}
