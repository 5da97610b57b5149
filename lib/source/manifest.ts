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
function safeReason(reason: string): string {
  const cut = reason.search(/["'`]|!<|: /);
  return (cut < 0 ? reason : reason.slice(0, cut)).trim() || "invalid YAML";
}

function parseError(file: string, line: number, column: number, problem: string): SyntaxError {
  return new SyntaxError(`Cannot parse ${file}:${line}:${column}: ${problem}`);
}

/** The documents of a YAML text, each as loaded by js-yaml. */
function* loadYaml(text: string, file: string): Generator<{ value: unknown; line: number }> {
  for (const document of yamlDocuments(text)) {
    let values: unknown[];
    try {
      values = loadAll(document.text, { maxAliases: 0 });
    } catch (error) {
      if (!(error instanceof YAMLException)) throw error;
      const line = document.line + (error.mark?.line ?? 0) + 1;
      throw parseError(file, line, (error.mark?.column ?? 0) + 1, safeReason(error.reason));
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
