/**
 * Reading `iptables-save` output: its tables, their chains and the chains
 * rules jump to (for syncs and cleanup), and kproxy's chains as blocks of
 * rules with the service each rule belongs to (for `kproxy diff`).
 *
 * @module
 */

import type { Listing } from "../../lib/core/backend.ts";
import { upstreamChainName } from "./names.ts";

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

/** The service (`namespace/name`) an iptables rule concerns, from its comment (`"ns/name:port …"`). */
export function iptablesServiceOf(text: string): string | undefined {
  const comment = /--comment "?([a-z0-9][-a-z0-9.]*)\/([a-z0-9][-a-z0-9.]*)[:"\s]/.exec(text);
  return comment ? `${comment[1]}/${comment[2]}` : undefined;
}

/**
 * Splits `iptables-save` output into the text of each table it lists.
 *
 * @example Usage
 * ```ts
 * splitSave("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n").get("nat"); // "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT"
 * ```
 */
export function splitSave(save: string): Map<string, string> {
  const tables = new Map<string, string>();
  let table: string | undefined;
  let lines: string[] = [];
  for (const line of save.split("\n")) {
    if (line.startsWith("*")) {
      table = line.slice(1).trim();
      lines = [line];
    } else if (table !== undefined) {
      lines.push(line);
      if (line === "COMMIT") {
        tables.set(table, lines.join("\n"));
        table = undefined;
      }
    }
  }
  return tables;
}

/** Reads the chains `iptables-save` output of one table declares, in order. */
export function parseSavedChains(save: string): string[] {
  const chains: string[] = [];
  for (const match of save.matchAll(/^:(\S+) /gm)) chains.push(match[1]!);
  return chains;
}

/** Reads the chains rules jump or go to from `iptables-save` output of one table. */
export function parseSavedTargets(save: string): Set<string> {
  const targets = new Set<string>();
  for (const match of save.matchAll(/^-A \S+ .*-[jg] (\S+)/gm)) targets.add(match[1]!);
  return targets;
}

export function splitSavedArgs(text: string): string[] {
  const args: string[] = [];
  const pattern = /"((?:[^"\\]|\\.)*)"|(\S+)/g;
  for (const match of text.matchAll(pattern)) args.push(match[1] ?? match[2] ?? "");
  return args;
}
