/**
 * Maps a `--proxy-mode` to its backend. Backends load lazily, so a mode that
 * is missing or broken fails only when it is selected.
 *
 * @module
 */

import type { Config, ProxyMode } from "../lib/config/types.ts";
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

type Loader = (options: BackendOptions) => Promise<Backend>;

/** What starting in a mode takes over from the proxy that ran before it. */
export interface Takeover {
  /**
   * Modes whose rules are removed once this mode's first sync is in the
   * kernel, whether kproxy or kube-proxy wrote them (program first, then
   * clean: lib/takeover.ts).
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

/**
 * The one table of which leftovers each mode removes. kube-proxy's iptables
 * and ipvs rules carry the names kproxy's do, so removing "iptables" or
 * "ipvs" removes both; its nftables tables are named `kube-proxy`. Within its
 * own mode, the iptables mode also removes its chains from the iptables
 * variant (nft or legacy) it does not use, after its first full sync.
 */
export const LEFTOVERS: Readonly<Record<ProxyMode, Takeover>> = {
  nftables: { removes: ["iptables", "ipvs"], replacesTables: ["kube-proxy"] },
  iptables: { removes: ["nftables", "ipvs"], replacesTables: [], usesChain: isIptablesModeChain },
  ipvs: { removes: ["nftables", "iptables"], replacesTables: [], usesChain: isIpvsModeChain },
  kernelspace: { removes: [], replacesTables: [] },
};

const LOADERS: Readonly<Record<ProxyMode, Loader>> = {
  nftables: async (options) =>
    (await import("./nftables/applier.ts")).createNftablesBackend({
      ...options,
      replacedTables: LEFTOVERS.nftables.replacesTables,
    }),
  iptables: async (options) =>
    (await import("./iptables/applier.ts")).createIptablesBackend(options),
  ipvs: async (options) => (await import("./ipvs/applier.ts")).createIpvsBackend(options),
  kernelspace: async (options) =>
    (await import("./windows/applier.ts")).createWindowsBackend(options),
};

/** Every mode the registry knows, in `--cleanup` order. */
export const PROXY_MODES: readonly ProxyMode[] = Object.freeze(
  Object.keys(LOADERS) as ProxyMode[],
);

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
  const loader = Object.hasOwn(LOADERS, mode) ? LOADERS[mode] : undefined;
  if (!loader) {
    throw new BackendLoadError(mode, `Cannot create backend "${mode}": unknown proxy mode`);
  }
  try {
    return await loader(options);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new BackendLoadError(
      mode,
      `Cannot create the ${mode} backend: ${reason}`,
      { cause: error },
    );
  }
}
