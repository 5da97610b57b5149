/**
 * Reading an `nft list table` listing for `kproxy diff`: blocks of
 * normalised lines, and which service a block or a line belongs to.
 *
 * @module
 */

import type { Listing } from "../../lib/core/backend.ts";
import type { Plan } from "../../lib/core/plan.ts";

/** One block of an `nft list` listing: a chain, set, map or other named object. */
export interface NftBlock {
  /** The table's family (`ip`, `ip6`, …). */
  family: string;
  kind: string;
  name: string;
  /**
   * Its lines between the braces, trimmed, in order, empty ones left out; a
   * multi-line `elements = { … }` is one line.
   */
  lines: string[];
}

const BLOCK_HEADER = /^(chain|set|map|flowtable|counter|quota)\s+(\S+)\s*\{$/;

/**
 * Reads `nft list table`/`nft list ruleset` output into its blocks: the one
 * reader of nft listings, under `kproxy diff` ({@linkcode parseNftListing})
 * and the skeleton drift check (drift.ts).
 */
export function readNftBlocks(text: string): NftBlock[] {
  const blocks: NftBlock[] = [];
  let block: NftBlock | undefined;
  let family = "";
  let elements: string | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (elements !== undefined) {
      elements += " " + line;
      if (braceDepth(elements) === 0) {
        block?.lines.push(elements);
        elements = undefined;
      }
      continue;
    }
    const table = /^table (\S+) /.exec(line);
    if (table) {
      family = table[1]!;
      continue;
    }
    if (line === "") continue;
    const header = BLOCK_HEADER.exec(line);
    if (header) {
      block = { family, kind: header[1]!, name: header[2]!, lines: [] };
      blocks.push(block);
      continue;
    }
    if (line === "}") {
      block = undefined;
      continue;
    }
    if (block === undefined) continue;
    if (line.startsWith("elements = ") && braceDepth(line) !== 0) {
      elements = line;
      continue;
    }
    block.lines.push(line);
  }
  return blocks;
}

/**
 * Parses `nft list table` output; blocks are keyed `FAMILY KIND NAME`
 * (`ip chain svc-…`). Dynamic state is ignored: element timeouts
 * and expiry, counters, handles, and the elements of sets the packet path
 * writes (`flags dynamic`) or that hold a sync generation (`canary`).
 */
export function parseNftListing(text: string, ignoreSets: readonly string[] = ["canary"]): Listing {
  const listing: Listing = new Map();
  for (const block of readNftBlocks(text)) {
    if (block.kind !== "chain" && block.kind !== "set" && block.kind !== "map") continue;
    const lines = new Set<string>();
    listing.set(`${block.family} ${block.kind} ${block.name}`, lines);
    let dynamic = ignoreSets.includes(block.name);
    for (const line of block.lines) {
      if (line.startsWith("comment ")) continue;
      if (line.startsWith("elements = ")) {
        if (!dynamic) {
          for (const element of splitElements(line.slice("elements = ".length))) {
            lines.add(element);
          }
        }
        continue;
      }
      if (/^flags .*\bdynamic\b/.test(line) || /^timeout /.test(line)) dynamic = true;
      lines.add(normaliseRule(line));
    }
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
