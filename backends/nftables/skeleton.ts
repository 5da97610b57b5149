/**
 * The static part of kproxy's nftables table: base chains, helper chains,
 * the global sets and maps, and the canary set that carries the sync
 * generation. The same in every sync with the same options. Pure.
 *
 * @module
 */

import type { Plan } from "../../lib/core/plan.ts";
import { type ChainOptions, Element, NftSet, type Transaction } from "./transaction.ts";
import { type Context, context, type RenderOptions } from "./context.ts";

/**
 * Name of the one-element set holding the sync generation. Listing it is
 * cheap at any table size (~0 ms at 30k services), while `nft list chain`
 * fetches every chain and set of the table first (0.35 s at 30k).
 */
export const CANARY_SET = "canary";

interface BaseChain extends ChainOptions {
  rules: string[];
}

export function skeleton(
  ctx: Context,
  dropInvalid: boolean,
): { sets: NftSet[]; chains: BaseChain[] } {
  const { ipx, addrType } = ctx;
  const tuple = `${addrType} . inet_proto . inet_service`;
  const sets = [
    new NftSet({
      name: "service-ips",
      type: tuple,
      dataType: "verdict",
      comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    }),
    new NftSet({
      name: "service-nodeports",
      type: "inet_proto . inet_service",
      dataType: "verdict",
      comment: "NodePort traffic",
    }),
    new NftSet({
      name: "no-endpoint-services",
      type: tuple,
      dataType: "verdict",
      comment: "drop or reject traffic to services with no endpoints",
    }),
    new NftSet({
      name: "no-endpoint-nodeports",
      type: "inet_proto . inet_service",
      dataType: "verdict",
      comment: "drop or reject traffic to node ports with no endpoints",
    }),
    new NftSet({
      name: "nodeport-ips",
      type: addrType,
      flags: ["interval"],
      comment: "addresses that accept node port traffic",
    }),
    new NftSet({ name: "cluster-ips", type: addrType, comment: "active cluster IPs" }),
    new NftSet({
      name: "service-cidrs",
      type: addrType,
      flags: ["interval"],
      comment: "service CIDRs",
    }),
    new NftSet({
      name: "firewall-ips",
      type: tuple,
      comment: "destinations subject to loadBalancerSourceRanges",
    }),
    new NftSet({
      name: "firewall-allow",
      type: `${tuple} . ${addrType}`,
      flags: ["interval"],
      comment: "allowed sources per firewalled destination",
    }),
    new NftSet({
      name: "service-endpoints",
      type: `${ipx} daddr . meta l4proto . th dport . numgen random mod 1`,
      dataType: `${ipx} daddr . th dport`,
      typeOf: true,
      comment: "service address . proto . port . slot: endpoint address . port",
    }),
    new NftSet({
      name: "nodeport-endpoints",
      type: "meta l4proto . th dport . numgen random mod 1",
      dataType: `${ipx} daddr . th dport`,
      typeOf: true,
      comment: "proto . node port . slot: endpoint address . port",
    }),
    new NftSet({
      name: "hairpin",
      type: `${addrType} . ${addrType}`,
      comment: "endpoint . endpoint: DNATed back to its own source",
    }),
  ];
  if (ctx.counters) sets.push(...counterMaps(ctx));
  const ctNew = "ct state new";
  const chains: BaseChain[] = [
    {
      name: "filter-prerouting-pre-dnat",
      type: "filter",
      hook: "prerouting",
      priority: -110,
      rules: [`${ctNew} jump firewall-check`],
    },
    {
      name: "filter-output-pre-dnat",
      type: "filter",
      hook: "output",
      priority: -110,
      rules: [`${ctNew} jump firewall-check`],
    },
    {
      name: "filter-forward",
      type: "filter",
      hook: "forward",
      priority: 0,
      rules: [
        ...(dropInvalid ? ["ct state invalid drop"] : []),
        `${ctNew} jump service-endpoints-check`,
        `${ctNew} jump cluster-ips-check`,
      ],
    },
    {
      name: "filter-input",
      type: "filter",
      hook: "input",
      priority: 0,
      rules: [`${ctNew} jump nodeport-endpoints-check`, `${ctNew} jump service-endpoints-check`],
    },
    {
      name: "filter-output",
      type: "filter",
      hook: "output",
      priority: 0,
      rules: [`${ctNew} jump service-endpoints-check`, `${ctNew} jump cluster-ips-check`],
    },
    {
      name: "nat-prerouting",
      type: "nat",
      hook: "prerouting",
      priority: -100,
      rules: ["jump services"],
    },
    { name: "nat-output", type: "nat", hook: "output", priority: -100, rules: ["jump services"] },
    {
      name: "nat-postrouting",
      type: "nat",
      hook: "postrouting",
      priority: 100,
      rules: ["jump masquerading"],
    },
    {
      name: "firewall-check",
      rules: [
        `${ipx} daddr . meta l4proto . th dport @firewall-ips ${ipx} daddr . meta l4proto . th dport . ${ipx} saddr != @firewall-allow drop`,
      ],
    },
    {
      name: "service-endpoints-check",
      rules: [`${ipx} daddr . meta l4proto . th dport vmap @no-endpoint-services`],
    },
    {
      name: "nodeport-endpoints-check",
      rules: [`${ipx} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports`],
    },
    // Upstream drops unallocated addresses; kproxy's Plan contract says reject.
    {
      name: "cluster-ips-check",
      rules: [`${ipx} daddr @cluster-ips reject`, `${ipx} daddr @service-cidrs reject`],
    },
    { name: "reject-chain", rules: ["reject"] },
    {
      name: "services",
      rules: [
        `${ipx} daddr . meta l4proto . th dport vmap @service-ips`,
        `${ipx} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports`,
      ],
    },
    {
      name: "masquerading",
      rules: [
        `ct status dnat ${ipx} saddr . ${ipx} daddr @hairpin masquerade fully-random`,
        `meta mark & ${ctx.mark} == 0 return`,
        `meta mark set meta mark ^ ${ctx.mark}`,
        "masquerade fully-random",
      ],
    },
  ];
  if (ctx.counters) addCounterRules(ctx, chains);
  return { sets, chains };
}

/** The maps from a dispatch key to a service port's counter (`Plan.serviceCounters`). */
export const COUNTER_MAPS = {
  connections: "connection-counters",
  nodePortConnections: "nodeport-connection-counters",
  refusals: "refusal-counters",
  nodePortRefusals: "nodeport-refusal-counters",
  firewall: "firewall-counters",
} as const;

function counterMaps(ctx: Context): NftSet[] {
  const tuple = `${ctx.addrType} . inet_proto . inet_service`;
  const nodePort = "inet_proto . inet_service";
  const map = (name: string, type: string, comment: string) =>
    new NftSet({ name, type, dataType: "counter", comment });
  return [
    map(COUNTER_MAPS.connections, tuple, "connections dispatched, by service address"),
    map(COUNTER_MAPS.nodePortConnections, nodePort, "connections dispatched, by node port"),
    map(COUNTER_MAPS.refusals, tuple, "refused for no endpoints, by service address"),
    map(COUNTER_MAPS.nodePortRefusals, nodePort, "refused for no endpoints, by node port"),
    map(COUNTER_MAPS.firewall, tuple, "refused by loadBalancerSourceRanges"),
  ];
}

/**
 * One counting rule ahead of each dispatch or refusal rule: it names the
 * service port's counter through a map, so no rule is added per service. A
 * key missing from the map ends that rule only, and the packet goes on.
 */
function addCounterRules(ctx: Context, chains: BaseChain[]): void {
  const { ipx } = ctx;
  const tuple = `${ipx} daddr . meta l4proto . th dport`;
  const nodePort = `${ipx} daddr @nodeport-ips counter name meta l4proto . th dport map`;
  const first: Record<string, string[]> = {
    "services": [
      `counter name ${tuple} map @${COUNTER_MAPS.connections}`,
      `${nodePort} @${COUNTER_MAPS.nodePortConnections}`,
    ],
    "service-endpoints-check": [`counter name ${tuple} map @${COUNTER_MAPS.refusals}`],
    "nodeport-endpoints-check": [`${nodePort} @${COUNTER_MAPS.nodePortRefusals}`],
    "firewall-check": [
      `${tuple} . ${ipx} saddr != @firewall-allow counter name ${tuple} map @${COUNTER_MAPS.firewall}`,
    ],
  };
  for (const chain of chains) chain.rules.unshift(...(first[chain.name] ?? []));
}

/**
 * The skeleton chains {@linkcode renderFull} writes for `plan`, each with its
 * number of rules: the same in every sync with the same options.
 */
export function skeletonRuleCounts(plan: Plan, options: RenderOptions = {}): Map<string, number> {
  const { chains } = skeleton(context(plan, options), options.dropInvalid ?? true);
  return new Map(chains.map((chain) => [chain.name, chain.rules.length]));
}

/**
 * About how many set and map elements {@linkcode renderFull} writes for
 * `plan`, counted without rendering it: what listing the table costs.
 */
export function estimateElements(plan: Plan): number {
  let count = 0;
  for (const service of plan.services) {
    const external = service.externalIPs.length + service.loadBalancerIPs.length +
      (service.nodePort > 0 ? 1 : 0);
    count += service.clusterIPs.length * (2 + service.internal.endpoints.length) +
      external * (1 + service.external.endpoints.length);
  }
  return count;
}

export function canary(tx: Transaction, generation: number, fresh: boolean): void {
  if (!Number.isInteger(generation) || generation < 0 || generation > 0xffffffff) {
    throw new RangeError(`Cannot write canary generation "${generation}": not a 32-bit number`);
  }
  const set = new NftSet({ name: CANARY_SET, type: "mark", comment: "kproxy sync generation" });
  if (fresh) tx.add(set);
  else tx.flush(set);
  tx.add(new Element({ set: CANARY_SET, key: [String(generation)] }));
}

/** Parses the generation out of `nft list set … canary` output, or undefined. */
export function parseCanaryGeneration(listing: string): number | undefined {
  const match = listing.match(/elements = \{ (0x[0-9a-fA-F]+|[0-9]+) \}/);
  return match === null ? undefined : Number(match[1]);
}
