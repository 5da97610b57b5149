/**
 * The iptables rules the ipvs mode needs next to IPVS: masquerading decided
 * through the ipsets (cluster IPs from non-local sources, node ports,
 * external and load-balancer IPs unless their policy is Local, hairpin), the
 * load-balancer source-range firewall and the forward rules. The rules are
 * static per plan shape; the ipsets hold the per-service data.
 *
 * Kept small and local to the ipvs mode (the iptables mode renders its own
 * `KUBE-MARK-MASQ`/`KUBE-POSTROUTING` in the same shape).
 *
 * @module
 */

import { isInterfaceName } from "../../lib/core/interface_name.ts";
import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan } from "../../lib/core/plan.ts";
import type { ChainOwnership } from "../iptables/chains.ts";
import { type IpsetKey, ipsetName } from "./render.ts";
import { checkCidr } from "../../lib/core/plan_check.ts";

/** Options for {@linkcode renderIpvsIptables}. */
export interface IpvsIptablesOptions {
  /** `iptables.masqueradeBit`: the fwmark bit that requests masquerading. @default {14} */
  masqueradeBit?: number;
}

/** A jump from a built-in chain into a kproxy chain, ensured outside the restore. */
export interface IptablesJump {
  table: "nat" | "filter";
  chain: string;
  target: string;
  comment: string;
}

/** The jumps the ipvs mode inserts into built-in chains. */
export const IPVS_JUMPS: readonly IptablesJump[] = Object.freeze([
  {
    table: "nat",
    chain: "PREROUTING",
    target: "KUBE-SERVICES",
    comment: "kubernetes service portals",
  },
  { table: "nat", chain: "OUTPUT", target: "KUBE-SERVICES", comment: "kubernetes service portals" },
  {
    table: "nat",
    chain: "POSTROUTING",
    target: "KUBE-POSTROUTING",
    comment: "kubernetes postrouting rules",
  },
  {
    table: "filter",
    chain: "FORWARD",
    target: "KUBE-FORWARD",
    comment: "kubernetes forwarding rules",
  },
  {
    table: "filter",
    chain: "INPUT",
    target: "KUBE-PROXY-FIREWALL",
    comment: "kubernetes load balancer firewall",
  },
  {
    table: "filter",
    chain: "OUTPUT",
    target: "KUBE-PROXY-FIREWALL",
    comment: "kubernetes load balancer firewall",
  },
]);

/** The chains the ipvs mode owns, per table. */
const IPVS_CHAINS = Object.freeze(
  {
    nat: [
      "KUBE-SERVICES",
      "KUBE-POSTROUTING",
      "KUBE-MARK-MASQ",
      "KUBE-NON-LOCAL-MASQ",
      "KUBE-NODE-PORT",
      "KUBE-LOAD-BALANCER",
      "KUBE-EXTERNAL-IPS",
    ],
    filter: ["KUBE-FORWARD", "KUBE-PROXY-FIREWALL"],
  } as const,
);

/** Chains only kube-proxy's ipvs mode creates (upstream's `iptablesCleanupChains`). */
const KUBE_PROXY_IPVS_CHAINS: Readonly<Record<string, readonly string[]>> = {
  filter: [
    "KUBE-NODE-PORT",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
  ],
};

/** The iptables chains of the ipvs mode, kproxy's or kube-proxy's. */
export const isIpvsModeChain: ChainOwnership = (table, chain) =>
  ((IPVS_CHAINS as Record<string, readonly string[]>)[table]?.includes(chain) ?? false) ||
  (KUBE_PROXY_IPVS_CHAINS[table]?.includes(chain) ?? false);

/** The fwmark value of a masquerade bit, e.g. `0x4000` for 14. */
export function masqueradeMark(bit: number): string {
  if (!Number.isInteger(bit) || bit < 0 || bit > 31) {
    throw new RangeError(`Cannot use masquerade bit ${bit}: not in 0..31`);
  }
  return `0x${(2 ** bit).toString(16)}`;
}

/** `-m comment --comment "<text>"` (texts are constants of this module). */
function comment(text: string): string {
  return `-m comment --comment "${text}"`;
}

function localSourceReturns(plan: Plan): string[] {
  const detector = plan.localTraffic;
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR":
      return detector.cidrs.map((cidr) => {
        checkCidr(cidr, plan.family);
        return `-s ${cidr}`;
      });
    case "BridgeInterface":
    case "InterfaceNamePrefix":
      return detector.interfaces.map((name) => {
        if (!isInterfaceName(name)) {
          throw new TypeError(`Cannot use interface "${name}": not an interface name`);
        }
        return `-i ${name}${detector.mode === "InterfaceNamePrefix" ? "+" : ""}`;
      });
    case "None":
      return [];
  }
}

/**
 * Renders the `iptables-restore --noflush` input of the ipvs mode for a plan.
 * Every owned chain is declared, which flushes it, so the result replaces the
 * previous rules atomically. Pure.
 *
 * @throws {RangeError} on an invalid masquerade bit
 */
export function renderIpvsIptables(plan: Plan, options: IpvsIptablesOptions = {}): string {
  const mark = masqueradeMark(options.masqueradeBit ?? 14);
  const set = (key: IpsetKey) => ipsetName(key, plan.family);
  // Only a node with services writes the rule (it matches the cluster IP set).
  const masq = plan.services.length > 0 ? plan.clusterIPMasquerade : "none";
  const nat: string[] = IPVS_CHAINS.nat.map((chain) => `:${chain} - [0:0]`);

  if (masq === "all") {
    nat.push(
      `-A KUBE-SERVICES ${
        comment("Kubernetes service cluster ip + port for masquerade purpose")
      } ` +
        `-m set --match-set ${set("clusterIP")} dst,dst -j KUBE-MARK-MASQ`,
    );
  } else if (masq === "non-local" && plan.localTraffic.mode !== "None") {
    nat.push(
      `-A KUBE-SERVICES ${
        comment("Kubernetes service cluster ip + port for masquerade purpose")
      } ` +
        `-m set --match-set ${set("clusterIP")} dst,dst -j KUBE-NON-LOCAL-MASQ`,
    );
    for (const match of localSourceReturns(plan)) {
      nat.push(`-A KUBE-NON-LOCAL-MASQ ${match} -j RETURN`);
    }
    nat.push("-A KUBE-NON-LOCAL-MASQ -j KUBE-MARK-MASQ");
  }
  nat.push(
    `-A KUBE-SERVICES -m set --match-set ${set("clusterIP")} dst,dst -j ACCEPT`,
    `-A KUBE-SERVICES ${comment("Kubernetes service load balancer ip + port")} ` +
      `-m set --match-set ${set("loadBalancer")} dst,dst -j KUBE-LOAD-BALANCER`,
    `-A KUBE-SERVICES ${comment("Kubernetes service external ip + port")} ` +
      `-m set --match-set ${set("externalIP")} dst,dst -j KUBE-EXTERNAL-IPS`,
    `-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT`,
    ...externalLocalRules(
      "KUBE-LOAD-BALANCER",
      `-m set --match-set ${set("loadBalancerLocal")} dst,dst`,
    ),
    ...externalLocalRules(
      "KUBE-EXTERNAL-IPS",
      `-m set --match-set ${set("externalIPLocal")} dst,dst`,
    ),
  );
  for (
    const [proto, local, all] of [
      ["tcp", "nodePortLocalTCP", "nodePortTCP"],
      ["udp", "nodePortLocalUDP", "nodePortUDP"],
      ["sctp", "nodePortLocalSCTP", "nodePortSCTP"],
    ] as const
  ) {
    nat.push(
      `-A KUBE-NODE-PORT -p ${proto} -m set --match-set ${set(local)} dst ` +
        `-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ`,
      `-A KUBE-NODE-PORT -p ${proto} -m set --match-set ${set(local)} dst -j RETURN`,
      `-A KUBE-NODE-PORT -p ${proto} -m set --match-set ${set(all)} dst -j KUBE-MARK-MASQ`,
    );
  }
  nat.push(
    `-A KUBE-POSTROUTING ${
      comment("Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose")
    } ` +
      `-m set --match-set ${set("loopBack")} dst,dst,src -j MASQUERADE`,
    `-A KUBE-POSTROUTING -m mark ! --mark ${mark}/${mark} -j RETURN`,
    `-A KUBE-POSTROUTING -j MARK --xor-mark ${mark}`,
    `-A KUBE-POSTROUTING ${
      comment("kubernetes service traffic requiring SNAT")
    } -j MASQUERADE --random-fully`,
    `-A KUBE-MARK-MASQ -j MARK --or-mark ${mark}`,
  );

  const filter: string[] = [
    ...IPVS_CHAINS.filter.map((chain) => `:${chain} - [0:0]`),
    `-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP`,
    `-A KUBE-FORWARD ${
      comment("kubernetes forwarding rules")
    } -m mark --mark ${mark}/${mark} -j ACCEPT`,
    `-A KUBE-FORWARD ${comment("kubernetes forwarding conntrack rule")} ` +
    `-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
    `-A KUBE-PROXY-FIREWALL ${comment("Kubernetes service load balancer source ranges")} ` +
    `-m set --match-set ${set("loadBalancerFW")} dst,dst ` +
    `-m set ! --match-set ${set("loadBalancerSourceCIDR")} dst,dst,src -j DROP`,
  ];
  return ["*nat", ...nat, "COMMIT", "*filter", ...filter, "COMMIT", ""].join("\n");
}

/** Local policy: keep the client's source, except for traffic from the node itself.
 * ACCEPT ends the nat lookup so a VIP (a local address) is not also taken for a node port. */
function externalLocalRules(chain: string, localMatch: string): string[] {
  return [
    `-A ${chain} ${localMatch} -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ`,
    `-A ${chain} ${localMatch} -j ACCEPT`,
    `-A ${chain} -j KUBE-MARK-MASQ`,
    `-A ${chain} -j ACCEPT`,
  ];
}

/** The iptables programs of a family and `iptables.backend` value. */
export function iptablesPrograms(
  family: IpFamily,
  backend: "auto" | "nft" | "legacy",
): { iptables: string; restore: string } {
  const base = family === "IPv4" ? "iptables" : "ip6tables";
  const variant = backend === "auto" ? base : `${base}-${backend}`;
  return { iptables: variant, restore: `${variant}-restore` };
}
