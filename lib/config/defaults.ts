/**
 * The configuration kproxy uses when no flag or file says otherwise, and the
 * feature gates it knows.
 *
 * @module
 */

import type { Config, SyncPeriods } from "./types.ts";
import { modeOf } from "../../backends/registry.ts";

/** Feature gates kproxy knows, with upstream's defaults. Any other gate is an error. */
export const FEATURE_GATE_DEFAULTS: Readonly<Record<string, boolean>> = Object.freeze({
  ServiceTopology: false,
  TopologyAwareHints: true,
  ServiceTrafficDistribution: true,
  PreferSameTrafficDistribution: true,
  WinDSR: false,
  WinOverlay: true,
  NFTablesProxyMode: true,
  MultiCIDRServiceAllocator: true,
  ProxyTerminatingEndpoints: true,
  ServiceInternalTrafficPolicy: true,
  KubeProxyDrainingTerminatingNodes: true,
});

/**
 * The configuration used when no flag or file says otherwise.
 *
 * @param hostname The host's name; lower-cased and trimmed like upstream's node name.
 * @returns A fresh, fully populated Config.
 * @example Usage
 * ```ts
 *
 * defaultConfig("Node-A").hostnameOverride; // "node-a"
 * ```
 */
export function defaultConfig(hostname: string): Config {
  return {
    configFile: "",
    kubeconfig: "",
    master: "",
    manifests: "",
    hostnameOverride: hostname.trim().toLowerCase(),
    proxyMode: "nftables",
    clusterCIDRs: [],
    detectLocalMode: "ClusterCIDR",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    nodePortAddresses: ["primary"],
    masqueradeAll: false,
    serviceCounters: true,
    bindAddress: "0.0.0.0",
    healthzBindAddress: "0.0.0.0:10256",
    metricsBindAddress: "127.0.0.1:10249",
    iptables: {
      syncPeriodMs: 30_000,
      minSyncPeriodMs: 1_000,
      masqueradeBit: 14,
      localhostNodePorts: false,
      backend: "auto",
    },
    nftables: { syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 },
    ipvs: {
      syncPeriodMs: 30_000,
      minSyncPeriodMs: 1_000,
      scheduler: "rr",
      strictARP: false,
      tcpTimeoutMs: 0,
      tcpFinTimeoutMs: 0,
      udpTimeoutMs: 0,
    },
    winkernel: {
      sourceVip: "",
      enableDSR: false,
      networkName: "",
      forwardHealthCheckVip: false,
      rootHnsEndpointName: "cbr0",
    },
    conntrack: { tcpBeLiberal: false },
    serviceClusterIPRange: [],
    externalIPAllowedCIDRs: [],
    serviceNodePortRange: { first: 30000, last: 32767 },
    featureGates: { ...FEATURE_GATE_DEFAULTS },
    cleanup: false,
    verbosity: 0,
  };
}

/**
 * The sync periods of the selected proxy mode: the Config section its
 * registry entry names.
 *
 * @param config A parsed configuration.
 * @returns A copy of the mode's periods.
 */
export function effectiveSyncPeriods(config: Config): SyncPeriods {
  const periods = config[modeOf(config.proxyMode).syncPeriods];
  return { syncPeriodMs: periods.syncPeriodMs, minSyncPeriodMs: periods.minSyncPeriodMs };
}
