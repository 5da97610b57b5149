/**
 * Pieces of iptables rules every part of the renderer shares: the options,
 * the masquerade mark, local-traffic matches, comments, destinations, and
 * how chains of rules are written into a restore script. Pure.
 *
 * @module
 */

import type { LocalTrafficDetector } from "../../lib/core/plan.ts";
import type { IptablesTable } from "./chains.ts";
import type { ServiceLayout } from "./layout.ts";
import type { IptablesRestoreScript } from "./script.ts";

/** Rendering settings that come from the configuration, not the Plan. */
export interface IptablesRenderOptions {
  /** Bit of the packet mark that flags traffic for masquerade. @default {14} */
  masqueradeBit?: number;
  /** Capture node ports on 127.0.0.1 (IPv4 only). @default {false} */
  localhostNodePorts?: boolean;
  /** `--conntrack-tcp-be-liberal`: do not drop conntrack-INVALID packets. @default {false} */
  conntrackTcpBeLiberal?: boolean;
}

/** Rules (argument vectors, without `-A chain`) of each chain, in chain order. */
export type ChainRules = Map<string, string[][]>;

const DEFAULT_MASQUERADE_BIT = 14;

/** The mark value of the masquerade bit, as upstream prints it (`0x4000`). */
export function masqueradeMark(bit = DEFAULT_MASQUERADE_BIT): string {
  if (!Number.isInteger(bit) || bit < 0 || bit > 31) {
    throw new RangeError(`Cannot use masquerade bit ${bit}: not in 0..31`);
  }
  return `0x${(2 ** bit).toString(16)}`;
}

export function ifLocal(detector: LocalTrafficDetector): string[] | undefined {
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR":
      return detector.cidrs.length > 0 ? ["-s", detector.cidrs.join(",")] : undefined;
    case "BridgeInterface":
      return detector.interfaces[0] ? ["-i", detector.interfaces[0]] : undefined;
    case "InterfaceNamePrefix":
      return detector.interfaces[0] ? ["-i", `${detector.interfaces[0]}+`] : undefined;
    case "None":
      return undefined;
  }
}

/** A negated list cannot be expressed in one rule: the first CIDR or interface is used. */
export function ifNotLocal(detector: LocalTrafficDetector): string[] | undefined {
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR":
      return detector.cidrs[0] ? ["!", "-s", detector.cidrs[0]] : undefined;
    case "BridgeInterface":
      return detector.interfaces[0] ? ["!", "-i", detector.interfaces[0]] : undefined;
    case "InterfaceNamePrefix":
      return detector.interfaces[0] ? ["!", "-i", `${detector.interfaces[0]}+`] : undefined;
    case "None":
      return undefined;
  }
}

export function comment(text: string): string[] {
  return ["-m", "comment", "--comment", text];
}

/**
 * The KUBE-FORWARD rules both iptables-based modes share: drop
 * conntrack-INVALID packets (unless `--conntrack-tcp-be-liberal`), accept
 * marked service traffic and the replies to it.
 */
export function forwardRules(mark: string, options: { dropInvalid: boolean }): string[][] {
  return [
    ...(options.dropInvalid ? [["-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"]] : []),
    [
      ...comment("kubernetes forwarding rules"),
      "-m",
      "mark",
      "--mark",
      `${mark}/${mark}`,
      "-j",
      "ACCEPT",
    ],
    [
      ...comment("kubernetes forwarding conntrack rule"),
      "-m",
      "conntrack",
      "--ctstate",
      "RELATED,ESTABLISHED",
      "-j",
      "ACCEPT",
    ],
  ];
}

export function dest(layout: ServiceLayout, ip: string, port: number): string[] {
  return ["-m", layout.protocol, "-p", layout.protocol, "-d", ip, "--dport", String(port)];
}

export function push(chains: ChainRules, chain: string, rule: string[]): void {
  const rules = chains.get(chain);
  if (rules) rules.push(rule);
  else chains.set(chain, [rule]);
}

export function writeChains(
  script: IptablesRestoreScript,
  table: IptablesTable,
  chains: ChainRules,
): void {
  for (const chain of chains.keys()) script.declareChain(table, chain);
  for (const [chain, rules] of chains) {
    for (const rule of rules) script.appendRule(table, chain, rule);
  }
}

export function sameRules(
  a: readonly string[][] | undefined,
  b: readonly string[][] | undefined,
): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.length === b.length && a.every((rule, i) => rule.join(" ") === b[i]?.join(" "));
}
