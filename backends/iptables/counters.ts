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

/** The nfacct object of one counter of a service port in `family`. */
export function nfacctName(
  counter: ServiceCounter,
  service: ServicePortPlan,
  family: IpFamily,
): string {
  const base = hash16(servicePortName(service) + service.protocol.toLowerCase());
  return `KP-${KINDS[counter]}${family === "IPv4" ? "4" : "6"}-${base}`;
}

/** A service port's counters by kind, as nfacct names; empty when the plan keeps none. */
export function serviceNfacctNames(
  plan: Plan,
  service: ServicePortPlan,
): Map<ServiceCounter, string> {
  if (plan.serviceCounters !== true || service.counters === undefined) return new Map();
  return new Map(service.counters.map((c) => [c, nfacctName(c, service, plan.family)]));
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

/** The samples of the counters `plans` name, from a {@linkcode parseNfacctList} result. */
export function nfacctSamples(
  plans: Iterable<Plan>,
  packets: ReadonlyMap<string, number>,
): ServiceCounterSample[] {
  return counterSamples(
    plans,
    (plan, service, counter) => packets.get(nfacctName(counter, service, plan.family)),
  );
}

/** Whether `name` is one of kproxy's nfacct objects of `family`. */
export function isFamilyNfacct(name: string, family: IpFamily): boolean {
  return NFACCT_NAME.test(name) && name[name.length - 18] === (family === "IPv4" ? "4" : "6");
}
