/**
 * Reading an `nft list table` listing for `kproxy diff`: blocks of
 * normalised lines, and which service a block or a line belongs to.
 *
 * @module
 */

import type { Listing } from "../../lib/core/backend.ts";
import type { Plan } from "../../lib/core/plan.ts";

const HEADER = /^(chain|set|map)\s+(\S+)\s*\{$/;

/**
 * Parses `nft list table` output; blocks are keyed `FAMILY KIND NAME`
 * (`ip chain svc-…`). Dynamic state is ignored: element timeouts
 * and expiry, counters, handles, and the elements of sets the packet path
 * writes (`flags dynamic`) or that hold a sync generation (`canary`).
 */
export function parseNftListing(text: string, ignoreSets: readonly string[] = ["canary"]): Listing {
  const listing: Listing = new Map();
  let block: string | undefined;
  let lines: Set<string> | undefined;
  let dynamic = false;
  let elements: string | undefined;
  let family = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    const table = /^table (\S+) /.exec(line);
    if (table) family = `${table[1]} `;
    if (line === "" || table || line.startsWith("comment ")) continue;
    if (elements !== undefined) {
      elements += " " + line;
      if (braceDepth(elements) === 0) {
        if (!dynamic) { for (const element of splitElements(elements)) lines!.add(element); }
        elements = undefined;
      }
      continue;
    }
    const header = HEADER.exec(line);
    if (header) {
      block = `${family}${header[1]} ${header[2]}`;
      lines = new Set();
      dynamic = ignoreSets.includes(header[2]!);
      listing.set(block, lines);
      continue;
    }
    if (line === "}") {
      block = undefined;
      continue;
    }
    if (block === undefined || lines === undefined) continue;
    if (line.startsWith("elements = ")) {
      elements = line.slice("elements = ".length);
      if (braceDepth(elements) === 0) {
        if (!dynamic) { for (const element of splitElements(elements)) lines.add(element); }
        elements = undefined;
      }
      continue;
    }
    if (/^flags .*\bdynamic\b/.test(line) || /^timeout /.test(line)) dynamic = true;
    lines.add(normaliseRule(line));
  }
  return listing;
}

/**
 * The service (`namespace/name`) an nftables block name or listed line
 * concerns: a per-service-port object it names (`svc-ns/name/…`, a verdict
 * `goto svc-ns/name/…`), or a map element keyed by one of the service
 * destinations of `plans` (`ip . proto . port`, node port `proto . port`).
 */
export function nftServiceOf(plans: readonly Plan[]): (text: string) => string | undefined {
  const owners = elementOwners(plans);
  return (text) => {
    const named = /\b(?:svc|ext|aff|affx)-([a-z0-9-]+)\/([a-z0-9-]+)\//.exec(text);
    return named ? `${named[1]}/${named[2]}` : owners(text);
  };
}

/** The service destinations of `plans` (`ip . proto . port`, node port `proto . port`) by owner. */
function elementOwners(plans: readonly Plan[]): (line: string) => string | undefined {
  const owners = new Map<string, string>();
  for (const plan of plans) {
    for (const service of plan.services) {
      const owner = `${service.namespace}/${service.name}`;
      const proto = service.protocol.toLowerCase();
      for (
        const ip of [...service.clusterIPs, ...service.externalIPs, ...service.loadBalancerIPs]
      ) {
        owners.set(`${ip} . ${proto} . ${service.port}`, owner);
      }
      if (service.nodePort > 0) owners.set(`${proto} . ${service.nodePort}`, owner);
    }
  }
  return (line) => {
    const key = /^(\S+ \. [a-z]+ \. \d+)(?: |$)/.exec(line) ??
      /^([a-z]+ \. \d+)(?: |$)/.exec(line);
    return key === null ? undefined : owners.get(key[1]!);
  };
}

function normaliseRule(line: string): string {
  return line
    .replace(/\s+# handle \d+$/, "")
    .replace(/\bcounter packets \d+ bytes \d+\s*/g, "")
    .replace(/\s+/g, " ")
    .trim();
}

function braceDepth(text: string): number {
  let depth = 0;
  for (const char of text) {
    if (char === "{") depth++;
    else if (char === "}") depth--;
  }
  return depth;
}

/** Splits `{ a, b : c, … }` into normalised elements, without dynamic attributes. */
function splitElements(text: string): string[] {
  const inner = text.trim().replace(/^\{/, "").replace(/\}$/, "");
  const elements: string[] = [];
  let depth = 0;
  let current = "";
  for (const char of inner) {
    if (char === "{") depth++;
    if (char === "}") depth--;
    if (char === "," && depth === 0) {
      elements.push(current);
      current = "";
    } else {
      current += char;
    }
  }
  elements.push(current);
  return elements
    .map((element) =>
      element
        .replace(/\s+(timeout|expires) \S+/g, "")
        .replace(/\s+counter packets \d+ bytes \d+/g, "")
        .replace(/\s+/g, " ")
        .trim()
    )
    .filter((element) => element !== "");
}
