/**
 * The service counters of the iptables mode: nfacct objects (kernel
 * nfnetlink_acct, the mechanism kube-proxy uses for its two counters), named
 * per service port and family, counted by `-m nfacct --nfacct-name` on the
 * rules that DNAT a connection or refuse a packet. Pure.
 *
 * Names are `KP-<KIND><4|6>-<hash>`, where hash is the 16 characters of the
 * port's KUBE-SVC chain name (as collision-free as upstream's chain names),
 * at most 26 characters: nfacct allows 31. nfacct objects belong to the
 * network namespace, not to a family, hence the family digit.
 *
 * @module
 */

import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan, ServiceCounter, ServicePortPlan } from "../../lib/core/plan.ts";
import { counterSamples, type ServiceCounterSample } from "../../lib/core/service_counters.ts";
import { hash16, servicePortName } from "./names.ts";

const KINDS: Record<ServiceCounter, string> = {
  "connections": "CONN",
  "no-endpoints": "NOEP",
  "no-local-endpoints": "NOLOC",
  "source-range": "SRCR",
};

/** Every name {@linkcode nfacctName} makes, of either family. */
export const NFACCT_NAME = /^KP-(?:CONN|NOEP|NOLOC|SRCR)[46]-[A-Z2-7]{16}$/;

/** The hash part of a service port's nfacct names, computed once per plan object. */
const BASES = new WeakMap<ServicePortPlan, string>();

/** The nfacct object of one counter of a service port in `family`. */
export function nfacctName(
  counter: ServiceCounter,
  service: ServicePortPlan,
  family: IpFamily,
): string {
  let base = BASES.get(service);
  if (base === undefined) {
    base = hash16(servicePortName(service) + service.protocol.toLowerCase());
    BASES.set(service, base);
  }
  return `KP-${KINDS[counter]}${family === "IPv4" ? "4" : "6"}-${base}`;
}

/**
 * Whether the rule that counts `counter` exists for the port (as the
 * renderers lay it out): a policy chain for connections, a REJECT or DROP
 * rule for refusals, a KUBE-PROXY-FIREWALL rule for source ranges. An nfacct
 * object exists only while a rule names it: every object makes each later
 * one and each rule naming one slower to load (the kernel keeps them in a
 * list, searched by name).
 */
function hasRule(service: ServicePortPlan, counter: ServiceCounter): boolean {
  const { internal, external } = service;
  const externallyAddressed = service.externalIPs.length + service.loadBalancerIPs.length > 0 ||
    service.nodePort > 0;
  const refuses = (verdict: "reject" | "drop") =>
    (internal.endpoints.length === 0 && internal.whenEmpty === verdict &&
      service.clusterIPs.length > 0) ||
    (external.endpoints.length === 0 && external.whenEmpty === verdict && externallyAddressed);
  const hasEndpoints = internal.endpoints.length > 0 || external.endpoints.length > 0;
  switch (counter) {
    case "connections":
      return hasEndpoints;
    case "no-endpoints":
      return refuses("reject");
    case "no-local-endpoints":
      return refuses("drop");
    case "source-range":
      return hasEndpoints && service.loadBalancerIPs.length > 0 && service.sourceRanges.length > 0;
  }
}

/**
 * A service port's nfacct objects by counter: those of its planned counters
 * whose rule exists now; empty when the plan keeps no counters.
 */
export function serviceNfacctNames(
  plan: Plan,
  service: ServicePortPlan,
): Map<ServiceCounter, string> {
  if (plan.serviceCounters !== true || service.counters === undefined) return new Map();
  return new Map(
    service.counters.filter((c) => hasRule(service, c))
      .map((c) => [c, nfacctName(c, service, plan.family)]),
  );
}

/** The nfacct names of `services` (every service port of `plan` by default). */
export function planNfacctNames(
  plan: Plan,
  services: Iterable<ServicePortPlan> = plan.services,
): Set<string> {
  const names = new Set<string>();
  for (const service of services) {
    for (const name of serviceNfacctNames(plan, service).values()) names.add(name);
  }
  return names;
}

/** `-m nfacct --nfacct-name NAME`, or nothing when `name` is undefined. */
export function nfacctMatch(name: string | undefined): string[] {
  return name === undefined ? [] : ["-m", "nfacct", "--nfacct-name", name];
}

const LIST_LINE = /^\{ pkts = (\d+), bytes = (\d+) \} = ([^;\s]+);$/;

/** Packets per nfacct object, from `nfacct list` output. */
export function parseNfacctList(text: string): Map<string, number> {
  const packets = new Map<string, number>();
  for (const line of text.split("\n")) {
    const match = LIST_LINE.exec(line.trim());
    if (match !== null) packets.set(match[3]!, Number(match[1]));
  }
  return packets;
}

/** The `nfacct restore` input creating `names` at zero (none of them may exist yet). */
export function nfacctRestoreInput(names: Iterable<string>): string {
  const zero = "00000000000000000000";
  return [...names].map((name) => `{ pkts = ${zero}, bytes = ${zero} } = ${name};\n`).join("");
}

/**
 * The samples of the counters `plans` name, from a {@linkcode parseNfacctList}
 * result; 0 for a counter without an object now (its rule does not exist).
 */
export function nfacctSamples(
  plans: Iterable<Plan>,
  packets: ReadonlyMap<string, number>,
): ServiceCounterSample[] {
  return counterSamples(
    plans,
    (plan, service, counter) => packets.get(nfacctName(counter, service, plan.family)) ?? 0,
  );
}

/** Whether `name` is one of kproxy's nfacct objects of `family`. */
export function isFamilyNfacct(name: string, family: IpFamily): boolean {
  return NFACCT_NAME.test(name) && name[name.length - 18] === (family === "IPv4" ? "4" : "6");
}
