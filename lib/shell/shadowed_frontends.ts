/**
 * Reports the frontends the planner left out of a service port's rules because another service
 * port holds them (`ServicePortPlan.shadowed`, decided in lib/core/frontends.ts): one log line
 * when a port loses a frontend and one when it stops losing it, and a count per family and kind.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import type { IpFamily } from "../core/model.ts";
import { findServicePort, type FrontendKind, type Plan } from "../core/plan.ts";

const logger = getLogger(["kproxy", "proxier"]);

/** The frontend kinds a count is kept for. */
export const FRONTEND_KINDS: readonly FrontendKind[] = [
  "clusterIP",
  "externalIP",
  "loadBalancerIP",
  "nodePort",
];

/** One lost frontend, in log form. */
interface Loss {
  kind: FrontendKind;
  /** `kind address:port/protocol` (`nodePort :30080/TCP` for a node port). */
  frontend: string;
  holder: string;
}

/** Receives the number of shadowed frontends of one family and kind. */
export type ShadowedCountSink = (
  labels: { ip_family: IpFamily; kind: FrontendKind },
  n: number,
) => void;

/**
 * What each service port lost, per family, kept in step with the applied plans at the cost of
 * what changed.
 */
export class ShadowedFrontends {
  /** Losses by family, then service port id. */
  readonly #lost = new Map<IpFamily, Map<string, Loss[]>>();
  readonly #counts = new Map<string, number>();
  readonly #setCount: ShadowedCountSink;

  /** Creates a tracker that reports counts through `setCount`. */
  constructor(setCount: ShadowedCountSink) {
    this.#setCount = setCount;
  }

  /**
   * Takes the plans just applied: every service port when `full`, else those in `changed`.
   * Logs each frontend a port newly lost or got back and updates the counts.
   */
  update(plans: readonly Plan[], changed: ReadonlySet<string>, full: boolean): void {
    for (const plan of plans) {
      let byId = this.#lost.get(plan.family);
      if (byId === undefined) {
        byId = new Map();
        this.#lost.set(plan.family, byId);
      }
      if (full) {
        const current = new Set(plan.services.map((service) => service.id));
        for (const id of byId.keys()) {
          if (!current.has(id)) this.#replace(plan.family, byId, id, []);
        }
        for (const service of plan.services) {
          this.#replace(plan.family, byId, service.id, lossesOf(plan, service.id));
        }
      } else {
        for (const id of changed) this.#replace(plan.family, byId, id, lossesOf(plan, id));
      }
    }
  }

  #replace(family: IpFamily, byId: Map<string, Loss[]>, id: string, now: Loss[]): void {
    const before = byId.get(id) ?? [];
    if (before.length === 0 && now.length === 0) return;
    const same = (a: Loss) => (b: Loss) => a.frontend === b.frontend && a.holder === b.holder;
    for (const loss of now) {
      if (before.some(same(loss))) continue;
      logger.warn(
        "Service port {lost} declares the frontend {frontend}, which {holder} holds: it is left out of {lost}'s rules ({family})",
        { lost: id, holder: loss.holder, frontend: loss.frontend, family },
      );
      this.#count(family, loss.kind, 1);
    }
    for (const loss of before) {
      if (now.some(same(loss))) continue;
      logger.info(
        "Service port {lost} no longer loses the frontend {frontend} to {holder} ({family})",
        {
          lost: id,
          holder: loss.holder,
          frontend: loss.frontend,
          family,
        },
      );
      this.#count(family, loss.kind, -1);
    }
    if (now.length === 0) byId.delete(id);
    else byId.set(id, now);
  }

  #count(family: IpFamily, kind: FrontendKind, delta: number): void {
    const key = `${family} ${kind}`;
    const n = (this.#counts.get(key) ?? 0) + delta;
    this.#counts.set(key, n);
    this.#setCount({ ip_family: family, kind }, n);
  }
}

function lossesOf(plan: Plan, id: string): Loss[] {
  const service = findServicePort(plan, id);
  if (service === undefined) return [];
  return (service.shadowed ?? []).map(({ kind, address, port, heldBy }) => ({
    kind,
    frontend: `${kind} ${
      address.includes(":") ? `[${address}]` : address
    }:${port}/${service.protocol}`,
    holder: heldBy,
  }));
}
