/**
 * The post-sync conntrack step of every Linux mode: after a sync, per IP
 * family, list the UDP (and SCTP) conntrack entries once and delete the stale
 * ones in one batch, as kube-proxy 1.36 does after each sync. What is stale is
 * decided by `lib/core/conntrack.ts`; this module only runs `conntrack`:
 *
 * - `conntrack -L -f ipv4|ipv6 -p udp|sctp`, read line by line while it runs
 *   (100k entries are ~16 MB of text; only stale pairs are kept);
 * - `conntrack -R -` with one `-D` line per stale (frontend, reply source)
 *   pair on stdin; it prints each entry it deletes, which is counted.
 *
 * conntrack-tools 1.4.7 walks the whole table for every `-D` line (there is no
 * delete by tuple), so the cost is one walk per stale pair: a handful after an
 * endpoint change, none when nothing is stale. Failures are logged and the
 * next sync reconciles again; they never fail the sync that succeeded.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import { systemClock } from "./clock.ts";
import type { Clock } from "../core/clock.ts";
import {
  deleteLine,
  listArgs,
  mayLeaveStaleFlows,
  parseConntrackLine,
  ServiceFrontends,
  type SyncChange,
} from "../core/conntrack.ts";
import { runChecked } from "./exec.ts";
import type { Executor } from "../core/executor.ts";
import type { ProxyMetrics } from "./metrics.ts";
import type { IpFamily } from "../core/model.ts";
import type { Plan } from "../core/plan.ts";

const logger = getLogger(["kproxy", "conntrack"]);

/** How long one `conntrack` listing or batch may run. */
const CONNTRACK_TIMEOUT_MS = 60_000;

/** Options for {@linkcode ConntrackReconciler}. */
export interface ConntrackReconcilerOptions {
  /** Runs `conntrack` (in the node's network namespace). */
  executor: Executor;
  /** Receives the reconcile duration and the deleted entries, per family. */
  metrics?: Pick<
    ProxyMetrics,
    "conntrackReconcilerSyncDuration" | "conntrackReconcilerDeletedEntriesTotal"
  >;
  /** Monotonic time for the duration. @default {systemClock} */
  clock?: Pick<Clock, "now">;
}

/** What one family's reconcile did. */
export interface FamilyReconcile {
  family: IpFamily;
  /** Entries read from the listings. */
  listed: number;
  /** Stale (frontend, reply source) pairs found: one delete line each. */
  stalePairs: number;
  /** Entries `conntrack` reported deleted. */
  deleted: number;
  /** Why the reconcile failed, when it did. */
  error?: string;
}

/**
 * Deletes stale UDP and SCTP conntrack entries after syncs.
 *
 * @example Usage
 * ```ts ignore
 * const reconciler = new ConntrackReconciler({ executor, metrics });
 * const proxier = new Proxier({ ..., afterSync: (sync) => reconciler.afterSync(sync) });
 * ```
 */
export class ConntrackReconciler {
  readonly #executor: Executor;
  readonly #metrics?: ConntrackReconcilerOptions["metrics"];
  readonly #clock: Pick<Clock, "now">;
  /** The last reconcile failed: the next sync reconciles whatever it changed. */
  #retry = false;

  constructor(options: ConntrackReconcilerOptions) {
    this.#executor = options.executor;
    this.#metrics = options.metrics;
    this.#clock = options.clock ?? systemClock;
  }

  /**
   * The step after a successful sync: reconciles every family when the sync
   * may have left a stale flow (see {@linkcode mayLeaveStaleFlows}) or the last
   * reconcile failed.
   */
  async afterSync(sync: SyncChange): Promise<void> {
    if (!this.#retry && !mayLeaveStaleFlows(sync)) return;
    const results = [];
    for (const plan of sync.plans) results.push(await this.reconcile(plan));
    this.#retry = results.some((result) => result.error !== undefined);
  }

  /** Lists one family's UDP/SCTP entries and deletes the stale ones. */
  async reconcile(plan: Plan): Promise<FamilyReconcile> {
    const family = plan.family;
    const result: FamilyReconcile = { family, listed: 0, stalePairs: 0, deleted: 0 };
    const frontends = new ServiceFrontends(plan);
    if (frontends.protocols.size === 0) return result;
    const startedAt = this.#clock.now();
    const stale = new Set<string>();
    try {
      for (const protocol of frontends.protocols) {
        await runChecked(this.#executor, {
          program: "conntrack",
          args: listArgs(family, protocol),
          timeoutMs: CONNTRACK_TIMEOUT_MS,
          onStdoutLine: (line) => {
            result.listed++;
            const flow = parseConntrackLine(line);
            if (flow !== undefined && frontends.isStale(flow)) {
              stale.add(deleteLine(family, flow));
            }
          },
        });
      }
      result.stalePairs = stale.size;
      if (stale.size > 0) {
        await runChecked(this.#executor, {
          program: "conntrack",
          args: ["-R", "-"],
          stdin: stale.values(),
          timeoutMs: CONNTRACK_TIMEOUT_MS,
          onStdoutLine: (line) => {
            if (line.trim() !== "") result.deleted++;
          },
        });
      }
    } catch (error) {
      result.error = error instanceof Error ? error.message : String(error);
    }
    const seconds = (this.#clock.now() - startedAt) / 1000;
    this.#metrics?.conntrackReconcilerSyncDuration.observe({ ip_family: family }, seconds);
    this.#metrics?.conntrackReconcilerDeletedEntriesTotal.inc(
      { ip_family: family },
      result.deleted,
    );
    if (result.error !== undefined) {
      logger.warn("Cannot reconcile {family} conntrack entries: {error}", {
        family,
        error: result.error,
        deleted: result.deleted,
      });
    } else {
      logger.debug("Reconciled {family} conntrack entries in {seconds} s", { ...result, seconds });
    }
    return result;
  }
}
