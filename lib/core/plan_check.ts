/**
 * The one check of a Plan's values, for the renderers that write them into
 * scripts without a grammar of their own to catch a bad one (ipvs, Windows):
 * each address, CIDR and port of a service port is of the plan's family and
 * in range. The planner only produces such values; this guards the boundary.
 *
 * @module
 */

import type { IpFamily } from "./model.ts";
import type { Plan, ServicePortPlan } from "./plan.ts";
import { heldFrontendKeys } from "./frontends.ts";
import { ipFamily, parseCIDR } from "./ip.ts";

const PROTOCOLS: ReadonlySet<string> = new Set(["TCP", "UDP", "SCTP"]);

/** The longest ClientIP affinity timeout (the apiserver's limit). */
const MAX_AFFINITY_SECONDS = 86400;

/** Throws a TypeError unless `address` is an IP address of `family`. */
export function checkAddress(address: string, family: IpFamily): void {
  if (address.includes("/") || ipFamily(address) !== family) {
    throw new TypeError(`Cannot use address "${address}": not an ${family} address`);
  }
}

/** Throws a TypeError unless `cidr` is a CIDR of `family`. */
export function checkCidr(cidr: string, family: IpFamily): void {
  if (!cidr.includes("/") || parseCIDR(cidr)?.family !== family) {
    throw new TypeError(`Cannot use CIDR "${cidr}": not an ${family} CIDR`);
  }
}

/** Throws a RangeError unless `port` is an integer in 1..65535. */
export function checkPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new RangeError(`Cannot use port ${port}: not in 1..65535`);
  }
}

/**
 * Checks every value of one service port that a renderer writes: ports,
 * protocol, affinity timeout, frontend addresses, source ranges and
 * endpoints, all of `family`.
 *
 * @throws {TypeError} or {RangeError} naming the first bad value
 */
export function checkServicePort(service: ServicePortPlan, family: IpFamily): void {
  checkPort(service.port);
  if (service.nodePort !== 0) checkPort(service.nodePort);
  if (!PROTOCOLS.has(service.protocol)) {
    throw new TypeError(`Cannot use protocol "${service.protocol}" of ${service.id}`);
  }
  const timeout = service.affinityTimeoutSeconds;
  if (!Number.isInteger(timeout) || timeout < 0 || timeout > MAX_AFFINITY_SECONDS) {
    throw new RangeError(`Cannot use affinity timeout ${timeout} of ${service.id}`);
  }
  for (const ip of [...service.clusterIPs, ...service.externalIPs, ...service.loadBalancerIPs]) {
    checkAddress(ip, family);
  }
  for (const cidr of service.sourceRanges) checkCidr(cidr, family);
  for (const endpoint of [...service.internal.endpoints, ...service.external.endpoints]) {
    checkAddress(endpoint.ip, family);
    checkPort(endpoint.port);
  }
}

/**
 * Checks that no two service ports of `plan` hold one frontend (address,
 * protocol and port, or node port and protocol): the planner gives each to
 * one of its claimants (lib/core/frontends.ts), and a renderer writes each
 * once, without choosing.
 *
 * @throws {TypeError} naming the first frontend two service ports hold
 */
export function checkFrontendsHeldOnce(plan: Plan): void {
  const holders = new Map<string, string>();
  for (const service of plan.services) {
    for (const key of heldFrontendKeys(service)) {
      const holder = holders.get(key);
      if (holder !== undefined && holder !== service.id) {
        throw new TypeError(
          `Cannot render frontend "${key}": held by both ${holder} and ${service.id}`,
        );
      }
      holders.set(key, service.id);
    }
  }
}
