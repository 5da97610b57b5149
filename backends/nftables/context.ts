/**
 * What every nftables render of one plan shares: the options, the family,
 * the masquerade mark, the local-traffic matches, and the checked spelling of
 * addresses and ports. Pure.
 *
 * @module
 */

import { isInterfaceName } from "../../lib/core/interface_name.ts";
import type { IpFamily } from "../../lib/core/model.ts";
import type { ClusterIPMasquerade, Plan } from "../../lib/core/plan.ts";
import { canonicalIP, ipFamily, parseCIDR } from "../../lib/core/ip.ts";
import { Element, type NftFamily, type TableRef } from "./transaction.ts";

/** Default table name in both families. */
export const DEFAULT_TABLE = "kproxy";

/** Default masquerade mark: bit 14, as kube-proxy. */
const DEFAULT_MASQUERADE_MARK = 0x4000;

/** Options shared by the render functions. */
export interface RenderOptions {
  /** @default {"kproxy"} */
  table?: string;
  /** Packet mark bit that asks nat postrouting to masquerade. @default {0x4000} */
  masqueradeMark?: number;
  /** Sync generation written to the canary set. @default {0} */
  generation?: number;
  /**
   * Drop forwarded packets conntrack marks INVALID, as upstream's iptables
   * mode does unless `nf_conntrack_tcp_be_liberal` is set: an out-of-window
   * packet would otherwise reach the pod un-DNATed and reset the connection.
   * @default {true}
   */
  dropInvalid?: boolean;
  /**
   * A full sync writes the shared `dnat-E…` chains for 1 to this many
   * endpoints whether or not a service port uses them, so an incremental sync
   * never adds one (nft 1.0.6 cannot add a rule reading a slot map that is
   * already in the kernel). A change to a count above it that no service
   * port already uses takes a full sync.
   * @default {64}
   */
  presetSlotChains?: number;
}

/** Default of {@linkcode RenderOptions.presetSlotChains}. */
const DEFAULT_PRESET_SLOT_CHAINS = 64;

/** Maps a plan family to its nftables family. */
export function nftFamily(family: IpFamily): NftFamily {
  return family === "IPv4" ? "ip" : "ip6";
}

/** The table a plan of `family` is rendered into. */
export function tableRef(family: IpFamily, table = DEFAULT_TABLE): TableRef {
  return { family: nftFamily(family), table };
}

export interface Context {
  family: IpFamily;
  ipx: NftFamily;
  addrType: string;
  /** The masquerade mark in hex, e.g. `0x4000`. */
  mark: string;
  markSet: string;
  /** Matches traffic from local pods, one alternative per rule. */
  localMatches: string[];
  /** Matches traffic NOT from local pods (all conditions in one rule), or undefined. */
  nonLocalMatch?: string;
  /** The node's masquerade for cluster IP traffic (`Plan.clusterIPMasquerade`). */
  clusterIPMasquerade: ClusterIPMasquerade;
  /** `Plan.serviceCounters`: the counted sets keep element counters and are looked up. */
  counters: boolean;
}

export function context(plan: Plan, options: RenderOptions): Context {
  const ipx = nftFamily(plan.family);
  const mark = options.masqueradeMark ?? DEFAULT_MASQUERADE_MARK;
  if (!Number.isInteger(mark) || mark <= 0 || mark > 0xffffffff) {
    throw new RangeError(`Cannot use masquerade mark "${mark}": not a 32-bit mark`);
  }
  const markSet = `meta mark set meta mark | 0x${mark.toString(16)}`;
  const markHex = `0x${mark.toString(16)}`;
  const detector = plan.localTraffic;
  let localMatches: string[] = [];
  let negatives: string[] = [];
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR": {
      const cidrs = detector.cidrs.map((text) => {
        const cidr = parseCIDR(text);
        if (cidr === undefined || cidr.family !== plan.family) {
          throw new TypeError(
            `Cannot render local traffic CIDR "${text}": not an ${plan.family} CIDR`,
          );
        }
        return cidr.cidr;
      });
      localMatches = cidrs.map((cidr) => `${ipx} saddr ${cidr}`);
      negatives = cidrs.map((cidr) => `${ipx} saddr != ${cidr}`);
      break;
    }
    case "BridgeInterface":
    case "InterfaceNamePrefix": {
      const wildcard = detector.mode === "InterfaceNamePrefix" ? "*" : "";
      const names = detector.interfaces.map((name) => {
        if (!isInterfaceName(name)) {
          throw new TypeError(`Cannot render interface name "${name}": not an interface name`);
        }
        return `"${name}${wildcard}"`;
      });
      localMatches = names.map((name) => `iifname ${name}`);
      negatives = names.map((name) => `iifname != ${name}`);
      break;
    }
    case "None":
      break;
  }
  return {
    family: plan.family,
    ipx,
    addrType: plan.family === "IPv4" ? "ipv4_addr" : "ipv6_addr",
    mark: markHex,
    markSet,
    localMatches,
    nonLocalMatch: negatives.length > 0 ? negatives.join(" ") : undefined,
    clusterIPMasquerade: plan.clusterIPMasquerade,
    counters: plan.serviceCounters === true,
  };
}

const IPV4 =
  /^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$/;

export function address(ctx: Context, text: string): string {
  if (ctx.family === "IPv4" && IPV4.test(text)) return text;
  const ip = canonicalIP(text);
  if (ip === undefined || ipFamily(ip) !== ctx.family) {
    throw new TypeError(`Cannot render address "${text}": not an ${ctx.family} address`);
  }
  return ip;
}

export function port(value: number, what: string): string {
  if (!Number.isInteger(value) || value < 1 || value > 65535) {
    throw new RangeError(`Cannot render ${what} "${value}": not a port number`);
  }
  return String(value);
}

/** Elements of a hash set of addresses (`nodeport-ips`), one per address. */
export function hostElements(ctx: Context, set: string, addresses: string[]): Element[] {
  return addresses.map((text) => new Element({ set, key: [address(ctx, text)] }));
}

/** Elements of an interval set of addresses and CIDRs (`service-cidrs`). */
export function addressElements(ctx: Context, set: string, values: string[]): Element[] {
  return values.map((text) => {
    const cidr = parseCIDR(
      text.includes("/") ? text : `${text}/${ctx.family === "IPv4" ? 32 : 128}`,
    );
    if (cidr === undefined || cidr.family !== ctx.family) {
      throw new TypeError(
        `Cannot render "${text}" in ${set}: not an ${ctx.family} address or CIDR`,
      );
    }
    return new Element({ set, key: [cidr.cidr] });
  });
}

export function presetCount(options: RenderOptions): number {
  const count = options.presetSlotChains ?? DEFAULT_PRESET_SLOT_CHAINS;
  if (!Number.isInteger(count) || count < 0 || count > 4096) {
    throw new RangeError(`Cannot preset "${count}" slot chains: not an integer from 0 to 4096`);
  }
  return count;
}
