/**
 * The ipvs proxy mode: programs IPVS virtual servers with ipvsadm, binds
 * service VIPs to the `kube-ipvs0` dummy interface, fills ipsets and installs
 * the few iptables rules the mode needs. Reconciles against the kernel at
 * start and applies only differences afterwards; never clears live traffic.
 *
 * @module
 */

import { ipFamily } from "../../lib/core/ip.ts";
import { ipvsSamples, LIST_STATS, parseIpvsStats } from "./stats.ts";
import type { ServiceCounterSample } from "../../lib/core/service_counters.ts";
import { getLogger } from "../../lib/core/logger.ts";
import {
  type Backend,
  type CleanupOptions,
  ModeUnavailableError,
  type SyncRequest,
  type SyncResult,
} from "../../lib/core/backend.ts";
import { removeChains } from "../iptables/cleanup.ts";
import { systemClock } from "../../lib/shell/clock.ts";
import type { Clock } from "../../lib/core/clock.ts";
import type { Config } from "../../lib/config/types.ts";
import { runChecked } from "../../lib/shell/exec.ts";
import type { Executor } from "../../lib/core/executor.ts";
import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { setSysctls } from "../../lib/shell/sysctl.ts";
import { applyIpvsOps, diffIpvs, type IpvsOp, renderIpvsOps } from "./diff.ts";
import { GracefulTermination } from "./graceful.ts";
import {
  type IptablesJump,
  iptablesPrograms,
  IPVS_JUMPS,
  IPVS_MODE_CHAINS,
  isIpvsModeChain,
  renderIpvsIptables,
} from "./iptables.ts";
import { ownedIpsets, ownedVirtualServers } from "./leftovers.ts";
import { parseIpvsadmList, parseIpvsadmSave } from "./parse.ts";
import {
  DUMMY_INTERFACE,
  type IpvsDesiredState,
  renderDummyBatch,
  renderIpsetRestoreDiff,
  renderIpsetRestoreFull,
  renderIpvs,
  validateScheduler,
  type VirtualServer,
} from "./render.ts";

const logger = getLogger(["kproxy", "ipvs"]);

/** Options for {@linkcode createIpvsBackend}. */
export interface IpvsBackendOptions {
  executor: Executor;
  config: Config;
  /** Families cleaned up by `cleanup()`. @default {["IPv4", "IPv6"]} */
  families?: IpFamily[];
  /** Monotonic time for the drain timeout. @default {systemClock} */
  clock?: Pick<Clock, "now">;
  /** How long a removed TCP real server may drain before deletion. @default {900000} */
  drainTimeoutMs?: number;
}

/** What the backend believes one family's kernel state is. */
interface FamilyState {
  desired: IpvsDesiredState;
  /** The virtual servers in the kernel, draining real servers included. */
  kernel: VirtualServer[];
  iptables: string;
  graceful: GracefulTermination;
}

/** Thrown when the node cannot run the ipvs mode: kproxy exits at start, as kube-proxy does. */
export class IpvsUnavailableError extends ModeUnavailableError {
  constructor(missing: string) {
    super(`Cannot use the ipvs proxy mode: ${missing}`);
    this.name = "IpvsUnavailableError";
  }
}

/**
 * Creates the ipvs backend.
 *
 * @throws {TypeError} when `config.ipvs.scheduler` is not an IPVS scheduler
 * @example Usage
 * ```ts ignore
 * const backend = createIpvsBackend({ executor, config });
 * await backend.sync({ plans, changed: new Set(), full: true });
 * ```
 */
export function createIpvsBackend(options: IpvsBackendOptions): Backend {
  return new IpvsBackend(options);
}

class IpvsBackend implements Backend {
  readonly mode = "ipvs";
  readonly #executor: Executor;
  readonly #config: Config;
  readonly #families: IpFamily[];
  readonly #clock: Pick<Clock, "now">;
  readonly #drainTimeoutMs?: number;
  readonly #scheduler: string;
  readonly #state = new Map<IpFamily, FamilyState>();
  /** The plans last applied, for reading their counters. */
  readonly #applied = new Map<IpFamily, Plan>();
  #started = false;
  #needFull = true;
  #available = false;

  constructor(options: IpvsBackendOptions) {
    this.#executor = options.executor;
    this.#config = options.config;
    this.#families = options.families ?? ["IPv4", "IPv6"];
    this.#clock = options.clock ?? systemClock;
    this.#drainTimeoutMs = options.drainTimeoutMs;
    this.#scheduler = validateScheduler(options.config.ipvs.scheduler);
  }

  async sync(request: SyncRequest): Promise<SyncResult> {
    const full = request.full || this.#needFull;
    this.#needFull = true;
    if (!this.#started) {
      await this.#start(request.plans.map((plan) => plan.family));
      this.#started = true;
    }
    let commands = 0;
    if (full) {
      const listing = await this.#listKernel();
      for (const plan of request.plans) commands += await this.#syncFull(plan, listing);
    } else {
      for (const plan of request.plans) commands += await this.#syncPartial(plan);
    }
    for (const plan of request.plans) commands += await this.#drain(plan.family);
    this.#needFull = false;
    for (const plan of request.plans) this.#applied.set(plan.family, plan);
    const services = request.plans.reduce((n, plan) => n + plan.services.length, 0);
    return { full, summary: `${services} service ports, ${commands} commands` };
  }

  async readServiceCounters(
    plans: readonly Plan[] = [...this.#applied.values()],
  ): Promise<ServiceCounterSample[]> {
    if (!plans.some((plan) => plan.serviceCounters === true)) return [];
    const listed = await runChecked(this.#executor, LIST_STATS);
    return ipvsSamples(plans, parseIpvsStats(listed.stdout));
  }

  async checkDrift(): Promise<boolean> {
    if (!this.#started) return false;
    const listing = await this.#listKernel();
    for (const [family, state] of this.#state) {
      const owned = ownedAddresses(state, listing.dummy);
      const actual = listing.servers.filter((vs) =>
        ipFamily(vs.address) === family && owned.has(vs.address)
      );
      if (JSON.stringify(actual) !== JSON.stringify(state.kernel)) return true;
      const bound = new Set(listing.dummy);
      if (state.desired.dummyAddresses.some((ip) => !bound.has(ip))) return true;
    }
    return false;
  }

  async preflight(): Promise<void> {
    if (this.#available) return;
    const missing = await this.#missingPiece();
    if (missing !== undefined) throw new IpvsUnavailableError(missing);
    this.#available = true;
  }

  /**
   * Removes only what the ipvs mode created: the virtual servers bound to
   * `kube-ipvs0` (never another program's, so never `ipvsadm -C`), the
   * interface, the mode's iptables chains except `options.keepChains`, and
   * its ipsets (after the rules that use them).
   */
  async cleanup(options: CleanupOptions = {}): Promise<void> {
    this.#applied.clear();
    this.#state.clear();
    this.#started = false;
    this.#needFull = true;
    const bound = await this.#dummyAddresses();
    if (bound !== undefined) {
      await this.#removeVirtualServers(bound);
      await runChecked(this.#executor, { program: "ip", args: ["link", "del", DUMMY_INTERFACE] });
      logger.info("Removed the {device} interface", { device: DUMMY_INTERFACE });
    }
    await removeChains(this.#executor, {
      owns: isIpvsModeChain,
      names: IPVS_MODE_CHAINS,
      keep: options.keepChains,
      owner: "ipvs mode",
      families: this.#families,
    });
    await this.#removeIpsets();
  }

  /** What the node lacks to run this mode, or undefined when it has everything. */
  async #missingPiece(): Promise<string | undefined> {
    const probes: { program: string; args: string[]; missing: string }[] = [
      { program: "ipvsadm", args: ["-Ln"], missing: "the kernel has no IPVS support" },
      { program: "ipset", args: ["version"], missing: "the kernel has no ipset support" },
    ];
    for (const probe of probes) {
      let result;
      try {
        result = await this.#executor.run({ program: probe.program, args: probe.args });
      } catch (error) {
        const reason = (error instanceof Error ? error.message : String(error))
          .replace(/^Cannot run "[^"]*": /, "");
        return `${probe.program} is not available (${reason})`;
      }
      if (result.code !== 0) {
        const detail = (result.stderr.trim() || `exit status ${result.code}`).split("\n")[0];
        return `${probe.missing} (${[probe.program, ...probe.args].join(" ")}: ${detail})`;
      }
    }
    return undefined;
  }

  /** Addresses bound to `kube-ipvs0`; undefined when there is no such interface. */
  async #dummyAddresses(): Promise<string[] | undefined> {
    const result = await this.#executor.run({
      program: "ip",
      args: ["-o", "address", "show", "dev", DUMMY_INTERFACE],
    });
    return result.code === 0 ? parseAddresses(result.stdout) : undefined;
  }

  async #removeVirtualServers(bound: readonly string[]): Promise<void> {
    let listing;
    try {
      listing = await this.#executor.run({ program: "ipvsadm", args: ["-Sn"] });
    } catch (error) {
      logger.debug("No IPVS virtual servers to remove: {error}", { error });
      return;
    }
    if (listing.code !== 0) {
      logger.debug("No IPVS virtual servers to remove: {stderr}", {
        stderr: listing.stderr.trim(),
      });
      return;
    }
    const owned = ownedVirtualServers(parseIpvsadmSave(listing.stdout), bound);
    await this.#ipvsRestore(owned.map((vs) => ({ kind: "delete-service", vs })));
    if (owned.length > 0) {
      logger.info("Removed {count} IPVS virtual servers bound to {device}", {
        count: owned.length,
        device: DUMMY_INTERFACE,
      });
    }
  }

  async #removeIpsets(): Promise<void> {
    let names: string[];
    try {
      const listed = await this.#executor.run({ program: "ipset", args: ["list", "-n"] });
      if (listed.code !== 0) return;
      names = ownedIpsets(listed.stdout.split("\n").map((line) => line.trim()));
    } catch (error) {
      logger.debug("No ipsets to remove: {error}", { error });
      return;
    }
    for (const name of names) {
      await runChecked(this.#executor, { program: "ipset", args: ["destroy", name] });
    }
    if (names.length > 0) logger.info("Removed the ipsets {names}", { names: names.join(", ") });
  }

  async #start(families: IpFamily[]): Promise<void> {
    await this.preflight();
    const sysctls: Record<string, string> = {
      "net.ipv4.vs.conntrack": "1",
      "net.ipv4.vs.expire_nodest_conn": "1",
      "net.ipv4.vs.expire_quiescent_template": "1",
    };
    if (families.includes("IPv4")) sysctls["net.ipv4.ip_forward"] = "1";
    if (families.includes("IPv6")) sysctls["net.ipv6.conf.all.forwarding"] = "1";
    if (this.#config.ipvs.strictARP) {
      sysctls["net.ipv4.conf.all.arp_ignore"] = "1";
      sysctls["net.ipv4.conf.all.arp_announce"] = "2";
    }
    await setSysctls(this.#executor, sysctls);

    const { tcpTimeoutMs, tcpFinTimeoutMs, udpTimeoutMs } = this.#config.ipvs;
    if (tcpTimeoutMs > 0 || tcpFinTimeoutMs > 0 || udpTimeoutMs > 0) {
      const seconds = (ms: number) => String(Math.round(ms / 1000));
      await runChecked(this.#executor, {
        program: "ipvsadm",
        args: ["--set", seconds(tcpTimeoutMs), seconds(tcpFinTimeoutMs), seconds(udpTimeoutMs)],
      });
    }
  }

  async #listKernel(): Promise<{ servers: VirtualServer[]; dummy: string[] }> {
    const saved = await runChecked(this.#executor, { program: "ipvsadm", args: ["-Sn"] });
    const addresses = await this.#executor.run({
      program: "ip",
      args: ["-o", "address", "show", "dev", DUMMY_INTERFACE],
    });
    if (addresses.code !== 0) {
      await runChecked(this.#executor, {
        program: "ip",
        args: ["link", "add", DUMMY_INTERFACE, "type", "dummy"],
      });
    }
    return {
      servers: parseIpvsadmSave(saved.stdout),
      dummy: addresses.code === 0 ? parseAddresses(addresses.stdout) : [],
    };
  }

  async #syncFull(
    plan: Plan,
    listing: { servers: VirtualServer[]; dummy: string[] },
  ): Promise<number> {
    const family = plan.family;
    const desired = renderIpvs(plan, { scheduler: this.#scheduler });
    const iptables = this.#renderIptables(plan);
    const previous = this.#state.get(family);
    const owned = new Set([
      ...listing.dummy,
      ...plan.nodePortAddresses,
      ...(previous ? ownedAddresses(previous, []) : []),
      ...desired.virtualServers.map((vs) => vs.address),
    ]);
    const current = listing.servers.filter((vs) =>
      ipFamily(vs.address) === family && owned.has(vs.address)
    );
    const bound = listing.dummy.filter((ip) => ipFamily(ip) === family);
    const wanted = new Set(desired.dummyAddresses);
    let commands = 0;

    commands += await this.#ipsetRestore(renderIpsetRestoreFull(desired));
    commands += await this.#iptablesRestore(family, iptables);
    commands += await this.#ensureJumps(family);
    commands += await this.#ipBatch(
      renderDummyBatch(family, { add: desired.dummyAddresses, remove: [] }),
    );
    const ops = diffIpvs(current, desired.virtualServers);
    commands += await this.#ipvsRestore(ops);
    commands += await this.#ipBatch(
      renderDummyBatch(family, { add: [], remove: bound.filter((ip) => !wanted.has(ip)) }),
    );
    const state: FamilyState = {
      desired,
      kernel: applyIpvsOps(current, ops),
      iptables,
      graceful: previous?.graceful ?? new GracefulTermination({ timeoutMs: this.#drainTimeoutMs }),
    };
    this.#state.set(family, state);
    return commands;
  }

  async #syncPartial(plan: Plan): Promise<number> {
    const family = plan.family;
    const previous = this.#state.get(family);
    if (previous === undefined) {
      return await this.#syncFull(plan, await this.#listKernel());
    }
    const desired = renderIpvs(plan, { scheduler: this.#scheduler });
    const iptables = this.#renderIptables(plan);
    const before = new Set(previous.desired.dummyAddresses);
    const after = new Set(desired.dummyAddresses);
    let commands = 0;

    commands += await this.#ipsetRestore(renderIpsetRestoreDiff(previous.desired, desired));
    if (iptables !== previous.iptables) commands += await this.#iptablesRestore(family, iptables);
    commands += await this.#ipBatch(
      renderDummyBatch(family, {
        add: desired.dummyAddresses.filter((ip) => !before.has(ip)),
        remove: [],
      }),
    );
    const ops = diffIpvs(previous.kernel, desired.virtualServers);
    commands += await this.#ipvsRestore(ops);
    commands += await this.#ipBatch(
      renderDummyBatch(family, {
        add: [],
        remove: previous.desired.dummyAddresses.filter((ip) => !after.has(ip)),
      }),
    );
    this.#state.set(family, {
      ...previous,
      desired,
      kernel: applyIpvsOps(previous.kernel, ops),
      iptables,
    });
    return commands;
  }

  /** Deletes draining real servers whose connections are gone or whose time is up. */
  async #drain(family: IpFamily): Promise<number> {
    const state = this.#state.get(family);
    if (state === undefined) return 0;
    const now = this.#clock.now();
    state.graceful.track(state.kernel, state.desired.virtualServers, now);
    if (state.graceful.pending === 0) return 0;
    const listing = await runChecked(this.#executor, { program: "ipvsadm", args: ["-Ln"] });
    const ops = state.graceful.expired(state.kernel, parseIpvsadmList(listing.stdout), now);
    const commands = 1 + await this.#ipvsRestore(ops);
    state.kernel = applyIpvsOps(state.kernel, ops);
    state.graceful.track(state.kernel, state.desired.virtualServers, now);
    return commands;
  }

  #renderIptables(plan: Plan): string {
    return renderIpvsIptables(plan, { masqueradeBit: this.#config.iptables.masqueradeBit });
  }

  async #ipvsRestore(ops: IpvsOp[]): Promise<number> {
    if (ops.length === 0) return 0;
    await runChecked(this.#executor, {
      program: "ipvsadm",
      args: ["--restore"],
      stdin: renderIpvsOps(ops),
    });
    return 1;
  }

  async #ipsetRestore(script: string): Promise<number> {
    if (script === "") return 0;
    await runChecked(this.#executor, {
      program: "ipset",
      args: ["restore", "-exist"],
      stdin: script,
    });
    return 1;
  }

  async #iptablesRestore(family: IpFamily, script: string): Promise<number> {
    const { restore } = iptablesPrograms(family, this.#config.iptables.backend);
    await runChecked(this.#executor, {
      program: restore,
      args: ["-w", "--noflush"],
      stdin: script,
    });
    return 1;
  }

  async #ipBatch(script: string): Promise<number> {
    if (script === "") return 0;
    await runChecked(this.#executor, { program: "ip", args: ["-batch", "-"], stdin: script });
    return 1;
  }

  async #ensureJumps(family: IpFamily): Promise<number> {
    const { iptables } = iptablesPrograms(family, this.#config.iptables.backend);
    let commands = 0;
    for (const jump of IPVS_JUMPS) {
      commands++;
      const check = await this.#executor.run({ program: iptables, args: jumpArgs("-C", jump) });
      if (check.code === 0) continue;
      commands++;
      await runChecked(this.#executor, { program: iptables, args: jumpArgs("-I", jump) });
    }
    return commands;
  }
}

function jumpArgs(verb: "-C" | "-I" | "-D", jump: IptablesJump): string[] {
  return [
    "-w",
    "-t",
    jump.table,
    verb,
    jump.chain,
    "-m",
    "comment",
    "--comment",
    jump.comment,
    "-j",
    jump.target,
  ];
}

/** Addresses whose virtual servers this backend owns: bound VIPs and ones it created. */
function ownedAddresses(state: FamilyState, dummy: readonly string[]): Set<string> {
  return new Set([
    ...dummy,
    ...state.desired.dummyAddresses,
    ...state.kernel.map((vs) => vs.address),
  ]);
}

/** Parses `ip -o address show dev kube-ipvs0` into the bound addresses. */
function parseAddresses(text: string): string[] {
  const addresses: string[] = [];
  for (const match of text.matchAll(/\binet6?\s+([0-9a-fA-F:.]+)\/\d+/g)) {
    if (match[1]) addresses.push(match[1]);
  }
  return addresses.sort();
}
