/**
 * Per-Service-port traffic counters as read from the kernel: the samples a
 * backend returns, built from the plans it applied, so a counter whose
 * Service is gone is never reported. Pure.
 *
 * @module
 */

import type { IpFamily } from "./model.ts";
import type { Plan, ServiceCounter, ServicePortPlan } from "./plan.ts";

/** The service port a counter sample belongs to. */
export type CountedServicePort = Pick<
  ServicePortPlan,
  "id" | "namespace" | "name" | "portName" | "port" | "protocol"
>;

/** One counter of one service port of one family, as the kernel holds it now. */
export interface ServiceCounterSample {
  service: CountedServicePort;
  family: IpFamily;
  counter: ServiceCounter;
  /** Packets counted since the counter was created (with its Service). */
  packets: number;
}

/**
 * The samples of every counter the plans name that the kernel reading has.
 *
 * @param plans the plans the backend applied last
 * @param packetsOf the kernel's value of one counter, undefined when the kernel has none
 */
export function counterSamples(
  plans: Iterable<Plan>,
  packetsOf: (plan: Plan, service: ServicePortPlan, counter: ServiceCounter) => number | undefined,
): ServiceCounterSample[] {
  const samples: ServiceCounterSample[] = [];
  for (const plan of plans) {
    if (plan.serviceCounters !== true) continue;
    for (const service of plan.services) {
      for (const counter of service.counters ?? []) {
        const packets = packetsOf(plan, service, counter);
        // The plan's own object, not a copy: a reading holds one sample per counter.
        if (packets !== undefined) samples.push({ service, family: plan.family, counter, packets });
      }
    }
  }
  return samples;
}
