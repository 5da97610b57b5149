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
  const counted = ctx.counters ? { counter: true } : {};
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
      ...counted,
      comment: "drop or reject traffic to services with no endpoints",
    }),
    new NftSet({
      name: "no-endpoint-nodeports",
      type: "inet_proto . inet_service",
      dataType: "verdict",
      ...counted,
      comment: "drop or reject traffic to node ports with no endpoints",
    }),
    // A hash set, as every set the DNAT path consults: a new interval set
    // matches nothing until its commit ends (tests/kernel/table_recreate_test.ts).
    new NftSet({
      name: "nodeport-ips",
      type: addrType,
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
      ...counted,
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
  if (ctx.counters) addServiceCounters(ctx, sets, chains);
  return { sets, chains };
}

/**
 * The sets whose element counters hold the connections of each dispatch key
 * (`Plan.serviceCounters`): an element per key that has endpoints.
 */
export const CONNECTION_COUNTERS = {
  address: "connection-counters",
  nodePort: "nodeport-connection-counters",
} as const;

/**
 * The sets and maps whose element counters kproxy reads (`Plan.serviceCounters`):
 * the two connection sets, the no-endpoint verdict maps (refused packets per
 * key; the reason is the plan's `whenEmpty` for the key) and `firewall-ips`
 * (packets dropped by `loadBalancerSourceRanges`).
 */
export const COUNTED_SETS = [
  CONNECTION_COUNTERS.address,
  CONNECTION_COUNTERS.nodePort,
  "no-endpoint-services",
  "no-endpoint-nodeports",
  "firewall-ips",
] as const;

/** One of {@linkcode COUNTED_SETS}. */
export type CountedSet = typeof COUNTED_SETS[number];

/**
 * With service counters (the flag is set on the counted skeleton sets above),
 * the connection sets are added, and `services` looks each first packet up
 * in them (a lookup that matches counts; either way the packet goes on). The
 * refusal lookups already exist: the no-endpoint maps count their verdicts,
 * and the firewall rule looks `@firewall-ips` up last, so only the packets
 * it drops are counted there. No rule is added per service.
 */
function addServiceCounters(ctx: Context, sets: NftSet[], chains: BaseChain[]): void {
  const { ipx } = ctx;
  const tuple = `${ipx} daddr . meta l4proto . th dport`;
  sets.push(
    new NftSet({
      name: CONNECTION_COUNTERS.address,
      type: `${ctx.addrType} . inet_proto . inet_service`,
      counter: true,
      comment: "connections dispatched, by service address",
    }),
    new NftSet({
      name: CONNECTION_COUNTERS.nodePort,
      type: "inet_proto . inet_service",
      counter: true,
      comment: "connections dispatched, by node port",
    }),
  );
  const rules: Record<string, string[]> = {
    "services": [
      `${tuple} @${CONNECTION_COUNTERS.address}`,
      `${ipx} daddr @nodeport-ips meta l4proto . th dport @${CONNECTION_COUNTERS.nodePort}`,
    ],
    "firewall-check": [`${tuple} . ${ipx} saddr != @firewall-allow ${tuple} @firewall-ips drop`],
  };
  for (const chain of chains) {
    const first = rules[chain.name];
    if (first === undefined) continue;
    chain.rules = chain.name === "firewall-check" ? first : [...first, ...chain.rules];
  }
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
