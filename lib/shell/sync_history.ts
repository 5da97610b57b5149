/**
 * The last syncs the proxier ran, for the status page (`/statusz`).
 *
 * @module
 */

/** One sync, as recorded by {@linkcode SyncHistory}. */
export interface SyncRecord {
  /** Start time, ms since the epoch. */
  at: number;
  full: boolean;
  durationMs: number;
  /** Service ports changed (for a failure: that the sync tried to change). */
  changed: number;
  ok: boolean;
  /** The failure's message; only when `ok` is false. */
  error?: string;
}

/** Options for {@linkcode SyncHistory}. */
export interface SyncHistoryOptions {
  /** How many syncs to keep. @default {50} */
  capacity?: number;
}

/**
 * A ring buffer of the last syncs, fed by the shell after each sync.
 *
 * @example Usage
 * ```ts
 * import { SyncHistory } from "./sync_history.ts";
 * const history = new SyncHistory({ capacity: 3 });
 * history.record({ at: 0, full: true, durationMs: 12, changed: 4, ok: true });
 * history.entries().length; // 1
 * ```
 */
export class SyncHistory {
  readonly #capacity: number;
  readonly #ring: SyncRecord[] = [];
  #next = 0;
  #total = 0;
  #failures = 0;
  #lastFailure?: SyncRecord;

  /** Creates an empty history. */
  constructor(options: SyncHistoryOptions = {}) {
    const capacity = options.capacity ?? 50;
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`Cannot create a sync history of capacity ${capacity}: want >= 1`);
    }
    this.#capacity = capacity;
  }

  /** Records one sync, forgetting the oldest when full. */
  record(sync: SyncRecord): void {
    const entry = { ...sync };
    if (this.#ring.length < this.#capacity) this.#ring.push(entry);
    else this.#ring[this.#next] = entry;
    this.#next = (this.#next + 1) % this.#capacity;
    this.#total++;
    if (!sync.ok) {
      this.#failures++;
      this.#lastFailure = entry;
    }
  }

  /** The kept syncs, oldest first. */
  entries(): SyncRecord[] {
    if (this.#ring.length < this.#capacity) return this.#ring.map((e) => ({ ...e }));
    return [...this.#ring.slice(this.#next), ...this.#ring.slice(0, this.#next)].map((e) => ({
      ...e,
    }));
  }

  /** Syncs recorded since creation, including forgotten ones. */
  get total(): number {
    return this.#total;
  }

  /** Failed syncs recorded since creation. */
  get failures(): number {
    return this.#failures;
  }

  /** The last failed sync, even when it left the ring. */
  get lastFailure(): SyncRecord | undefined {
    return this.#lastFailure === undefined ? undefined : { ...this.#lastFailure };
  }
}
