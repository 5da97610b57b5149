/**
 * The iptables baseline: the ruleset upstream kube-proxy's iptables mode
 * writes for ClusterIP services (KUBE-SERVICES → KUBE-SVC-* with `statistic`
 * rules → KUBE-SEP-* with DNAT; endpoint rules without comments above 1000
 * endpoints, as its large cluster mode), loaded by `iptables-{nft,legacy}-restore`
 * in a throwaway `kp-b-*` namespace. It stands beside kproxy's iptables rows
 * when the iptables module does not report a baseline of its own.
 *
 * @module
 */

import { endpointChainName, serviceChainNames } from "../../backends/iptables/names.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { HostExecutor, NetnsExecutor } from "../netns.ts";
import { withNamespace } from "./harness.ts";

/** A full upstream-style `iptables-restore` input (nat table) for the plan. */
export function upstreamIptablesScript(plan: Plan): string {
  const chains = [":KUBE-SERVICES - [0:0]", ":KUBE-MARK-MASQ - [0:0]", ":KUBE-POSTROUTING - [0:0]"];
  const rules = [
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
    "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
    "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
    "-A KUBE-POSTROUTING -j MASQUERADE --random-fully",
  ];
  // kube-proxy's large cluster mode: no comments on endpoint rules above 1000 endpoints.
  const endpointCount = plan.services.reduce((n, s) => n + s.internal.endpoints.length, 0);
  const large = endpointCount > 1000;
  plan.services.forEach((service) => {
    // Upstream's names: hashes, so chains arrive in no order (libiptc sorts them on insert).
    const svc = serviceChainNames(service).cluster;
    const ip = service.clusterIPs[0]!;
    const comment =
      `-m comment --comment "${service.namespace}/${service.name}:${service.portName}"`;
    const endpointComment = large ? "" : ` ${comment}`;
    chains.push(`:${svc} - [0:0]`);
    rules.push(
      `-A KUBE-SERVICES ${comment} -m tcp -p tcp -d ${ip} --dport ${service.port} -j ${svc}`,
    );
    rules.push(
      `-A ${svc} ${comment} -m tcp -p tcp -d ${ip} --dport ${service.port} ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ`,
    );
    const endpoints = service.internal.endpoints;
    endpoints.forEach((endpoint, j) => {
      const sep = endpointChainName(service, endpoint);
      chains.push(`:${sep} - [0:0]`);
      const left = endpoints.length - j;
      const pick = left > 1
        ? ` -m statistic --mode random --probability ${(1 / left).toFixed(10)}`
        : "";
      rules.push(`-A ${svc}${endpointComment}${pick} -j ${sep}`);
      rules.push(`-A ${sep}${endpointComment} -s ${endpoint.ip}/32 -j KUBE-MARK-MASQ`);
      rules.push(
        `-A ${sep}${endpointComment} -m tcp -p tcp -j DNAT --to-destination ${endpoint.ip}:${endpoint.port}`,
      );
    });
  });
  return ["*nat", ...chains, ...rules, "COMMIT", ""].join("\n");
}

/**
 * Milliseconds to load the upstream-style ruleset with `program` in a fresh
 * namespace; `stopped` when the load was killed after `timeoutMs`.
 */
export async function loadIptablesBaseline(
  plan: Plan,
  variant: "nft" | "legacy",
  timeoutMs = 300_000,
): Promise<{ ms: number; rules: number; stopped: boolean }> {
  const script = upstreamIptablesScript(plan);
  const rules = script.split("\n").filter((line) => line.startsWith("-A")).length;
  return await withNamespace(`ipt-${variant}`, async (namespace) => {
    const executor = new NetnsExecutor({ namespace, inner: new HostExecutor() });
    const start = performance.now();
    let result;
    try {
      result = await executor.run({
        program: `iptables-${variant}-restore`,
        args: ["--noflush"],
        stdin: script,
        timeoutMs,
      });
    } catch (error) {
      const ms = performance.now() - start;
      if (ms >= timeoutMs) return { ms, rules, stopped: true };
      throw error;
    }
    const ms = performance.now() - start;
    if (result.code !== 0) {
      throw new Error(`Cannot load the upstream-style iptables baseline: ${result.stderr}`);
    }
    return { ms, rules, stopped: false };
  });
}
