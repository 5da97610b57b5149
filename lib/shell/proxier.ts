/**
 * The sync loop glue shared by every mode: source events go to the tracker,
 * a sync drains it, plans the node, hands the backend what changed and
 * reports health and metrics. Backends only render and apply.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import type { Backend, SyncResult } from "../core/backend.ts";
import { systemClock } from "./clock.ts";
import { CommandError } from "./exec.ts";
import type { Clock } from "../core/clock.ts";
import type { ServiceHealthInfo } from "./servers.ts";
import type { ProxyHealth } from "./health.ts";
import type { ProxyMetrics } from "./metrics.ts";
import type { NodePlans, Plan } from "../core/plan.ts";
import type { IpFamily } from "../core/model.ts";
import type { SyncHistory } from "./sync_history.ts";
import { changedServicePortIds, type PlannerOptions, planNode } from "../core/planner.ts";
import type { SourceEvent } from "../core/source.ts";
import type { StateChange } from "../core/state.ts";
import { ShadowedFrontends } from "./shadowed_frontends.ts";

const logger = getLogger(["kproxy", "proxier"]);
/** The first sync's lines, shown at -v=0 (lib/shell/log.ts). */
const startupLogger = getLogger(["kproxy", "main"]);

/** The family an `iptables-restore` program (any variant) writes, undefined for other programs. */
function restoreFamily(program: string): IpFamily | undefined {
  const match = /^ip(6?)tables(?:-nft|-legacy)?-restore$/.exec(program);
  if (!match) return undefined;
  return match[1] === "6" ? "IPv6" : "IPv4";
}

/** The `ip_family` label of each family of {@linkcode NodePlans}. */
const FAMILY_LABELS: Readonly<Record<keyof NodePlans, IpFamily>> = { ipv4: "IPv4", ipv6: "IPv6" };

/** The tracker as the proxier uses it (see `lib/core/tracker.ts`). */
export interface StateTracker {
  /** Applies one source event; true when the state changed. */
  apply(event: SourceEvent): boolean;
  /** True once every kind has been listed. */
  readonly synced: boolean;
  /** Returns the current state and what changed since the last drain. */
  drain(): StateChange;
}

/** Something that serves health-check node ports (see `ServiceHealthServers`). */
export interface ServiceHealthSink {
  sync(services: ReadonlyMap<number, ServiceHealthInfo>): Promise<void>;
}

/** A sync the backend applied, handed to {@linkcode ProxierOptions.afterSync}. */
export interface AppliedSync {
  /** The plans the kernel held before (empty on the first sync). */
  previous: Plan[];
  /** The plans just applied, same families and order. */
  plans: Plan[];
  /** Ids of the service ports that may differ between the two. */
  changed: Set<string>;
  full: boolean;
}

/** Which families of {@linkcode NodePlans} to program. */
export type PlanFamily = keyof NodePlans;

/** Options for {@linkcode Proxier}. */
export interface ProxierOptions {
  backend: Backend;
  tracker: StateTracker;
  plannerOptions: PlannerOptions;
  /**
   * Reads the node's interface addresses; called on every sync, as kube-proxy
   * calls GetNodeIPs, and a change replans every service port. Without it,
   * `plannerOptions.localAddresses` stay as given.
   */
  readLocalAddresses?: () => string[];
  health: ProxyHealth;
  metrics: ProxyMetrics;
  /** The mode's sync period: full resync and drift check interval. */
  syncPeriodMs: number;
  /** Time between forced full syncs. @default {syncPeriodMs} */
  fullSyncPeriodMs?: number;
  /** Called when a sync is needed (wire it to the runner's `run()`). */
  requestSync?: () => void;
  /** Runs once a sync is planned, right before the backend applies it. */
  beforeApply?: (sync: { full: boolean }) => void;
  /** Runs after each successful sync (stale UDP conntrack cleanup); failures are logged. */
  afterSync?: (sync: AppliedSync) => Promise<void>;
  /** Health-check node port servers to keep in step with the plans. */
  serviceHealth?: ServiceHealthSink;
  /** @default {["ipv4", "ipv6"]} */
  families?: readonly PlanFamily[];
  /** Monotonic time for periods and durations (the tracker's change times too), wall time for
   * timestamps. @default {systemClock} */
  clock?: Pick<Clock, "now" | "wallNow">;
  /** Receives every sync attempt, for the status page. */
  history?: SyncHistory;
}

/** What {@linkcode Proxier.sync} did. */
export type SyncOutcome =
  | { kind: "waiting" }
  | { kind: "unchanged" }
  | { kind: "applied"; result: SyncResult; changed: Set<string> };

/**
 * One proxier for all modes. Never syncs before the source's initial list is
 * complete, so rules from an earlier run stay until then; a failed sync
 * keeps the previous rules, forces a full sync next and rethrows so the runner
 * retries.
 */
export class Proxier {
  readonly #backend: Backend;
  readonly #tracker: StateTracker;
  #plannerOptions: PlannerOptions;
  readonly #readLocalAddresses?: () => string[];
  readonly #health: ProxyHealth;
  readonly #metrics: ProxyMetrics;
  readonly #syncPeriodMs: number;
  readonly #fullSyncPeriodMs: number;
  readonly #requestSync: () => void;
  readonly #serviceHealth?: ServiceHealthSink;
  readonly #beforeApply?: (sync: { full: boolean }) => void;
  readonly #afterSync?: (sync: AppliedSync) => Promise<void>;
  readonly #families: readonly PlanFamily[];
  readonly #clock: Pick<Clock, "now" | "wallNow">;
  readonly #history?: SyncHistory;
  readonly #shadowed: ShadowedFrontends;
  #driftRepairs = 0;
  #planned?: NodePlans;
  #applied?: NodePlans;
  #needFull = true;
  #replanAll = true;
  #lastFullAt = -Infinity;
  #lastDriftCheckAt: number;
  #pendingChangeAt?: number;

  constructor(options: ProxierOptions) {
    this.#backend = options.backend;
    this.#tracker = options.tracker;
    this.#plannerOptions = options.plannerOptions;
    this.#readLocalAddresses = options.readLocalAddresses;
    this.#health = options.health;
    this.#metrics = options.metrics;
    this.#syncPeriodMs = options.syncPeriodMs;
    this.#fullSyncPeriodMs = options.fullSyncPeriodMs ?? options.syncPeriodMs;
    this.#requestSync = options.requestSync ?? (() => {});
    this.#serviceHealth = options.serviceHealth;
    this.#beforeApply = options.beforeApply;
    this.#afterSync = options.afterSync;
    this.#families = options.families ?? ["ipv4", "ipv6"];
    this.#clock = options.clock ?? systemClock;
    this.#history = options.history;
    this.#shadowed = new ShadowedFrontends((labels, n) =>
      this.#metrics.shadowedFrontends.set(labels, n)
    );
    this.#lastDriftCheckAt = this.#clock.now();
  }

  /** Full resyncs forced by drift since start. */
  get driftRepairs(): number {
    return this.#driftRepairs;
  }

  /** The plans last applied successfully, undefined before the first success. */
  get lastSynced(): NodePlans | undefined {
    return this.#applied;
  }

  /** Feeds one source event to the tracker and, once it is synced, requests a sync when
   * state changed. */
  onEvent(event: SourceEvent): void {
    const changed = this.#tracker.apply(event);
    if (!changed && event.type !== "synced") return;
    const now = this.#clock.now();
    if (event.type !== "synced") {
      this.#pendingChangeAt ??= now;
      if (event.kind === "EndpointSlice") {
        this.#metrics.endpointChangesPending.inc();
        this.#metrics.endpointChangesTotal.inc();
      } else if (event.kind === "Service") {
        this.#metrics.serviceChangesPending.inc();
        this.#metrics.serviceChangesTotal.inc();
      }
      const queuedAt = this.#clock.wallNow() / 1000;
      for (const family of this.#families) {
        this.#metrics.lastQueuedTimestamp.set({ ip_family: FAMILY_LABELS[family] }, queuedAt);
      }
    }
    this.#health.queuedUpdate();
    // Before the initial list is complete a sync would only wait, and would
    // delay the first real one by the runner's minimum interval.
    if (this.#tracker.synced) this.#requestSync();
  }

  /**
   * Brings the kernel in line with the tracker's state. Does nothing until
   * the tracker is synced.
   *
   * @throws what the backend threw, after recording the failure
   */
  async sync(): Promise<SyncOutcome> {
    if (!this.#tracker.synced) {
      logger.debug("Not syncing: waiting for the initial list of every kind");
      return { kind: "waiting" };
    }
    const startedAt = this.#clock.now();
    const startedAtWall = this.#clock.wallNow();
    const change = this.#tracker.drain();
    this.#health.drained();
    this.#metrics.endpointChangesPending.set(0);
    this.#metrics.serviceChangesPending.set(0);
    this.#health.setNodeDeleting(
      change.state.nodes.get(this.#plannerOptions.nodeName)?.deleting ?? false,
    );
    const oldestChangeAt = minDefined(change.oldestChangeAt, this.#pendingChangeAt);
    this.#pendingChangeAt = undefined;

    this.#rereadLocalAddresses();
    let planned: NodePlans;
    try {
      planned = this.#plan(change);
    } catch (error) {
      this.#needFull = true;
      this.#pendingChangeAt = oldestChangeAt;
      this.#metrics.syncFailuresTotal.inc({ mode: this.#backend.mode });
      logger.error("Cannot plan the node: {error}", { error });
      throw error;
    }
    let full = this.#needFull || this.#applied === undefined || change.globalChange ||
      startedAt - this.#lastFullAt >= this.#fullSyncPeriodMs ||
      !this.#sameHeaders(planned);
    if (!full && await this.#drifted(startedAt)) full = true;

    const plans = this.#families.map((family) => planned[family]);
    const previous = this.#applied ? this.#families.map((family) => this.#applied![family]) : [];
    const changed = new Set<string>();
    plans.forEach((plan, i) => {
      const before = previous[i];
      const ids = before
        ? changedServicePortIds(before, plan)
        : new Set(plan.services.map((service) => service.id));
      for (const id of ids) changed.add(id);
    });

    if (!full && changed.size === 0) {
      this.#recordUnchanged(plans, (this.#clock.now() - startedAt) / 1000);
      return { kind: "unchanged" };
    }

    let result: SyncResult;
    try {
      this.#beforeApply?.({ full });
      result = await this.#backend.sync({ plans, changed, full });
    } catch (error) {
      this.#needFull = true;
      this.#pendingChangeAt = oldestChangeAt;
      this.#recordBackendFailure(error, full);
      this.#history?.record({
        at: startedAtWall,
        full,
        durationMs: this.#clock.now() - startedAt,
        changed: changed.size,
        ok: false,
        error: error instanceof Error ? error.message : String(error),
      });
      logger.error("Cannot sync {mode} rules: {error}", { mode: this.#backend.mode, error });
      throw error;
    }

    const finishedAt = this.#clock.now();
    if (this.#applied === undefined) {
      this.#logNodeIPs(change.state.nodes.get(this.#plannerOptions.nodeName)?.addresses);
      startupLogger.info("Programmed the initial {mode} rules: {summary}", {
        mode: this.#backend.mode,
        summary: result.summary ?? `${changed.size} service ports`,
        durationMs: Math.round(finishedAt - startedAt),
        servicePorts: plans.map((plan) => `${plan.family}:${plan.services.length}`).join(","),
      });
    }
    this.#applied = planned;
    this.#needFull = false;
    if (result.full) {
      this.#lastFullAt = startedAt;
      this.#lastDriftCheckAt = startedAt;
    }
    this.#health.updated();
    this.#history?.record({
      at: startedAtWall,
      full: result.full,
      durationMs: finishedAt - startedAt,
      changed: changed.size,
      ok: true,
    });
    this.#recordSuccess({
      result,
      startedAt,
      finishedAt,
      oldestChangeAt,
      plans,
      previous,
      changed,
    });
    this.#shadowed.update(plans, changed, full || result.full);
    logger.debug("Synced {mode} rules ({kind}, {changed} changed): {summary}", {
      mode: this.#backend.mode,
      kind: result.full ? "full" : "partial",
      changed: changed.size,
      summary: result.summary ?? "",
      durationMs: Math.round(finishedAt - startedAt),
      ...oldestChangeAt !== undefined &&
        { sinceChangeMs: Math.round(finishedAt - oldestChangeAt) },
    });
    if (this.#afterSync) {
      try {
        await this.#afterSync({ previous, plans, changed, full: result.full });
      } catch (error) {
        logger.warn("Post-sync step after the {mode} sync failed: {error}", {
          mode: this.#backend.mode,
          error,
        });
      }
    }
    await this.#syncServiceHealth(plans);
    return { kind: "applied", result, changed };
  }

  /** The node's addresses as the first sync found them (the Node object's). */
  #logNodeIPs(addresses: readonly string[] | undefined): void {
    const node = this.#plannerOptions.nodeName;
    if (addresses === undefined) {
      startupLogger.warn("Node {node} is not in the cluster: no node IPs until it appears", {
        node,
      });
      return;
    }
    const families = [...new Set(addresses.map((ip) => ip.includes(":") ? "IPv6" : "IPv4"))];
    startupLogger.info("Node {node} IPs", {
      node,
      nodeIPs: [...addresses],
      families: families.sort().join(","),
    });
  }

  /** Takes the node's current addresses; a change replans every service port. */
  #rereadLocalAddresses(): void {
    if (this.#readLocalAddresses === undefined) return;
    const now = this.#readLocalAddresses();
    const before = this.#plannerOptions.localAddresses;
    if (now.length === before.length && now.every((ip, i) => ip === before[i])) return;
    logger.info("The node's addresses changed: {addresses}", { addresses: now.join(",") });
    this.#plannerOptions = { ...this.#plannerOptions, localAddresses: now };
    this.#replanAll = true;
  }

  #plan(change: StateChange): NodePlans {
    const incremental = !this.#replanAll && this.#planned !== undefined;
    this.#replanAll = true;
    const planned = planNode({
      state: change.state,
      options: this.#plannerOptions,
      previous: incremental ? this.#planned : undefined,
      changedServices: incremental ? change.changedServices : undefined,
      globalChange: change.globalChange,
    });
    this.#planned = planned;
    this.#replanAll = false;
    return planned;
  }

  #sameHeaders(planned: NodePlans): boolean {
    return this.#families.every((family) => {
      const before = this.#applied?.[family];
      return before !== undefined && headerKey(before) === headerKey(planned[family]);
    });
  }

  async #drifted(now: number): Promise<boolean> {
    if (!this.#backend.checkDrift || now - this.#lastDriftCheckAt < this.#syncPeriodMs) {
      return false;
    }
    this.#lastDriftCheckAt = now;
    let drifted: boolean;
    try {
      drifted = await this.#backend.checkDrift();
    } catch (error) {
      logger.warn("Cannot check {mode} rules for drift, resyncing fully: {error}", {
        mode: this.#backend.mode,
        error,
      });
      drifted = true;
    }
    if (drifted) {
      this.#driftRepairs++;
      this.#metrics.driftRepairsTotal.inc({ mode: this.#backend.mode });
      logger.warn("The kernel's {mode} rules drifted from what was applied; resyncing fully", {
        mode: this.#backend.mode,
      });
    }
    return drifted;
  }

  /**
   * Counts a failed backend sync in kproxy's counter and, as kube-proxy does,
   * in the mode's: a failed `nft` run, a failed `iptables-restore` run of a
   * family, any failure of a partial iptables sync.
   */
  #recordBackendFailure(error: unknown, full: boolean): void {
    const metrics = this.#metrics;
    metrics.syncFailuresTotal.inc({ mode: this.#backend.mode });
    const program = error instanceof CommandError ? error.command.program : undefined;
    for (const family of this.#families) {
      const ip_family = FAMILY_LABELS[family];
      if (!full) metrics.iptablesPartialRestoreFailuresTotal?.inc({ ip_family });
      if (program === "nft") metrics.nftablesSyncFailuresTotal?.inc({ ip_family });
      if (program !== undefined && restoreFamily(program) === ip_family) {
        metrics.iptablesRestoreFailuresTotal?.inc({ ip_family });
      }
    }
  }

  #recordSuccess(
    sync: {
      result: SyncResult;
      startedAt: number;
      finishedAt: number;
      oldestChangeAt?: number;
      plans: Plan[];
      previous: Plan[];
      changed: ReadonlySet<string>;
    },
  ): void {
    const metrics = this.#metrics;
    const seconds = (sync.finishedAt - sync.startedAt) / 1000;
    const syncedAt = this.#clock.wallNow() / 1000;
    sync.plans.forEach((plan, i) => {
      const ip_family = plan.family;
      metrics.syncProxyRulesDuration.observe({ ip_family }, seconds);
      (sync.result.full
        ? metrics.syncFullProxyRulesDuration
        : metrics.syncPartialProxyRulesDuration)
        .observe({ ip_family }, seconds);
      metrics.syncProxyRulesLastTimestamp.set({ ip_family }, syncedAt);
      const programmed = sync.previous[i] === undefined ||
        plan.services.some((service) => sync.changed.has(service.id)) ||
        sync.previous[i]!.services.some((service) => sync.changed.has(service.id));
      if (sync.oldestChangeAt !== undefined && programmed) {
        metrics.networkProgrammingDuration.observe(
          { ip_family },
          Math.max(0, sync.finishedAt - sync.oldestChangeAt) / 1000,
        );
      }
      let internal = 0;
      let external = 0;
      for (const service of plan.services) {
        if (service.internal.endpoints.length === 0 && service.internal.whenEmpty === "drop") {
          internal++;
        }
        if (
          service.externalLocal && service.external.endpoints.length === 0 &&
          service.external.whenEmpty === "drop"
        ) {
          external++;
        }
      }
      metrics.noLocalEndpointsTotal.set({ ip_family, traffic_policy: "internal" }, internal);
      metrics.noLocalEndpointsTotal.set({ ip_family, traffic_policy: "external" }, external);
    });
    for (const count of sync.result.iptablesRules ?? []) {
      const labels = { ip_family: count.family, table: count.table };
      metrics.iptablesRulesLast?.set(labels, count.written);
      metrics.iptablesRulesTotal?.set(labels, count.total);
    }
  }

  /**
   * A sync that found the kernel already right is a successful sync, as in
   * kube-proxy, which runs its (then empty) transaction every time: health,
   * the sync durations and the last-sync timestamp move, so a quiet node does
   * not look stale.
   */
  #recordUnchanged(plans: Plan[], seconds: number): void {
    this.#health.updated();
    const syncedAt = this.#clock.wallNow() / 1000;
    for (const { family: ip_family } of plans) {
      this.#metrics.syncProxyRulesDuration.observe({ ip_family }, seconds);
      this.#metrics.syncPartialProxyRulesDuration.observe({ ip_family }, seconds);
      this.#metrics.syncProxyRulesLastTimestamp.set({ ip_family }, syncedAt);
    }
  }

  async #syncServiceHealth(plans: Plan[]): Promise<void> {
    if (!this.#serviceHealth) return;
    const services = new Map<number, ServiceHealthInfo>();
    for (const plan of plans) {
      for (const service of plan.services) {
        if (service.healthCheckNodePort === 0) continue;
        const known = services.get(service.healthCheckNodePort);
        services.set(service.healthCheckNodePort, {
          namespace: service.namespace,
          name: service.name,
          localEndpoints: Math.max(known?.localEndpoints ?? 0, service.localReadyEndpoints),
        });
      }
    }
    try {
      await this.#serviceHealth.sync(services);
    } catch (error) {
      logger.error("Cannot update health check node ports: {error}", { error });
    }
  }
}

function headerKey(plan: Plan): string {
  return JSON.stringify([
    plan.family,
    plan.nodeName,
    plan.nodePortAddresses,
    plan.serviceCIDRs,
    plan.localTraffic,
    plan.clusterIPMasquerade,
  ]);
}

function minDefined(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.min(a, b);
}
