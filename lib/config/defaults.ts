/**
 * The configuration kproxy uses when no flag or file says otherwise.
 *
 * @module
 */

import type { Config, SyncPeriods } from "./types.ts";
import { modeOf } from "../../backends/registry.ts";
import { defaultFeatureGates } from "./gates.ts";
import { defaultProxyMode } from "./values.ts";

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
    proxyMode: defaultProxyMode(),
    clusterCIDRs: [],
    detectLocalMode: "ClusterCIDR",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    nodePortAddresses: [],
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
    nftables: { syncPeriodMs: 30_000, minSyncPeriodMs: 1_000, masqueradeBit: 14 },
    ipvs: {
      syncPeriodMs: 30_000,
      minSyncPeriodMs: 0,
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
    conntrack: {
      maxPerCore: 32 * 1024,
      min: 128 * 1024,
      tcpEstablishedTimeoutMs: 24 * 3_600_000,
      tcpCloseWaitTimeoutMs: 3_600_000,
      tcpBeLiberal: false,
      udpTimeoutMs: 0,
      udpStreamTimeoutMs: 0,
    },
    oomScoreAdj: -999,
    serviceClusterIPRange: [],
    externalIPAllowedCIDRs: [],
    serviceNodePortRange: { first: 30000, last: 32767 },
    featureGates: defaultFeatureGates(),
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
