/**
 * JSON with object keys sorted at every level, for output that diffs well
 * (`kproxy plan`): written in pieces, so a 64 MB plan never becomes one string
 * plus its encoded copy. Pure.
 *
 * @module
 */

/** Pieces are handed to the writer once they reach about this many characters. */
const PIECE = 64 * 1024;

/** An array index key: JavaScript objects list these first, in numeric order. */
const INDEX_KEY = /^(0|[1-9][0-9]{0,9})$/;

function isIndex(key: string): boolean {
  return INDEX_KEY.test(key) && Number(key) < 4294967295;
}

/** Keys in the order `JSON.stringify` lists them for an object built from sorted entries. */
function orderedKeys(keys: string[]): string[] {
  keys.sort((a, b) => (a < b ? -1 : 1));
  const indexes = keys.filter(isIndex);
  if (indexes.length === 0) return keys;
  indexes.sort((a, b) => Number(a) - Number(b));
  return [...indexes, ...keys.filter((key) => !isIndex(key))];
}

/** The value JSON.stringify would write for `value`: after toJSON, Sets sorted, Maps as objects. */
function resolve(value: unknown): unknown {
  let inner = value;
  if (typeof inner === "object" && inner !== null) {
    const withJson = inner as { toJSON?: () => unknown };
    if (typeof withJson.toJSON === "function") inner = withJson.toJSON();
  }
  if (inner instanceof Set) return [...inner].sort();
  if (inner instanceof Map) return Object.fromEntries(inner);
  return inner;
}

function omitted(value: unknown): boolean {
  return value === undefined || typeof value === "function" || typeof value === "symbol";
}

/** What JSON.stringify would write for a value that is not an object, or undefined to omit it. */
function scalar(value: unknown): string | undefined {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "number":
      return Number.isFinite(value) ? String(value) : "null";
    case "boolean":
      return value ? "true" : "false";
    case "bigint":
      throw new TypeError("Cannot write JSON: a value is a BigInt");
    default:
      return value === null ? "null" : undefined;
  }
}

/**
 * Writes `value` as JSON indented by two spaces, with object keys sorted at
 * every level, Sets as sorted arrays and Maps as objects: the same text as
 * `JSON.stringify` with a key-sorting replacer.
 *
 * @param value What to write.
 * @param write Receives the text in pieces of about 64 KiB, in order.
 */
export function writeStableJson(value: unknown, write: (text: string) => void): void {
  let pending: string[] = [];
  let size = 0;
  const emit = (text: string) => {
    pending.push(text);
    size += text.length;
    if (size >= PIECE) {
      write(pending.join(""));
      pending = [];
      size = 0;
    }
  };
  /** Writes a resolved value; objects and arrays are written, omitted values never reach here. */
  const visit = (inner: unknown, indent: string): void => {
    if (typeof inner !== "object" || inner === null) return emit(scalar(inner) ?? "null");
    const deeper = `${indent}  `;
    if (Array.isArray(inner)) {
      if (inner.length === 0) return emit("[]");
      for (let i = 0; i < inner.length; i++) {
        emit(i === 0 ? `[\n${deeper}` : `,\n${deeper}`);
        visit(resolve(inner[i]), deeper);
      }
      return emit(`\n${indent}]`);
    }
    const object = inner as Record<string, unknown>;
    let first = true;
    for (const key of orderedKeys(Object.keys(object))) {
      const field = resolve(object[key]);
      if (omitted(field)) continue;
      emit(`${first ? "{" : ","}\n${deeper}${JSON.stringify(key)}: `);
      first = false;
      visit(field, deeper);
    }
    emit(first ? "{}" : `\n${indent}}`);
  };
  const top = resolve(value);
  if (!omitted(top)) visit(top, "");
  if (pending.length > 0) write(pending.join(""));
}

/**
 * JSON with object keys sorted at every level, indented by two spaces.
 *
 * @example Usage
 * ```ts
 * import { stableJson } from "./stable_json.ts";
 * stableJson({ b: 1, a: new Set(["y", "x"]) }); // '{\n  "a": [\n    "x",\n    "y"\n  ],\n  "b": 1\n}'
 * ```
 */
export function stableJson(value: unknown): string {
  const pieces: string[] = [];
  writeStableJson(value, (text) => pieces.push(text));
  return pieces.join("");
}
