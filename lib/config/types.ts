/**
 * The resolved configuration of kproxy: kube-proxy's flags and its
 * KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) merged, flags
 * winning. Parsed and validated by `lib/config/`.
 *
 * @module
 */

import type { DetectLocalMode } from "../core/plan.ts";
import type { ProxyMode } from "../../backends/registry.ts";
import type { ConntrackSettings } from "../core/conntrack_sysctls.ts";

export type { ProxyMode } from "../../backends/registry.ts";

/** The IPVS schedulers kube-proxy accepts (`--ipvs-scheduler`, `ipvs.scheduler`). */
export const IPVS_SCHEDULERS: readonly string[] = Object.freeze([
  "rr",
  "wrr",
  "lc",
  "wlc",
  "lblc",
  "lblcr",
  "sh",
  "dh",
  "sed",
  "nq",
  "mh",
]);

/** Sync timing of one mode, in milliseconds. */
export interface SyncPeriods {
  /** @default {30000} */
  syncPeriodMs: number;
  /** @default {1000} */
  minSyncPeriodMs: number;
}

/** The Config sections (KubeProxyConfiguration's) that hold sync periods: a mode reads one. */
export type SyncPeriodSection = "iptables" | "nftables" | "ipvs";

/** An inclusive range of ports. */
export interface PortRange {
  first: number;
  last: number;
}

/** Everything kproxy reads from flags and the config file. */
export interface Config {
  /** Path of the KubeProxyConfiguration file, "" when none. */
  configFile: string;
  kubeconfig: string;
  master: string;
  /** Directory of manifests to read instead of an apiserver, "" when none (kproxy's own flag). */
  manifests: string;
  /** Node name: --hostname-override, else the host name. */
  hostnameOverride: string;
  proxyMode: ProxyMode;
  /** --cluster-cidr, split on commas. */
  clusterCIDRs: string[];
  detectLocalMode: DetectLocalMode;
  /** detectLocal.bridgeInterface / --pod-bridge-interface. */
  bridgeInterface: string;
  /** detectLocal.interfaceNamePrefix / --pod-interface-name-prefix. */
  interfaceNamePrefix: string;
  /** --nodeport-addresses: ["primary"] (the default) or CIDRs. */
  nodePortAddresses: string[];
  masqueradeAll: boolean;
  bindAddress: string;
  healthzBindAddress: string;
  metricsBindAddress: string;
  iptables: SyncPeriods & {
    /** @default {14} */
    masqueradeBit: number;
    /** @default {false} in kproxy (CVE-2020-8558) */
    localhostNodePorts: boolean;
    /** "auto", "nft" or "legacy": which iptables binaries to use. */
    backend: "auto" | "nft" | "legacy";
  };
  nftables: SyncPeriods & {
    /** nftables.masqueradeBit (no flag, as in kube-proxy). @default {14} */
    masqueradeBit: number;
  };
  ipvs: SyncPeriods & {
    scheduler: string;
    strictARP: boolean;
    tcpTimeoutMs: number;
    tcpFinTimeoutMs: number;
    udpTimeoutMs: number;
  };
  winkernel: {
    sourceVip: string;
    enableDSR: boolean;
    networkName: string;
    /** Forward each ingress IP's health-check port to the root namespace's HNS endpoint. */
    forwardHealthCheckVip: boolean;
    /** The name of the root namespace's HNS endpoint (`--root-hnsendpoint-name`). */
    rootHnsEndpointName: string;
  };
  /** conntrack.* / --conntrack-*: set at start as kube-proxy does (0 leaves a value as is). */
  conntrack: ConntrackSettings;
  /** oomScoreAdj / --oom-score-adj, -1000..1000. @default {-999} */
  oomScoreAdj: number;
  /** --service-cluster-ip-range (kproxy's own): used when no ServiceCIDR objects exist. */
  serviceClusterIPRange: string[];
  /** kproxy's own: when non-empty, externalIPs outside these CIDRs are ignored (CVE-2020-8554). */
  externalIPAllowedCIDRs: string[];
  /**
   * kproxy's own --service-node-port-range, as the apiserver's: the ports health-check node
   * ports may use, and so the only ports kproxy may listen on for them.
   */
  serviceNodePortRange: PortRange;
  /**
   * kproxy's own --service-counters / `serviceCounters`: keep per-Service-port traffic
   * counters in the kernel and export them (`kproxy_service_*_total`).
   */
  serviceCounters: boolean;
  /** --feature-gates merged over the defaults. */
  featureGates: Record<string, boolean>;
  cleanup: boolean;
  /** -v / --v. */
  verbosity: number;
}
