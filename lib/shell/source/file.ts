/**
 * A source that reads API objects from a directory of manifests instead of
 * an apiserver: for the demo, `kproxy plan` and tests.
 *
 * @module
 */

import { getLogger } from "../../core/logger.ts";
import type { ObjectKind, Source, SourceListener } from "../../core/source.ts";
import { sleep } from "./backoff.ts";
import { manifestDocuments, type ManifestObject } from "./manifest.ts";
import {
  MANIFEST_NAME,
  type ManifestEntry,
  readManifest,
  scanManifestDir,
} from "./manifest_dir.ts";

const logger = getLogger(["kproxy", "source", "file"]);

/** Options for {@linkcode FileSource}. */
export interface FileSourceOptions {
  /** The directory of `.yaml`, `.yml` and `.json` manifests. */
  dir: string;
  /** How often to look for changes (by size, times and inode) besides file events. @default {2000} */
  pollIntervalMs?: number;
  /** Delay to gather a burst of file events into one re-read. @default {100} */
  debounceMs?: number;
  /** Files above this size are refused. @default {MAX_MANIFEST_BYTES} */
  maxFileBytes?: number;
  /** Longest stretch of parsing or emitting before timers and I/O get a turn. @default {20} */
  sliceMs?: number;
}

const KINDS: readonly string[] = ["Service", "EndpointSlice", "Node", "ServiceCIDR"];

interface LoadedObject {
  kind: ObjectKind;
  /** The object's JSON text: a change in it means an update. */
  content: string;
  /** The parsed object until it has been emitted once; later rebuilt from `content`. */
  object?: ManifestObject;
}

/** What was last read of one file. */
interface LoadedFile {
  /** The scan signature at the last read: unchanged means no read. */
  signature: string;
  /** Its objects by identity, from the last read that parsed. */
  objects: Map<string, LoadedObject>;
}

function identity(kind: string, object: ManifestObject): string {
  const metadata = typeof object.metadata === "object" && object.metadata !== null
    ? object.metadata as Record<string, unknown>
    : {};
  return `${kind}/${String(metadata.namespace ?? "")}/${String(metadata.name ?? "")}`;
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * Reads Services, EndpointSlices, Nodes and ServiceCIDRs from a directory and
 * follows its changes.
 *
 * `start()` emits an upsert per object, then `synced`, then upserts for
 * changed objects and deletes for vanished ones whenever the directory
 * changes. Changes are noticed by file events and by a poll that compares
 * each file's size, times, inode and link target: only files that changed are
 * read and parsed again, and only their objects' changes are emitted. A file
 * that cannot be read or parsed is logged (once per change) and skipped; its
 * objects keep their last loaded version. A link leaving the directory, a
 * file above `maxFileBytes` and anything but a regular file are refused with
 * a log line naming them. Parsing yields to the event loop every `sliceMs`.
 * The promise resolves when the signal aborts; it rejects, before `synced`, when
 * the directory cannot be read at start. A directory that vanishes later keeps
 * its last objects (logged) until it is back.
 *
 * @example Usage
 * ```ts
 * import { FileSource } from "./file.ts";
 * const controller = new AbortController();
 * const source = new FileSource({ dir: "scripts/manifests" });
 * const done = source.start((event) => console.log(event.type), controller.signal);
 * controller.abort();
 * await done;
 * ```
 */
export class FileSource implements Source {
  readonly #dir: string;
  readonly #pollIntervalMs: number;
  readonly #debounceMs: number;
  readonly #maxFileBytes: number | undefined;
  readonly #sliceMs: number;
  #files = new Map<string, LoadedFile>();
  /** What was emitted, by identity. */
  #known = new Map<string, LoadedObject>();
  /** What was last logged, so polling does not repeat it. */
  #duplicates = new Set<string>();
  #problems = new Map<string, string>();
  #dirError: string | undefined;
  #sliceStart = 0;

  /** Creates a source reading `options.dir`. */
  constructor(options: FileSourceOptions) {
    this.#dir = options.dir;
    this.#pollIntervalMs = options.pollIntervalMs ?? 2000;
    this.#debounceMs = options.debounceMs ?? 100;
    this.#maxFileBytes = options.maxFileBytes;
    this.#sliceMs = options.sliceMs ?? 20;
  }

  /** Loads the directory, reports `synced`, then follows changes until `signal` aborts. */
  async start(listener: SourceListener, signal: AbortSignal): Promise<void> {
    // Watch before the first read, so that a change made while it runs is not missed.
    const events = new FileEvents();
    const stopWatch = this.#watch(events, signal);
    try {
      await this.#reload(listener, new Set(), { initial: true });
      if (signal.aborted) return;
      listener({ type: "synced" });
      await this.#follow(listener, signal, events);
    } finally {
      stopWatch();
    }
  }

  async #follow(listener: SourceListener, signal: AbortSignal, events: FileEvents): Promise<void> {
    const onAbort = () => events.wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      while (!signal.aborted) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, this.#pollIntervalMs);
          events.wake = () => {
            clearTimeout(timer);
            resolve();
          };
          if (events.poked || signal.aborted) events.wake();
        });
        events.wake = undefined;
        if (signal.aborted) break;
        if (events.poked) await sleep(this.#debounceMs, signal);
        if (signal.aborted) break;
        await this.#reload(listener, events.take());
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /** Watches the directory with Deno.watchFs; returns a function that stops it. */
  #watch(events: FileEvents, signal: AbortSignal): () => void {
    let watcher: Deno.FsWatcher;
    try {
      watcher = Deno.watchFs(this.#dir, { recursive: false });
    } catch (error) {
      logger.info("Cannot watch {dir}, polling only: {error}", {
        dir: this.#dir,
        error: String(error),
      });
      return () => {};
    }
    (async () => {
      try {
        for await (const event of watcher) {
          if (signal.aborted) break;
          if (event.kind === "access") continue;
          // Any other event counts (a ConfigMap volume swaps its `..data` link); names are re-read.
          events.poke(undefined);
          for (const path of event.paths) {
            const name = path.slice(path.lastIndexOf("/") + 1);
            if (MANIFEST_NAME.test(name)) events.poke(name);
          }
        }
      } catch (error) {
        if (!signal.aborted) {
          logger.info("Stopped watching {dir}, polling only: {error}", {
            dir: this.#dir,
            error: String(error),
          });
        }
      }
    })();
    return () => {
      try {
        watcher.close();
      } catch {
        // already closed
      }
    };
  }

  /**
   * Reads the files that changed (or are in `forced`) and emits what changed. A directory that
   * cannot be read keeps every object: the first time it throws (an empty directory is a
   * cluster without Services, a missing one is a mistake), later it logs once per error.
   */
  async #reload(
    listener: SourceListener,
    forced: ReadonlySet<string>,
    options: { initial?: boolean } = {},
  ): Promise<void> {
    let entries: ManifestEntry[];
    try {
      entries = await scanManifestDir(this.#dir, { maxFileBytes: this.#maxFileBytes });
      this.#dirError = undefined;
    } catch (error) {
      if (options.initial) {
        const reason = error instanceof Error ? error.message : String(error);
        throw new Error(`Cannot read manifests directory ${this.#dir}: ${reason}`, {
          cause: error,
        });
      }
      const message = String(error);
      if (this.#dirError !== message) {
        logger.error("Cannot read manifests directory {dir}, keeping its last objects: {error}", {
          dir: this.#dir,
          error: message,
        });
      }
      this.#dirError = message;
      return;
    }
    this.#sliceStart = performance.now();
    let changed = false;
    const present = new Set<string>();
    for (const entry of entries) {
      present.add(entry.name);
      if (entry.problem !== undefined) {
        this.#problem(entry, "Refusing manifest {path}: {reason}", entry.problem);
        continue;
      }
      const last = this.#files.get(entry.name);
      if (last?.signature === entry.signature && !forced.has(entry.name)) continue;
      const objects = await this.#readFile(entry);
      this.#files.set(entry.name, {
        signature: entry.signature,
        objects: objects ?? last?.objects ?? new Map(),
      });
      if (objects !== undefined) changed = true;
    }
    for (const name of [...this.#files.keys(), ...this.#problems.keys()]) {
      if (present.has(name)) continue;
      if (this.#files.delete(name)) changed = true;
      this.#problems.delete(name);
    }
    if (changed) await this.#emitChanges(listener);
  }

  /** Logs a refused or unreadable file, once while the reason stays the same unless `always`. */
  #problem(entry: ManifestEntry, message: string, reason: string, always = false): void {
    const key = `${message}\0${reason}`;
    if (always || this.#problems.get(entry.name) !== key) {
      logger.error(message, { path: entry.path, reason });
    }
    this.#problems.set(entry.name, key);
  }

  /** The objects of one file, or undefined when it cannot be read or parsed. */
  async #readFile(entry: ManifestEntry): Promise<Map<string, LoadedObject> | undefined> {
    const objects = new Map<string, LoadedObject>();
    try {
      const text = await readManifest(this.#dir, entry.name, { maxFileBytes: this.#maxFileBytes });
      for (const documentObjects of manifestDocuments(text, entry.path)) {
        for (const object of documentObjects) {
          const kind = object.kind;
          if (typeof kind !== "string" || !KINDS.includes(kind)) {
            const named = typeof kind === "string" && /^[A-Za-z0-9]{1,63}$/.test(kind);
            logger.debug("Ignoring {kind} in {path}", {
              kind: named ? kind : "an object without a valid kind",
              path: entry.path,
            });
            continue;
          }
          objects.set(identity(kind, object), {
            kind: kind as ObjectKind,
            content: JSON.stringify(object),
            object,
          });
        }
        await this.#maybeYield();
      }
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      // A file is read only when it changed: every failure is news.
      this.#problem(entry, "Skipping manifest {path}: {reason}", reason, true);
      return undefined;
    }
    this.#problems.delete(entry.name);
    logger.debug("Read {path}: {count} objects", { path: entry.path, count: objects.size });
    return objects;
  }

  async #maybeYield(): Promise<void> {
    if (performance.now() - this.#sliceStart < this.#sliceMs) return;
    await yieldToEventLoop();
    this.#sliceStart = performance.now();
  }

  /** Emits the difference between the files' objects (first file wins) and what was emitted. */
  async #emitChanges(listener: SourceListener): Promise<void> {
    const next = new Map<string, LoadedObject>();
    const duplicates = new Set<string>();
    for (const name of [...this.#files.keys()].sort()) {
      for (const [id, loaded] of this.#files.get(name)!.objects) {
        if (!next.has(id)) {
          next.set(id, loaded);
          continue;
        }
        if (!this.#duplicates.has(id)) {
          logger.warn("Ignoring duplicate {id} in {dir}", { id, dir: this.#dir });
        }
        duplicates.add(id);
      }
    }
    this.#duplicates = duplicates;
    const previous = this.#known;
    this.#known = next;
    for (const [id, loaded] of next) {
      if (previous.get(id)?.content !== loaded.content) {
        listener({ type: "upsert", kind: loaded.kind, object: objectOf(loaded) });
        await this.#maybeYield();
      }
    }
    for (const [id, loaded] of previous) {
      if (next.has(id)) continue;
      listener({ type: "delete", kind: loaded.kind, object: objectOf(loaded) });
      await this.#maybeYield();
    }
    for (const file of this.#files.values()) {
      for (const loaded of file.objects.values()) loaded.object = undefined;
    }
  }
}

/** File events seen since the last re-read. */
class FileEvents {
  /** Whether any event came. */
  poked = false;
  /** Wakes the waiting follow loop. */
  wake: (() => void) | undefined;
  /** Manifest names the events named: read again even when their signature did not change. */
  #touched = new Set<string>();

  /** Records an event, naming a manifest or not. */
  poke(name: string | undefined): void {
    if (name !== undefined) this.#touched.add(name);
    this.poked = true;
    this.wake?.();
  }

  /** The names recorded so far; forgets them. */
  take(): Set<string> {
    const names = this.#touched;
    this.#touched = new Set();
    this.poked = false;
    return names;
  }
}

function objectOf(loaded: LoadedObject): ManifestObject {
  return loaded.object ?? JSON.parse(loaded.content);
}
