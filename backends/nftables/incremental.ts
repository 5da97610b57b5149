/**
 * A partial nftables sync: only the objects of the changed service ports,
 * and the plan-wide address sets. Cost follows the number of changed service
 * ports. Pure.
 *
 * @module
 */

import { findServicePort, type Plan, type ServicePortPlan } from "../../lib/core/plan.ts";
import { canonicalIP, collapseCIDRs } from "../../lib/core/ip.ts";
import { Chain, Element, type NftSet, Rule, Transaction } from "./transaction.ts";
import {
  addressElements,
  context,
  hostElements,
  presetCount,
  type RenderOptions,
  tableRef,
} from "./context.ts";
import {
  elementId,
  mayHairpinHere,
  type ServiceObjects,
  slotChainName,
  slotChainsOf,
  tryServiceObjects,
} from "./service.ts";
import { canary } from "./skeleton.ts";

/** What {@linkcode renderIncremental} needs. */
export interface IncrementalInput {
  plan: Plan;
  /** The plan the kernel holds now (last applied). */
  previous: Plan;
  /** Ids of service ports that may differ between `previous` and `plan`. */
  changed: ReadonlySet<string>;
}

/** The service ports of `ids` in `plan`, in plan order; the cost follows `ids`, not the plan. */
function indexById(plan: Plan, ids: ReadonlySet<string>): Map<string, ServicePortPlan> {
  const found: ServicePortPlan[] = [];
  for (const id of ids) {
    const service = findServicePort(plan, id);
    if (service !== undefined) found.push(service);
  }
  found.sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  return new Map(found.map((service) => [service.id, service]));
}

function sameSet(a: NftSet, b: NftSet): boolean {
  return JSON.stringify(a.options) === JSON.stringify(b.options);
}

/**
 * Renders only what changed: the chains, affinity maps and map elements of
 * the service ports in `changed`, plus the plan-wide address sets. Cost
 * follows the number of changed service ports.
 *
 * @returns the transaction, or undefined when the change needs a full render
 *   (another family or another local-traffic detector)
 */
export function renderIncremental(
  input: IncrementalInput,
  options: RenderOptions = {},
): Transaction | undefined {
  const { plan, previous, changed } = input;
  if (plan.family !== previous.family) return undefined;
  if (JSON.stringify(plan.localTraffic) !== JSON.stringify(previous.localTraffic)) return undefined;
  if (plan.clusterIPMasquerade !== previous.clusterIPMasquerade) return undefined;
  if (plan.serviceCounters !== previous.serviceCounters) return undefined;
  const ctx = context(plan, options);
  const tx = new Transaction(tableRef(plan.family, options.table));
  const before = indexById(previous, changed);
  const after = indexById(plan, changed);

  const oldObjects = [...before.values()].flatMap((service) =>
    tryServiceObjects(ctx, service) ?? []
  );
  const newObjects = new Map<string, ServiceObjects>();
  for (const [id, service] of after) {
    const objects = tryServiceObjects(ctx, service);
    if (objects !== undefined) newObjects.set(id, objects);
  }

  const oldChains = new Set(oldObjects.flatMap((o) => o.chains.map((c) => c.chain.name)));
  const newChains = new Set(
    [...newObjects.values()].flatMap((o) => o.chains.map((c) => c.chain.name)),
  );
  const oldSets = new Map(
    oldObjects.flatMap((o) => o.sets.map((s) => [s.options.name, s] as const)),
  );
  const newSets = new Map(
    [...newObjects.values()].flatMap((o) => o.sets.map((s) => [s.options.name, s] as const)),
  );
  const oldElements = new Map(
    oldObjects.flatMap((o) => o.elements.map((e) => [elementId(e), e] as const)),
  );
  const newElements = new Map(
    [...newObjects.values()].flatMap((o) => o.elements.map((e) => [elementId(e), e] as const)),
  );

  // 1. Drop every rule of the changed service ports, so nothing references
  //    chains, maps and elements about to go.
  for (const name of oldChains) tx.flush(new Chain({ name }));
  // 2. Elements that went away or changed value.
  for (const [id, element] of oldElements) {
    const next = newElements.get(id);
    if (next === undefined || next.options.value !== element.options.value) tx.delete(element);
  }
  // 3. Chains and affinity maps that went away or changed definition.
  for (const name of oldChains) {
    if (!newChains.has(name)) tx.delete(new Chain({ name }));
  }
  for (const [name, set] of oldSets) {
    const next = newSets.get(name);
    if (next === undefined || !sameSet(set, next)) tx.delete(set);
  }
  // Affinity entries may point at an endpoint that is gone: forget them all.
  const oldAffinity = new Map(oldObjects.flatMap((o) => [...o.affinityEndpoints]));
  for (const objects of newObjects.values()) {
    for (const [name, endpoints] of objects.affinityEndpoints) {
      const was = oldAffinity.get(name);
      const set = newSets.get(name)!;
      const old = oldSets.get(name);
      if (was !== undefined && old !== undefined && sameSet(old, set)) {
        const kept = new Set(endpoints);
        if (was.some((endpoint) => !kept.has(endpoint))) tx.flush(set);
      }
    }
  }
  // 4. New and rewritten objects. Shared chains are written by full syncs
  //    only: one the changed service ports now need must be a preset one,
  //    or one a service port already dispatches to.
  const presetUpTo = presetCount(options);
  const oldShared = new Set(oldObjects.flatMap((o) => [...o.sharedChains.keys()]));
  const missing = new Set<string>();
  for (const service of after.values()) {
    for (const { map, count, masquerade } of slotChainsOf(ctx, service)) {
      const name = slotChainName(map, count, masquerade);
      if (count > presetUpTo && !oldShared.has(name)) missing.add(name);
    }
  }
  for (const service of plan.services) {
    if (missing.size === 0) break;
    if (changed.has(service.id)) continue;
    for (const { map, count, masquerade } of slotChainsOf(ctx, service)) {
      missing.delete(slotChainName(map, count, masquerade));
    }
  }
  if (missing.size > 0) return undefined;
  for (const objects of newObjects.values()) {
    for (const set of objects.sets) {
      const old = oldSets.get(set.options.name);
      if (old !== undefined && sameSet(old, set)) continue;
      tx.add(set);
    }
    for (const { chain, rules } of objects.chains) {
      tx.add(chain);
      for (const rule of rules) tx.add(new Rule({ chain: chain.name, rule }));
    }
  }
  for (const [id, element] of newElements) {
    const old = oldElements.get(id);
    if (old === undefined || old.options.value !== element.options.value) tx.add(element);
  }

  // 5. Shared sets: cluster IPs may be shared with sibling ports of the same service.
  const oldClusterIPs = new Set(oldObjects.flatMap((o) => o.clusterIPs));
  const newClusterIPs = new Set([...newObjects.values()].flatMap((o) => o.clusterIPs));
  const gone = [...oldClusterIPs].filter((ip) => !newClusterIPs.has(ip));
  if (gone.length > 0) {
    const stillUsed = new Set<string>();
    const owners = new Set([...before.values()].map((s) => `${s.namespace}/${s.name}`));
    for (const service of plan.services) {
      if (!changed.has(service.id) && owners.has(`${service.namespace}/${service.name}`)) {
        for (const ip of service.clusterIPs) stillUsed.add(canonicalIP(ip) ?? ip);
      }
    }
    for (const ip of gone) {
      if (!stillUsed.has(ip)) tx.delete(new Element({ set: "cluster-ips", key: [ip] }));
    }
  }
  for (const ip of newClusterIPs) {
    if (!oldClusterIPs.has(ip)) tx.add(new Element({ set: "cluster-ips", key: [ip] }));
  }
  // Hairpin entries: add new endpoint IPs; delete those of endpoints gone,
  // unless an unchanged service port still uses the IP (checked only when
  // some endpoint went away).
  const oldEndpointIPs = new Set(oldObjects.flatMap((o) => o.endpointIPs));
  const newEndpointIPs = new Set([...newObjects.values()].flatMap((o) => o.endpointIPs));
  for (const ip of newEndpointIPs) {
    if (!oldEndpointIPs.has(ip)) tx.add(new Element({ set: "hairpin", key: [ip, ip] }));
  }
  const goneEndpointIPs = new Set([...oldEndpointIPs].filter((ip) => !newEndpointIPs.has(ip)));
  for (const service of plan.services) {
    if (goneEndpointIPs.size === 0) break;
    if (changed.has(service.id)) continue;
    for (const endpoint of [...service.internal.endpoints, ...service.external.endpoints]) {
      if (mayHairpinHere(endpoint)) goneEndpointIPs.delete(endpoint.ip); // canonical (lib/core/parse/)
    }
  }
  for (const ip of goneEndpointIPs) tx.delete(new Element({ set: "hairpin", key: [ip, ip] }));

  // 6. Plan-wide address sets.
  diffElements(
    tx,
    hostElements(ctx, "nodeport-ips", previous.nodePortAddresses),
    hostElements(ctx, "nodeport-ips", plan.nodePortAddresses),
  );
  diffElements(
    tx,
    addressElements(ctx, "service-cidrs", collapseCIDRs(previous.serviceCIDRs)),
    addressElements(ctx, "service-cidrs", collapseCIDRs(plan.serviceCIDRs)),
  );
  canary(tx, options.generation ?? 0, false);
  return tx;
}

function diffElements(tx: Transaction, before: Element[], after: Element[]): void {
  const old = new Map(before.map((e) => [e.keyText, e]));
  const next = new Map(after.map((e) => [e.keyText, e]));
  for (const [key, element] of old) if (!next.has(key)) tx.delete(element);
  for (const [key, element] of next) if (!old.has(key)) tx.add(element);
}
