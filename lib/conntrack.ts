/**
 * Stale UDP conntrack cleanup, shared by every Linux proxy mode.
 *
 * UDP has no connection end: a conntrack entry made while a service pointed
 * at an endpoint (or while it rejected traffic) keeps steering packets after
 * the endpoint is gone, black-holing clients such as DNS resolvers. After a
 * successful sync, flush the entries the change made stale. The decision is
 * pure ({@linkcode staleUdpEntries}); {@linkcode flushStaleUdp} runs
 * `conntrack -D` through the Executor.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import { type Command, describeCommand, type Executor } from "./exec.ts";
import type { IpFamily } from "./model.ts";
import type { Plan, ServicePortPlan } from "./plan.ts";

const logger = getLogger(["kproxy", "conntrack"]);

/**
 * One set of conntrack entries to delete (all UDP):
 * - `endpoint`: entries to `origDst` (a service address) or to node port
 *   `origPortDst` that were DNATed to the removed endpoint `dstNat`;
 * - `service`: entries to `origDst:origPortDst` (or any address on node port
 *   `origPortDst`) created while the service had no endpoints, or to a
 *   service address or node port that no longer exists (still sending to
 *   the old endpoints).
 */
export type StaleUdpEntry =
  | { kind: "endpoint"; family: IpFamily; origDst: string; dstNat: string }
  | { kind: "endpoint"; family: IpFamily; origPortDst: number; dstNat: string }
  | { kind: "service"; family: IpFamily; origDst: string; origPortDst: number }
  | { kind: "service"; family: IpFamily; origPortDst: number };

function ips(list: { ip: string }[]): Set<string> {
  return new Set(list.map((e) => e.ip));
}

function staleFor(
  family: IpFamily,
  before: ServicePortPlan | undefined,
  after: ServicePortPlan | undefined,
  add: (entry: StaleUdpEntry) => void,
): void {
  if (before !== undefined && before.protocol === "UDP") {
    const internalNow = ips(after?.protocol === "UDP" ? after.internal.endpoints : []);
    const externalNow = ips(after?.protocol === "UDP" ? after.external.endpoints : []);
    const externalAddresses = [...before.externalIPs, ...before.loadBalancerIPs];
    for (const endpoint of ips(before.internal.endpoints)) {
      if (internalNow.has(endpoint)) continue;
      for (const ip of before.clusterIPs) {
        add({ kind: "endpoint", family, origDst: ip, dstNat: endpoint });
      }
    }
    for (const endpoint of ips(before.external.endpoints)) {
      if (externalNow.has(endpoint)) continue;
      for (const ip of externalAddresses) {
        add({ kind: "endpoint", family, origDst: ip, dstNat: endpoint });
      }
      if (before.nodePort > 0) {
        add({ kind: "endpoint", family, origPortDst: before.nodePort, dstNat: endpoint });
      }
    }
  }
  if (before !== undefined && before.protocol === "UDP") {
    const stillUDP = after?.protocol === "UDP";
    const nowVIPs = new Set(
      stillUDP && after.port === before.port
        ? [...after.clusterIPs, ...after.externalIPs, ...after.loadBalancerIPs]
        : [],
    );
    for (const ip of [...before.clusterIPs, ...before.externalIPs, ...before.loadBalancerIPs]) {
      if (!nowVIPs.has(ip)) add({ kind: "service", family, origDst: ip, origPortDst: before.port });
    }
    if (before.nodePort > 0 && !(stillUDP && after.nodePort === before.nodePort)) {
      add({ kind: "service", family, origPortDst: before.nodePort });
    }
  }
  if (after === undefined || after.protocol !== "UDP") return;
  const hadInternal = before?.protocol === "UDP" && before.internal.endpoints.length > 0;
  const hadExternal = before?.protocol === "UDP" && before.external.endpoints.length > 0;
  if (!hadInternal && after.internal.endpoints.length > 0) {
    for (const ip of after.clusterIPs) {
      add({ kind: "service", family, origDst: ip, origPortDst: after.port });
    }
  }
  if (!hadExternal && after.external.endpoints.length > 0) {
    for (const ip of [...after.externalIPs, ...after.loadBalancerIPs]) {
      add({ kind: "service", family, origDst: ip, origPortDst: after.port });
    }
    if (after.nodePort > 0) add({ kind: "service", family, origPortDst: after.nodePort });
  }
}

/**
 * Works out which UDP conntrack entries a change made stale. Pure; cost
 * follows the number of changed ids (plus one pass to index them).
 *
 * @param previous the plan the kernel held before the sync
 * @param next the plan just applied
 * @param changed ids of the service ports that may differ
 * @returns entries to delete, without duplicates
 */
export function staleUdpEntries(
  previous: Plan,
  next: Plan,
  changed: ReadonlySet<string>,
): StaleUdpEntry[] {
  const index = (plan: Plan) => {
    const found = new Map<string, ServicePortPlan>();
    for (const service of plan.services) {
      if (changed.has(service.id)) found.set(service.id, service);
    }
    return found;
  };
  const before = index(previous);
  const after = index(next);
  const entries = new Map<string, StaleUdpEntry>();
  const add = (entry: StaleUdpEntry) => entries.set(JSON.stringify(entry), entry);
  for (const id of changed) staleFor(next.family, before.get(id), after.get(id), add);
  return [...entries.values()];
}

/** The `conntrack` command that deletes one entry set. */
export function conntrackCommand(entry: StaleUdpEntry): Command {
  const args = ["-D", "-p", "udp"];
  if (entry.family === "IPv6") args.push("-f", "ipv6");
  if ("origDst" in entry) args.push("--orig-dst", entry.origDst);
  if ("origPortDst" in entry) args.push("--orig-port-dst", String(entry.origPortDst));
  if ("dstNat" in entry) args.push("--dst-nat", entry.dstNat);
  return { program: "conntrack", args };
}

/** Outcome of {@linkcode flushStaleUdp}. */
export interface FlushResult {
  /** Commands that ran successfully (including those that found nothing to delete). */
  succeeded: number;
  /** Commands that failed; they are logged and the rest still run. */
  failed: number;
}

/**
 * Deletes stale UDP conntrack entries with `conntrack -D`, one command per
 * entry. Exit status 1 with "0 flow entries have been deleted" means nothing
 * matched and is not an error. Failures are logged, not thrown: a missed
 * flush must not fail the sync that already succeeded.
 */
export async function flushStaleUdp(
  executor: Executor,
  entries: StaleUdpEntry[],
): Promise<FlushResult> {
  let succeeded = 0;
  let failed = 0;
  for (const entry of entries) {
    const command = conntrackCommand(entry);
    try {
      const result = await executor.run(command);
      const nothing = result.code === 1 && /0 flow entries/.test(result.stderr + result.stdout);
      if (result.code === 0 || nothing) {
        succeeded++;
        continue;
      }
      failed++;
      logger.warn(
        "Cannot flush stale UDP conntrack entries with {command}: exit status {code}: {stderr}",
        {
          command: describeCommand(command),
          code: result.code,
          stderr: result.stderr.trim(),
        },
      );
    } catch (error) {
      failed++;
      logger.warn("Cannot flush stale UDP conntrack entries with {command}: {error}", {
        command: describeCommand(command),
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }
  return { succeeded, failed };
}
