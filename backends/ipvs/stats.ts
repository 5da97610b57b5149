/**
 * The service counters of the ipvs mode: the per-virtual-server statistics
 * IPVS keeps anyway, read with one `ipvsadm -Ln --stats --exact`. IPVS counts
 * connections only; packets refused for no endpoint or a source range are
 * dropped or rejected by the mode's iptables rules, which keep no counter
 * per Service. Pure.
 *
 * @module
 */

import type { Command } from "../../lib/core/executor.ts";
import type { Protocol } from "../../lib/core/model.ts";
import type { Plan, ServicePortPlan } from "../../lib/core/plan.ts";
import { counterSamples, type ServiceCounterSample } from "../../lib/core/service_counters.ts";
import { parseHostPort } from "./parse.ts";
import { virtualServerKey } from "./render.ts";

/** The one command that lists every virtual server's statistics, exact numbers. */
export const LIST_STATS: Command = { program: "ipvsadm", args: ["-Ln", "--stats", "--exact"] };

const VIRTUAL_SERVER = /^(TCP|UDP|SCTP)\s+(\S+)\s+(\d+)\s+\d+\s+\d+\s+\d+\s+\d+\s*$/;

/**
 * Connections per virtual server, keyed by `virtualServerKey`, from
 * `ipvsadm -Ln --stats --exact` output (real-server lines are skipped).
 *
 * @throws {TypeError} on a virtual-server address it cannot parse
 */
export function parseIpvsStats(text: string): Map<string, number> {
  const connections = new Map<string, number>();
  for (const line of text.split("\n")) {
    const match = VIRTUAL_SERVER.exec(line.trim());
    if (match === null) continue;
    const { address, port } = parseHostPort(match[2]!);
    const key = virtualServerKey({ protocol: match[1] as Protocol, address, port });
    connections.set(key, Number(match[3]));
  }
  return connections;
}

/** The virtual servers a service port owns, as `renderIpvs` creates them. */
function virtualServerKeys(plan: Plan, service: ServicePortPlan): string[] {
  const { protocol } = service;
  const addresses = [...service.clusterIPs, ...service.externalIPs, ...service.loadBalancerIPs];
  const keys = addresses.map((address) =>
    virtualServerKey({ protocol, address, port: service.port })
  );
  if (service.nodePort !== 0) {
    for (const address of plan.nodePortAddresses) {
      keys.push(virtualServerKey({ protocol, address, port: service.nodePort }));
    }
  }
  return keys;
}

/**
 * The connection samples of the service ports of `plans`: the sum over the
 * port's virtual servers. A virtual server two ports claim counts for both.
 */
export function ipvsSamples(
  plans: Iterable<Plan>,
  connections: ReadonlyMap<string, number>,
): ServiceCounterSample[] {
  return counterSamples(plans, (plan, service, counter) => {
    if (counter !== "connections") return undefined;
    const found = virtualServerKeys(plan, service).map((key) => connections.get(key));
    if (found.every((value) => value === undefined)) return undefined;
    return found.reduce<number>((sum, value) => sum + (value ?? 0), 0);
  });
}
