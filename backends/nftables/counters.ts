/**
 * Reading the service counters of kproxy's tables: the element counters of
 * the counted sets (`skeleton.ts` {@linkcode COUNTED_SETS}), one `nft -j list`
 * per set, summed per service port over its keys. Pure.
 *
 * nft 1.0.6 lists one set without fetching the rest of the table (a few ms
 * plus ~25–55 µs per element), while `nft list counters` fetches every set's
 * elements first (2.5–5 s at 10k services × 10 endpoints); two list commands
 * in one input lose that filter. Hence element counters, not counter objects.
 *
 * @module
 */

import type { Command } from "../../lib/core/executor.ts";
import { canonicalIP } from "../../lib/core/ip.ts";
import type { Plan, ServiceCounter, ServicePortPlan } from "../../lib/core/plan.ts";
import { counterSamples, type ServiceCounterSample } from "../../lib/core/service_counters.ts";
import { nftFamily } from "./context.ts";
import { CONNECTION_COUNTERS, COUNTED_SETS, type CountedSet } from "./skeleton.ts";

/** Element counts of the counted sets: set name to element key text (`a . tcp . 80`) to packets. */
export type CountedElements = Map<CountedSet, Map<string, number>>;

const MAPS: ReadonlySet<CountedSet> = new Set(["no-endpoint-services", "no-endpoint-nodeports"]);

/** The commands that list the counted sets of `table` in `plan`'s family, one per set. */
export function listCountedSets(
  plan: Plan,
  table: string,
): { set: CountedSet; command: Command }[] {
  return COUNTED_SETS.map((set) => ({
    set,
    command: {
      program: "nft",
      args: ["-j", "list", MAPS.has(set) ? "map" : "set", nftFamily(plan.family), table, set],
    },
  }));
}

function keyText(value: unknown): string {
  if (typeof value === "object" && value !== null && "concat" in value) {
    return (value as { concat: unknown[] }).concat.map(String).join(" . ");
  }
  return String(value);
}

/**
 * Packets per element key of one set or map, from `nft -j list set|map`
 * output; elements without a counter are skipped.
 *
 * @throws {SyntaxError} when the output is not nft's JSON of one set or map
 */
export function parseCountedSet(json: string): Map<string, number> {
  const parsed = JSON.parse(json) as { nftables?: unknown };
  if (!Array.isArray(parsed.nftables)) {
    throw new SyntaxError('Cannot parse an nft set listing: no "nftables" array');
  }
  const packets = new Map<string, number>();
  for (const item of parsed.nftables as Record<string, { elem?: unknown[] }>[]) {
    const set = item.set ?? item.map;
    if (set === undefined) continue;
    for (const entry of set.elem ?? []) {
      // A map's element is [element, value]; a set's is the element.
      const element = (Array.isArray(entry) ? entry[0] : entry) as {
        elem?: { val?: unknown; counter?: { packets?: unknown } };
      };
      const packetCount = element?.elem?.counter?.packets;
      if (typeof packetCount !== "number") continue;
      packets.set(keyText(element.elem!.val), packetCount);
    }
  }
  return packets;
}

/** The keys of a service port in one counted set, for one counter. */
function keysOf(
  service: ServicePortPlan,
  counter: ServiceCounter,
): { set: CountedSet; key: string }[] {
  const proto = service.protocol.toLowerCase();
  const addressKey = (ip: string) => `${canonicalIP(ip) ?? ip} . ${proto} . ${service.port}`;
  const nodePortKey = `${proto} . ${service.nodePort}`;
  const external = [...service.externalIPs, ...service.loadBalancerIPs];
  const hasNodePort = service.nodePort > 0;
  switch (counter) {
    case "connections":
      return [
        ...[...service.clusterIPs, ...external].map((ip) => ({
          set: CONNECTION_COUNTERS.address,
          key: addressKey(ip),
        })),
        ...(hasNodePort ? [{ set: CONNECTION_COUNTERS.nodePort, key: nodePortKey }] : []),
      ];
    case "no-endpoints":
    case "no-local-endpoints": {
      const verdict = counter === "no-endpoints" ? "reject" : "drop";
      const refusing = (traffic: ServicePortPlan["internal"]) =>
        traffic.endpoints.length === 0 && traffic.whenEmpty === verdict;
      const keys: { set: CountedSet; key: string }[] = [];
      if (refusing(service.internal)) {
        for (const ip of service.clusterIPs) {
          keys.push({ set: "no-endpoint-services", key: addressKey(ip) });
        }
      }
      if (refusing(service.external)) {
        for (const ip of external) keys.push({ set: "no-endpoint-services", key: addressKey(ip) });
        if (hasNodePort) keys.push({ set: "no-endpoint-nodeports", key: nodePortKey });
      }
      return keys;
    }
    case "source-range":
      return service.loadBalancerIPs.map((ip) => ({ set: "firewall-ips", key: addressKey(ip) }));
  }
}

/**
 * The samples of the counters `plans` name: each the sum of the element
 * counters of the port's keys, 0 when none of them has an element now (a
 * count restarts from zero when its elements are re-created, e.g. when a
 * Service's last endpoint goes and comes back).
 */
export function nftCounterSamples(
  plans: Iterable<Plan>,
  elements: (plan: Plan) => CountedElements,
): ServiceCounterSample[] {
  return counterSamples(plans, (plan, service, counter) => {
    const counted = elements(plan);
    let packets = 0;
    for (const { set, key } of keysOf(service, counter)) {
      packets += counted.get(set)?.get(key) ?? 0;
    }
    return packets;
  });
}
