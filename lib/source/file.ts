/**
 * A source that reads API objects from a directory of manifests instead of
 * an apiserver: for the demo, `kproxy plan` and tests.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import { parseAllDocuments } from "yaml";
import type { ObjectKind, Source, SourceListener } from "./source.ts";
import { sleep } from "./backoff.ts";

const logger = getLogger(["kproxy", "source", "file"]);

/** Options for {@linkcode FileSource}. */
export interface FileSourceOptions {
  /** The directory of `.yaml`, `.yml` and `.json` manifests. */
  dir: string;
  /** How often to re-read the directory when file events are missed. @default {2000} */
  pollIntervalMs?: number;
  /** Delay to gather a burst of file events into one re-read. @default {100} */
  debounceMs?: number;
}

const KINDS: readonly string[] = ["Service", "EndpointSlice", "Node", "ServiceCIDR"];
const MANIFEST = /\.(ya?ml|json)$/;

interface LoadedObject {
  kind: ObjectKind;
  object: Record<string, unknown>;
  /** The object's JSON text: a change in it means an update. */
  content: string;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Extracts the objects of one manifest file: every YAML document, and the
 * items of `kind: List` documents.
 *
 * @throws {SyntaxError} when the file is not valid YAML or JSON.
 */
export function parseManifest(text: string, file: string): Record<string, unknown>[] {
  const objects: Record<string, unknown>[] = [];
  for (const document of parseAllDocuments(text)) {
    if (document.errors.length > 0) {
      throw new SyntaxError(`Cannot parse ${file}: ${document.errors[0]!.message}`);
    }
    const value = document.toJS();
    if (value === null || value === undefined) continue;
    if (!isRecord(value)) {
      throw new SyntaxError(`Cannot parse ${file}: a document is not an object`);
    }
    if (typeof value.kind === "string" && value.kind.endsWith("List")) {
      const items = Array.isArray(value.items) ? value.items : [];
      for (const item of items) if (isRecord(item)) objects.push(item);
    } else {
      objects.push(value);
    }
  }
  return objects;
}

function identity(kind: string, object: Record<string, unknown>): string {
  const metadata = isRecord(object.metadata) ? object.metadata : {};
  return `${kind}/${String(metadata.namespace ?? "")}/${String(metadata.name ?? "")}`;
}

/**
 * Reads Services, EndpointSlices, Nodes and ServiceCIDRs from a directory and
 * follows its changes.
 *
 * `start()` emits an upsert per object, then `synced`, then upserts for
 * changed objects and deletes for vanished ones whenever the directory
 * changes (file events, with polling as a fallback). A file that fails to
 * parse is logged and skipped; its objects keep their last loaded version.
 * The promise resolves when the signal aborts.
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
  #known = new Map<string, LoadedObject>();
  /** Objects per file, so a file that stops parsing keeps its last good objects. */
  #byFile = new Map<string, Map<string, LoadedObject>>();
  /** What was last logged, so polling does not repeat it. */
  #duplicates = new Set<string>();
  #fileErrors = new Map<string, string>();

  /** Creates a source reading `options.dir`. */
  constructor(options: FileSourceOptions) {
    this.#dir = options.dir;
    this.#pollIntervalMs = options.pollIntervalMs ?? 2000;
    this.#debounceMs = options.debounceMs ?? 100;
  }

  /** Loads the directory, reports `synced`, then follows changes until `signal` aborts. */
  async start(listener: SourceListener, signal: AbortSignal): Promise<void> {
    await this.#reload(listener);
    if (signal.aborted) return;
    listener({ type: "synced" });
    await this.#follow(listener, signal);
  }

  async #follow(listener: SourceListener, signal: AbortSignal): Promise<void> {
    let wake: (() => void) | undefined;
    let dirty = false;
    const poke = () => {
      dirty = true;
      wake?.();
    };
    const stopWatch = this.#watch(poke, signal);
    const onAbort = () => wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      while (!signal.aborted) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            dirty = true;
            resolve();
          }, this.#pollIntervalMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
          if (dirty || signal.aborted) wake();
        });
        wake = undefined;
        if (signal.aborted) break;
        if (dirty) {
          await sleep(this.#debounceMs, signal);
          dirty = false;
          if (signal.aborted) break;
          await this.#reload(listener);
        }
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      stopWatch();
    }
  }

  /** Watches the directory with Deno.watchFs; returns a function that stops it. */
  #watch(onChange: () => void, signal: AbortSignal): () => void {
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
          if (event.paths.some((path) => MANIFEST.test(path))) onChange();
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

  async #reload(listener: SourceListener): Promise<void> {
    const files: string[] = [];
    try {
      for await (const entry of Deno.readDir(this.#dir)) {
        if ((entry.isFile || entry.isSymlink) && MANIFEST.test(entry.name)) files.push(entry.name);
      }
    } catch (error) {
      logger.error("Cannot read manifests directory {dir}: {error}", {
        dir: this.#dir,
        error: String(error),
      });
      return;
    }
    files.sort();
    const byFile = new Map<string, Map<string, LoadedObject>>();
    for (const file of files) {
      const loaded = await this.#loadFile(file);
      const objects = loaded ?? this.#byFile.get(file);
      if (objects) byFile.set(file, objects);
    }
    const next = new Map<string, LoadedObject>();
    const duplicates = new Set<string>();
    for (const objects of byFile.values()) {
      for (const [id, object] of objects) {
        if (next.has(id)) {
          if (!this.#duplicates.has(id)) {
            logger.warn("Ignoring duplicate {id} in {dir}", { id, dir: this.#dir });
          }
          duplicates.add(id);
          continue;
        }
        next.set(id, object);
      }
    }
    this.#duplicates = duplicates;
    const previous = this.#known;
    this.#known = next;
    this.#byFile = byFile;
    for (const [id, loaded] of next) {
      if (previous.get(id)?.content !== loaded.content) {
        listener({ type: "upsert", kind: loaded.kind, object: loaded.object });
      }
    }
    for (const [id, loaded] of previous) {
      if (!next.has(id)) listener({ type: "delete", kind: loaded.kind, object: loaded.object });
    }
  }

  /** The objects of one file, or undefined when it cannot be read or parsed. */
  async #loadFile(file: string): Promise<Map<string, LoadedObject> | undefined> {
    const path = `${this.#dir}/${file}`;
    let raw: Record<string, unknown>[];
    try {
      raw = parseManifest(await Deno.readTextFile(path), path);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (this.#fileErrors.get(file) !== message) {
        logger.error("Skipping manifest {path}: {error}", { path, error: message });
      }
      this.#fileErrors.set(file, message);
      return undefined;
    }
    this.#fileErrors.delete(file);
    const objects = new Map<string, LoadedObject>();
    for (const object of raw) {
      const kind = object.kind;
      if (typeof kind !== "string" || !KINDS.includes(kind)) {
        logger.debug("Ignoring {kind} in {path}", { kind: String(kind), path });
        continue;
      }
      objects.set(identity(kind, object), {
        kind: kind as ObjectKind,
        object,
        content: JSON.stringify(object),
      });
    }
    return objects;
  }
}
