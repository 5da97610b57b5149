/**
 * Capped exponential backoff and an abortable sleep, for retrying an
 * apiserver that fails or cannot be reached.
 *
 * @module
 */

/** Options for {@linkcode Backoff}. */
export interface BackoffOptions {
  /** The first delay. @default {1000} */
  initialMs?: number;
  /** The largest delay. @default {30000} */
  maxMs?: number;
  /** Growth per failure. @default {2} */
  factor?: number;
  /** Random spread as a fraction of the delay (0.1 = ±10%). @default {0.1} */
  jitter?: number;
  /** Random numbers in [0, 1). @default {Math.random} */
  random?: () => number;
}

/**
 * Delays that double after each failure up to a cap, and start over on
 * success.
 *
 * @example Usage
 * ```ts
 * import { Backoff } from "./backoff.ts";
 * const backoff = new Backoff({ initialMs: 1000, maxMs: 30000, jitter: 0 });
 * backoff.next(); // 1000
 * backoff.next(); // 2000
 * backoff.reset();
 * ```
 */
export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #factor: number;
  readonly #jitter: number;
  readonly #random: () => number;
  #failures = 0;

  /** Creates a backoff from `options`. */
  constructor(options: BackoffOptions = {}) {
    this.#initialMs = options.initialMs ?? 1000;
    this.#maxMs = options.maxMs ?? 30000;
    this.#factor = options.factor ?? 2;
    this.#jitter = options.jitter ?? 0.1;
    this.#random = options.random ?? Math.random;
  }

  /** The number of failures since the last reset. */
  get failures(): number {
    return this.#failures;
  }

  /** Records a failure and returns how long to wait before the next attempt. */
  next(): number {
    const base = Math.min(this.#maxMs, this.#initialMs * this.#factor ** this.#failures);
    this.#failures++;
    const spread = base * this.#jitter * (2 * this.#random() - 1);
    return Math.max(0, Math.round(Math.min(this.#maxMs, base + spread)));
  }

  /** Records a success: the next failure waits the initial delay again. */
  reset(): void {
    this.#failures = 0;
  }
}

/** Resolves after `ms` milliseconds, or at once when `signal` aborts. Never rejects. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });
}
