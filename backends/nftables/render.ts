/**
 * Renders a {@linkcode Plan} as nftables transactions. No I/O; service.ts logs what it leaves out.
 *
 * Layout (docs/ARCHITECTURE.md and docs/BENCHMARKS.md hold the measurements
 * behind it):
 *
 * - One table per family, `ip kproxy` and `ip6 kproxy`, as upstream does with
 *   `kube-proxy`: each table has plain single-family types (no `inet` family
 *   casts), and a partial sync of one family never touches the other table.
 * - Static skeleton: base chains for nat (dstnat/srcnat) and filter hooks,
 *   helper chains, and global named sets and maps. Everything dynamic lives in
 *   elements of those global maps, never in a set per service, because every
 *   set bound to a rule makes each later load slower.
 * - `services` dispatches `daddr . l4proto . dport` through ONE verdict map
 *   (`service-ips`) and node ports through `service-nodeports`, restricted to
 *   `@nodeport-ips` (never loopback).
 * - Endpoints are elements, not rules: `@service-endpoints` maps
 *   `daddr . l4proto . dport . slot` and `@nodeport-endpoints`
 *   `l4proto . dport . slot` to an endpoint's `addr . port`, slot j for the
 *   j-th endpoint. A dispatch element goes to a chain shared by every service
 *   port with E endpoints (`dnat-E`, `dnat-E-masq`, `dnat-E-masq-nonlocal`,
 *   `nodeport-dnat-E-masq`), whose one rule is `dnat to daddr . l4proto .
 *   dport . numgen random mod E map @service-endpoints`. Only these few
 *   rules bind the maps (each rule binding a map costs more as the table
 *   grows), and an endpoint change rewrites elements only, which nft and the
 *   kernel apply without re-validating the table. Full syncs write the
 *   shared chains for 1 to 64 endpoints up front, because nft 1.0.6 cannot
 *   add a rule reading a slot map once it is in the kernel.
 * - Session affinity and externalTrafficPolicy Local keep chains of their
 *   own per service port: `svc-…` and, with external addresses, `ext-…`,
 *   where rule j is `numgen random mod (E-j) 0 … dnat to ep_j`.
 * - Hairpin masquerade is global: nat postrouting masquerades DNATed packets
 *   whose `saddr . daddr` is in `@hairpin` (`ep . ep` for each local endpoint
 *   IP, or one of unknown node), instead of a rule per endpoint.
 * - Source ranges: `@firewall-ips` (LB IP . proto . port) and an interval set
 *   `@firewall-allow` (LB IP . proto . port . source CIDR), one rule.
 * - Session affinity: one dynamic map per affinity service port (`aff-…`,
 *   client address to endpoint `addr . port`), consulted with
 *   `dnat to saddr map @aff-…` and filled by the rule that picked the endpoint.
 *   When the service loses an endpoint the map is flushed.
 *
 * The parts: `context.ts` (options and checked values every part shares),
 * `skeleton.ts` (the static chains and sets), `service.ts` (one service
 * port's objects), `incremental.ts` (a partial sync); this file renders a
 * whole table.
 *
 * @module
 */

import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { checkFrontendsHeldOnce } from "../../lib/core/plan_check.ts";
import { collapseCIDRs } from "../../lib/core/ip.ts";
import { Chain, Element, ElementLines, Rule, Table, Transaction } from "./transaction.ts";
import {
  addressElements,
  type Context,
  context,
  DEFAULT_TABLE,
  hostElements,
  presetCount,
  type RenderOptions,
  tableRef,
} from "./context.ts";
import {
  DISPATCH_MAPS,
  elementId,
  isSlotElement,
  presetSlotChains,
  type ServiceObjects,
  tryServiceObjects,
} from "./service.ts";
import { canary, skeleton } from "./skeleton.ts";

function addSharedChain(tx: Transaction, name: string, rules: string[]): void {
  tx.add(new Chain({ name }));
  for (const rule of rules) tx.add(new Rule({ chain: name, rule }));
}

function addService(tx: Transaction, objects: ServiceObjects): void {
  for (const set of objects.sets) tx.add(set);
  for (const { chain, rules } of objects.chains) {
    tx.add(chain);
    for (const rule of rules) tx.add(new Rule({ chain: chain.name, rule }));
  }
}

/**
 * Renders the whole table for one plan: `add table`, `delete table` and a
 * rebuild, which replaces any earlier table atomically in one `nft -f`.
 *
 * Re-creating (not flushing) the table also registers its base chains anew,
 * and the kernel runs a hook registered later before the others of the same
 * priority; of nat chains, the first that NATs a connection decides it. So
 * while another proxy's nat chains at the same priority still exist
 * (kube-proxy's dstnat chains during a takeover), kproxy's rules decide
 * after each full sync (tests/kernel/nat_order_test.ts).
 */
export function renderFull(plan: Plan, options: RenderOptions = {}): Transaction {
  const tx = freshTable(plan, options);
  const render = renderTable(plan, options, { objects: tx, hooks: tx });
  for (const lines of render.services(tx).values()) tx.addLines(lines);
  return tx;
}

/**
 * {@linkcode renderFull}'s table in pieces, for a family whose table the
 * kernel does not hold: loaded in order (`setup`, then `services` unless
 * empty, then every `elements` part, in parallel, then `hooks`) they make the
 * same table.
 */
export interface StagedTable {
  /** The table rebuilt without base chains: the skeleton's sets, maps and chains, the preset `dnat-*` chains. */
  setup: Transaction;
  /** What service ports add before their elements: their own chains and affinity maps, other shared chains. */
  services: Transaction;
  /** The elements of the large sets and maps, dealt into parts of about the same size. */
  elements: Transaction[];
  /** The base chains, their rules and the canary: what makes packets pass the table. */
  hooks: Transaction;
}

/**
 * A {@linkcode StagedTable} rendered in two steps: `setup` and `hooks` need
 * no service port, so `setup` can load while {@linkcode rest} renders the
 * service ports.
 */
export interface StagingTable {
  setup: Transaction;
  hooks: Transaction;
  /** Renders the service ports: their objects, and their elements dealt into `parts`. */
  rest(parts: number): { services: Transaction; elements: Transaction[] };
}

/**
 * Renders {@linkcode renderFull}'s table as a {@linkcode StagedTable} of
 * `parts` element parts. Until `hooks` is loaded no packet passes the table
 * (it has no base chain), so the pieces need not be one transaction when no
 * earlier table of kproxy's serves: nft parses the element parts (90 % of
 * a large load's time, ~10 µs an element) in as many processes.
 */
export function renderStaged(plan: Plan, options: RenderOptions, parts: number): StagedTable {
  const staging = stageTable(plan, options);
  return { setup: staging.setup, hooks: staging.hooks, ...staging.rest(parts) };
}

/** {@linkcode renderStaged} in two steps (see {@linkcode StagingTable}). */
export function stageTable(plan: Plan, options: RenderOptions): StagingTable {
  const setup = freshTable(plan, options);
  const hooks = new Transaction(setup.where);
  const render = renderTable(plan, options, { objects: setup, hooks });
  return {
    setup,
    hooks,
    rest(parts: number) {
      if (!Number.isInteger(parts) || parts < 1) {
        throw new RangeError(`Cannot deal elements into "${parts}" parts: not a positive integer`);
      }
      const services = new Transaction(setup.where);
      const elements = Array.from({ length: parts }, () => new Transaction(setup.where));
      let next = 0;
      for (const lines of render.services(services).values()) {
        const dealt = lines.deal(parts, next);
        dealt.parts.forEach((part, i) => elements[i]!.addLines(part));
        next = dealt.next;
      }
      return { services, elements };
    },
  };
}

/** A transaction that replaces the plan family's table with an empty one. */
function freshTable(plan: Plan, options: RenderOptions): Transaction {
  const tx = new Transaction(tableRef(plan.family, options.table));
  tx.add(new Table());
  tx.delete(new Table());
  tx.add(new Table({ comment: "rules for kproxy" }));
  return tx;
}

/**
 * Adds the table's own objects to `objects` (the skeleton's sets and
 * chains, the preset shared chains, the plan-wide address elements) and its
 * base chains, their rules and the canary to `hooks`; `services` then adds
 * every service port's objects to the transaction it is given and returns
 * their elements, per set.
 */
function renderTable(
  plan: Plan,
  options: RenderOptions,
  { objects: tx, hooks }: { objects: Transaction; hooks: Transaction },
): { services(into: Transaction): Map<string, ElementLines> } {
  checkFrontendsHeldOnce(plan);
  const ctx = context(plan, options);
  const { sets, chains } = skeleton(ctx, options.dropInvalid ?? true);
  const into = (chain: { hook?: unknown }) => chain.hook === undefined ? tx : hooks;
  for (const set of sets) tx.add(set);
  for (const { rules: _rules, ...chain } of chains) into(chain).add(new Chain(chain));
  for (const chain of chains) {
    for (const rule of chain.rules) into(chain).add(new Rule({ chain: chain.name, rule }));
  }
  canary(hooks, options.generation ?? 0, true);
  for (const element of hostElements(ctx, "nodeport-ips", plan.nodePortAddresses)) {
    tx.add(element);
  }
  for (const element of addressElements(ctx, "service-cidrs", collapseCIDRs(plan.serviceCIDRs))) {
    tx.add(element);
  }
  const presets = presetSlotChains(ctx, presetCount(options));
  for (const [name, rules] of presets) addSharedChain(tx, name, rules);
  return { services: (target) => renderServices(ctx, plan, target, presets) };
}

/**
 * Adds every service port's objects to `tx` (with the shared chains that
 * are not `presets`) and returns their elements, per set.
 */
function renderServices(
  ctx: Context,
  plan: Plan,
  tx: Transaction,
  presets: ReadonlyMap<string, string[]>,
): Map<string, ElementLines> {
  // Elements are kept as their item text, joined per set into script lines as
  // they come; element objects would triple the peak heap.
  const items = new Map<string, ElementLines>();
  // A port may list one address twice (an externalIP that is also its
  // load-balancer IP), sibling ports share a cluster IP and services share
  // endpoints: each element is written once. Slot elements follow the dispatch
  // element before them, so they need no id of their own in `seen`. Which
  // service port holds a frontend two services claim is the planner's call
  // (`ServicePortPlan.shadowed`), checked by checkFrontendsHeldOnce().
  const seen = new Set<string>();
  let slotsFollow = true;
  const addOnce = (element: Element) => {
    if (isSlotElement(element)) {
      if (!slotsFollow) return;
    } else {
      const id = elementId(element);
      const fresh = !seen.has(id);
      if (DISPATCH_MAPS.has(element.options.set)) slotsFollow = fresh;
      if (!fresh) return;
      seen.add(id);
    }
    const item = tx.itemToAdd(element);
    if (item === undefined) return;
    const set = element.options.set;
    let lines = items.get(set);
    if (lines === undefined) items.set(set, lines = new ElementLines(set));
    lines.push(item);
  };
  const sharedChains = new Map<string, string[]>();
  for (const service of plan.services) {
    const objects = tryServiceObjects(ctx, service);
    if (objects === undefined) continue;
    addService(tx, objects);
    for (const [name, rules] of objects.sharedChains) {
      if (!presets.has(name)) sharedChains.set(name, rules);
    }
    for (const element of objects.elements) addOnce(element);
    for (const ip of objects.clusterIPs) {
      addOnce(new Element({ set: "cluster-ips", key: [ip] }));
    }
    for (const ip of objects.endpointIPs) {
      addOnce(new Element({ set: "hairpin", key: [ip, ip] }));
    }
  }
  for (const [name, rules] of sharedChains) addSharedChain(tx, name, rules);
  return items;
}

/**
 * Renders the removal of a table of a family whether it exists or not
 * (`add table` is a no-op on an existing one, then `delete table`), so it can
 * join a transaction without making it fail.
 */
export function renderDeleteTable(family: IpFamily, table = DEFAULT_TABLE): Transaction {
  const tx = new Transaction(tableRef(family, table));
  tx.add(new Table());
  tx.delete(new Table());
  return tx;
}

/** Parses `nft list tables` output into `family table` pairs, e.g. `ip kube-proxy`. */
export function parseTableList(text: string): string[] {
  return [...text.matchAll(/^table (\S+) (\S+)/gm)].map((match) => `${match[1]} ${match[2]}`);
}
