/**
 * Turns the text of one manifest file (YAML or JSON) into API objects, one
 * document at a time. Pure: no I/O.
 *
 * YAML goes through js-yaml's core schema with aliases refused (no expansion
 * bombs); JSON text goes through `JSON.parse`. A parse error names the file,
 * line and column and never quotes the file's text: the file may be anything
 * a link or a careless operator put in the directory.
 *
 * @module
 */

import { loadAll, YAMLException } from "js-yaml";
import { safeYamlReason } from "../../core/yaml.ts";

/** An API object as read from a manifest: field names as in the API. */
export type ManifestObject = Record<string, unknown>;

function isRecord(value: unknown): value is ManifestObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A `---` marker at the start of a line: a YAML document cannot contain one (c-forbidden). */
const DOCUMENT_START = /^---(?=[ \t\r\n]|$)/gm;
/** A line that is not blank, a comment or a directive. */
const CONTENT_LINE = /^(?!%)[ \t]*[^ \t\r\n#]/m;

/** The text of each YAML document with the line (0-based) it starts on. */
function* yamlDocuments(text: string): Generator<{ text: string; line: number }> {
  let start = 0;
  let line = 0;
  for (const match of text.matchAll(DOCUMENT_START)) {
    const chunk = text.slice(start, match.index);
    // Directives and comments before a marker belong to the document it starts.
    if (match.index === 0 || !CONTENT_LINE.test(chunk)) continue;
    yield { text: chunk, line };
    line += countLines(chunk);
    start = match.index;
  }
  yield { text: text.slice(start), line };
}

function countLines(text: string): number {
  let count = 0;
  for (let at = text.indexOf("\n"); at >= 0; at = text.indexOf("\n", at + 1)) count++;
  return count;
}

/** The fixed text of a js-yaml reason: what follows a quote, a tag or a colon can come from the file. */
function parseError(file: string, line: number, column: number, problem: string): SyntaxError {
  return new SyntaxError(`Cannot parse ${file}:${line}:${column}: ${problem}`);
}

/** A top-level `items:` key with a block value. */
const ITEMS_KEY = /^items:[ \t]*(?:#.*)?$/m;

/** A YAML list document cut at its top-level `items:` block sequence. */
interface SplitList {
  /** The document up to the `items:` key. */
  prefix: string;
  /** The document without the `items:` block. */
  header: string;
  /** Each entry of the block as a document of its own, with its first line (0-based). */
  items: Iterable<{ text: string; line: number }>;
}

/**
 * Cuts a document shaped as `kubectl get -o yaml` prints a List (a top-level
 * `items:` key whose value is a block sequence) into its entries, so that a
 * 10k-item dump is parsed item by item. An entry's lines are all indented
 * deeper than its `-` (block scalars and flow continuations included), so the
 * entry ends where the next `-` at the same indentation, or a shallower line,
 * begins. The `-` itself becomes a space: the entry parses as the node it holds.
 */
function splitList(text: string): SplitList | undefined {
  const key = ITEMS_KEY.exec(text);
  if (key === null) return undefined;
  const starts: { at: number; line: number }[] = [];
  let indent = -1;
  let end = text.length;
  let line = countLines(text.slice(0, key.index)) + 1;
  let at = text.indexOf("\n", key.index) + 1;
  while (at > 0 && at < text.length) {
    const next = text.indexOf("\n", at);
    const stop = next < 0 ? text.length : next;
    let spaces = 0;
    while (text.charCodeAt(at + spaces) === 32) spaces++;
    const first = text[at + spaces];
    if (at + spaces < stop && first !== "#" && first !== "\r") {
      const entry = first === "-" && /[ \t\r\n]/.test(text[at + spaces + 1] ?? "\n");
      if (indent < 0) {
        if (!entry) return undefined;
        indent = spaces;
      }
      if (spaces < indent || (spaces === indent && !entry)) {
        end = at;
        break;
      }
      if (spaces === indent) starts.push({ at, line });
    }
    line++;
    at = stop + 1;
  }
  if (starts.length === 0) return undefined;
  const items = function* () {
    for (const [i, start] of starts.entries()) {
      const entry = text.slice(start.at, starts[i + 1]?.at ?? end);
      yield { text: `${entry.slice(0, indent)} ${entry.slice(indent + 1)}`, line: start.line };
    }
  };
  const prefix = text.slice(0, key.index);
  return { prefix, header: prefix + text.slice(end), items: items() };
}

/** Loads one YAML text that must hold at most one document; positions are shifted by `line`. */
function loadOne(text: string, file: string, line: number): unknown {
  let values: unknown[];
  try {
    values = loadAll(text, { maxAliases: 0 });
  } catch (error) {
    if (!(error instanceof YAMLException)) throw error;
    const at = line + (error.mark?.line ?? 0) + 1;
    throw parseError(file, at, (error.mark?.column ?? 0) + 1, safeYamlReason(error.reason));
  }
  if (values.length > 1) {
    throw parseError(file, line + 1, 1, "an entry holds more than one document");
  }
  return values[0];
}

/**
 * The list header of a split document, when it is a list and nothing else. The
 * text before `items:` must parse on its own: then `items:` is a key, not a
 * line inside a quoted scalar or a flow collection.
 */
function listHeader(split: SplitList): ManifestObject | undefined {
  try {
    loadAll(split.prefix, { maxAliases: 0 });
    const header = loadAll(split.header, { maxAliases: 0 });
    const value = header[0];
    if (header.length !== 1 || !isRecord(value) || "items" in value) return undefined;
    return typeof value.kind === "string" && value.kind.endsWith("List") ? value : undefined;
  } catch {
    return undefined; // parsed whole below, for the exact error
  }
}

/**
 * The documents of a YAML text, each as loaded by js-yaml; a list document is
 * given one entry at a time, as a list of that one item.
 */
function* loadYaml(text: string, file: string): Generator<{ value: unknown; line: number }> {
  for (const document of yamlDocuments(text)) {
    const split = splitList(document.text);
    const header = split && listHeader(split);
    if (split && header) {
      for (const item of split.items) {
        const line = document.line + item.line;
        yield { value: { ...header, items: [loadOne(item.text, file, line)] }, line: line + 1 };
      }
      continue;
    }
    let values: unknown[];
    try {
      values = loadAll(document.text, { maxAliases: 0 });
    } catch (error) {
      if (!(error instanceof YAMLException)) throw error;
      const line = document.line + (error.mark?.line ?? 0) + 1;
      throw parseError(file, line, (error.mark?.column ?? 0) + 1, safeYamlReason(error.reason));
    }
    for (const value of values) yield { value, line: document.line + 1 };
  }
}

/** The value of a JSON text, or undefined when it is not JSON (it may still be YAML). */
function loadJson(text: string): unknown {
  if (!/^\s*[{[]/.test(text)) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * The objects a document holds: itself, or the items of a `List` or of a
 * typed list such as `ServiceList` (whose items, as the API serves them,
 * carry no kind: they get the list's).
 */
function documentObjects(value: ManifestObject): ManifestObject[] {
  const kind = value.kind;
  if (typeof kind !== "string" || !kind.endsWith("List") || !Array.isArray(value.items)) {
    return [value];
  }
  const itemKind = kind.slice(0, -"List".length);
  const objects: ManifestObject[] = [];
  for (const item of value.items) {
    if (!isRecord(item)) continue;
    if (item.kind === undefined && itemKind !== "") {
      objects.push({ apiVersion: value.apiVersion, kind: itemKind, ...item });
    } else {
      objects.push(item);
    }
  }
  return objects;
}

/**
 * Yields the objects of a manifest text document by document, so that a
 * caller may hand control back to the event loop between documents. JSON text
 * is read with `JSON.parse`; anything else as a YAML stream. `kind: List`
 * documents (as `kubectl get -o json|yaml` prints them) and typed lists
 * (`ServiceList`, …) give their items.
 *
 * @param text The file's text.
 * @param file The file's name, for errors.
 * @throws {SyntaxError} `Cannot parse FILE:LINE:COLUMN: …` when the text is
 *   not valid YAML or JSON, uses YAML aliases, or holds a document that is not
 *   an object. The message never quotes the text.
 */
export function* manifestDocuments(text: string, file: string): Generator<ManifestObject[]> {
  const json = loadJson(text);
  const documents = json === undefined ? loadYaml(text, file) : [{ value: json, line: 1 }];
  for (const { value, line } of documents) {
    if (value === null || value === undefined) continue;
    if (!isRecord(value)) throw parseError(file, line, 1, "a document is not an object");
    yield documentObjects(value);
  }
}

/**
 * Extracts the objects of one manifest file at once: every document, and the
 * items of list documents. See {@linkcode manifestDocuments}.
 *
 * @example Usage
 * ```ts
 * import { parseManifest } from "./manifest.ts";
 * const objects = parseManifest("kind: Service\n---\nkind: Node\n", "a.yaml");
 * // objects.map((o) => o.kind) is ["Service", "Node"]
 * ```
 *
 * @param text The file's text.
 * @param file The file's name, for errors.
 * @returns The objects, in file order.
 * @throws {SyntaxError} as {@linkcode manifestDocuments}.
 */
export function parseManifest(text: string, file: string): ManifestObject[] {
  return [...manifestDocuments(text, file)].flat();
}
