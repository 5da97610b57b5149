/**
 * One cap over the connections of every kproxy server: at the cap, the
 * connection that has waited longest for a request is closed to admit the
 * new one, so a flood of idle connections cannot lock out a probe.
 *
 * @module
 */

/** Connections closed to make room that may still hold their socket (see {@linkcode ConnectionLimit}). */
export const CLOSING_SLACK = 32;

/** A connection as {@linkcode ConnectionLimit} sees it. */
export interface LimitedConnection {
  close(): void;
}

/** Options for {@linkcode ConnectionLimit}. */
export interface ConnectionLimitOptions {
  /**
   * Connections open at once over every server sharing the limit. 128 leaves
   * kproxy room for its own work within a 1024-descriptor soft limit (the
   * usual default); kproxy's systemd unit allows 65536.
   * @default {128}
   */
  maxConnections?: number;
}

/**
 * The connections of one or more servers, at most `maxConnections` open. A
 * connection is either waiting for a request (new, kept alive, or with half
 * a request head) or busy with one. It counts from {@linkcode admit} until
 * its server calls {@linkcode release} once the socket is gone: Deno frees a
 * socket with a read in flight only on the next turn of the event loop, and
 * accepts queued connections without one, so servers wait for
 * {@linkcode settled} before accepting, or a burst of connections would
 * pile up closed-but-held descriptors. Up to {@linkcode CLOSING_SLACK} closed
 * ones may wait for that turn, so a burst is accepted in batches.
 */
export class ConnectionLimit {
  readonly #max: number;
  readonly #open = new Set<LimitedConnection>();
  /** In the order they started waiting. */
  readonly #waiting = new Set<LimitedConnection>();
  #settledWaiters: (() => void)[] = [];

  constructor(options: ConnectionLimitOptions = {}) {
    const max = options.maxConnections ?? 128;
    if (!Number.isInteger(max) || max < 1) {
      throw new RangeError(`Cannot limit connections to ${max}: want an integer >= 1`);
    }
    this.#max = max;
  }

  /** Connections admitted and not released yet. */
  get open(): number {
    return this.#open.size;
  }

  /**
   * Admits a new connection, waiting for its first request. At the cap the
   * connection waiting longest is closed to make room; when every open one
   * is busy, returns false and the caller closes the new one.
   */
  admit(connection: LimitedConnection): boolean {
    if (this.#open.size >= this.#max) {
      const oldest: LimitedConnection | undefined = this.#waiting.values().next().value;
      if (oldest === undefined) return false;
      this.#waiting.delete(oldest);
      oldest.close();
    }
    this.#open.add(connection);
    this.#waiting.add(connection);
    return true;
  }

  /** Resolves once no more than the cap and {@linkcode CLOSING_SLACK} are open. */
  settled(): Promise<void> {
    if (this.#open.size < this.#max + CLOSING_SLACK) return Promise.resolve();
    return new Promise((resolve) => this.#settledWaiters.push(resolve));
  }

  /** Marks an admitted connection as waiting for its next request, from now. */
  waiting(connection: LimitedConnection): void {
    if (!this.#open.has(connection)) return;
    this.#waiting.delete(connection);
    this.#waiting.add(connection);
  }

  /** Marks an admitted connection as busy: it is not closed to make room. */
  busy(connection: LimitedConnection): void {
    this.#waiting.delete(connection);
  }

  /** Forgets a connection whose socket is gone. */
  release(connection: LimitedConnection): void {
    this.#open.delete(connection);
    this.#waiting.delete(connection);
    if (this.#open.size >= this.#max + CLOSING_SLACK) return;
    const waiters = this.#settledWaiters;
    this.#settledWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
