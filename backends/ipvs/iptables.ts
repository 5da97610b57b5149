/**
 * The iptables rules the ipvs mode needs next to IPVS: masquerading decided
 * through the ipsets (cluster IPs from non-local sources, node ports,
 * external and load-balancer IPs unless their policy is Local, hairpin), the
 * load-balancer source-range firewall and the forward rules. The rules are
 * static per plan shape; the ipsets hold the per-service data.
 *
 * Written with the iptables mode's script builder (`IptablesRestoreScript`:
 * validated, quoted arguments), its masquerade mark and local-traffic match.
 *
 * @module
 */

import { isInterfaceName } from "../../lib/core/interface_name.ts";
import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan } from "../../lib/core/plan.ts";
import type { ChainOwnership, IptablesTable } from "../iptables/chains.ts";
import { type IpsetKey, ipsetName } from "./render.ts";
import { checkCidr } from "../../lib/core/plan_check.ts";
import { IptablesRestoreScript } from "../iptables/script.ts";
import { comment, forwardRules, ifLocal, masqueradeMark } from "../iptables/rules.ts";

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
const KUBE_PROXY_IPVS_FILTER_CHAINS = [
  "KUBE-NODE-PORT",
  "KUBE-SOURCE-RANGES-FIREWALL",
  "KUBE-IPVS-FILTER",
  "KUBE-IPVS-OUT-FILTER",
];

/** Every iptables chain of the ipvs mode, kproxy's or kube-proxy's, per table. */
export const IPVS_MODE_CHAINS: Readonly<Partial<Record<IptablesTable, readonly string[]>>> = Object
  .freeze({
    nat: IPVS_CHAINS.nat,
    filter: [...new Set([...IPVS_CHAINS.filter, ...KUBE_PROXY_IPVS_FILTER_CHAINS])],
  });

/** The iptables chains of the ipvs mode, kproxy's or kube-proxy's. */
export const isIpvsModeChain: ChainOwnership = (table, chain) =>
  IPVS_MODE_CHAINS[table as IptablesTable]?.includes(chain) ?? false;

/**
 * Renders the `iptables-restore --noflush` input of the ipvs mode for a plan,
 * with the iptables mode's script builder, mark and local-traffic match.
 * Every owned chain is declared, which flushes it, so the result replaces the
 * previous rules atomically. Pure.
 *
 * @throws {RangeError} on an invalid masquerade bit
 * @throws {TypeError} when a local-traffic CIDR or interface is invalid
 */
export function renderIpvsIptables(plan: Plan, options: IpvsIptablesOptions = {}): string {
  const mark = masqueradeMark(options.masqueradeBit);
  const marked = `${mark}/${mark}`;
  const set = (key: IpsetKey) => ipsetName(key, plan.family);
  const matchSet = (key: IpsetKey, flags: string) => ["-m", "set", "--match-set", set(key), flags];
  const script = new IptablesRestoreScript(plan.family);
  for (const chain of IPVS_CHAINS.nat) script.declareChain("nat", chain);
  for (const chain of IPVS_CHAINS.filter) script.declareChain("filter", chain);
  const nat = (chain: string, ...args: string[]) => script.appendRule("nat", chain, args);
  const filter = (chain: string, ...args: string[]) => script.appendRule("filter", chain, args);

  // Only a node with services writes the rule (it matches the cluster IP set).
  const masq = plan.services.length > 0 ? plan.clusterIPMasquerade : "none";
  const clusterIPs = [
    ...comment("Kubernetes service cluster ip + port for masquerade purpose"),
    ...matchSet("clusterIP", "dst,dst"),
  ];
  if (masq === "all") {
    nat("KUBE-SERVICES", ...clusterIPs, "-j", "KUBE-MARK-MASQ");
  } else if (masq === "non-local" && plan.localTraffic.mode !== "None") {
    nat("KUBE-SERVICES", ...clusterIPs, "-j", "KUBE-NON-LOCAL-MASQ");
    checkLocalTraffic(plan);
    const local = ifLocal(plan.localTraffic);
    if (local !== undefined) nat("KUBE-NON-LOCAL-MASQ", ...local, "-j", "RETURN");
    nat("KUBE-NON-LOCAL-MASQ", "-j", "KUBE-MARK-MASQ");
  }
  nat("KUBE-SERVICES", ...matchSet("clusterIP", "dst,dst"), "-j", "ACCEPT");
  nat(
    "KUBE-SERVICES",
    ...comment("Kubernetes service load balancer ip + port"),
    ...matchSet("loadBalancer", "dst,dst"),
    "-j",
    "KUBE-LOAD-BALANCER",
  );
  nat(
    "KUBE-SERVICES",
    ...comment("Kubernetes service external ip + port"),
    ...matchSet("externalIP", "dst,dst"),
    "-j",
    "KUBE-EXTERNAL-IPS",
  );
  nat("KUBE-SERVICES", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-NODE-PORT");
  // Local policy: keep the client's source, except for traffic from the node
  // itself. ACCEPT ends the nat lookup so a VIP (a local address) is not also
  // taken for a node port.
  for (
    const [chain, key] of [
      ["KUBE-LOAD-BALANCER", "loadBalancerLocal"],
      ["KUBE-EXTERNAL-IPS", "externalIPLocal"],
    ] as const
  ) {
    const local = matchSet(key, "dst,dst");
    nat(chain, ...local, "-m", "addrtype", "--src-type", "LOCAL", "-j", "KUBE-MARK-MASQ");
    nat(chain, ...local, "-j", "ACCEPT");
    nat(chain, "-j", "KUBE-MARK-MASQ");
    nat(chain, "-j", "ACCEPT");
  }
  for (
    const [proto, local, all] of [
      ["tcp", "nodePortLocalTCP", "nodePortTCP"],
      ["udp", "nodePortLocalUDP", "nodePortUDP"],
      ["sctp", "nodePortLocalSCTP", "nodePortSCTP"],
    ] as const
  ) {
    const localPorts = ["-p", proto, ...matchSet(local, "dst")];
    nat(
      "KUBE-NODE-PORT",
      ...localPorts,
      "-m",
      "addrtype",
      "--src-type",
      "LOCAL",
      "-j",
      "KUBE-MARK-MASQ",
    );
    nat("KUBE-NODE-PORT", ...localPorts, "-j", "RETURN");
    nat("KUBE-NODE-PORT", "-p", proto, ...matchSet(all, "dst"), "-j", "KUBE-MARK-MASQ");
  }
  nat(
    "KUBE-POSTROUTING",
    ...comment("Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"),
    ...matchSet("loopBack", "dst,dst,src"),
    "-j",
    "MASQUERADE",
  );
  nat("KUBE-POSTROUTING", "-m", "mark", "!", "--mark", marked, "-j", "RETURN");
  nat("KUBE-POSTROUTING", "-j", "MARK", "--xor-mark", mark);
  nat(
    "KUBE-POSTROUTING",
    ...comment("kubernetes service traffic requiring SNAT"),
    "-j",
    "MASQUERADE",
    "--random-fully",
  );
  nat("KUBE-MARK-MASQ", "-j", "MARK", "--or-mark", mark);

  for (const rule of forwardRules(mark, { dropInvalid: true })) filter("KUBE-FORWARD", ...rule);
  filter(
    "KUBE-PROXY-FIREWALL",
    ...comment("Kubernetes service load balancer source ranges"),
    ...matchSet("loadBalancerFW", "dst,dst"),
    "-m",
    "set",
    "!",
    "--match-set",
    set("loadBalancerSourceCIDR"),
    "dst,dst,src",
    "-j",
    "DROP",
  );
  if (script.error) throw script.error;
  return script.toString();
}

/** The local-traffic CIDRs and interfaces must be of the plan's family and well-formed. */
function checkLocalTraffic(plan: Plan): void {
  const detector = plan.localTraffic;
  if (detector.mode === "ClusterCIDR" || detector.mode === "NodeCIDR") {
    for (const cidr of detector.cidrs) checkCidr(cidr, plan.family);
  } else if (detector.mode === "BridgeInterface" || detector.mode === "InterfaceNamePrefix") {
    for (const name of detector.interfaces) {
      if (!isInterfaceName(name)) {
        throw new TypeError(`Cannot use interface "${name}": not an interface name`);
      }
    }
  }
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
