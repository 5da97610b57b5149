/**
 * The kernel-test harness: the namespace topology of `scripts/netns.ts`, the
 * requirement check that decides whether kernel tests run, and a Config for
 * backends under test.
 *
 * @module
 */

import type { Config } from "../../lib/config/types.ts";
import { kernelUnavailableReason, Topology } from "../../scripts/netns.ts";

export {
  ADDRESSES,
  HostExecutor,
  NetnsExecutor,
  type Pod,
  type Reply,
  type RequestSpec,
  Topology,
} from "../../scripts/netns.ts";

/**
 * Why kernel tests cannot run here (printed, so a skip is never silent), or
 * undefined when they can.
 */
export async function kernelSkipReason(programs: readonly string[]): Promise<string | undefined> {
  const reason = await kernelUnavailableReason(["ip", "python3", ...programs]);
  if (reason !== undefined) console.warn(`kernel tests ignored: ${reason}`);
  return reason;
}

/** Why IPVS cannot be used in a fresh namespace here, or undefined when it can. */
export async function ipvsUnavailableReason(): Promise<string | undefined> {
  const ns = `kp-k-${Topology.randomTag()}-ipvs`;
  const add = await new Deno.Command("ip", { args: ["netns", "add", ns], stderr: "piped" })
    .output();
  if (!add.success) return `cannot create namespace ${ns}`;
  try {
    const list = await new Deno.Command("ip", {
      args: ["netns", "exec", ns, "ipvsadm", "-Ln"],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (list.success) return undefined;
    const stderr = new TextDecoder().decode(list.stderr).trim();
    return `ipvsadm -Ln failed: ${stderr.split("\n")[0]}`;
  } finally {
    await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
  }
}

/**
 * A fresh topology with the kernel-test prefix `kp-k-<random4>-`: 3 local pods, 1 remote,
 * echo servers on 8080 and 9090 (a case may move an endpoint's port).
 */
export function createTestTopology(): Promise<Topology> {
  return Topology.create({
    prefix: `kp-k-${Topology.randomTag()}-`,
    localPods: 3,
    remotePods: 1,
    ports: [8080, 9090],
    exitOnSigint: true,
  });
}

/** Options for {@linkcode testConfig}. */
export interface TestConfigOptions {
  /** @default {"nftables"} */
  proxyMode?: Config["proxyMode"];
  /** @default {"auto"} */
  iptablesBackend?: Config["iptables"]["backend"];
}

/** A Config with kube-proxy's defaults, for backends under test on node "node-a". */
export function testConfig(options: TestConfigOptions = {}): Config {
  const periods = { syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 };
  return {
    configFile: "",
    kubeconfig: "",
    master: "",
    manifests: "",
    hostnameOverride: "node-a",
    proxyMode: options.proxyMode ?? "nftables",
    clusterCIDRs: ["10.244.0.0/16", "fd00:244::/48"],
    detectLocalMode: "ClusterCIDR",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    nodePortAddresses: ["primary"],
    masqueradeAll: false,
    bindAddress: "0.0.0.0",
    healthzBindAddress: "127.0.0.1:0",
    metricsBindAddress: "127.0.0.1:0",
    iptables: {
      ...periods,
      masqueradeBit: 14,
      localhostNodePorts: false,
      backend: options.iptablesBackend ?? "auto",
    },
    nftables: { ...periods },
    ipvs: {
      ...periods,
      scheduler: "rr",
      strictARP: false,
      tcpTimeoutMs: 0,
      tcpFinTimeoutMs: 0,
      udpTimeoutMs: 0,
    },
    winkernel: { sourceVip: "", enableDSR: false, networkName: "" },
    conntrack: { tcpBeLiberal: false },
    serviceClusterIPRange: ["10.96.0.0/16", "fd00:96::/112"],
    externalIPAllowedCIDRs: [],
    serviceNodePortRange: { first: 30000, last: 32767 },
    serviceCounters: true,
    featureGates: {},
    cleanup: false,
    verbosity: 0,
  };
}
