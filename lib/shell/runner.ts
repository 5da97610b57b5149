/**
 * The bounded-frequency sync runner (upstream pkg/proxy/runner): coalesces
 * pokes, runs no more than once per minimum interval, at least once per
 * maximum interval, and retries a failed run with capped exponential backoff.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import { systemClock } from "./clock.ts";
import type { Clock } from "../core/clock.ts";

const logger = getLogger(["kproxy", "runner"]);

/** Options for {@linkcode BoundedFrequencyRunner}. */
export interface BoundedFrequencyRunnerOptions {
  /** Name used in logs. */
  name: string;
  /** The work; a rejection schedules a retry. */
  fn: () => Promise<void>;
  /** Minimum time between the starts of two runs. */
  minIntervalMs: number;
  /** Maximum time between runs; `Infinity` disables periodic runs. */
  maxIntervalMs: number;
  /** Delay before the first retry after a failure; doubles per failure up to `maxIntervalMs`. */
  retryIntervalMs: number;
  /** Monotonic time and timers. @default {systemClock} */
  clock?: Pick<Clock, "now" | "setTimeout" | "clearTimeout">;
}

/**
 * Runs `fn` on demand with bounded frequency.
 *
 * @example Usage
 * ```ts ignore
 * const runner = new BoundedFrequencyRunner({
 *   name: "sync", fn: sync, minIntervalMs: 1000, maxIntervalMs: 30000, retryIntervalMs: 1000,
 * });
 * const done = runner.loop(controller.signal);
 * runner.run(); // coalescing poke
 * ```
 */
export class BoundedFrequencyRunner {
  readonly #name: string;
  readonly #fn: () => Promise<void>;
  readonly #minIntervalMs: number;
  readonly #maxIntervalMs: number;
  readonly #retryIntervalMs: number;
  readonly #clock: Pick<Clock, "now" | "setTimeout" | "clearTimeout">;
  #pending = false;
  #lastRunAt?: number;
  #retryAt?: number;
  #failures = 0;
  #wake?: () => void;
  #looping = false;

  constructor(options: BoundedFrequencyRunnerOptions) {
    if (!(options.minIntervalMs >= 0) || !(options.maxIntervalMs >= options.minIntervalMs)) {
      throw new RangeError(
        `Cannot create runner "${options.name}": need 0 <= minIntervalMs <= maxIntervalMs`,
      );
    }
    if (!(options.retryIntervalMs > 0)) {
      throw new RangeError(
        `Cannot create runner "${options.name}": retryIntervalMs must be positive`,
      );
    }
    this.#name = options.name;
    this.#fn = options.fn;
    this.#minIntervalMs = options.minIntervalMs;
    this.#maxIntervalMs = options.maxIntervalMs;
    this.#retryIntervalMs = options.retryIntervalMs;
    this.#clock = options.clock ?? systemClock;
  }

  /** Consecutive failed runs so far (0 after a success). */
  get failures(): number {
    return this.#failures;
  }

  /** Requests a run as soon as the minimum interval allows; never blocks, pokes coalesce. */
  run(): void {
    this.#pending = true;
    this.#wake?.();
  }

  /**
   * Runs until `signal` aborts. The first run happens on the first
   * {@linkcode run} poke or after `maxIntervalMs`. Resolves once aborted and
   * any run in progress has finished.
   */
  async loop(signal: AbortSignal): Promise<void> {
    if (this.#looping) throw new Error(`Cannot loop runner "${this.#name}": already looping`);
    this.#looping = true;
    const startedAt = this.#clock.now();
    try {
      while (!signal.aborted) {
        const dueAt = this.#nextDueAt(startedAt);
        if (dueAt <= this.#clock.now()) {
          await this.#runOnce();
        } else {
          await this.#sleepUntil(dueAt, signal);
        }
      }
    } finally {
      this.#looping = false;
    }
  }

  #nextDueAt(startedAt: number): number {
    const base = this.#lastRunAt ?? startedAt;
    let dueAt = this.#pending
      ? (this.#lastRunAt === undefined ? base : base + this.#minIntervalMs)
      : base + this.#maxIntervalMs;
    if (this.#retryAt !== undefined) {
      dueAt = Math.min(dueAt, Math.max(this.#retryAt, base + this.#minIntervalMs));
    }
    return dueAt;
  }

  async #runOnce(): Promise<void> {
    this.#pending = false;
    this.#retryAt = undefined;
    this.#lastRunAt = this.#clock.now();
    try {
      await this.#fn();
      this.#failures = 0;
    } catch (error) {
      this.#failures++;
      const delayMs = Math.min(
        this.#retryIntervalMs * 2 ** (this.#failures - 1),
        this.#maxIntervalMs,
      );
      this.#retryAt = this.#clock.now() + delayMs;
      logger.error(
        "Run of {name} failed ({failures} in a row), retrying in {delayMs} ms: {error}",
        {
          name: this.#name,
          failures: this.#failures,
          delayMs,
          error,
        },
      );
    }
  }

  #sleepUntil(dueAt: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let timer: unknown;
      const done = () => {
        if (timer !== undefined) this.#clock.clearTimeout(timer);
        signal.removeEventListener("abort", done);
        this.#wake = undefined;
        resolve();
      };
      if (Number.isFinite(dueAt)) {
        timer = this.#clock.setTimeout(done, Math.max(0, dueAt - this.#clock.now()));
      }
      this.#wake = done;
      signal.addEventListener("abort", done);
    });
  }
}
