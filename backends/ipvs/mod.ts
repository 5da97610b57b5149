/**
 * The ipvs proxy mode: programs IPVS virtual servers with ipvsadm, binds
 * service VIPs to the `kube-ipvs0` dummy interface, fills ipsets and installs
 * the few iptables rules the mode needs. Reconciles against the kernel at
 * start and applies only differences afterwards; never clears live traffic.
 *
 * @module
 */

import { getLogger } from "@logtape/logtape";
import type { Backend, SyncRequest, SyncResult } from "../backend.ts";
import { type Clock, systemClock } from "../../lib/clock.ts";
import type { Config } from "../../lib/config_types.ts";
import { type Executor, runChecked } from "../../lib/exec.ts";
import type { IpFamily } from "../../lib/model.ts";
import type { Plan } from "../../lib/plan.ts";
import { setSysctls } from "../../lib/sysctl.ts";
import { applyIpvsOps, diffIpvs, type IpvsOp, renderIpvsOps } from "./diff.ts";
import { GracefulTermination } from "./graceful.ts";
import {
  type IptablesJump,
  iptablesPrograms,
  IPVS_JUMPS,
  renderIpvsIptables,
  renderIpvsIptablesCleanup,
} from "./iptables.ts";
import { parseIpvsadmList, parseIpvsadmSave } from "./parse.ts";
import {
  DUMMY_INTERFACE,
  IPSET_BASES,
  type IpsetKey,
  ipsetName,
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

/** Thrown when the kernel has no IPVS: the mode cannot run (upstream exits). */
export class IpvsUnavailableError extends Error {
  constructor(detail: string) {
    super(`Cannot use the ipvs proxy mode: IPVS is not available in the kernel: ${detail}`);
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
 * await backend.sync({ plans, previous: [], changed: new Set(), full: true });
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
  #started = false;
  #needFull = true;

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
    const services = request.plans.reduce((n, plan) => n + plan.services.length, 0);
    return { full, summary: `${services} service ports, ${commands} commands` };
  }

  async checkDrift(): Promise<boolean> {
    if (!this.#started) return false;
    const listing = await this.#listKernel();
    for (const [family, state] of this.#state) {
      const owned = ownedAddresses(state, listing.dummy);
      const actual = listing.servers.filter((vs) =>
        familyOf(vs.address) === family && owned.has(vs.address)
      );
      if (JSON.stringify(actual) !== JSON.stringify(state.kernel)) return true;
      const bound = new Set(listing.dummy);
      if (state.desired.dummyAddresses.some((ip) => !bound.has(ip))) return true;
    }
    return false;
  }

  async cleanup(): Promise<void> {
    const attempt = async (what: string, command: Parameters<Executor["run"]>[0]) => {
      const result = await this.#executor.run(command);
      if (result.code !== 0) {
        logger.debug("Cleanup step {what} failed: {stderr}", { what, stderr: result.stderr });
      }
      return result.code === 0;
    };
    await attempt("ipvsadm clear", { program: "ipvsadm", args: ["-C"] });
    await attempt("dummy interface", { program: "ip", args: ["link", "del", DUMMY_INTERFACE] });
    for (const family of this.#families) {
      const programs = iptablesPrograms(family, this.#config.iptables.backend);
      for (const jump of IPVS_JUMPS) {
        await attempt("jump", { program: programs.iptables, args: jumpArgs("-D", jump) });
      }
      await attempt("chains", {
        program: programs.restore,
        args: ["-w", "--noflush"],
        stdin: renderIpvsIptablesCleanup(),
      });
      for (const key of Object.keys(IPSET_BASES) as IpsetKey[]) {
        await attempt("ipset", { program: "ipset", args: ["destroy", ipsetName(key, family)] });
      }
    }
    this.#state.clear();
    this.#started = false;
    this.#needFull = true;
  }

  async #start(families: IpFamily[]): Promise<void> {
    let detail = "";
    try {
      const result = await this.#executor.run({ program: "ipvsadm", args: ["-Ln"] });
      if (result.code === 0) detail = "";
      else detail = result.stderr.trim() || `exit status ${result.code}`;
    } catch (error) {
      detail = error instanceof Error ? error.message : String(error);
    }
    if (detail !== "") throw new IpvsUnavailableError(detail);

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
      familyOf(vs.address) === family && owned.has(vs.address)
    );
    const bound = listing.dummy.filter((ip) => familyOf(ip) === family);
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

function familyOf(address: string): IpFamily {
  return address.includes(":") ? "IPv6" : "IPv4";
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
export function parseAddresses(text: string): string[] {
  const addresses: string[] = [];
  for (const match of text.matchAll(/\binet6?\s+([0-9a-fA-F:.]+)\/\d+/g)) {
    if (match[1]) addresses.push(match[1]);
  }
  return addresses.sort();
}
