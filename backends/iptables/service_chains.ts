/**
 * The nat chains of one service port (KUBE-SVC/SVL, KUBE-EXT, KUBE-FW,
 * KUBE-SEP), as kube-proxy arranges them. Pure.
 *
 * @module
 */

import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { Chains } from "./chains.ts";
import { serviceLayout } from "./layout.ts";
import { nfacctMatch } from "./counters.ts";
import { endpointChainName, endpointString } from "./names.ts";
import { type ChainRules, comment, dest, ifLocal, ifNotLocal } from "./rules.ts";

/**
 * Above this many endpoints kube-proxy drops the comments of endpoint rules
 * (its "large cluster mode"): they are most of the ruleset's size, and at 30k
 * services × 10 endpoints they push iptables-legacy's nat table past the
 * kernel's 512 MiB limit for one table.
 */
export const LARGE_CLUSTER_ENDPOINTS = 1000;

/** Whether `plan` has more endpoints than {@linkcode LARGE_CLUSTER_ENDPOINTS}. */
export function isLargeCluster(plan: Plan): boolean {
  let endpoints = 0;
  for (const service of plan.services) {
    endpoints += Math.max(service.internal.endpoints.length, service.external.endpoints.length);
    if (endpoints > LARGE_CLUSTER_ENDPOINTS) return true;
  }
  return false;
}

/** `--probability` of the i-th of n endpoint rules, with upstream's `%0.10f`. */
export function probability(index: number, count: number): string {
  return (1 / (count - index)).toFixed(10);
}

/**
 * Renders the nat chains of one service port: KUBE-SVC/SVL, KUBE-EXT, KUBE-FW
 * and KUBE-SEP. With `largeCluster` (see {@linkcode isLargeCluster}) the
 * endpoint rules carry no comment, as kube-proxy's.
 */
export function renderServiceChains(
  service: ServicePortPlan,
  plan: Plan,
  largeCluster = false,
): ChainRules {
  const layout = serviceLayout(service, plan);
  const endpointComment = largeCluster ? () => [] : comment;
  const chains: ChainRules = new Map();
  if (!layout.hasEndpoints) return chains;
  const name = layout.portName;
  const names = layout.names;
  const sepNames = new Map<string, string>();
  const sepName = (endpoint: PlanEndpoint): string => {
    const key = endpointString(endpoint);
    let chain = sepNames.get(key);
    if (chain === undefined) {
      chain = endpointChainName(service, endpoint);
      sepNames.set(key, chain);
    }
    return chain;
  };

  if (layout.usesExternalChain) {
    const ext: string[][] = [];
    chains.set(names.external, ext);
    if (!service.externalLocal) {
      ext.push([
        ...comment(`masquerade traffic for ${name} external destinations`),
        "-j",
        Chains.markMasq,
      ]);
    } else if (layout.internalChain) {
      const podMatch = ifLocal(plan.localTraffic);
      if (podMatch) {
        ext.push([
          ...comment(`pod traffic for ${name} external destinations`),
          ...podMatch,
          "-j",
          layout.internalChain,
        ]);
      }
      ext.push([
        ...comment(`masquerade LOCAL traffic for ${name} external destinations`),
        "-m",
        "addrtype",
        "--src-type",
        "LOCAL",
        "-j",
        Chains.markMasq,
      ]);
      ext.push([
        ...comment(`route LOCAL traffic for ${name} external destinations`),
        "-m",
        "addrtype",
        "--src-type",
        "LOCAL",
        "-j",
        layout.internalChain,
      ]);
    }
    if (layout.externalPolicyChain) ext.push(["-j", layout.externalPolicyChain]);
  }

  if (layout.usesFirewallChain) {
    const fw: string[][] = [];
    chains.set(names.firewall, fw);
    const lbComment = comment(`${name} loadbalancer IP`);
    for (const range of service.sourceRanges) {
      fw.push([...lbComment, "-s", range, "-j", names.external]);
    }
    if (service.allowFromLoadBalancerIPs) {
      for (const ip of service.loadBalancerIPs) {
        fw.push([...lbComment, "-s", ip, "-j", names.external]);
      }
    }
    fw.push(comment(`other traffic to ${name} will be dropped by KUBE-PROXY-FIREWALL`));
  }

  const masquerade = plan.clusterIPMasquerade === "all"
    ? []
    : plan.clusterIPMasquerade === "non-local"
    ? ifNotLocal(plan.localTraffic)
    : undefined;
  const policyChains: [string | undefined, ServicePortPlan["internal"]][] = [
    [layout.internalChain, service.internal],
    [layout.externalPolicyChain, service.external],
  ];
  for (const [chain, traffic] of policyChains) {
    if (!chain || chains.has(chain)) continue;
    const rules: string[][] = [];
    chains.set(chain, rules);
    // Every connection dispatched to the port enters exactly one of its policy chains, and
    // leaves it through a DNAT: a match-only first rule counts each once.
    const connections = layout.counters.get("connections");
    if (connections !== undefined) rules.push(nfacctMatch(connections));
    if (chain === layout.internalChain && masquerade) {
      for (const ip of service.clusterIPs) {
        rules.push([
          ...comment(`${name} cluster IP`),
          ...dest(layout, ip, service.port),
          ...masquerade,
          "-j",
          Chains.markMasq,
        ]);
      }
    }
    const endpoints = traffic.endpoints;
    if (service.affinityTimeoutSeconds > 0) {
      for (const endpoint of endpoints) {
        const sep = sepName(endpoint);
        rules.push([
          ...endpointComment(`${name} -> ${endpointString(endpoint)}`),
          "-m",
          "recent",
          "--name",
          sep,
          "--rcheck",
          "--seconds",
          String(service.affinityTimeoutSeconds),
          "--reap",
          "-j",
          sep,
        ]);
      }
    }
    endpoints.forEach((endpoint, i) => {
      const statistic = i < endpoints.length - 1
        ? ["-m", "statistic", "--mode", "random", "--probability", probability(i, endpoints.length)]
        : [];
      rules.push([
        ...endpointComment(`${name} -> ${endpointString(endpoint)}`),
        ...statistic,
        "-j",
        sepName(endpoint),
      ]);
    });
  }

  for (const endpoint of [...service.internal.endpoints, ...service.external.endpoints]) {
    const sep = sepName(endpoint);
    if (chains.has(sep)) continue;
    const affinity = service.affinityTimeoutSeconds > 0
      ? ["-m", "recent", "--name", sep, "--set"]
      : [];
    chains.set(sep, [
      [...endpointComment(name), "-s", endpoint.ip, "-j", Chains.markMasq],
      [
        ...endpointComment(name),
        ...affinity,
        "-m",
        layout.protocol,
        "-p",
        layout.protocol,
        "-j",
        "DNAT",
        "--to-destination",
        endpointString(endpoint),
      ],
    ]);
  }
  return chains;
}
