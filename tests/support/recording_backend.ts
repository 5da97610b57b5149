/**
 * A Backend that programs nothing and records every sync: for tests of the
 * shell and for `plan`-style dry runs.
 *
 * @module
 */

import { counterSamples, type ServiceCounterSample } from "../../lib/core/service_counters.ts";
import type { Backend, SyncRequest, SyncResult } from "../../lib/core/backend.ts";
import type { Plan } from "../../lib/core/plan.ts";

/** Decides whether a sync fails: return or throw an Error to fail it. */
export type FailureInjector = (request: SyncRequest, index: number) => Error | undefined;

/** Options for {@linkcode RecordingBackend}. */
export interface RecordingBackendOptions {
  /** @default {"recording"} */
  mode?: string;
  /** Called before each sync is recorded as applied. */
  failWith?: FailureInjector;
  /** Answers `checkDrift()`; without it the backend has no drift check. */
  drift?: () => boolean;
}

/**
 * Records each {@linkcode SyncRequest} (deep-copied, so later mutation of
 * plans cannot change history) and each cleanup.
 */
export class RecordingBackend implements Backend {
  readonly mode: string;
  /** Every sync request received, including failed ones, in order. */
  readonly requests: SyncRequest[] = [];
  /** Indexes into `requests` of the syncs that succeeded. */
  readonly applied: number[] = [];
  /** Number of `cleanup()` calls. */
  cleanups = 0;
  /** Number of `checkDrift()` calls. */
  driftChecks = 0;
  /** Number of syncs requested before `warmUp()` was first called, or undefined until it is. */
  syncsBeforeWarmUp?: number;
  failWith?: FailureInjector;
  readonly checkDrift?: () => Promise<boolean>;

  constructor(options: RecordingBackendOptions = {}) {
    this.mode = options.mode ?? "recording";
    this.failWith = options.failWith;
    const drift = options.drift;
    if (drift) {
      this.checkDrift = () => {
        this.driftChecks++;
        return Promise.resolve(drift());
      };
    }
  }

  /** Records when it was called, relative to the syncs. */
  warmUp(): Promise<void> {
    this.syncsBeforeWarmUp ??= this.requests.length;
    return Promise.resolve();
  }

  /** The last request that succeeded, if any. */
  get lastApplied(): SyncRequest | undefined {
    const index = this.applied.at(-1);
    return index === undefined ? undefined : this.requests[index];
  }

  /** Records the request; throws what the failure injector returns. */
  sync(request: SyncRequest): Promise<SyncResult> {
    const copy: SyncRequest = {
      plans: structuredClone(request.plans),
      changed: new Set(request.changed),
      full: request.full,
    };
    const index = this.requests.push(copy) - 1;
    let failure: Error | undefined;
    try {
      failure = this.failWith?.(copy, index);
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error));
    }
    if (failure) return Promise.reject(failure);
    this.applied.push(index);
    return Promise.resolve({
      full: request.full,
      summary: `${request.plans.reduce((n, p) => n + p.services.length, 0)} service ports`,
    });
  }

  /** Every counter of the last applied plans (or `plans`), at zero: no kernel counts here. */
  readServiceCounters(plans?: readonly Plan[]): Promise<ServiceCounterSample[]> {
    return Promise.resolve(counterSamples(plans ?? this.lastApplied?.plans ?? [], () => 0));
  }

  /** Counts the call. */
  cleanup(): Promise<void> {
    this.cleanups++;
    return Promise.resolve();
  }
}
