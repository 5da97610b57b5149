/**
 * A map whose snapshots cost what changed since the last one, not its size.
 *
 * @module
 */

const DELETED: unique symbol = Symbol("deleted");
type Slot<V> = V | typeof DELETED;

/** Changes are folded into a new base once they exceed this share of it (and this minimum). */
const FOLD_DIVISOR = 16;
const FOLD_MINIMUM = 1024;

/**
 * One immutable version of a {@linkcode SnapshotMap}: a base map shared with
 * other versions, and the changes on top of it. Iterates in the base's order,
 * then the keys added since.
 */
class Snapshot<K, V> implements ReadonlyMap<K, V> {
  constructor(
    readonly base: ReadonlyMap<K, V>,
    readonly changes: ReadonlyMap<K, Slot<V>>,
    readonly size: number,
  ) {}

  get(key: K): V | undefined {
    const slot = this.changes.get(key);
    if (slot === undefined) return this.changes.has(key) ? undefined : this.base.get(key);
    return slot === DELETED ? undefined : slot;
  }

  has(key: K): boolean {
    const slot = this.changes.get(key);
    if (slot === undefined && !this.changes.has(key)) return this.base.has(key);
    return slot !== DELETED;
  }

  *entries(): MapIterator<[K, V]> {
    const { base, changes } = this;
    for (const [key, value] of base) {
      if (!changes.has(key)) {
        yield [key, value];
        continue;
      }
      const slot = changes.get(key) as Slot<V>;
      if (slot !== DELETED) yield [key, slot];
    }
    for (const [key, slot] of changes) {
      if (slot !== DELETED && !base.has(key)) yield [key, slot];
    }
  }

  *keys(): MapIterator<K> {
    for (const [key] of this.entries()) yield key;
  }

  *values(): MapIterator<V> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.entries();
  }

  forEach(callback: (value: V, key: K, map: ReadonlyMap<K, V>) => void, thisArg?: unknown): void {
    for (const [key, value] of this.entries()) callback.call(thisArg, value, key, this);
  }
}

/**
 * A mutable map that hands out immutable snapshots ({@linkcode share}). A
 * write after a snapshot copies only the changes made since the base was last
 * folded (at most a sixteenth of the map), not the whole map, so that one
 * change costs the same at 100k entries as at 1k.
 *
 * @example Usage
 * ```ts
 * import { SnapshotMap } from "./snapshot_map.ts";
 * const map = new SnapshotMap<string, number>();
 * map.set("a", 1);
 * const before = map.share();
 * map.set("a", 2);
 * console.log(before.get("a"), map.get("a")); // 1 2
 * ```
 */
export class SnapshotMap<K, V> {
  #base: Map<K, V> = new Map();
  #changes: Map<K, Slot<V>> = new Map();
  #size = 0;
  /** The snapshot handed out last, while nothing changed since. */
  #shared: Snapshot<K, V> | undefined;
  /** Whether a snapshot uses #base: writes then go to #changes (empty while it is not). */
  #baseShared = false;
  /** Whether #changes belongs to a snapshot and must be copied before a write. */
  #changesShared = false;

  get size(): number {
    return this.#size;
  }

  get(key: K): V | undefined {
    const slot = this.#changes.get(key);
    if (slot === undefined) return this.#changes.has(key) ? undefined : this.#base.get(key);
    return slot === DELETED ? undefined : slot;
  }

  has(key: K): boolean {
    const slot = this.#changes.get(key);
    if (slot === undefined && !this.#changes.has(key)) return this.#base.has(key);
    return slot !== DELETED;
  }

  set(key: K, value: V): void {
    if (!this.has(key)) this.#size++;
    this.#shared = undefined;
    if (this.#baseShared) this.#writableChanges().set(key, value);
    else this.#base.set(key, value);
  }

  delete(key: K): boolean {
    if (!this.has(key)) return false;
    this.#size--;
    this.#shared = undefined;
    if (!this.#baseShared) {
      this.#base.delete(key);
      return true;
    }
    const changes = this.#writableChanges();
    if (this.#base.has(key)) changes.set(key, DELETED);
    else changes.delete(key);
    return true;
  }

  /** The current contents, never changed by later writes. */
  share(): ReadonlyMap<K, V> {
    this.#shared ??= new Snapshot(this.#base, this.#changes, this.#size);
    this.#baseShared = true;
    this.#changesShared = true;
    return this.#shared;
  }

  #writableChanges(): Map<K, V | typeof DELETED> {
    if (this.#changes.size >= Math.max(FOLD_MINIMUM, this.#base.size / FOLD_DIVISOR)) {
      this.#fold();
    } else if (this.#changesShared) {
      this.#changes = new Map(this.#changes);
      this.#changesShared = false;
    }
    return this.#changes;
  }

  /** Makes a new base holding the changes; the old base stays with the snapshots using it. */
  #fold(): void {
    const base = new Map<K, V>();
    for (const [key, value] of new Snapshot(this.#base, this.#changes, this.#size)) {
      base.set(key, value);
    }
    this.#base = base;
    this.#changes = new Map();
    this.#changesShared = false;
    this.#baseShared = true;
  }
}
