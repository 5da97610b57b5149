/**
 * The proxy modes: one entry per `--proxy-mode`, and the only place a mode
 * is named. Everything that differs by mode derives from its entry: the
 * config's accepted values (`ProxyMode`), the programs kproxy may run
 * (lib/shell/permissions.ts), whose leftovers a mode removes
 * (lib/shell/takeover.ts), whether the shell reconciles stale conntrack
 * entries after its syncs (lib/commands/app.ts), and how `kproxy diff` reads
 * and attributes its kernel listing (its backend's `inspect()`). Adding a mode
 * is one entry here plus its folder under backends/.
 *
 * Backends load lazily, so a mode that is missing or broken fails only when
 * it is selected.
 *
 * @module
 */

import type { Config, SyncPeriodSection } from "../lib/config/types.ts";
import type { Executor } from "../lib/core/executor.ts";
import type { Backend } from "../lib/core/backend.ts";
import { type ChainOwnership, isIptablesModeChain } from "./iptables/chains.ts";
import { isIpvsModeChain } from "./ipvs/iptables.ts";

export {
  type HandBackOutcome,
  handBackToKubeProxy,
  type HandBackToKubeProxyOptions,
} from "./hand_back.ts";

/** What every backend factory receives. */
export interface BackendOptions {
  executor: Executor;
  config: Config;
}

/** What starting in a mode takes over from the proxy that ran before it. */
export interface Takeover {
  /**
   * Modes whose rules are removed once this mode's first sync is in the
   * kernel, whether kproxy or kube-proxy wrote them (program first, then
   * clean: lib/shell/takeover.ts).
   */
  removes: readonly ProxyMode[];
  /**
   * kube-proxy's nftables tables of this same mode, in each family: deleted
   * in the transaction of the first full write, so no packet sees neither.
   */
  replacesTables: readonly string[];
  /**
   * The iptables chains this mode uses: other modes' cleanup keeps them, as
   * iptables and ipvs share chain names (KUBE-SERVICES, KUBE-MARK-MASQ, …).
   */
  usesChain?: ChainOwnership;
}

/** Everything kproxy knows about one proxy mode. */
export interface ModeDescriptor {
  /** The system whose packet path the mode programs. */
  platform: "linux" | "windows";
  /** Programs its backend runs through the Executor, `--allow-run` included. */
  programs: readonly string[];
  /**
   * True when the shell reconciles stale UDP/SCTP conntrack entries after
   * this mode's syncs (lib/shell/conntrack_reconciler.ts); adds `conntrack`
   * to its programs.
   */
  reconcilesConntrack: boolean;
  /** The Config section whose sync periods the mode uses. */
  syncPeriods: SyncPeriodSection;
  /**
   * How the mode applies a service port's `sourceRanges`: "with-load-balancer-ips"
   * also lets traffic from the load-balancer IPs through when the Plan's
   * `allowFromLoadBalancerIPs` says so (upstream's iptables mode), "ranges-only"
   * does not, "not-enforced" lets every source through. Read by `explain`.
   */
  sourceRanges: "with-load-balancer-ips" | "ranges-only" | "not-enforced";
  /** What it removes and keeps of the proxy that ran before it. */
  takeover: Takeover;
  /**
   * Creates its backend, loading its module only now. The backend's
   * `inspect()` says how `kproxy diff` loads, lists, reads and attributes its
   * rules (without one, `diff` refuses the mode).
   */
  create(options: BackendOptions): Promise<Backend>;
}

/**
 * Every mode, in `--cleanup` order: the only list of mode names. Each has
 * its entry in the table below, which the compiler holds to this list.
 */
export const PROXY_MODES = ["nftables", "iptables", "ipvs", "kernelspace"] as const;

/** A `--proxy-mode` value. */
export type ProxyMode = typeof PROXY_MODES[number];

/** iptables, ip6tables and their -save/-restore, for each variant (`--iptables-backend`). */
function iptablesPrograms(variants: readonly string[]): string[] {
  return ["iptables", "ip6tables"].flatMap((base) =>
    variants.flatMap((variant) =>
      ["", "-save", "-restore"].map((tool) => `${base}${variant}${tool}`)
    )
  );
}

/** kube-proxy's nftables tables, replaced by the nftables mode's first full write. */
const KUBE_PROXY_NFTABLES_TABLES: readonly string[] = ["kube-proxy"];

/**
 * The one table of proxy modes, in `--cleanup` order. kube-proxy's iptables
 * and ipvs rules carry the names kproxy's do, so removing "iptables" or
 * "ipvs" removes both; its nftables tables are named `kube-proxy`. Within its
 * own mode, the iptables mode also removes its chains from the iptables
 * variant (nft or legacy) it does not use, after its first full sync.
 */
const MODES: Readonly<Record<ProxyMode, ModeDescriptor>> = {
  nftables: {
    platform: "linux",
    programs: ["nft", "sysctl"],
    reconcilesConntrack: true,
    syncPeriods: "nftables",
    sourceRanges: "ranges-only",
    takeover: { removes: ["iptables", "ipvs"], replacesTables: KUBE_PROXY_NFTABLES_TABLES },
    create: async (options: BackendOptions): Promise<Backend> =>
      (await import("./nftables/applier.ts")).createNftablesBackend({
        ...options,
        replacedTables: KUBE_PROXY_NFTABLES_TABLES,
      }),
  },
  iptables: {
    platform: "linux",
    programs: [...iptablesPrograms(["", "-nft", "-legacy"]), "sysctl", "nfacct"],
    reconcilesConntrack: true,
    syncPeriods: "iptables",
    sourceRanges: "with-load-balancer-ips",
    takeover: {
      removes: ["nftables", "ipvs"],
      replacesTables: [],
      usesChain: isIptablesModeChain,
    },
    create: async (options: BackendOptions): Promise<Backend> =>
      (await import("./iptables/applier.ts")).createIptablesBackend(options),
  },
  ipvs: {
    platform: "linux",
    programs: ["ipvsadm", "ipset", "ip", ...iptablesPrograms([""]), "sysctl"],
    reconcilesConntrack: true,
    syncPeriods: "ipvs",
    sourceRanges: "ranges-only",
    takeover: {
      removes: ["nftables", "iptables"],
      replacesTables: [],
      usesChain: isIpvsModeChain,
    },
    create: async (options: BackendOptions): Promise<Backend> =>
      (await import("./ipvs/applier.ts")).createIpvsBackend(options),
  },
  kernelspace: {
    platform: "windows",
    programs: ["powershell.exe", "pwsh"],
    reconcilesConntrack: false,
    // As upstream: the Windows proxy reads the iptables periods.
    syncPeriods: "iptables",
    sourceRanges: "not-enforced",
    takeover: { removes: [], replacesTables: [] },
    create: async (options: BackendOptions): Promise<Backend> =>
      (await import("./windows/applier.ts")).createWindowsBackend(options),
  },
};

/** True when `value` names a mode of the registry. */
export function isProxyMode(value: string): value is ProxyMode {
  return Object.hasOwn(MODES, value);
}

/** The descriptor of `mode`. */
export function modeOf(mode: ProxyMode): ModeDescriptor {
  return MODES[mode];
}

/** The programs `mode` runs: its backend's, and `conntrack` when the shell reconciles after it. */
export function programsOf(mode: ProxyMode): readonly string[] {
  const { programs, reconcilesConntrack, platform } = modeOf(mode);
  return [
    ...programs,
    ...(reconcilesConntrack ? ["conntrack"] : []),
    ...(platform === "linux" ? NODE_SETUP_PROGRAMS : []),
  ].filter((program, i, all) => all.indexOf(program) === i);
}

/** What the start-up on Linux runs in every mode: conntrack sysctls, and choom for the OOM score. */
const NODE_SETUP_PROGRAMS: readonly string[] = ["sysctl", "choom"];

/** Thrown when a mode's backend cannot be loaded or created. */
export class BackendLoadError extends Error {
  constructor(readonly mode: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "BackendLoadError";
  }
}

/**
 * Creates the backend of `mode`.
 *
 * @throws {BackendLoadError} when the mode is unknown or its module fails to load
 */
export async function createBackend(mode: ProxyMode, options: BackendOptions): Promise<Backend> {
  if (!isProxyMode(mode)) {
    throw new BackendLoadError(mode, `Cannot create backend "${mode}": unknown proxy mode`);
  }
  try {
    return await modeOf(mode).create(options);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new BackendLoadError(
      mode,
      `Cannot create the ${mode} backend: ${reason}`,
      { cause: error },
    );
  }
}
