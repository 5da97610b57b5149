/**
 * Reading `iptables-save` output for `kproxy diff`: kproxy's chains as blocks
 * of rules, and which service a rule belongs to.
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
