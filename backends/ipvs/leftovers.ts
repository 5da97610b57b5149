/**
 * What of the node's IPVS state and ipsets belongs to the ipvs mode, as
 * kproxy or kube-proxy ran it. Pure: cleanup decides with these and touches
 * nothing else (keepalived's or an LVS director's virtual servers stay).
 *
 * @module
 */

import { IPSET_BASES, type VirtualServer } from "./render.ts";

/** ipset bases only kube-proxy's ipvs mode creates, beside {@linkcode IPSET_BASES}. */
const KUBE_PROXY_IPSET_BASES = [
  "LOAD-BALANCER-SOURCE-IP",
  "NODE-PORT-SCTP-HASH",
  "NODE-PORT-LOCAL-SCTP-HASH",
  "HEALTH-CHECK-NODE-PORT",
  "IPVS-IPS",
];

/** IPv4 sets are `KUBE-<base>`; IPv6 sets `KUBE6-<base>` (kproxy) or `KUBE-6-<base>` (kube-proxy). */
const IPSET_PREFIXES = ["KUBE-", "KUBE6-", "KUBE-6-"];

const OWNED_IPSETS: ReadonlySet<string> = new Set(
  IPSET_PREFIXES.flatMap((prefix) =>
    [...Object.values(IPSET_BASES), ...KUBE_PROXY_IPSET_BASES].map((base) => prefix + base)
  ),
);

/** The ipsets among `names` (`ipset list -n` output) that the ipvs mode created. */
export function ownedIpsets(names: readonly string[]): string[] {
  return names.filter((name) => OWNED_IPSETS.has(name));
}

/**
 * The virtual servers the ipvs mode created: those whose address is bound to
 * its dummy interface (`kube-ipvs0`). Every other virtual server is someone
 * else's.
 */
export function ownedVirtualServers(
  servers: readonly VirtualServer[],
  dummyAddresses: readonly string[],
): VirtualServer[] {
  const bound = new Set(dummyAddresses);
  return servers.filter((vs) => bound.has(vs.address));
}
