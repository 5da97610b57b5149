/**
 * Pure rendering of a {@linkcode Plan} into the Windows kernelspace mode's
 * desired HNS objects: one HostComputeLoadBalancer per service port and
 * virtual address, and one remote HNS endpoint per endpoint on another node.
 *
 * Every object gets a deterministic id derived from its content, starting with
 * {@linkcode KPROXY_ID_PREFIX}: the id tags the object as kproxy's (so start-up
 * recovery and cleanup find exactly what kproxy owns) and a changed object gets
 * a new id (so a sync is a set difference of ids).
 *
 * @module
 */

import type { IpFamily, Protocol } from "../../lib/core/model.ts";
import type { Plan, PlanEndpoint } from "../../lib/core/plan.ts";
import {
  checkAddress,
  checkFrontendsHeldOnce,
  checkServicePort,
} from "../../lib/core/plan_check.ts";
import { cidrContains, parseIP } from "../../lib/core/ip.ts";
import { sha1Hex } from "../../lib/core/sha1.ts";

/** First 8 hex digits of every HNS object id kproxy creates ("kpro" in ASCII). */
const KPROXY_ID_PREFIX = "6b70726f";

/** HCN LoadBalancerFlags. */
export const LB_FLAGS = Object.freeze({ none: 0, dsr: 1, ipv6: 2 });

/** HCN LoadBalancerPortMappingFlags. */
export const PORT_FLAGS = Object.freeze({
  none: 0,
  ilb: 1,
  localRoutedVip: 2,
  useMux: 4,
  preserveDip: 8,
  vipExternalIp: 16,
});

/** HCN LoadBalancerDistribution: none, or source-IP affinity. */
export const DISTRIBUTION = Object.freeze({ none: 0, sourceIP: 2 });

/** The upstream default ClientIP affinity timeout; other values are not supported on Windows. */
const DEFAULT_AFFINITY_SECONDS = 10800;

/** IANA protocol numbers, as HNS port mappings expect them. */
const PROTOCOL_NUMBERS: Readonly<Record<Protocol, number>> = Object.freeze({
  TCP: 6,
  UDP: 17,
  SCTP: 132,
});

/** Which address of a service port a load balancer serves. */
export type VipKind = "clusterIP" | "nodePort" | "externalIP" | "loadBalancerIP" | "healthCheck";

/** One backend of a load balancer. */
export interface LoadBalancerBackend {
  ip: string;
  /** Local endpoints are looked up by IP on the node; remote ones are kproxy's remote endpoints. */
  isLocal: boolean;
  /** The remote endpoint id, "" for local endpoints. */
  remoteEndpointId: string;
  /** An HNS endpoint found by name (the root namespace's, for health checks); `ip` is "". */
  endpointName?: string;
}

/** One HNS HostComputeLoadBalancer. */
export interface LoadBalancerSpec {
  id: string;
  /** The service port (`ServicePortPlan.id`), for logs and change tracking. */
  servicePortId: string;
  kind: VipKind;
  /** Frontend VIP; "" for node ports (every node address). */
  vip: string;
  protocol: number;
  internalPort: number;
  externalPort: number;
  /** LoadBalancerFlags (DSR, IPv6). */
  flags: number;
  /** LoadBalancerPortMappingFlags. */
  portFlags: number;
  distribution: number;
  /** Overlay networks: `--source-vip`, or the node's address (see {@linkcode renderWindows}); "" on
   * other networks. */
  sourceVip: string;
  /** Sorted by IP. */
  backends: LoadBalancerBackend[];
}

/** One remote HNS endpoint (an endpoint running on another node). */
export interface RemoteEndpointSpec {
  id: string;
  ip: string;
  /** A MAC derived from the IP, as upstream's `conjureMac("02-11", ip)`. */
  mac: string;
  /** Overlay networks: the address of the host that holds `ip`; "" on other networks. */
  providerAddress: string;
  /** The MAC is the host's: that of the node's adapter holding this address (`mac` is ""). */
  hostMacOf?: string;
  /** A local endpoint (HNS endpoint flags 0): the source VIP's, on Overlay networks. */
  local?: true;
}

/** Everything the kernelspace mode programs for one family. */
export interface WindowsDesiredState {
  family: IpFamily;
  /** Sorted by id. */
  loadBalancers: LoadBalancerSpec[];
  /** Sorted by id. */
  remoteEndpoints: RemoteEndpointSpec[];
  /** Things HNS cannot do that the plan asked for, one entry per service port and reason. */
  unsupported: { servicePortId: string; reason: string }[];
}

/** One RemoteSubnetRoute policy of an Overlay network: a pod subnet and the host holding it. */
export interface RemoteSubnet {
  destinationPrefix: string;
  providerAddress: string;
}

/** What the kernelspace mode needs to know of the HNS network of the pods. */
export interface HnsNetworkInfo {
  /** HNS network type: "L2Bridge", "Overlay", … */
  type: string;
  /** Overlay networks: the remote subnet routes. */
  remoteSubnets: RemoteSubnet[];
}

/** Options for {@linkcode renderWindows}. */
export interface WindowsRenderOptions {
  /** `--source-vip` when it is of the plan's family, else "". Used on Overlay networks only. */
  sourceVip?: string;
  /** DSR on cluster IPs: `--enable-dsr` (which needs the WinDSR feature gate). */
  dsr?: boolean;
  /** The HNS network; without it the network is taken for L2Bridge. */
  network?: HnsNetworkInfo;
  /** The node's address of the plan's family (upstream's `nodeIP`), "" when it has none. */
  nodeIP?: string;
  /**
   * `forwardHealthCheckVip` with the root namespace's HNS endpoint present: each load-balancer
   * IP also forwards its health-check node port (or `healthzPort`) to that endpoint.
   */
  healthCheck?: { rootEndpointName: string; healthzPort: number };
}

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Throws a TypeError unless `id` is a lower-case GUID. */
export function validateGuid(id: string): void {
  if (!GUID.test(id)) throw new TypeError(`Cannot use HNS id "${id}": not a GUID`);
}

/** True when an HNS id (any case) was created by kproxy. */
export function isKproxyId(id: string): boolean {
  return GUID.test(id.toLowerCase()) && id.toLowerCase().startsWith(KPROXY_ID_PREFIX);
}

/** A kproxy id: the prefix, a 4-digit kind, then digits of the SHA-1 of `content`. */
function kproxyId(kind: "0001" | "0002", content: string): string {
  const hash = sha1Hex(content);
  return `${KPROXY_ID_PREFIX}-${kind}-${hash.slice(0, 4)}-${hash.slice(4, 8)}-${hash.slice(8, 20)}`;
}

/** The id of the remote endpoint kproxy creates for an endpoint IP (behind `providerAddress`,
 * on Overlay networks). */
export function remoteEndpointId(ip: string, providerAddress = ""): string {
  return kproxyId(
    "0002",
    providerAddress === ""
      ? `remote-endpoint/${ip}`
      : `remote-endpoint/${ip}/pa/${providerAddress}`,
  );
}

/**
 * The provider address of a remote endpoint on an Overlay network, as upstream's
 * `findRemoteSubnetProviderAddress`: the route whose prefix holds `ip`, or whose provider address
 * is `ip` (a host-network endpoint on another node); "" when no route matches.
 */
export function findProviderAddress(subnets: readonly RemoteSubnet[], ip: string): string {
  let found = "";
  for (const subnet of subnets) {
    if (subnet.providerAddress === ip || cidrContains(subnet.destinationPrefix, ip)) {
      found = subnet.providerAddress;
    }
  }
  return found;
}

/** A MAC address for a remote endpoint: `02-11-` and four bytes of the IP (the last four,
 * reversed, for IPv6), as upstream's `conjureMac`. */
export function conjureMac(ip: string): string {
  const hex = (n: number) => n.toString(16).padStart(2, "0");
  const parsed = parseIP(ip);
  if (parsed === undefined) throw new TypeError(`Cannot use address "${ip}": not an IP address`);
  const { bytes } = parsed;
  const last = parsed.family === "IPv4" ? [0, 1, 2, 3] : [15, 14, 13, 12];
  return ["02", "11", ...last.map((i) => hex(bytes[i] ?? 0))].join("-");
}

/**
 * Renders the desired HNS objects of a plan. Pure. What HNS is asked follows upstream's winkernel
 * proxier (docs/WINDOWS.md, "Cases beside upstream"):
 *
 * - cluster IPs use `internal` endpoints; node ports, external IPs and
 *   load-balancer IPs use `external` ones (Local policies are already applied);
 * - HNS maps one internal port per load balancer: endpoints whose port differs
 *   from the first endpoint's are left out and reported in `unsupported`;
 * - DSR: on cluster IPs with `dsr` (`--enable-dsr`); on node ports, external IPs and
 *   load-balancer IPs of externalTrafficPolicy Local services, always;
 * - Overlay networks: a remote endpoint carries the provider address of the host
 *   holding it (the node's own address when no route names one), and a load balancer
 *   the source VIP, or the node's address when one of its remote endpoints is a
 *   host's own address or outside every pod subnet; other networks get neither;
 * - `preserveDestination`: node ports and load-balancer IPs use local endpoints only, and
 *   load-balancer IPs get DSR, UseMux and PreserveDIP;
 * - `healthCheck`: each load-balancer IP with a load balancer also forwards its health-check
 *   node port (else the healthz port) to the root namespace's endpoint, without DSR;
 * - Overlay networks, as upstream: a local endpoint for the source VIP and a remote endpoint for
 *   each cluster IP (provider address the node's), both with the host's MAC;
 * - affinity uses source-IP distribution; HNS has no timeout, so a timeout
 *   other than the default is reported in `unsupported`, as are source ranges.
 *
 * @throws {TypeError} or {RangeError} when a value in the plan is invalid
 */
export function renderWindows(plan: Plan, options: WindowsRenderOptions = {}): WindowsDesiredState {
  const family = plan.family;
  const overlay = options.network?.type.toLowerCase() === "overlay";
  const sourceVip = overlay ? options.sourceVip ?? "" : "";
  if (sourceVip !== "") checkAddress(sourceVip, family);
  const nodeIP = options.nodeIP ?? "";
  if (nodeIP !== "") checkAddress(nodeIP, family);
  const subnets = options.network?.remoteSubnets ?? [];
  checkFrontendsHeldOnce(plan);
  const dsr = options.dsr ?? false;
  const balancers = new Map<string, LoadBalancerSpec>();
  const remotes = new Map<string, RemoteEndpointSpec>();
  const unsupported: WindowsDesiredState["unsupported"] = [];
  /** The provider address of a remote endpoint, and whether it is the host's own or none. */
  const locate = (ip: string) => {
    if (!overlay) return { providerAddress: "", nodeSourced: false };
    const found = findProviderAddress(subnets, ip);
    return {
      providerAddress: found === "" ? nodeIP : found,
      nodeSourced: found === "" || found === ip,
    };
  };

  const hostEndpoint = (role: string, ip: string, spec: Partial<RemoteEndpointSpec>) => {
    const id = kproxyId("0002", `${role}/${ip}/${nodeIP}`);
    remotes.set(id, { id, ip, mac: "", providerAddress: "", hostMacOf: nodeIP, ...spec });
  };
  if (overlay && nodeIP !== "" && sourceVip !== "") {
    hostEndpoint("source-vip", sourceVip, { local: true });
  }

  for (const service of plan.services) {
    checkServicePort(service, family);
    if (overlay && nodeIP !== "") {
      for (const ip of service.clusterIPs) {
        hostEndpoint("service-vip", ip, { providerAddress: nodeIP });
      }
    }
    const note = (reason: string) => unsupported.push({ servicePortId: service.id, reason });
    if (
      service.affinityTimeoutSeconds > 0 &&
      service.affinityTimeoutSeconds !== DEFAULT_AFFINITY_SECONDS
    ) {
      note(
        `session affinity timeout ${service.affinityTimeoutSeconds}s is not supported on Windows`,
      );
    }
    if (service.sourceRanges.length > 0) {
      note("loadBalancerSourceRanges are not enforced by HNS load balancers");
    }
    const preserve = service.preserveDestination === true;
    const add = (kind: VipKind, vip: string, externalPort: number, endpoints: PlanEndpoint[]) => {
      const backends = kind === "healthCheck"
        ? [{
          ip: "",
          isLocal: true,
          remoteEndpointId: "",
          endpointName: options.healthCheck!.rootEndpointName,
        }]
        : pickBackends(endpoints, note, (ip) => locate(ip).providerAddress);
      // As upstream: no HNS load balancer without backends (HNS rejects an empty one).
      if (backends.length === 0) return false;
      let nodeSourced = false;
      for (const backend of backends) {
        if (backend.isLocal) continue;
        const { providerAddress, nodeSourced: own } = locate(backend.ip);
        nodeSourced ||= own;
        remotes.set(backend.remoteEndpointId, {
          id: backend.remoteEndpointId,
          ip: backend.ip,
          mac: conjureMac(backend.ip),
          providerAddress,
        });
      }
      const external = kind !== "clusterIP" && kind !== "healthCheck";
      let portFlags = PORT_FLAGS.none;
      if (kind === "nodePort") portFlags |= PORT_FLAGS.localRoutedVip;
      if (external) portFlags |= PORT_FLAGS.vipExternalIp;
      if (preserve && (kind === "loadBalancerIP" || kind === "healthCheck")) {
        portFlags |= PORT_FLAGS.useMux | PORT_FLAGS.preserveDip;
      }
      let flags = family === "IPv6" ? LB_FLAGS.ipv6 : LB_FLAGS.none;
      const externalDsr = service.externalLocal || (preserve && kind === "loadBalancerIP");
      if (kind === "clusterIP" ? dsr : external && externalDsr) flags |= LB_FLAGS.dsr;
      const spec: Omit<LoadBalancerSpec, "id"> = {
        servicePortId: service.id,
        kind,
        vip,
        protocol: PROTOCOL_NUMBERS[service.protocol],
        internalPort: kind === "healthCheck" ? externalPort : endpoints[0]?.port ?? service.port,
        externalPort,
        flags,
        portFlags,
        distribution: service.affinityTimeoutSeconds > 0 && kind !== "healthCheck"
          ? DISTRIBUTION.sourceIP
          : DISTRIBUTION.none,
        sourceVip: overlay && nodeSourced && nodeIP !== "" ? nodeIP : sourceVip,
        backends,
      };
      const id = kproxyId("0001", JSON.stringify({ ...spec, servicePortId: undefined }));
      balancers.set(id, { id, ...spec });
      return true;
    };
    const local = (endpoints: PlanEndpoint[]) =>
      preserve ? endpoints.filter((ep) => ep.isLocal) : endpoints;
    for (const ip of service.clusterIPs) {
      add("clusterIP", ip, service.port, service.internal.endpoints);
    }
    if (service.nodePort !== 0) {
      add("nodePort", "", service.nodePort, local(service.external.endpoints));
    }
    for (const ip of service.externalIPs) {
      add("externalIP", ip, service.port, service.external.endpoints);
    }
    const healthPort = service.healthCheckNodePort || options.healthCheck?.healthzPort || 0;
    for (const ip of service.loadBalancerIPs) {
      const served = add("loadBalancerIP", ip, service.port, local(service.external.endpoints));
      if (served && options.healthCheck !== undefined && healthPort !== 0) {
        add("healthCheck", ip, healthPort, []);
      }
    }
  }
  return {
    family,
    loadBalancers: [...balancers.values()].sort((a, b) => compare(a.id, b.id)),
    remoteEndpoints: [...remotes.values()].sort((a, b) => compare(a.id, b.id)),
    unsupported: dedupe(unsupported),
  };
}

function pickBackends(
  endpoints: PlanEndpoint[],
  note: (reason: string) => void,
  providerAddress: (ip: string) => string,
): LoadBalancerBackend[] {
  const port = endpoints[0]?.port;
  const backends = new Map<string, LoadBalancerBackend>();
  for (const ep of endpoints) {
    if (ep.port !== port) {
      note(`endpoint ${ep.ip}:${ep.port} left out: HNS maps one target port (${port}) per VIP`);
      continue;
    }
    backends.set(ep.ip, {
      ip: ep.ip,
      isLocal: ep.isLocal,
      remoteEndpointId: ep.isLocal ? "" : remoteEndpointId(ep.ip, providerAddress(ep.ip)),
    });
  }
  return [...backends.values()].sort((a, b) => compare(a.ip, b.ip));
}

function dedupe<T>(items: T[]): T[] {
  const seen = new Set<string>();
  return items.filter((item) => {
    const key = JSON.stringify(item);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
