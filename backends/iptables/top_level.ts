/**
 * The top-level chains of the iptables mode (KUBE-SERVICES, KUBE-NODEPORTS,
 * KUBE-POSTROUTING, KUBE-MARK-MASQ in nat; KUBE-SERVICES,
 * KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS, KUBE-FORWARD, KUBE-PROXY-FIREWALL in
 * filter), with the entry rules of every service port. Pure.
 *
 * @module
 */

import type { IpFamily } from "../../lib/core/model.ts";
import type { Plan, ServicePortPlan } from "../../lib/core/plan.ts";
import { checkFrontendsHeldOnce } from "../../lib/core/plan_check.ts";
import { Chains } from "./chains.ts";
import { type ServiceLayout, serviceLayout } from "./layout.ts";
import { nfacctMatch } from "./counters.ts";
import {
  type ChainRules,
  comment,
  dest,
  forwardRules,
  type IptablesRenderOptions,
  masqueradeMark,
  push,
} from "./rules.ts";

/** The top-level chains of both tables. */
export interface TopLevelChains {
  filter: ChainRules;
  nat: ChainRules;
}

const NODE_PORTS_COMMENT =
  "kubernetes service nodeports; NOTE: this must be the last rule in this chain";

function loopbackIPv4(family: IpFamily, options: IptablesRenderOptions): boolean {
  return family === "IPv4" && options.localhostNodePorts === true;
}

/**
 * Renders the top-level chains (KUBE-SERVICES, KUBE-NODEPORTS, KUBE-POSTROUTING,
 * KUBE-MARK-MASQ in nat; KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS,
 * KUBE-FORWARD, KUBE-PROXY-FIREWALL in filter) with their complete rules.
 */
export function renderTopLevelChains(
  plan: Plan,
  options: IptablesRenderOptions = {},
): TopLevelChains {
  checkFrontendsHeldOnce(plan);
  const mark = masqueradeMark(options.masqueradeBit);
  const nat: ChainRules = new Map([
    [Chains.services, []],
    [Chains.nodePorts, []],
    [Chains.postrouting, [
      ["-m", "mark", "!", "--mark", `${mark}/${mark}`, "-j", "RETURN"],
      ["-j", "MARK", "--xor-mark", mark],
      [
        ...comment("kubernetes service traffic requiring SNAT"),
        "-j",
        "MASQUERADE",
        "--random-fully",
      ],
    ]],
    [Chains.markMasq, [["-j", "MARK", "--or-mark", mark]]],
    [Chains.canary, []],
  ]);
  const filter: ChainRules = new Map([
    [Chains.services, []],
    [Chains.externalServices, []],
    [Chains.nodePorts, []],
    [Chains.forward, []],
    [Chains.proxyFirewall, []],
    [Chains.canary, []],
  ]);

  for (const service of plan.services) {
    addServiceEntryRules(service, serviceLayout(service, plan), { nat, filter });
  }

  for (const ip of plan.nodePortAddresses) {
    push(nat, Chains.services, [...comment(NODE_PORTS_COMMENT), "-d", ip, "-j", Chains.nodePorts]);
  }
  if (loopbackIPv4(plan.family, options)) {
    push(nat, Chains.services, [
      ...comment(NODE_PORTS_COMMENT),
      "-d",
      "127.0.0.1",
      "-j",
      Chains.nodePorts,
    ]);
    filter.set(Chains.kubeletFirewall, [[
      ...comment("block incoming localnet connections"),
      "-d",
      "127.0.0.0/8",
      "!",
      "-s",
      "127.0.0.0/8",
      "-m",
      "conntrack",
      "!",
      "--ctstate",
      "RELATED,ESTABLISHED,DNAT",
      "-j",
      "DROP",
    ]]);
  }
  for (const cidr of plan.serviceCIDRs) {
    push(filter, Chains.services, [
      ...comment("reject traffic to unallocated cluster IPs and invalid ports"),
      "-d",
      cidr,
      "-j",
      "REJECT",
    ]);
  }

  for (const rule of forwardRules(mark, { dropInvalid: !options.conntrackTcpBeLiberal })) {
    push(filter, Chains.forward, rule);
  }
  return { nat, filter };
}

/**
 * The rules one service port adds to the top-level chains, alone: a partial
 * sync compares them before and after to tell whether the top-level chains
 * change at all.
 */
export function renderEntryRules(service: ServicePortPlan, plan: Plan): TopLevelChains {
  const chains: TopLevelChains = { nat: new Map(), filter: new Map() };
  addServiceEntryRules(service, serviceLayout(service, plan), chains);
  return chains;
}

function addServiceEntryRules(
  service: ServicePortPlan,
  layout: ServiceLayout,
  { nat, filter }: TopLevelChains,
): void {
  const name = layout.portName;
  const emptyComment = (verdict: "reject" | "drop") =>
    verdict === "reject" ? `${name} has no endpoints` : `${name} has no local endpoints`;
  const target = (verdict: "reject" | "drop") => [
    ...nfacctMatch(
      layout.counters.get(verdict === "reject" ? "no-endpoints" : "no-local-endpoints"),
    ),
    "-j",
    verdict === "reject" ? "REJECT" : "DROP",
  ];
  const internal = service.internal.whenEmpty;
  const external = service.external.whenEmpty;
  const externalTarget = layout.usesExternalChain ? layout.names.external : undefined;

  for (const ip of service.clusterIPs) {
    if (layout.internalChain) {
      push(nat, Chains.services, [
        ...comment(`${name} cluster IP`),
        ...dest(layout, ip, service.port),
        "-j",
        layout.internalChain,
      ]);
    } else {
      push(filter, Chains.services, [
        ...comment(emptyComment(internal)),
        ...dest(layout, ip, service.port),
        ...target(internal),
      ]);
    }
  }

  const externalAddresses: [string, string, string | undefined][] = [
    ...service.externalIPs.map((ip): [string, string, string | undefined] => [
      ip,
      "external IP",
      externalTarget,
    ]),
    ...service.loadBalancerIPs.map((ip): [string, string, string | undefined] => [
      ip,
      "loadbalancer IP",
      layout.usesFirewallChain ? layout.names.firewall : externalTarget,
    ]),
  ];
  for (const [ip, kind, chain] of externalAddresses) {
    if (chain) {
      push(nat, Chains.services, [
        ...comment(`${name} ${kind}`),
        ...dest(layout, ip, service.port),
        "-j",
        chain,
      ]);
    }
    if (!layout.externalPolicyChain) {
      push(filter, Chains.externalServices, [
        ...comment(emptyComment(external)),
        ...dest(layout, ip, service.port),
        ...target(external),
      ]);
    }
  }
  if (layout.usesFirewallChain) {
    for (const ip of service.loadBalancerIPs) {
      push(filter, Chains.proxyFirewall, [
        ...comment(`${name} traffic not accepted by ${layout.names.firewall}`),
        ...dest(layout, ip, service.port),
        ...nfacctMatch(layout.counters.get("source-range")),
        "-j",
        "DROP",
      ]);
    }
  }

  if (service.nodePort > 0) {
    const port = [
      "-m",
      layout.protocol,
      "-p",
      layout.protocol,
      "--dport",
      String(service.nodePort),
    ];
    if (externalTarget) {
      push(nat, Chains.nodePorts, [...comment(name), ...port, "-j", externalTarget]);
    }
    if (!layout.externalPolicyChain) {
      push(filter, Chains.externalServices, [
        ...comment(emptyComment(external)),
        "-m",
        "addrtype",
        "--dst-type",
        "LOCAL",
        ...port,
        ...target(external),
      ]);
    }
  }
  if (service.healthCheckNodePort > 0) {
    push(filter, Chains.nodePorts, [
      ...comment(`${name} health check node port`),
      "-m",
      "tcp",
      "-p",
      "tcp",
      "--dport",
      String(service.healthCheckNodePort),
      "-j",
      "ACCEPT",
    ]);
  }
}
