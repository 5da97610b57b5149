/**
 * Plan fixtures shared by the ipvs and Windows backend tests: one scenario per
 * service kind, written as a planner would produce them.
 *
 * @module
 */

import type { Config } from "../../../lib/config/types.ts";
import type { IpFamily } from "../../../lib/core/model.ts";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../../lib/core/plan.ts";

/** Builds an endpoint; local ones run on node-a. */
export function endpoint(ip: string, port: number, isLocal = false): PlanEndpoint {
  return {
    ip,
    port,
    nodeName: isLocal ? "node-a" : "node-b",
    zone: "zone-1",
    isLocal,
    ready: true,
    serving: true,
    terminating: false,
  };
}

/** Builds a ClusterIP service port with two endpoints (one local); override anything. */
export function servicePort(overrides: Partial<ServicePortPlan> = {}): ServicePortPlan {
  const endpoints = [endpoint("10.244.1.5", 8080, true), endpoint("10.244.2.7", 8080)];
  const base: ServicePortPlan = {
    id: "default/web:http/TCP",
    namespace: "default",
    name: "web",
    portName: "http",
    protocol: "TCP",
    port: 80,
    clusterIPs: ["10.96.0.10"],
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    sourceRanges: [],
    healthCheckNodePort: 0,
    affinityTimeoutSeconds: 0,
    clusterIPMasquerade: "non-local",
    internal: { endpoints, whenEmpty: "reject", reason: "all ready endpoints" },
    external: { endpoints, whenEmpty: "reject", reason: "all ready endpoints" },
    externalLocal: false,
    localReadyEndpoints: 1,
    servingEndpoints: endpoints,
  };
  return { ...base, ...overrides };
}

/** Wraps service ports in an IPv4 plan of node-a. */
export function planOf(services: ServicePortPlan[], family: IpFamily = "IPv4"): Plan {
  return {
    family,
    nodeName: "node-a",
    nodePortAddresses: family === "IPv4" ? ["192.168.1.10"] : ["fd00:1::10"],
    serviceCIDRs: family === "IPv4" ? ["10.96.0.0/16"] : ["fd00:96::/112"],
    localTraffic: family === "IPv4"
      ? { mode: "ClusterCIDR", cidrs: ["10.244.0.0/16"] }
      : { mode: "ClusterCIDR", cidrs: ["fd00:244::/56"] },
    services: [...services].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)),
  };
}

const localOnly = [endpoint("10.244.1.5", 8080, true)];

/** One scenario per service kind, by golden file name. */
export const SCENARIOS: Record<string, Plan> = {
  clusterip: planOf([servicePort()]),
  nodeport: planOf([servicePort({ nodePort: 30080 })]),
  "loadbalancer-source-ranges": planOf([
    servicePort({
      nodePort: 30080,
      loadBalancerIPs: ["203.0.113.10"],
      sourceRanges: ["198.51.100.0/24", "192.0.2.7/32"],
    }),
  ]),
  externalips: planOf([servicePort({ externalIPs: ["198.51.100.20"] })]),
  affinity: planOf([servicePort({ affinityTimeoutSeconds: 10800 })]),
  "etp-local": planOf([
    servicePort({
      nodePort: 30080,
      loadBalancerIPs: ["203.0.113.10"],
      externalIPs: ["198.51.100.20"],
      externalLocal: true,
      healthCheckNodePort: 32000,
      external: { endpoints: localOnly, whenEmpty: "drop", reason: "local endpoints only" },
    }),
  ]),
  "itp-local": planOf([
    servicePort({
      internal: { endpoints: localOnly, whenEmpty: "drop", reason: "local endpoints only" },
    }),
  ]),
  "udp-sctp": planOf([
    servicePort({ id: "kube-system/dns:dns/UDP", protocol: "UDP", port: 53, nodePort: 30053 }),
    servicePort({ id: "default/sig:sig/SCTP", protocol: "SCTP", port: 3868 }),
  ]),
  "ipv6-nodeport": planOf([
    servicePort({
      clusterIPs: ["fd00:96::10"],
      nodePort: 30080,
      internal: {
        endpoints: [endpoint("fd00:244::5", 8080, true)],
        whenEmpty: "reject",
        reason: "all ready endpoints",
      },
      external: {
        endpoints: [endpoint("fd00:244::5", 8080, true)],
        whenEmpty: "reject",
        reason: "all ready endpoints",
      },
    }),
  ], "IPv6"),
};

/** A complete Config with kube-proxy's defaults, for backend tests. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  const periods = { syncPeriodMs: 30000, minSyncPeriodMs: 1000 };
  return {
    configFile: "",
    kubeconfig: "",
    master: "",
    manifests: "",
    hostnameOverride: "node-a",
    proxyMode: "ipvs",
    clusterCIDRs: ["10.244.0.0/16"],
    detectLocalMode: "ClusterCIDR",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    nodePortAddresses: ["primary"],
    masqueradeAll: false,
    bindAddress: "0.0.0.0",
    healthzBindAddress: "0.0.0.0:10256",
    metricsBindAddress: "127.0.0.1:10249",
    iptables: { ...periods, masqueradeBit: 14, localhostNodePorts: false, backend: "auto" },
    nftables: { ...periods },
    ipvs: {
      ...periods,
      scheduler: "",
      strictARP: false,
      tcpTimeoutMs: 0,
      tcpFinTimeoutMs: 0,
      udpTimeoutMs: 0,
    },
    winkernel: { sourceVip: "", enableDSR: false, networkName: "" },
    conntrack: { tcpBeLiberal: false },
    serviceClusterIPRange: ["10.96.0.0/16"],
    externalIPAllowedCIDRs: [],
    serviceNodePortRange: { first: 30000, last: 32767 },
    serviceCounters: true,
    featureGates: {},
    cleanup: false,
    verbosity: 0,
    ...overrides,
  };
}
