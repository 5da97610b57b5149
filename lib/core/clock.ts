/**
 * The one clock seam: monotonic time for every interval, deadline and
 * timer; wall time only for what people read (logs, `/healthz` and
 * `/statusz` timestamps, `*_timestamp_seconds` metrics). A wall clock that
 * steps (NTP, an operator, a VM resumed) must not stall a sync or hide a
 * late one. The real clock is `systemClock` in `lib/shell/clock.ts`.
 *
 * @module
 */

/** The time functions kproxy uses; inject a fake one in tests. */
export interface Clock {
  /** Monotonic milliseconds: only differences mean anything; wall clock steps do not move it. */
  now(): number;
  /** Milliseconds since the epoch, for display only. */
  wallNow(): number;
  /** Runs `fn` after `ms` of monotonic time. */
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
}
