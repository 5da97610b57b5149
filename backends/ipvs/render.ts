/**
 * Pure rendering of a {@linkcode Plan} into the ipvs mode's desired state:
 * IPVS virtual and real servers, the addresses of the `kube-ipvs0` dummy
 * interface and the ipset contents. The static iptables rules live in
 * `iptables.ts`; the incremental diff in `diff.ts`.
 *
 * @module
 */

import { joinHostPort } from "../../lib/core/ip.ts";
import type { IpFamily, Protocol } from "../../lib/core/model.ts";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { IPVS_SCHEDULERS } from "../../lib/config/types.ts";
import {
  checkAddress,
  checkFrontendsHeldOnce,
  checkServicePort,
} from "../../lib/core/plan_check.ts";

/** The name of the dummy interface that holds every service VIP. */
export const DUMMY_INTERFACE = "kube-ipvs0";

/** One real server (endpoint) of a virtual server. */
export interface RealServer {
  address: string;
  port: number;
  /** 1 for a live endpoint, 0 while it drains (graceful termination). */
  weight: number;
}

/** One IPVS virtual server: a virtual address and port of one protocol. */
export interface VirtualServer {
  protocol: Protocol;
  address: string;
  port: number;
  scheduler: string;
  /** Scheduler flags (`-b`), e.g. `["mh-port"]` for mh. */
  schedulerFlags: string[];
  /** Persistence (`-p`) in seconds for ClientIP affinity, 0 for none. */
  persistenceSeconds: number;
  /** Sorted by `address:port`. */
  realServers: RealServer[];
}

/** The kind and contents of one ipset. */
export interface IpsetSpec {
  name: string;
  type: "hash:ip,port" | "hash:ip,port,ip" | "hash:ip,port,net" | "bitmap:port";
  /** Sorted, deduplicated entries in `ipset add` syntax. */
  entries: string[];
}

/** Everything the ipvs mode programs for one family, except the static iptables rules. */
export interface IpvsDesiredState {
  family: IpFamily;
  /** Sorted by {@linkcode virtualServerKey}. */
  virtualServers: VirtualServer[];
  /** Addresses bound to `kube-ipvs0`, sorted. */
  dummyAddresses: string[];
  /** Every ipset of the mode, in a fixed order, including empty ones. */
  ipsets: IpsetSpec[];
}

/** Options for {@linkcode renderIpvs}. */
export interface IpvsRenderOptions {
  /** `ipvs.scheduler`; "" means rr. @default {"rr"} */
  scheduler?: string;
}

/** The base names of every ipset of the mode (IPv4 names; see {@linkcode ipsetName}). */
export const IPSET_BASES = Object.freeze(
  {
    clusterIP: "CLUSTER-IP",
    loopBack: "LOOP-BACK",
    externalIP: "EXTERNAL-IP",
    externalIPLocal: "EXTERNAL-IP-LOCAL",
    loadBalancer: "LOAD-BALANCER",
    loadBalancerLocal: "LOAD-BALANCER-LOCAL",
    loadBalancerFW: "LOAD-BALANCER-FW",
    loadBalancerSourceCIDR: "LOAD-BALANCER-SOURCE-CIDR",
    nodePortTCP: "NODE-PORT-TCP",
    nodePortUDP: "NODE-PORT-UDP",
    nodePortSCTP: "NODE-PORT-SCTP",
    nodePortLocalTCP: "NODE-PORT-LOCAL-TCP",
    nodePortLocalUDP: "NODE-PORT-LOCAL-UDP",
    nodePortLocalSCTP: "NODE-PORT-LOCAL-SCTP",
  } as const,
);

/** The key of an ipset in {@linkcode IPSET_BASES}. */
export type IpsetKey = keyof typeof IPSET_BASES;

const IPSET_TYPES: Record<IpsetKey, IpsetSpec["type"]> = {
  clusterIP: "hash:ip,port",
  loopBack: "hash:ip,port,ip",
  externalIP: "hash:ip,port",
  externalIPLocal: "hash:ip,port",
  loadBalancer: "hash:ip,port",
  loadBalancerLocal: "hash:ip,port",
  loadBalancerFW: "hash:ip,port",
  loadBalancerSourceCIDR: "hash:ip,port,net",
  nodePortTCP: "bitmap:port",
  nodePortUDP: "bitmap:port",
  nodePortSCTP: "bitmap:port",
  nodePortLocalTCP: "bitmap:port",
  nodePortLocalUDP: "bitmap:port",
  nodePortLocalSCTP: "bitmap:port",
};

/**
 * The name of an ipset for a family: `KUBE-<base>` for IPv4 (upstream's names)
 * and `KUBE6-<base>` for IPv6 (ipsets have one family; names stay under 32 bytes).
 */
export function ipsetName(key: IpsetKey, family: IpFamily): string {
  return `${family === "IPv4" ? "KUBE-" : "KUBE6-"}${IPSET_BASES[key]}`;
}

/** Throws a TypeError unless `scheduler` is one of {@linkcode IPVS_SCHEDULERS} (or ""). */
export function validateScheduler(scheduler: string): string {
  const name = scheduler === "" ? "rr" : scheduler;
  if (!IPVS_SCHEDULERS.includes(name)) {
    throw new TypeError(
      `Cannot use IPVS scheduler "${scheduler}": expected one of ${IPVS_SCHEDULERS.join(", ")}`,
    );
  }
  return name;
}

/** The stable key of a virtual server: `TCP/10.0.0.1/80`. */
export function virtualServerKey(vs: Pick<VirtualServer, "protocol" | "address" | "port">): string {
  return `${vs.protocol}/${vs.address}/${vs.port}`;
}

/** The stable key of a real server: `10.0.0.1:80` (`[fd00::1]:80` for IPv6). */
export function realServerKey(rs: Pick<RealServer, "address" | "port">): string {
  return joinHostPort(rs.address, rs.port);
}

/**
 * Renders the desired ipvs state of a plan. Pure: no I/O.
 *
 * @throws {TypeError} when the scheduler or a value in the plan is invalid
 * @example Usage
 * ```ts
 * import { emptyPlan } from "../../lib/core/plan.ts";
 * const state = renderIpvs(emptyPlan("IPv4"), { scheduler: "rr" });
 * console.assert(state.virtualServers.length === 0);
 * ```
 */
export function renderIpvs(plan: Plan, options: IpvsRenderOptions = {}): IpvsDesiredState {
  const scheduler = validateScheduler(options.scheduler ?? "");
  const family = plan.family;
  const servers = new Map<string, VirtualServer>();
  const dummy = new Set<string>();
  const sets = new Map<IpsetKey, Set<string>>(
    (Object.keys(IPSET_BASES) as IpsetKey[]).map((key) => [key, new Set<string>()]),
  );
  const add = (key: IpsetKey, entry: string) => sets.get(key)?.add(entry);
  for (const address of plan.nodePortAddresses) checkAddress(address, family);
  checkFrontendsHeldOnce(plan);

  for (const service of plan.services) {
    checkServicePort(service, family);
    const proto = service.protocol.toLowerCase();
    const vip = (address: string, port: number, endpoints: PlanEndpoint[]) => {
      const vs = virtualServer({ service, address, port, scheduler, endpoints });
      servers.set(virtualServerKey(vs), vs);
    };
    for (const ip of service.clusterIPs) {
      vip(ip, service.port, service.internal.endpoints);
      dummy.add(ip);
      add("clusterIP", `${ip},${proto}:${service.port}`);
    }
    for (const ip of service.externalIPs) {
      vip(ip, service.port, service.external.endpoints);
      dummy.add(ip);
      const entry = `${ip},${proto}:${service.port}`;
      add("externalIP", entry);
      if (service.externalLocal) add("externalIPLocal", entry);
    }
    for (const ip of service.loadBalancerIPs) {
      vip(ip, service.port, service.external.endpoints);
      dummy.add(ip);
      const entry = `${ip},${proto}:${service.port}`;
      add("loadBalancer", entry);
      if (service.externalLocal) add("loadBalancerLocal", entry);
      if (service.sourceRanges.length > 0) {
        add("loadBalancerFW", entry);
        for (const cidr of service.sourceRanges) add("loadBalancerSourceCIDR", `${entry},${cidr}`);
      }
    }
    if (service.nodePort !== 0) {
      for (const address of plan.nodePortAddresses) {
        vip(address, service.nodePort, service.external.endpoints);
      }
      add(nodePortSet(service.protocol, service.externalLocal), String(service.nodePort));
    }
    for (const ep of [...service.internal.endpoints, ...service.external.endpoints]) {
      if (ep.isLocal) add("loopBack", `${ep.ip},${proto}:${ep.port},${ep.ip}`);
    }
  }

  return {
    family,
    virtualServers: [...servers.values()].sort(byKey(virtualServerKey)),
    dummyAddresses: [...dummy].sort(),
    ipsets: [...sets].map(([key, entries]) => ({
      name: ipsetName(key, family),
      type: IPSET_TYPES[key],
      entries: [...entries].sort(),
    })),
  };
}

function nodePortSet(protocol: Protocol, local: boolean): IpsetKey {
  const suffix = protocol === "TCP" ? "TCP" : protocol === "UDP" ? "UDP" : "SCTP";
  return `nodePort${local ? "Local" : ""}${suffix}` as IpsetKey;
}

function virtualServer(
  spec: {
    service: ServicePortPlan;
    address: string;
    port: number;
    scheduler: string;
    endpoints: PlanEndpoint[];
  },
): VirtualServer {
  const reals = new Map<string, RealServer>();
  for (const ep of spec.endpoints) {
    const rs = { address: ep.ip, port: ep.port, weight: 1 };
    reals.set(realServerKey(rs), rs);
  }
  return {
    protocol: spec.service.protocol,
    address: spec.address,
    port: spec.port,
    scheduler: spec.scheduler,
    schedulerFlags: spec.scheduler === "mh" ? ["mh-port"] : [],
    persistenceSeconds: spec.service.affinityTimeoutSeconds,
    realServers: [...reals.values()].sort(byKey(realServerKey)),
  };
}

function byKey<T>(key: (value: T) => string): (a: T, b: T) => number {
  return (a, b) => {
    const x = key(a);
    const y = key(b);
    return x < y ? -1 : x > y ? 1 : 0;
  };
}

/** The ipvsadm service option for a protocol: `-t`, `-u` or `--sctp-service`. */
function protocolFlag(protocol: Protocol): string {
  return protocol === "TCP" ? "-t" : protocol === "UDP" ? "-u" : "--sctp-service";
}

/** The ipvsadm arguments naming a virtual server, e.g. `-t 10.0.0.1:80`. */
export function serviceArgs(vs: Pick<VirtualServer, "protocol" | "address" | "port">): string[] {
  return [protocolFlag(vs.protocol), joinHostPort(vs.address, vs.port)];
}

/** The scheduling options of a virtual server: `-s rr [-b mh-port] [-p N]`. */
export function schedulingArgs(vs: VirtualServer): string[] {
  const args = ["-s", vs.scheduler];
  if (vs.schedulerFlags.length > 0) args.push("-b", vs.schedulerFlags.join(","));
  if (vs.persistenceSeconds > 0) args.push("-p", String(vs.persistenceSeconds));
  return args;
}

/** The ipvsadm arguments of a real server with its weight: `-r ep:port -m -w 1`. */
export function realServerArgs(rs: RealServer): string[] {
  return ["-r", joinHostPort(rs.address, rs.port), "-m", "-w", String(rs.weight)];
}

/**
 * Renders a whole desired state as `ipvsadm --restore` input (`-A`/`-a` lines),
 * as used by golden files and for a first sync on an empty table.
 */
export function renderIpvsadmRestore(state: IpvsDesiredState): string {
  const lines: string[] = [];
  for (const vs of state.virtualServers) {
    lines.push(["-A", ...serviceArgs(vs), ...schedulingArgs(vs)].join(" "));
    for (const rs of vs.realServers) {
      lines.push(["-a", ...serviceArgs(vs), ...realServerArgs(rs)].join(" "));
    }
  }
  return lines.map((line) => line + "\n").join("");
}

/** The prefix length of a host address of the family (`/32` or `/128`). */
function hostPrefix(family: IpFamily): number {
  return family === "IPv4" ? 32 : 128;
}

/**
 * Renders `ip -batch -` input that binds `add` to `kube-ipvs0` and unbinds `remove`.
 * Creating the interface itself is a separate step (see `mod.ts`).
 */
export function renderDummyBatch(
  family: IpFamily,
  changes: { add: readonly string[]; remove: readonly string[] },
): string {
  const prefix = hostPrefix(family);
  const lines = [
    ...changes.remove.map((ip) => `address del ${ip}/${prefix} dev ${DUMMY_INTERFACE}`),
    ...changes.add.map((ip) => `address replace ${ip}/${prefix} dev ${DUMMY_INTERFACE}`),
  ];
  return lines.map((line) => line + "\n").join("");
}

function createLine(set: IpsetSpec, name: string, family: IpFamily): string {
  const options = set.type === "bitmap:port"
    ? "range 0-65535"
    : `family ${family === "IPv4" ? "inet" : "inet6"} hashsize 1024 maxelem 65536`;
  return `create ${name} ${set.type} ${options}`;
}

/**
 * Renders `ipset restore -exist` input that makes every set hold exactly its
 * entries, atomically per set: fill a temporary set, `swap` it in, destroy it.
 */
export function renderIpsetRestoreFull(state: IpvsDesiredState): string {
  const lines: string[] = [];
  state.ipsets.forEach((set, index) => {
    const temp = `KUBE-TMP-${state.family === "IPv4" ? 4 : 6}-${index}`;
    lines.push(createLine(set, set.name, state.family));
    lines.push(createLine(set, temp, state.family));
    lines.push(`flush ${temp}`);
    for (const entry of set.entries) lines.push(`add ${temp} ${entry}`);
    lines.push(`swap ${temp} ${set.name}`, `destroy ${temp}`);
  });
  return lines.map((line) => line + "\n").join("");
}

/**
 * Renders `ipset restore -exist` input that turns the `previous` entries into
 * the `next` ones (sets are created if missing); "" when nothing changed.
 */
export function renderIpsetRestoreDiff(previous: IpvsDesiredState, next: IpvsDesiredState): string {
  const before = new Map(previous.ipsets.map((set) => [set.name, new Set(set.entries)]));
  const lines: string[] = [];
  for (const set of next.ipsets) {
    const old = before.get(set.name) ?? new Set<string>();
    const now = new Set(set.entries);
    const removed = [...old].filter((entry) => !now.has(entry));
    const added = set.entries.filter((entry) => !old.has(entry));
    if (removed.length === 0 && added.length === 0) continue;
    lines.push(createLine(set, set.name, next.family));
    // Added entries first: ipset restore applies line by line.
    for (const entry of added) lines.push(`add ${set.name} ${entry}`);
    for (const entry of removed) lines.push(`del ${set.name} ${entry}`);
  }
  return lines.map((line) => line + "\n").join("");
}
