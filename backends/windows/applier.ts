/**
 * The Windows kernelspace proxy mode: programs HNS load balancers and remote
 * endpoints through PowerShell scripts that call the Host Compute Network API.
 * Every object kproxy creates carries a kproxy id (see `render.ts`), so start-up
 * recovery deletes stale ones, a sync creates and deletes only the ids that
 * changed, and cleanup removes exactly what kproxy owns.
 *
 * @module
 */

import { getLogger } from "../../lib/core/logger.ts";
import type { Backend, SyncRequest, SyncResult } from "../../lib/core/backend.ts";
import type { Config } from "../../lib/config/types.ts";
import { runChecked } from "../../lib/shell/exec.ts";
import type { Executor } from "../../lib/core/executor.ts";
import { parseIP } from "../../lib/core/ip.ts";
import {
  type HnsNetworkInfo,
  isKproxyId,
  type LoadBalancerSpec,
  type RemoteEndpointSpec,
  renderWindows,
  type WindowsDesiredState,
} from "./render.ts";
import {
  type HnsChanges,
  type HnsListing,
  parseListReply,
  parseSyncReply,
  renderListScript,
  renderSyncScript,
} from "./script.ts";

const logger = getLogger(["kproxy", "windows"]);

/** Options for {@linkcode createWindowsBackend}. */
export interface WindowsBackendOptions {
  executor: Executor;
  config: Config;
  /** The PowerShell program. @default {"powershell.exe"} */
  powershell?: "powershell.exe" | "pwsh";
  /** Reads an environment variable (`KUBE_NETWORK`). @default {Deno.env.get} */
  getEnv?: (name: string) => string | undefined;
}

/**
 * The arguments kproxy passes to PowerShell. The script comes on stdin and is
 * parsed whole (`-Command -` would read it line by line, as typed input, which
 * breaks multi-line blocks).
 */
export const POWERSHELL_ARGS: readonly string[] = Object.freeze([
  "-NoProfile",
  "-NonInteractive",
  "-ExecutionPolicy",
  "Bypass",
  "-Command",
  "& ([ScriptBlock]::Create([Console]::In.ReadToEnd()))",
]);

const NETWORK_NAME = /^[\x20-\x7e]{1,256}$/;

/** Thrown when HNS refused some changes; the backend resyncs fully next time. */
export class HnsSyncError extends Error {
  constructor(readonly errors: { id: string; error: string }[]) {
    super(
      `Cannot apply HNS changes: ${errors.length} failed, first: ${errors[0]?.id}: ${
        errors[0]?.error
      }`,
    );
    this.name = "HnsSyncError";
  }
}

/**
 * Creates the kernelspace backend.
 *
 * The network is `config.winkernel.networkName`, else the `KUBE_NETWORK` environment
 * variable, as upstream.
 *
 * @throws {TypeError} when neither names a network, or the name is not printable ASCII
 * @example Usage
 * ```ts ignore
 * const backend = createWindowsBackend({ executor, config });
 * await backend.sync({ plans, changed: new Set(), full: true });
 * ```
 */
export function createWindowsBackend(options: WindowsBackendOptions): Backend {
  return new WindowsBackend(options);
}

class WindowsBackend implements Backend {
  readonly mode = "kernelspace";
  readonly #executor: Executor;
  readonly #config: Config;
  readonly #powershell: string;
  readonly #networkName: string;
  readonly #rootEndpointName: string;
  /** The network as the last full sync found it. */
  #network?: HnsNetworkInfo;
  /** How many endpoints each load balancer held at the last full sync, by id. */
  #listedEndpoints = new Map<string, number>();
  /** Whether the last full sync found the root namespace's endpoint (`rootHnsEndpointName`). */
  #rootEndpointFound = false;
  /** Until one sync succeeds: delete every load balancer kproxy did not create, as kube-proxy
   * deletes every HNS load balancer at start (docs/WINDOWS.md, "Taking over from kube-proxy"). */
  #takeover = true;
  /** Ids of kproxy's load balancers and remote endpoints believed to exist in HNS. */
  #loadBalancers = new Set<string>();
  #endpoints = new Set<string>();
  /** Load balancers in HNS that lack some of their endpoints: replaced once those exist. */
  readonly #incomplete = new Set<string>();
  readonly #warned = new Set<string>();
  #needFull = true;

  constructor(options: WindowsBackendOptions) {
    this.#executor = options.executor;
    this.#config = options.config;
    this.#powershell = options.powershell ?? "powershell.exe";
    const name = options.config.winkernel.networkName ||
      (options.getEnv ?? readEnv)("KUBE_NETWORK") || "";
    if (name === "") {
      throw new TypeError(
        "Cannot find the HNS network: neither --network-name nor KUBE_NETWORK is set",
      );
    }
    if (!NETWORK_NAME.test(name)) {
      throw new TypeError(
        `Cannot use HNS network name "${name}": expected 1 to 256 printable ASCII characters`,
      );
    }
    this.#networkName = name;
    // As upstream: an empty --root-hnsendpoint-name means cbr0.
    this.#rootEndpointName = options.config.winkernel.rootHnsEndpointName || "cbr0";
    if (!NETWORK_NAME.test(this.#rootEndpointName)) {
      throw new TypeError(
        `Cannot use HNS endpoint name "${this.#rootEndpointName}": expected 1 to 256 printable ` +
          "ASCII characters",
      );
    }
  }

  async sync(request: SyncRequest): Promise<SyncResult> {
    const full = request.full || this.#needFull;
    this.#needFull = true;
    let foreign: string[] = [];
    if (full) {
      const listing = await this.#list();
      if (listing.network === undefined) {
        throw new Error(`Cannot find HNS network ${this.#networkName}`);
      }
      this.#network = listing.network;
      this.#listedEndpoints = listing.loadBalancerEndpoints;
      this.#rootEndpointFound = listing.endpointNames.includes(this.#rootEndpointName);
      this.#loadBalancers = new Set(listing.loadBalancerIds.filter(isKproxyId));
      this.#endpoints = new Set(listing.endpointIds.filter(isKproxyId));
      if (this.#takeover) foreign = listing.loadBalancerIds.filter((id) => !isKproxyId(id));
    }
    const desired = this.#render(request);
    if (full) {
      // A load balancer created without some of its endpoints by a script that did not live to
      // say so (killed, or an earlier kproxy): replaced once they all exist.
      for (const lb of desired.loadBalancers) {
        const held = this.#listedEndpoints.get(lb.id);
        if (held !== undefined && held < lb.backends.length) this.#incomplete.add(lb.id);
      }
    }
    if (foreign.length > 0) {
      logger.info(
        "Deleting {count} HNS load balancers kproxy did not create, as kube-proxy does at start",
        { count: foreign.length },
      );
    }
    const changes = diffHns(
      {
        loadBalancers: this.#loadBalancers,
        endpoints: this.#endpoints,
        incomplete: this.#incomplete,
      },
      desired,
    );
    changes.deleteLoadBalancers.push(...foreign);
    const count = changes.createLoadBalancers.length + changes.deleteLoadBalancers.length +
      changes.createEndpoints.length + changes.deleteEndpoints.length +
      (changes.replaceLoadBalancers?.length ?? 0);
    if (count > 0) await this.#apply(changes);
    this.#needFull = false;
    if (full) this.#takeover = false;
    return {
      full,
      summary: `${desired.loadBalancers.length} load balancers, ${count} changes`,
    };
  }

  async checkDrift(): Promise<boolean> {
    const listing = await this.#list();
    const lbs = listing.loadBalancerIds.filter(isKproxyId);
    const eps = listing.endpointIds.filter(isKproxyId);
    return !sameSet(lbs, this.#loadBalancers) || !sameSet(eps, this.#endpoints);
  }

  async cleanup(): Promise<void> {
    const listing = await this.#list();
    const changes: HnsChanges = {
      deleteLoadBalancers: listing.loadBalancerIds.filter(isKproxyId),
      deleteEndpoints: listing.endpointIds.filter(isKproxyId),
      createEndpoints: [],
      createLoadBalancers: [],
    };
    this.#loadBalancers = new Set(changes.deleteLoadBalancers);
    this.#endpoints = new Set(changes.deleteEndpoints);
    this.#needFull = true;
    if (changes.deleteLoadBalancers.length + changes.deleteEndpoints.length > 0) {
      await this.#apply(changes);
    }
  }

  #render(
    request: SyncRequest,
  ): { loadBalancers: LoadBalancerSpec[]; remoteEndpoints: RemoteEndpointSpec[] } {
    const dsr = this.#config.winkernel.enableDSR && this.#config.featureGates.WinDSR === true;
    const sourceVip = this.#config.winkernel.sourceVip;
    const sourceVipFamily = parseIP(sourceVip)?.family;
    const healthCheck = this.#config.winkernel.forwardHealthCheckVip && this.#rootEndpointFound
      ? {
        rootEndpointName: this.#rootEndpointName,
        healthzPort: portOf(this.#config.healthzBindAddress),
      }
      : undefined;
    if (this.#network?.type.toLowerCase() === "overlay" && sourceVip === "") {
      this.#warnOnce(
        "overlay",
        "HNS network {network} is Overlay and --source-vip is not set: load balancers get no " +
          "source VIP (kube-proxy refuses to start without one)",
      );
    }
    const states: WindowsDesiredState[] = request.plans.map((plan) =>
      renderWindows(plan, {
        // One --source-vip, of one family: the other family's load balancers get none.
        sourceVip: sourceVipFamily === plan.family ? sourceVip : "",
        dsr,
        network: this.#network,
        nodeIP: plan.nodePortAddresses[0] ?? "",
        healthCheck,
      })
    );
    for (const state of states) {
      for (const { servicePortId, reason } of state.unsupported) {
        const key = `${servicePortId}\n${reason}`;
        if (this.#warned.has(key)) continue;
        this.#warned.add(key);
        logger.warn("Service {service}: {reason}", { service: servicePortId, reason });
      }
    }
    return {
      loadBalancers: states.flatMap((state) => state.loadBalancers),
      remoteEndpoints: states.flatMap((state) => state.remoteEndpoints),
    };
  }

  #warnOnce(key: string, message: string): void {
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    logger.warn(message, { network: this.#networkName });
  }

  async #list(): Promise<HnsListing> {
    const result = await runChecked(this.#executor, {
      program: this.#powershell,
      args: [...POWERSHELL_ARGS],
      stdin: renderListScript(this.#networkName),
    });
    return parseListReply(result.stdout);
  }

  async #apply(changes: HnsChanges): Promise<void> {
    const script = renderSyncScript(changes, { networkName: this.#networkName });
    const result = await runChecked(this.#executor, {
      program: this.#powershell,
      args: [...POWERSHELL_ARGS],
      stdin: script,
    });
    const reply = parseSyncReply(result.stdout);
    for (const id of reply.deleted) {
      this.#loadBalancers.delete(id);
      this.#endpoints.delete(id);
      this.#incomplete.delete(id);
    }
    for (const id of reply.createdEndpoints) this.#endpoints.add(id);
    for (const id of reply.createdLoadBalancers) {
      this.#loadBalancers.add(id);
      this.#incomplete.delete(id);
    }
    for (const id of reply.incomplete) {
      this.#loadBalancers.add(id);
      this.#incomplete.add(id);
    }
    const problems = [
      ...reply.errors,
      ...[...new Set(reply.missingLocal)].map((ip) => ({
        id: ip,
        error: "no HNS endpoint for this local endpoint yet; its load balancers wait for it",
      })),
    ];
    for (const { id, error } of problems) {
      logger.warn("HNS could not take {id}: {error}", { id, error });
    }
    // Retried with the runner's backoff, so the missing parts join as soon as HNS takes them.
    if (problems.length > 0) throw new HnsSyncError(problems);
  }
}

/**
 * The HNS changes that turn the objects kproxy owns (`current`, by id) into
 * `desired`. Pure. Ids are content-derived, so a changed object is one
 * deletion and one creation; a wanted load balancer that HNS holds without
 * some of its endpoints (`incomplete`) is to be replaced.
 */
export function diffHns(
  current: {
    loadBalancers: ReadonlySet<string>;
    endpoints: ReadonlySet<string>;
    incomplete?: ReadonlySet<string>;
  },
  desired: { loadBalancers: LoadBalancerSpec[]; remoteEndpoints: RemoteEndpointSpec[] },
): HnsChanges {
  const wantedLbs = new Set(desired.loadBalancers.map((lb) => lb.id));
  const wantedEps = new Set(desired.remoteEndpoints.map((ep) => ep.id));
  const incomplete = (id: string) =>
    current.loadBalancers.has(id) && (current.incomplete?.has(id) ?? false);
  return {
    deleteLoadBalancers: [...current.loadBalancers].filter((id) => !wantedLbs.has(id)).sort(),
    deleteEndpoints: [...current.endpoints].filter((id) => !wantedEps.has(id)).sort(),
    createEndpoints: desired.remoteEndpoints.filter((ep) => !current.endpoints.has(ep.id)),
    createLoadBalancers: desired.loadBalancers.filter((lb) => !current.loadBalancers.has(lb.id)),
    replaceLoadBalancers: desired.loadBalancers.filter((lb) => incomplete(lb.id)),
  };
}

/** The port of a `host:port` bind address, 0 when it has none (healthz off). */
function portOf(address: string): number {
  const port = Number(address.slice(address.lastIndexOf(":") + 1));
  return Number.isInteger(port) && port > 0 && port <= 65535 ? port : 0;
}

function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

function sameSet(items: string[], set: ReadonlySet<string>): boolean {
  return items.length === set.size && items.every((item) => set.has(item));
}
