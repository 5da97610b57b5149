/**
 * The strict parser of an HTTP/1.1 request head.
 *
 * @module
 */

/** A request head, parsed. */
export interface RequestHead {
  method: string;
  /** The origin-form target: path and query. */
  target: string;
  /** Minor HTTP/1 version: 0 or 1. */
  minorVersion: 0 | 1;
  headers: [name: string, value: string][];
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

const REQUEST_LINE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP\/1\.([01])$/;

const HEADER_LINE = /^([^:\s]+):[ \t]*(.*?)[ \t]*$/;

const ORIGIN_FORM = /^\/[\x21-\x7e]*$/;

// deno-lint-ignore no-control-regex
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;

/**
 * Parses a request head (request line and header lines, without the empty
 * line). Pure.
 *
 * @returns the head, or undefined when it is not valid HTTP/1.x
 */
export function parseRequestHead(text: string): RequestHead | undefined {
  const lines = text.split(/\r?\n/);
  const requestLine = REQUEST_LINE.exec(lines[0] ?? "");
  if (!requestLine) return undefined;
  let target = requestLine[2]!;
  if (/^https?:\/\//i.test(target)) {
    const slash = target.indexOf("/", target.indexOf("//") + 2);
    target = slash < 0 ? "/" : target.slice(slash);
  }
  if (!ORIGIN_FORM.test(target)) return undefined;
  const headers: [string, string][] = [];
  for (const line of lines.slice(1)) {
    const header = HEADER_LINE.exec(line);
    if (!header || !TOKEN.test(header[1]!) || CONTROL.test(header[2]!)) {
      return undefined;
    }
    headers.push([header[1]!.toLowerCase(), header[2]!]);
  }
  return {
    method: requestLine[1]!,
    target,
    minorVersion: requestLine[3] === "1" ? 1 : 0,
    headers,
  };
}
