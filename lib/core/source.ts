/**
 * What a source of API objects (an apiserver watch or a manifests directory)
 * tells the tracker.
 *
 * @module
 */

/** The kinds of object kproxy watches. */
export type ObjectKind = "Service" | "EndpointSlice" | "Node" | "ServiceCIDR";

/** One change seen by a source. Objects are raw API JSON (field names as in the API). */
export type SourceEvent =
  | { type: "upsert"; kind: ObjectKind; object: Record<string, unknown> }
  | { type: "delete"; kind: ObjectKind; object: Record<string, unknown> }
  /** Every kind has completed its initial list: syncing may begin. */
  | { type: "synced" };

/** Receives source events. */
export type SourceListener = (event: SourceEvent) => void;

/** A running source; stops when the signal aborts. */
export interface Source {
  start(listener: SourceListener, signal: AbortSignal): Promise<void>;
  /**
   * Records kube-proxy's `Starting` event on this node, best effort (an
   * apiserver source only). Never rejects.
   */
  recordStarting?(signal: AbortSignal): Promise<void>;
}
