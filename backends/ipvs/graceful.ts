/**
 * Graceful termination of IPVS real servers (upstream
 * `pkg/proxy/ipvs/graceful_termination.go`): a removed TCP real server is
 * first set to weight 0, so it takes no new connections, and deleted once its
 * connections are gone or after a timeout, checked on later syncs.
 *
 * @module
 */

import type { IpvsOp } from "./diff.ts";
import type { RealServerConnections } from "./parse.ts";
import { realServerKey, type VirtualServer, virtualServerKey } from "./render.ts";

/** Options for {@linkcode GracefulTermination}. */
export interface GracefulTerminationOptions {
  /** Delete a draining real server after this long even with connections left. @default {900000} */
  timeoutMs?: number;
}

/** Default time a real server may drain before it is deleted anyway (15 minutes). */
const DEFAULT_DRAIN_TIMEOUT_MS = 900_000;

/**
 * Remembers since when each real server has been draining and decides when to
 * delete it. Time is passed in by the caller (an injected clock).
 */
export class GracefulTermination {
  readonly #timeoutMs: number;
  /** `vsKey|rsKey` → time draining started. */
  #since = new Map<string, number>();

  constructor(options: GracefulTerminationOptions = {}) {
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_DRAIN_TIMEOUT_MS;
  }

  /** Number of real servers currently draining. */
  get pending(): number {
    return this.#since.size;
  }

  /**
   * Records which real servers of `kernel` are draining: weight 0 and not in
   * `desired`. New ones start at `now`; ones no longer draining are forgotten.
   */
  track(kernel: readonly VirtualServer[], desired: readonly VirtualServer[], now: number): void {
    const wanted = new Set<string>();
    for (const vs of desired) {
      for (const rs of vs.realServers) wanted.add(drainKey(vs, rs));
    }
    const next = new Map<string, number>();
    for (const vs of kernel) {
      for (const rs of vs.realServers) {
        const key = drainKey(vs, rs);
        if (rs.weight !== 0 || wanted.has(key)) continue;
        next.set(key, this.#since.get(key) ?? now);
      }
    }
    this.#since = next;
  }

  /**
   * The delete operations for draining real servers that have no connections
   * left in `connections` (from `ipvsadm -Ln`) or drained longer than the timeout.
   * A real server missing from `connections` is treated as having none.
   */
  expired(
    kernel: readonly VirtualServer[],
    connections: Map<string, Map<string, RealServerConnections>>,
    now: number,
  ): IpvsOp[] {
    const ops: IpvsOp[] = [];
    for (const vs of kernel) {
      for (const rs of vs.realServers) {
        const since = this.#since.get(drainKey(vs, rs));
        if (since === undefined) continue;
        const counts = connections.get(virtualServerKey(vs))?.get(realServerKey(rs));
        const open = counts ? counts.activeConnections + counts.inactiveConnections : 0;
        if (open === 0 || now - since >= this.#timeoutMs) {
          ops.push({ kind: "delete-real", vs, rs });
        }
      }
    }
    return ops;
  }
}

function drainKey(vs: VirtualServer, rs: { address: string; port: number }): string {
  return `${virtualServerKey(vs)}|${realServerKey(rs)}`;
}
