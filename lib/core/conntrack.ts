/**
 * Which UDP and SCTP conntrack entries are stale, decided against the whole
 * Plan as kube-proxy 1.36's conntrack reconciler does
 * (`pkg/proxy/conntrack/cleanup.go`, `CleanStaleEntries`), never as a diff
 * between two plans: a flow made stale while no proxy ran is found as well.
 *
 * A flow is stale when its original destination is a Service frontend — a
 * cluster IP, external IP or load-balancer IP with the service port, or any
 * address with the node port — and its reply does not come from one of that
 * Service's serving endpoints (IP and port). Serving means what the
 * EndpointSlice says, whatever traffic policies, topology or termination
 * chose, so a change to a Service does not break flows in progress. A Service
 * without a serving endpoint is left alone: its traffic is rejected anyway.
 *
 * Pure: `lib/conntrack_reconciler.ts` lists the entries and deletes them.
 *
 * @module
 */

import { normalizeIP } from "./ip.ts";
import type { IpFamily, Protocol } from "./model.ts";
import { findServicePort, type Plan, type ServicePortPlan } from "./plan.ts";

/** The protocols whose stale flows are deleted: connectionless ones, which never end. */
export type ConntrackProtocol = Extract<Protocol, "UDP" | "SCTP">;

/** One conntrack entry, as far as staleness needs it. */
export interface ConntrackFlow {
  protocol: ConntrackProtocol;
  /** Where the client sent to (original direction). */
  origDst: string;
  origPortDst: number;
  /** Who answers (reply direction): the DNAT target, or the original destination without NAT. */
  replySrc: string;
  replyPortSrc: number;
}

const PROTOCOL_NAMES: Readonly<Record<string, ConntrackProtocol>> = { udp: "UDP", sctp: "SCTP" };

/**
 * Reads one line of `conntrack -L` (its default format, one entry per line:
 * `udp 17 29 src=A dst=B sport=P dport=Q [UNREPLIED] src=C dst=D sport=R dport=S …`).
 * Cheap, for 100k lines a reconcile: addresses are taken as printed (conntrack
 * prints canonical text) and checked only once a flow is found stale.
 *
 * @param line One output line, without its newline.
 * @returns The flow, or undefined for another protocol or a line it cannot read.
 */
export function parseConntrackLine(line: string): ConntrackFlow | undefined {
  const space = line.indexOf(" ");
  const protocol = PROTOCOL_NAMES[line.slice(0, space)];
  if (protocol === undefined) return undefined;
  // Original direction first (its src is the client), then the reply direction.
  const dst = valueStart(line, " dst=", space);
  const dport = valueStart(line, " dport=", dst);
  const src = valueStart(line, " src=", dport);
  const sport = valueStart(line, " sport=", src);
  if (sport < 0) return undefined;
  const origPortDst = portAt(line, dport);
  const replyPortSrc = portAt(line, sport);
  if (origPortDst < 0 || replyPortSrc < 0) return undefined;
  return {
    protocol,
    origDst: line.slice(dst, valueEnd(line, dst)),
    origPortDst,
    replySrc: line.slice(src, valueEnd(line, src)),
    replyPortSrc,
  };
}

/** Where the value after `key` starts (searching from `from`), or -1. */
function valueStart(line: string, key: string, from: number): number {
  if (from < 0) return -1;
  const at = line.indexOf(key, from);
  return at < 0 ? -1 : at + key.length;
}

function valueEnd(line: string, start: number): number {
  const space = line.indexOf(" ", start);
  return space < 0 ? line.length : space;
}

/** The port written at `start` (up to a space or the end), or -1. */
function portAt(line: string, start: number): number {
  let value = 0;
  let i = start;
  for (; i < line.length && i - start <= 5; i++) {
    const code = line.charCodeAt(i);
    if (code === 32) break;
    if (code < 48 || code > 57) return -1;
    value = value * 10 + code - 48;
  }
  return i > start && i - start <= 5 && value <= 65535 ? value : -1;
}

function isConntrackProtocol(protocol: Protocol): protocol is ConntrackProtocol {
  return protocol === "UDP" || protocol === "SCTP";
}

/** Endpoint lists longer than this get a Set for lookups; shorter ones are scanned. */
const SCAN_LIMIT = 16;

/** One protocol's frontends: by address then port, and by node port. `null` marks the
 * address frontend of a Service without serving endpoints (left alone). */
interface ProtocolFrontends {
  addresses: Map<string, Map<number, ServicePortPlan[] | null>>;
  nodePorts: Map<number, ServicePortPlan[]>;
}

/**
 * The UDP and SCTP frontends of one Plan, each with the Services behind it:
 * built once per reconcile, then asked about every listed flow (one Map miss
 * on the address and one on the port for a flow that is not Service traffic).
 *
 * @example Usage
 * ```ts ignore
 * const frontends = new ServiceFrontends(plan);
 * const stale = frontends.isStale(parseConntrackLine(line)!);
 * ```
 */
export class ServiceFrontends {
  /** Protocols with at least one frontend to check: only these need a listing. */
  readonly protocols: ReadonlySet<ConntrackProtocol>;
  readonly #index: Record<ConntrackProtocol, ProtocolFrontends> = {
    UDP: { addresses: new Map(), nodePorts: new Map() },
    SCTP: { addresses: new Map(), nodePorts: new Map() },
  };
  /** Serving `ip port` keys of Services with many endpoints, built on first use. */
  readonly #servingSets = new Map<ServicePortPlan, Set<string>>();

  constructor(plan: Plan) {
    const protocols = new Set<ConntrackProtocol>();
    for (const service of plan.services) {
      if (!isConntrackProtocol(service.protocol)) continue;
      const index = this.#index[service.protocol];
      const served = service.servingEndpoints.length > 0;
      if (served) protocols.add(service.protocol);
      for (
        const ip of [...service.clusterIPs, ...service.externalIPs, ...service.loadBalancerIPs]
      ) {
        let ports = index.addresses.get(ip);
        if (ports === undefined) index.addresses.set(ip, ports = new Map());
        const known = ports.get(service.port);
        if (served) ports.set(service.port, [...known ?? [], service]);
        else if (known === undefined) ports.set(service.port, null);
      }
      if (served && service.nodePort > 0) {
        const known = index.nodePorts.get(service.nodePort) ?? [];
        index.nodePorts.set(service.nodePort, [...known, service]);
      }
    }
    this.protocols = protocols;
  }

  /**
   * Whether `flow` is stale. A flow to a Service address and port is judged by
   * that Service only (even when the port is also another Service's node port);
   * a flow whose addresses are not IP addresses in canonical form is never
   * stale (it could not be named in a delete line).
   */
  isStale(flow: ConntrackFlow): boolean {
    const index = this.#index[flow.protocol];
    const atAddress = index.addresses.get(flow.origDst)?.get(flow.origPortDst);
    const services = atAddress === undefined
      ? index.nodePorts.get(flow.origPortDst)
      : atAddress ?? undefined;
    if (services === undefined) return false;
    if (services.some((service) => this.#serves(service, flow))) return false;
    return canonical(flow.replySrc) && canonical(flow.origDst);
  }

  #serves(service: ServicePortPlan, flow: ConntrackFlow): boolean {
    const endpoints = service.servingEndpoints;
    if (endpoints.length <= SCAN_LIMIT) {
      return endpoints.some((e) => e.port === flow.replyPortSrc && e.ip === flow.replySrc);
    }
    let set = this.#servingSets.get(service);
    if (set === undefined) {
      set = new Set(endpoints.map((e) => `${e.ip} ${e.port}`));
      this.#servingSets.set(service, set);
    }
    return set.has(`${flow.replySrc} ${flow.replyPortSrc}`);
  }
}

function canonical(ip: string): boolean {
  return normalizeIP(ip)?.address === ip;
}

/**
 * The `conntrack -L` arguments that list one family's entries of one protocol.
 *
 * @param family The Plan's family.
 * @param protocol UDP or SCTP.
 * @returns `-L -f ipv4|ipv6 -p udp|sctp`
 */
export function listArgs(family: IpFamily, protocol: ConntrackProtocol): string[] {
  return ["-L", "-f", familyName(family), "-p", protocol.toLowerCase()];
}

/**
 * The `conntrack -R -` line that deletes the entries of `flow`'s frontend and
 * reply source (every client of that pair at once): one line per stale pair,
 * never per entry. Only for flows {@linkcode ServiceFrontends.isStale} found stale, whose
 * addresses it checked.
 *
 * @param family The Plan's family.
 * @param flow A stale flow.
 * @returns The line, with its newline.
 */
export function deleteLine(family: IpFamily, flow: ConntrackFlow): string {
  return `-D -f ${familyName(family)} -p ${flow.protocol.toLowerCase()} ` +
    `--orig-dst ${flow.origDst} --orig-port-dst ${flow.origPortDst} ` +
    `--reply-src ${flow.replySrc} --reply-port-src ${flow.replyPortSrc}\n`;
}

function familyName(family: IpFamily): "ipv4" | "ipv6" {
  return family === "IPv6" ? "ipv6" : "ipv4";
}

/** What a sync changed, as the post-sync step sees it (lib/shell/proxier.ts `AppliedSync`). */
export interface SyncChange {
  previous: Plan[];
  plans: Plan[];
  changed: ReadonlySet<string>;
  full: boolean;
}

/**
 * Whether a sync may have left a stale UDP or SCTP flow: the first sync after
 * start (flows from before are unknown), a full sync, or a change to a UDP or
 * SCTP service port. A sync that touched only TCP services cannot, so the
 * listing (which costs the kernel a walk of the table) is skipped.
 *
 * @param sync The sync just applied.
 * @returns true when the conntrack table should be reconciled.
 */
export function mayLeaveStaleFlows(sync: SyncChange): boolean {
  if (sync.full || sync.previous.length === 0) return true;
  const plans = [...sync.previous, ...sync.plans];
  for (const id of sync.changed) {
    for (const plan of plans) {
      const service = findServicePort(plan, id);
      if (service !== undefined && isConntrackProtocol(service.protocol)) return true;
    }
  }
  return false;
}
