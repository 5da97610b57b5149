/**
 * The change tracker: source events in, validated state snapshots and the
 * set of changed services out.
 *
 * Like upstream's service and endpoints change trackers, changes are
 * coalesced per service between drains and a change followed by its revert
 * is no change at all. Snapshots share structure: the maps handed out by
 * `drain()` are never mutated afterwards ({@linkcode SnapshotMap}: a write
 * after a drain copies only the changes since the map was last folded, never
 * the whole map), and per-service slice arrays are replaced, never edited.
 *
 * @module
 */

import { deepEqual } from "./deep_equal.ts";
import { getLogger } from "./logger.ts";
import type { Clock } from "./clock.ts";
import type { EndpointSlice, Node, Service, ServiceCIDR, ServiceKey } from "./model.ts";
import { serviceKey } from "./model.ts";
import type { ClusterState, StateChange } from "./state.ts";
import type { ObjectKind, SourceEvent } from "./source.ts";
import { objectKeyOf, type ParseResult } from "./parse/fields.ts";
import { parseEndpointSlice } from "./parse/endpoint_slice.ts";
import { parseNode } from "./parse/node.ts";
import { parseService } from "./parse/service.ts";
import { parseServiceCIDR } from "./parse/service_cidr.ts";
import { SnapshotMap } from "./snapshot_map.ts";
import { unservedTopologyKeys, usesTopologyKeys } from "./topology.ts";

const logger = getLogger(["kproxy", "tracker"]);

/** Options for {@linkcode Tracker}. */
export interface TrackerOptions {
  /** The name of the node kproxy runs on. */
  nodeName: string;
  /**
   * Monotonic time of changes, for the network programming latency; with
   * `wallNow`, EndpointSlice changes start at their last-change-trigger-time.
   */
  clock: Pick<Clock, "now"> & Partial<Pick<Clock, "wallNow">>;
  /** Feature gates, for warnings about topologyKeys in effect. @default {{}} */
  featureGates?: Readonly<Record<string, boolean>>;
}

/** Parser warnings shown in one log line: the first few, then how many more. */
const SHOWN_WARNINGS = 3;

function summarize(warnings: readonly string[]): string {
  const shown = warnings.slice(0, SHOWN_WARNINGS);
  if (warnings.length > SHOWN_WARNINGS) shown.push(`and ${warnings.length - SHOWN_WARNINGS} more`);
  return shown.join("; ");
}

/** The EndpointSlice annotation upstream's network programming latency starts at. */
export const LAST_CHANGE_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time";

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/**
 * Parses a last-change-trigger-time as Go's `time.RFC3339Nano` layout does,
 * strictly: returns epoch milliseconds, or undefined for anything else.
 */
export function parseTriggerTime(value: unknown): number | undefined {
  if (typeof value !== "string") return undefined;
  const match = RFC3339.exec(value);
  if (!match) return undefined;
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const offsetHours = Number(match[9] ?? 0);
  const offsetMinutes = Number(match[10] ?? 0);
  if (month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59) return undefined;
  if (offsetHours > 23 || offsetMinutes > 59) return undefined;
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  if (date.getUTCDate() !== day) return undefined;
  date.setUTCHours(hour, minute, second);
  const fraction = match[7] === undefined ? 0 : Number(`0.${match[7]}`) * 1000;
  const offset = (match[8] === "-" ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000;
  return date.getTime() + fraction - offset;
}

const EMPTY_STATE: ClusterState = {
  services: new Map(),
  slicesByService: new Map(),
  nodes: new Map(),
  serviceCIDRs: [],
};

/**
 * Tracks validated cluster state and what changed since the last drain.
 *
 * @example Usage
 * ```ts
 * import { Tracker } from "./tracker.ts";
 * const tracker = new Tracker({ nodeName: "node-a", clock: { now: () => performance.now() } });
 * tracker.apply({ type: "synced" });
 * const change = tracker.drain();
 * console.log(change.state.services.size, change.changedServices.size);
 * ```
 */
export class Tracker {
  readonly #nodeName: string;
  readonly #clock: TrackerOptions["clock"];
  /** Wall time the tracker started: older trigger times come from before kproxy ran. */
  readonly #startedAtWall?: number;
  #synced = false;

  readonly #featureGates: Readonly<Record<string, boolean>>;
  readonly #services = new SnapshotMap<ServiceKey, Service>();
  /** Slices by `namespace/name` of the slice. */
  readonly #slices = new Map<string, EndpointSlice>();
  readonly #slicesByService = new SnapshotMap<ServiceKey, readonly EndpointSlice[]>();
  readonly #nodes = new SnapshotMap<string, Node>();
  readonly #serviceCIDRs = new Map<string, ServiceCIDR>();
  #serviceCIDRList: readonly ServiceCIDR[] = [];

  /** The state handed out by the last drain: the "previous" side of every pending change. */
  #drained: ClusterState = EMPTY_STATE;
  /** Service keys touched since the last drain, with when they were first touched. */
  readonly #pending = new Map<ServiceKey, number>();
  #globalSince: number | undefined;
  /** Last warning (error or refusals) logged per object, so a resync of the same object logs once. */
  readonly #loggedWarnings = new Map<string, string>();

  /** Creates a tracker for the node named in `options`. */
  constructor(options: TrackerOptions) {
    this.#nodeName = options.nodeName;
    this.#clock = options.clock;
    this.#featureGates = options.featureGates ?? {};
    this.#startedAtWall = options.clock.wallNow?.();
  }

  /** True once the source reported that every kind completed its initial list. */
  get synced(): boolean {
    return this.#synced;
  }

  /**
   * Applies one source event.
   *
   * Invalid objects are skipped with one warning; the last valid version of
   * an object stays in effect.
   *
   * @returns true when a sync is needed (changes are pending).
   */
  apply(event: SourceEvent): boolean {
    if (event.type === "synced") {
      this.#synced = true;
      return true;
    }
    const remove = event.type === "delete";
    switch (event.kind) {
      case "Service":
        this.#applyService(event.object, remove);
        break;
      case "EndpointSlice":
        this.#applyEndpointSlice(event.object, remove);
        break;
      case "Node":
        this.#applyNode(event.object, remove);
        break;
      case "ServiceCIDR":
        this.#applyServiceCIDR(event.object, remove);
        break;
    }
    return this.#hasPending();
  }

  /**
   * Takes a snapshot of the state and the changes since the last drain, and
   * starts a new change period.
   */
  drain(): StateChange {
    const state: ClusterState = {
      services: this.#services.share(),
      slicesByService: this.#slicesByService.share(),
      nodes: this.#nodes.share(),
      serviceCIDRs: this.#serviceCIDRList,
    };
    const previous = this.#drained;
    const changedServices = new Set<ServiceKey>();
    let serviceChanges = 0;
    let endpointChanges = 0;
    let oldest: number | undefined;
    const observe = (at: number) => {
      if (oldest === undefined || at < oldest) oldest = at;
    };
    for (const [key, at] of this.#pending) {
      const serviceChanged = !deepEqual(previous.services.get(key), state.services.get(key));
      const slicesChanged = !deepEqual(
        previous.slicesByService.get(key),
        state.slicesByService.get(key),
      );
      if (serviceChanged) serviceChanges++;
      if (slicesChanged) endpointChanges++;
      if (serviceChanged || slicesChanged) {
        changedServices.add(key);
        observe(at);
      }
    }
    const globalChange = this.#globalSince !== undefined && this.#globalDiffersFrom(previous);
    if (globalChange) observe(this.#globalSince!);

    this.#drained = state;
    this.#pending.clear();
    this.#globalSince = undefined;
    const change: StateChange = {
      state,
      changedServices,
      globalChange,
      serviceChanges,
      endpointChanges,
    };
    if (oldest !== undefined) change.oldestChangeAt = oldest;
    return change;
  }

  #hasPending(): boolean {
    return this.#pending.size > 0 || this.#globalSince !== undefined;
  }

  #globalDiffersFrom(previous: ClusterState): boolean {
    return !deepEqual(previous.nodes.get(this.#nodeName), this.#nodes.get(this.#nodeName)) ||
      !deepEqual(previous.serviceCIDRs, this.#serviceCIDRList);
  }

  #touchGlobal(): void {
    this.#globalSince ??= this.#clock.now();
    if (!this.#globalDiffersFrom(this.#drained)) this.#globalSince = undefined;
  }

  /**
   * Parses an upsert; on failure logs once and returns undefined (keep the
   * previous version). Values the parser left out (special addresses) are
   * logged once per change too, in one bounded line.
   */
  #parse<T>(
    kind: ObjectKind,
    object: Record<string, unknown>,
    parse: (raw: unknown) => ParseResult<T>,
  ): { value: T } | undefined {
    const { namespace, name } = objectKeyOf(object);
    const logKey = `${kind}/${namespace}/${name}`;
    const key = namespace === "" ? name : `${namespace}/${name}`;
    const result = parse(object);
    const reason = result.ok ? summarize(result.warnings ?? []) : result.error;
    if (reason === "") {
      this.#loggedWarnings.delete(logKey);
    } else if (this.#loggedWarnings.get(logKey) !== reason) {
      this.#loggedWarnings.set(logKey, reason);
      const message = result.ok
        ? "Refusing values of {kind} {key}: {reason}"
        : "Skipping invalid {kind} {key}: {reason}";
      logger.warn(message, { kind, key, reason });
    }
    return result.ok ? { value: result.value } : undefined;
  }

  /** Marks a service changed since `startedAt` (monotonic; default now), keeping the earliest. */
  #touch(key: ServiceKey, startedAt?: number): void {
    const at = Math.min(startedAt ?? this.#clock.now(), this.#pending.get(key) ?? Infinity);
    this.#pending.set(key, at);
    if (
      deepEqual(this.#drained.services.get(key), this.#services.get(key)) &&
      deepEqual(this.#drained.slicesByService.get(key), this.#slicesByService.get(key))
    ) {
      this.#pending.delete(key);
    }
  }

  #applyService(object: Record<string, unknown>, remove: boolean): void {
    const { namespace, name } = objectKeyOf(object);
    const key = serviceKey(namespace, name);
    if (remove) {
      this.#loggedWarnings.delete(`Service/${key}`);
      if (this.#services.delete(key)) this.#touch(key);
      return;
    }
    const parsed = this.#parse("Service", object, parseService);
    if (!parsed) return;
    const service = parsed.value;
    if (service === null) {
      if (this.#services.delete(key)) this.#touch(key);
      return;
    }
    const current = this.#services.get(key);
    if (deepEqual(current, service)) return;
    this.#services.set(key, service);
    this.#warnUnservedTopologyKeys(key, service);
    this.#touch(key);
  }

  #applyEndpointSlice(object: Record<string, unknown>, remove: boolean): void {
    const { namespace, name } = objectKeyOf(object);
    const sliceKey = `${namespace}/${name}`;
    if (remove) {
      this.#loggedWarnings.delete(`EndpointSlice/${sliceKey}`);
      this.#removeSlice(sliceKey);
      return;
    }
    const parsed = this.#parse("EndpointSlice", object, parseEndpointSlice);
    if (!parsed) return;
    const slice = parsed.value;
    if (slice === null) {
      this.#removeSlice(sliceKey);
      return;
    }
    const current = this.#slices.get(sliceKey);
    if (deepEqual(current, slice)) return;
    if (current && current.serviceName !== slice.serviceName) this.#removeSlice(sliceKey);
    this.#slices.set(sliceKey, slice);
    const key = serviceKey(namespace, slice.serviceName);
    const others = (this.#slicesByService.get(key) ?? []).filter((s) => s.name !== name);
    const group = [...others, slice].sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    this.#slicesByService.set(key, group);
    this.#touch(key, this.#triggeredAt(object));
  }

  /**
   * When the change of an EndpointSlice started, as upstream measures it: its
   * last-change-trigger-time, when valid and after the tracker started, in
   * monotonic time and never later than now. Undefined otherwise.
   */
  #triggeredAt(object: Record<string, unknown>): number | undefined {
    const wallNow = this.#clock.wallNow?.();
    if (wallNow === undefined || this.#startedAtWall === undefined) return undefined;
    const metadata = object.metadata;
    if (typeof metadata !== "object" || metadata === null) return undefined;
    const annotations = (metadata as Record<string, unknown>).annotations;
    if (typeof annotations !== "object" || annotations === null) return undefined;
    if (!Object.hasOwn(annotations, LAST_CHANGE_TRIGGER_TIME)) return undefined;
    const raw = (annotations as Record<string, unknown>)[LAST_CHANGE_TRIGGER_TIME];
    const triggeredAt = parseTriggerTime(raw);
    if (triggeredAt === undefined) {
      logger.debug("Ignoring {annotation}: {value} is not an RFC 3339 time", {
        annotation: LAST_CHANGE_TRIGGER_TIME,
        value: String(raw).slice(0, 64),
      });
      return undefined;
    }
    if (!(triggeredAt > this.#startedAtWall)) return undefined;
    return this.#clock.now() - Math.max(0, wallNow - triggeredAt);
  }

  #removeSlice(sliceKey: string): void {
    const current = this.#slices.get(sliceKey);
    if (!current) return;
    this.#slices.delete(sliceKey);
    const key = serviceKey(current.namespace, current.serviceName);
    const group = (this.#slicesByService.get(key) ?? []).filter((s) => s.name !== current.name);
    if (group.length === 0) this.#slicesByService.delete(key);
    else this.#slicesByService.set(key, group);
    this.#touch(key);
  }

  #applyNode(object: Record<string, unknown>, remove: boolean): void {
    const { name } = objectKeyOf(object);
    let node: Node | undefined;
    if (remove) {
      this.#loggedWarnings.delete(`Node//${name}`);
    } else {
      const parsed = this.#parse("Node", object, parseNode);
      if (!parsed) return;
      node = parsed.value;
    }
    const current = this.#nodes.get(name);
    if (deepEqual(current, node)) return;
    if (node) this.#nodes.set(name, node);
    else this.#nodes.delete(name);
    // Other nodes matter to nothing kproxy plans (topology takes their hostname and zone from
    // the EndpointSlices); a manifests directory still hands them in, for `kproxy explain`.
    if (name === this.#nodeName) this.#touchGlobal();
  }

  /** Logs once per Service which of its topologyKeys only endpoints on this node can match. */
  #warnUnservedTopologyKeys(key: ServiceKey, service: Service): void {
    const unserved = usesTopologyKeys(service, this.#featureGates)
      ? unservedTopologyKeys(service.topologyKeys)
      : [];
    const logKey = `Service-topologyKeys/${key}`;
    const reason = unserved.join(", ");
    if (reason === "") {
      this.#loggedWarnings.delete(logKey);
      return;
    }
    if (this.#loggedWarnings.get(logKey) === reason) return;
    this.#loggedWarnings.set(logKey, reason);
    logger.warn(
      "Service {key} topologyKeys {keys} match only endpoints on this node: kproxy watches only " +
        "its own Node and learns other nodes' hostname and zone from EndpointSlices, not their " +
        "other labels",
      { key, keys: unserved },
    );
  }

  #applyServiceCIDR(object: Record<string, unknown>, remove: boolean): void {
    const { name } = objectKeyOf(object);
    let cidr: ServiceCIDR | undefined;
    if (remove) {
      this.#loggedWarnings.delete(`ServiceCIDR//${name}`);
    } else {
      const parsed = this.#parse("ServiceCIDR", object, parseServiceCIDR);
      if (!parsed) return;
      cidr = parsed.value;
    }
    if (deepEqual(this.#serviceCIDRs.get(name), cidr)) return;
    if (cidr) this.#serviceCIDRs.set(name, cidr);
    else this.#serviceCIDRs.delete(name);
    this.#serviceCIDRList = [...this.#serviceCIDRs.values()].sort((a, b) =>
      a.name < b.name ? -1 : a.name > b.name ? 1 : 0
    );
    this.#touchGlobal();
  }
}
