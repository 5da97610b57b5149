/**
 * Splits the JSON text of a Kubernetes list (one page of a paged list) into
 * its envelope and the text of each item, so that each item is parsed on its
 * own: the objects of one item are garbage as soon as it has been read,
 * instead of the whole page's objects living (and being promoted to V8's old
 * generation) until the last item is done.
 *
 * @module
 */

/** A list page: everything but its items, and each item's JSON text. */
export interface ListPage {
  /** The parsed list without its items (`apiVersion`, `metadata`, …). */
  envelope: Record<string, unknown>;
  /** Each item's JSON text, in order; parse one at a time. */
  items: string[];
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;

/** The index just past the string whose opening quote is at `start`, or -1. */
function stringEnd(text: string, start: number): number {
  let at = start;
  while (true) {
    at = text.indexOf('"', at + 1);
    if (at < 0) return -1;
    let backslashes = 0;
    while (text.charCodeAt(at - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return at + 1;
  }
}

/** The index just past the object or array opening at `start`, or -1. */
function valueEnd(text: string, start: number): number {
  let depth = 0;
  for (let at = start; at < text.length; at++) {
    const code = text.charCodeAt(at);
    if (code === QUOTE) {
      at = stringEnd(text, at) - 1;
      if (at < 0) return -1;
    } else if (code === OPEN_BRACE || code === OPEN_BRACKET) {
      depth++;
    } else if (code === CLOSE_BRACE || code === CLOSE_BRACKET) {
      if (--depth === 0) return at + 1;
    }
  }
  return -1;
}

function skipSpace(text: string, at: number): number {
  while (true) {
    const code = text.charCodeAt(at);
    if (code !== 0x20 && code !== 0x0a && code !== 0x0d && code !== 0x09) return at;
    at++;
  }
}

/** Where the top-level `"items": [ … ]` array lies, or undefined. */
function itemsArray(text: string): { start: number; end: number } | undefined {
  let at = skipSpace(text, 0);
  if (text.charCodeAt(at) !== OPEN_BRACE) return undefined;
  at++;
  let found: { start: number; end: number } | undefined;
  while (true) {
    at = skipSpace(text, at);
    if (text.charCodeAt(at) === CLOSE_BRACE) return found;
    if (text.charCodeAt(at) !== QUOTE) return undefined;
    const keyEnd = stringEnd(text, at);
    if (keyEnd < 0) return undefined;
    const key = text.slice(at, keyEnd);
    at = skipSpace(text, keyEnd);
    if (text[at] !== ":") return undefined;
    at = skipSpace(text, at + 1);
    const code = text.charCodeAt(at);
    let end: number;
    if (code === OPEN_BRACE || code === OPEN_BRACKET) end = valueEnd(text, at);
    else if (code === QUOTE) end = stringEnd(text, at);
    else end = text.slice(at).search(/[,}]/) + at;
    if (end < at) return undefined;
    if (key === '"items"') {
      // A repeated key: JSON.parse keeps the last; leave such a page to it.
      if (found !== undefined || code !== OPEN_BRACKET) return undefined;
      found = { start: at, end };
    }
    at = skipSpace(text, end);
    if (text.charCodeAt(at) === COMMA) at++;
    else if (text.charCodeAt(at) !== CLOSE_BRACE) return undefined;
  }
}

/** The text of each element of the array spanning `[start, end)`, or undefined. */
function elements(text: string, start: number, end: number): string[] | undefined {
  const items: string[] = [];
  let at = skipSpace(text, start + 1);
  if (text.charCodeAt(at) === CLOSE_BRACKET) return at === end - 1 ? items : undefined;
  while (at < end) {
    if (text.charCodeAt(at) !== OPEN_BRACE) return undefined;
    const itemEnd = valueEnd(text, at);
    if (itemEnd < 0 || itemEnd > end) return undefined;
    items.push(text.slice(at, itemEnd));
    at = skipSpace(text, itemEnd);
    const code = text.charCodeAt(at);
    if (code === CLOSE_BRACKET) return at === end - 1 ? items : undefined;
    if (code !== COMMA) return undefined;
    at = skipSpace(text, at + 1);
  }
  return undefined;
}

/**
 * Splits a list's JSON text. Text the splitter does not follow (not an
 * object, items that are not objects, a repeated `items` key) is parsed whole
 * instead, with the same result and the same errors as `JSON.parse`.
 *
 * @throws {SyntaxError} when the text is not JSON.
 */
export function splitListPage(text: string): ListPage {
  const span = itemsArray(text);
  const items = span && elements(text, span.start, span.end);
  if (span && items) {
    const rest = JSON.parse(`${text.slice(0, span.start)}[]${text.slice(span.end)}`);
    if (typeof rest === "object" && rest !== null && !Array.isArray(rest)) {
      return { envelope: rest, items };
    }
  }
  const whole = JSON.parse(text);
  const envelope = typeof whole === "object" && whole !== null && !Array.isArray(whole)
    ? whole as Record<string, unknown>
    : {};
  const all = Array.isArray(envelope.items) ? envelope.items : [];
  return {
    envelope: { ...envelope, items: [] },
    items: all.map((item) => JSON.stringify(item)),
  };
}

/** The index just past the scalar (number, true, false, null) starting at `start`. */
function scalarEnd(text: string, start: number): number {
  let at = start;
  while (at < text.length) {
    const code = text.charCodeAt(at);
    if (code === COMMA || code === CLOSE_BRACE || code === CLOSE_BRACKET) break;
    if (code === 0x20 || code === 0x0a || code === 0x0d || code === 0x09) break;
    at++;
  }
  return at;
}

/**
 * Where the member `key` (its quoted text, unescaped) of the object opening at
 * `start` lies: the start of the key and the span of its value. Members are
 * read in order and the first match is taken; undefined when there is none or
 * the text is not plain JSON up to it.
 */
function member(
  text: string,
  start: number,
  key: string,
): { keyStart: number; valueStart: number; valueEnd: number } | undefined {
  let at = start + 1;
  while (true) {
    at = skipSpace(text, at);
    if (text.charCodeAt(at) !== QUOTE) return undefined;
    const keyStart = at;
    const keyEnd = stringEnd(text, at);
    if (keyEnd < 0) return undefined;
    at = skipSpace(text, keyEnd);
    if (text.charCodeAt(at) !== 0x3a) return undefined;
    const valueStart = skipSpace(text, at + 1);
    const code = text.charCodeAt(valueStart);
    let end: number;
    if (code === OPEN_BRACE || code === OPEN_BRACKET) end = valueEnd(text, valueStart);
    else if (code === QUOTE) end = stringEnd(text, valueStart);
    else end = scalarEnd(text, valueStart);
    if (end <= valueStart) return undefined;
    if (keyEnd - keyStart === key.length && text.startsWith(key, keyStart)) {
      return { keyStart, valueStart, valueEnd: end };
    }
    at = skipSpace(text, end);
    if (text.charCodeAt(at) !== COMMA) return undefined;
    at++;
  }
}

/**
 * An item's JSON text without `metadata.managedFields`, which kproxy never
 * reads: the apiserver adds it to every object, and at 10k Services × 10 it
 * is ~15 % of an EndpointSlice's text and ~30 % of a Service's, each entry
 * nested objects that `JSON.parse` would build only to drop. The field is
 * cut only where the text plainly holds it (an array under the object's
 * first `metadata` member); any other text is returned as it is.
 */
export function withoutManagedFields(text: string): string {
  const start = skipSpace(text, 0);
  if (text.charCodeAt(start) !== OPEN_BRACE) return text;
  const metadata = member(text, start, '"metadata"');
  if (metadata === undefined || text.charCodeAt(metadata.valueStart) !== OPEN_BRACE) return text;
  const field = member(text, metadata.valueStart, '"managedFields"');
  if (field === undefined || text.charCodeAt(field.valueStart) !== OPEN_BRACKET) return text;
  const after = skipSpace(text, field.valueEnd);
  if (text.charCodeAt(after) === COMMA) {
    return text.slice(0, field.keyStart) + text.slice(after + 1);
  }
  let before = field.keyStart - 1;
  while (before > metadata.valueStart && /\s/.test(text[before]!)) before--;
  const cutFrom = text.charCodeAt(before) === COMMA ? before : field.keyStart;
  return text.slice(0, cutFrom) + text.slice(field.valueEnd);
}
