/**
 * The cluster as the proxy sees it: validated objects, indexed for planning.
 *
 * @module
 */

import type { EndpointSlice, Node, Service, ServiceCIDR, ServiceKey } from "./model.ts";

/** A snapshot of validated cluster state. Treat as immutable. */
export interface ClusterState {
  services: ReadonlyMap<ServiceKey, Service>;
  /** EndpointSlices grouped by the key of the service that owns them. */
  slicesByService: ReadonlyMap<ServiceKey, readonly EndpointSlice[]>;
  nodes: ReadonlyMap<string, Node>;
  serviceCIDRs: readonly ServiceCIDR[];
}

/** What the tracker hands the runner on each sync. */
export interface StateChange {
  state: ClusterState;
  /** Services whose own object or slices changed since the last drain. */
  changedServices: Set<ServiceKey>;
  /** True when something every service depends on changed (this node, ServiceCIDRs). */
  globalChange: boolean;
  /** Pending counts since last drain, for metrics. */
  serviceChanges: number;
  endpointChanges: number;
  /** Earliest time (the tracker's monotonic clock) a change drained now was observed, for
   * network_programming_duration; undefined when nothing changed. */
  oldestChangeAt?: number;
}
