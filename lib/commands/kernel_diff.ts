/**
 * Compares two listings of kernel rules — what kproxy would program and what
 * the kernel holds — and groups the differences by service. Pure: the listings
 * are text from `nft list table` or `iptables-save`.
 *
 * @module
 */

import { upstreamChainName } from "../../backends/iptables/names.ts";
import type { Plan } from "../core/plan.ts";

/** A listing: each block (chain, set, map) with its normalised lines. */
export type Listing = Map<string, Set<string>>;

/** Lines the next sync would add to and remove from one block. */
export interface BlockDiff {
  block: string;
  /** In the desired state, missing from the kernel. */
  added: string[];
  /** In the kernel, not in the desired state. */
  removed: string[];
}

/** The differences that concern one service, or "(global)" for shared objects. */
export interface ServiceDiff {
  service: string;
  blocks: BlockDiff[];
}

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
 * Parses `iptables-save` output, keeping only chains named `KUBE-*`, per
 * table. A per-service chain the iptables mode wrote under its alternate
 * name (`<name>-2`) is listed, and jumped to, under its upstream name.
 */
export function parseIptablesSave(text: string): Listing {
  const listing: Listing = new Map();
  let table = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim().replace(/KUBE-[A-Z]+-[A-Z2-7]{16}-2\b/g, upstreamChainName);
    if (line.startsWith("*")) {
      table = line.slice(1);
      continue;
    }
    const declared = /^:(KUBE-\S+)/.exec(line);
    if (declared) {
      const block = `${table} ${declared[1]}`;
      if (!listing.has(block)) listing.set(block, new Set());
      continue;
    }
    const rule = /^-A (KUBE-\S+) (.*)$/.exec(line);
    if (rule) {
      const block = `${table} ${rule[1]}`;
      if (!listing.has(block)) listing.set(block, new Set());
      listing.get(block)!.add(rule[2]!.replace(/^\[\d+:\d+\] /, ""));
    }
  }
  return listing;
}

/** Compares a desired listing with the kernel's, block by block. */
export function diffListings(desired: Listing, kernel: Listing): BlockDiff[] {
  const blocks = [...new Set([...desired.keys(), ...kernel.keys()])].sort();
  const diffs: BlockDiff[] = [];
  for (const block of blocks) {
    const want = desired.get(block);
    const have = kernel.get(block);
    const added = want === undefined ? [] : [...want].filter((line) => !have?.has(line));
    const removed = have === undefined ? [] : [...have].filter((line) => !want?.has(line));
    if (want !== undefined && have === undefined) added.unshift(`(new ${block})`);
    if (have !== undefined && want === undefined) removed.unshift(`(stale ${block})`);
    if (added.length > 0 || removed.length > 0) {
      diffs.push({ block, added: added.sort(), removed: removed.sort() });
    }
  }
  return diffs;
}

/**
 * Groups block differences by the service they concern: a block named after
 * a service port (`svc-ns/name/…`), lines that name one (a verdict
 * `goto svc-ns/name/…`, an iptables comment `"ns/name:port"`), or lines
 * `ownerOf` attributes (map elements keyed by a service's address and port).
 */
export function groupByService(
  diffs: readonly BlockDiff[],
  ownerOf: (line: string) => string | undefined = () => undefined,
): ServiceDiff[] {
  const groups = new Map<string, BlockDiff[]>();
  const add = (service: string, diff: BlockDiff) => {
    const list = groups.get(service) ?? [];
    const existing = list.find((entry) => entry.block === diff.block);
    if (existing) {
      existing.added.push(...diff.added);
      existing.removed.push(...diff.removed);
    } else {
      list.push({ block: diff.block, added: [...diff.added], removed: [...diff.removed] });
    }
    groups.set(service, list);
  };
  for (const diff of diffs) {
    const owner = serviceOf(diff.block);
    if (owner !== undefined) {
      add(owner, diff);
      continue;
    }
    for (const [side, lines] of [["added", diff.added], ["removed", diff.removed]] as const) {
      for (const line of lines) {
        const service = serviceOf(line) ?? ownerOf(line) ?? "(global)";
        const entry: BlockDiff = { block: diff.block, added: [], removed: [] };
        entry[side].push(line);
        add(service, entry);
      }
    }
  }
  return [...groups.entries()]
    .sort(([a], [b]) => (a === "(global)" ? 1 : b === "(global)" ? -1 : a < b ? -1 : 1))
    .map(([service, blocks]) => ({ service, blocks }));
}

/** Renders grouped differences as readable `+`/`-` lines, or "in sync". */
export function formatServiceDiffs(groups: readonly ServiceDiff[]): string {
  if (groups.length === 0) return "in sync: the kernel holds what the next sync would program\n";
  const out: string[] = [];
  for (const { service, blocks } of groups) {
    out.push(service === "(global)" ? "shared objects:" : `service ${service}:`);
    for (const { block, added, removed } of blocks) {
      out.push(`  ${block}`);
      for (const line of removed) out.push(`    - ${line}`);
      for (const line of added) out.push(`    + ${line}`);
    }
  }
  return out.join("\n") + "\n";
}

/** The service destinations of `plans` (`ip . proto . port`, node port `proto . port`) by owner. */
export function elementOwners(plans: readonly Plan[]): (line: string) => string | undefined {
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

function serviceOf(text: string): string | undefined {
  const nft = /\b(?:svc|ext|aff|affx)-([a-z0-9-]+)\/([a-z0-9-]+)\//.exec(text);
  if (nft) return `${nft[1]}/${nft[2]}`;
  const comment = /--comment "?([a-z0-9][-a-z0-9.]*)\/([a-z0-9][-a-z0-9.]*)[:"\s]/.exec(text);
  if (comment) return `${comment[1]}/${comment[2]}`;
  return undefined;
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
        .replace(/\s+/g, " ")
        .trim()
    )
    .filter((element) => element !== "");
}
