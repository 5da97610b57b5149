/**
 * Renders a {@linkcode Plan} as `iptables-restore` input with kube-proxy's
 * chain structure. Pure: no I/O. A full script declares every chain kproxy
 * owns; a partial script holds only the chains whose rules changed, so an
 * endpoint change rewrites that service's chains and nothing else.
 *
 * @module
 */

import type { IpFamily } from "../../lib/model.ts";
import type { LocalTrafficDetector, Plan, PlanEndpoint, ServicePortPlan } from "../../lib/plan.ts";
import { cidrContains } from "../../lib/ip.ts";
import { type BaseJump, baseJumpArgs, Chains, type IptablesTable, isOwnedChain } from "./chains.ts";
import { type ServiceLayout, serviceLayout } from "./layout.ts";
import { endpointChainName, endpointString } from "./names.ts";
import { IptablesRestoreScript } from "./script.ts";

/** Rendering settings that come from the configuration, not the Plan. */
export interface IptablesRenderOptions {
  /** Bit of the packet mark that flags traffic for masquerade. @default {14} */
  masqueradeBit?: number;
  /** Capture node ports on 127.0.0.1 (IPv4 only). @default {false} */
  localhostNodePorts?: boolean;
  /** `--conntrack-tcp-be-liberal`: do not drop conntrack-INVALID packets. @default {false} */
  conntrackTcpBeLiberal?: boolean;
}

/** Options of {@linkcode renderFull}. */
export interface RenderFullOptions extends IptablesRenderOptions {
  /** Per-service chains found in the kernel; those the plan no longer uses are deleted. */
  existingChains?: readonly string[];
  /** Jumps from built-in chains to insert (those not yet in the kernel), in the last script. */
  insertJumps?: readonly BaseJump[];
}

/** The plans a partial sync moves between. */
export interface PartialChange {
  /** The plan the kernel holds now (last applied). */
  previous: Plan;
  next: Plan;
  /** Ids of service ports whose plan may differ. */
  changed: ReadonlySet<string>;
}

/** Rules (argument vectors, without `-A chain`) of each chain, in chain order. */
export type ChainRules = Map<string, string[][]>;

/** The top-level chains of both tables. */
export interface TopLevelChains {
  filter: ChainRules;
  nat: ChainRules;
}

const DEFAULT_MASQUERADE_BIT = 14;

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
const NODE_PORTS_COMMENT =
  "kubernetes service nodeports; NOTE: this must be the last rule in this chain";

/** The mark value of the masquerade bit, as upstream prints it (`0x4000`). */
export function masqueradeMark(bit = DEFAULT_MASQUERADE_BIT): string {
  if (!Number.isInteger(bit) || bit < 0 || bit > 31) {
    throw new RangeError(`Cannot use masquerade bit ${bit}: not in 0..31`);
  }
  return `0x${(2 ** bit).toString(16)}`;
}

/** `--probability` of the i-th of n endpoint rules, with upstream's `%0.10f`. */
export function probability(index: number, count: number): string {
  return (1 / (count - index)).toFixed(10);
}

function ifLocal(detector: LocalTrafficDetector): string[] | undefined {
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR":
      return detector.cidrs.length > 0 ? ["-s", detector.cidrs.join(",")] : undefined;
    case "BridgeInterface":
      return detector.interfaces[0] ? ["-i", detector.interfaces[0]] : undefined;
    case "InterfaceNamePrefix":
      return detector.interfaces[0] ? ["-i", `${detector.interfaces[0]}+`] : undefined;
    case "None":
      return undefined;
  }
}

/** A negated list cannot be expressed in one rule: the first CIDR or interface is used. */
function ifNotLocal(detector: LocalTrafficDetector): string[] | undefined {
  switch (detector.mode) {
    case "ClusterCIDR":
    case "NodeCIDR":
      return detector.cidrs[0] ? ["!", "-s", detector.cidrs[0]] : undefined;
    case "BridgeInterface":
      return detector.interfaces[0] ? ["!", "-i", detector.interfaces[0]] : undefined;
    case "InterfaceNamePrefix":
      return detector.interfaces[0] ? ["!", "-i", `${detector.interfaces[0]}+`] : undefined;
    case "None":
      return undefined;
  }
}

function comment(text: string): string[] {
  return ["-m", "comment", "--comment", text];
}

function dest(layout: ServiceLayout, ip: string, port: number): string[] {
  return ["-m", layout.protocol, "-p", layout.protocol, "-d", ip, "--dport", String(port)];
}

function push(chains: ChainRules, chain: string, rule: string[]): void {
  const rules = chains.get(chain);
  if (rules) rules.push(rule);
  else chains.set(chain, [rule]);
}

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
    addServiceEntryRules(service, serviceLayout(service), { nat, filter });
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

  if (!options.conntrackTcpBeLiberal) {
    push(filter, Chains.forward, ["-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"]);
  }
  push(filter, Chains.forward, [
    ...comment("kubernetes forwarding rules"),
    "-m",
    "mark",
    "--mark",
    `${mark}/${mark}`,
    "-j",
    "ACCEPT",
  ]);
  push(filter, Chains.forward, [
    ...comment("kubernetes forwarding conntrack rule"),
    "-m",
    "conntrack",
    "--ctstate",
    "RELATED,ESTABLISHED",
    "-j",
    "ACCEPT",
  ]);
  return { nat, filter };
}

function addServiceEntryRules(
  service: ServicePortPlan,
  layout: ServiceLayout,
  { nat, filter }: TopLevelChains,
): void {
  const name = layout.portName;
  const emptyComment = (verdict: "reject" | "drop") =>
    verdict === "reject" ? `${name} has no endpoints` : `${name} has no local endpoints`;
  const target = (verdict: "reject" | "drop") => verdict === "reject" ? "REJECT" : "DROP";
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
        "-j",
        target(internal),
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
        "-j",
        target(external),
      ]);
    }
  }
  if (layout.usesFirewallChain) {
    for (const ip of service.loadBalancerIPs) {
      push(filter, Chains.proxyFirewall, [
        ...comment(`${name} traffic not accepted by ${layout.names.firewall}`),
        ...dest(layout, ip, service.port),
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
        "-j",
        target(external),
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
  const layout = serviceLayout(service);
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
    const allowFromNode = plan.nodePortAddresses.some((ip) =>
      service.sourceRanges.some((range) => cidrContains(range, ip))
    );
    if (allowFromNode) {
      for (const ip of service.loadBalancerIPs) {
        fw.push([...lbComment, "-s", ip, "-j", names.external]);
      }
    }
    fw.push(comment(`other traffic to ${name} will be dropped by KUBE-PROXY-FIREWALL`));
  }

  const masquerade = service.clusterIPMasquerade === "all"
    ? []
    : service.clusterIPMasquerade === "non-local"
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

function writeChains(
  script: IptablesRestoreScript,
  table: IptablesTable,
  chains: ChainRules,
): void {
  for (const chain of chains.keys()) script.declareChain(table, chain);
  for (const [chain, rules] of chains) {
    for (const rule of rules) script.appendRule(table, chain, rule);
  }
}

/**
 * Renders the complete ruleset of a plan: every chain kproxy owns is declared
 * (so flushed) and refilled, and per-service chains listed in
 * `existingChains` that the plan no longer uses are deleted.
 *
 * @example Usage
 * ```ts ignore
 * const script = renderFull(plan, { masqueradeBit: 14 });
 * await executor.run({ program: "iptables-restore", args: ["-w", "5", "--noflush", "--counters"], stdin: script.toString() });
 * ```
 */
export function renderFull(plan: Plan, options: RenderFullOptions = {}): IptablesRestoreScript {
  return renderFullInChunks(plan, { ...options, maxChainsPerChunk: Infinity })[0]!;
}

/** Options of {@linkcode renderFullInChunks}. */
export interface RenderChunksOptions extends RenderFullOptions {
  /** Per-service chains per script before a new one is started; a service is never split. */
  maxChainsPerChunk: number;
}

/**
 * Renders the complete ruleset as several scripts, applied in order: first the
 * per-service chains, a bounded number per script, each service whole in one
 * script; the last script holds the top-level chains of both tables, the
 * canary and the deletions, so it switches traffic to the new chains at once.
 * iptables-nft-restore with `--noflush` takes time quadratic in the chains
 * declared in one input (measured: 2k services x 10 endpoints, 68 s in one
 * script); bounded scripts keep it linear.
 */
export function renderFullInChunks(
  plan: Plan,
  options: RenderChunksOptions,
): IptablesRestoreScript[] {
  const scripts: IptablesRestoreScript[] = [];
  const top = renderTopLevelChains(plan, options);
  const used = new Set<string>(top.nat.keys());
  const chunked = options.maxChainsPerChunk !== Infinity;
  // Service chains jump to KUBE-MARK-MASQ: it must exist before the first chunk.
  const markMasq = top.nat.get(Chains.markMasq) ?? [];
  let chunk: ChainRules = chunked ? new Map([[Chains.markMasq, markMasq]]) : new Map();
  const flush = () => {
    if (chunk.size === 0) return;
    const script = new IptablesRestoreScript(plan.family);
    writeChains(script, "nat", chunk);
    scripts.push(script);
    chunk = new Map();
  };
  const largeCluster = isLargeCluster(plan);
  for (const service of plan.services) {
    const chains = renderServiceChains(service, plan, largeCluster);
    if (chunk.size > 0 && chunk.size + chains.size > options.maxChainsPerChunk) flush();
    for (const [chain, rules] of chains) {
      chunk.set(chain, rules);
      used.add(chain);
    }
  }
  const last = new IptablesRestoreScript(plan.family);
  last.declareChain("mangle", Chains.canary);
  writeChains(last, "filter", top.filter);
  if (chunked) {
    flush();
    writeChains(last, "nat", new Map([...top.nat].filter(([chain]) => chain !== Chains.markMasq)));
  } else {
    writeChains(last, "nat", new Map([...top.nat, ...chunk]));
  }
  for (const jump of options.insertJumps ?? []) {
    last.insertRule(jump.table, jump.from, baseJumpArgs(jump));
  }
  for (const chain of options.existingChains ?? []) {
    if (!used.has(chain) && isOwnedChain(chain) && !top.filter.has(chain)) {
      last.deleteChain("nat", chain);
    }
  }
  scripts.push(last);
  return scripts;
}

function sameRules(
  a: readonly string[][] | undefined,
  b: readonly string[][] | undefined,
): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.length === b.length && a.every((rule, i) => rule.join(" ") === b[i]?.join(" "));
}

function writeChangedChains(
  script: IptablesRestoreScript,
  table: IptablesTable,
  previous: ChainRules,
  next: ChainRules,
): void {
  const changed: ChainRules = new Map();
  for (const [chain, rules] of next) {
    if (!sameRules(previous.get(chain), rules)) changed.set(chain, rules);
  }
  writeChains(script, table, changed);
}

function deleteRemovedChains(
  script: IptablesRestoreScript,
  table: IptablesTable,
  previous: ChainRules,
  next: ChainRules,
): void {
  for (const chain of previous.keys()) {
    if (!next.has(chain)) script.deleteChain(table, chain);
  }
}

/**
 * Renders the changes from `previous` to `next`: the per-service chains of
 * changed services whose rules differ, top-level chains only when their rules
 * differ (an endpoint-only change leaves KUBE-SERVICES alone), and `-X` for
 * chains of removed services and endpoints. Empty when nothing changed.
 */
export function renderPartial(
  change: PartialChange,
  options: IptablesRenderOptions = {},
): IptablesRestoreScript {
  const { previous, next } = change;
  const script = new IptablesRestoreScript(next.family);
  const oldTop = renderTopLevelChains(previous, options);
  const newTop = renderTopLevelChains(next, options);
  const oldServices = new Map(previous.services.map((service) => [service.id, service]));
  const newServices = new Map(next.services.map((service) => [service.id, service]));
  const oldChains: ChainRules = new Map();
  const newChains: ChainRules = new Map();
  const wasLarge = isLargeCluster(previous);
  const isLarge = isLargeCluster(next);
  for (const id of [...change.changed].sort()) {
    const before = oldServices.get(id);
    const after = newServices.get(id);
    if (before) {
      for (const [c, r] of renderServiceChains(before, previous, wasLarge)) oldChains.set(c, r);
    }
    if (after) {
      for (const [c, r] of renderServiceChains(after, next, isLarge)) newChains.set(c, r);
    }
  }
  writeChangedChains(script, "filter", oldTop.filter, newTop.filter);
  writeChangedChains(script, "nat", oldTop.nat, newTop.nat);
  writeChangedChains(script, "nat", oldChains, newChains);
  deleteRemovedChains(script, "filter", oldTop.filter, newTop.filter);
  deleteRemovedChains(script, "nat", oldChains, newChains);
  return script;
}

/**
 * Reads chain names from `iptables-save` output of one table (lines `:NAME POLICY [p:b]`).
 */
export function parseSavedChains(save: string): string[] {
  const chains: string[] = [];
  for (const line of save.split("\n")) {
    const match = /^:(\S+) /.exec(line);
    if (match?.[1]) chains.push(match[1]);
  }
  return chains;
}

/** What {@linkcode renderCleanup} removes chains from. */
export interface CleanupInput {
  table: IptablesTable;
  /** That table's `iptables-save` output. */
  save: string;
  /** The chains to remove. @default the chains {@linkcode isOwnedChain} accepts */
  removes?: (chain: string) => boolean;
}

/**
 * Renders the removal of chains from one table, from that table's
 * `iptables-save` output: the jumps from other chains are deleted, then every
 * removed chain is flushed and deleted. Empty when nothing is removed.
 */
export function renderCleanup(saved: CleanupInput, family: IpFamily): IptablesRestoreScript {
  const script = new IptablesRestoreScript(family);
  const owned = parseSavedChains(saved.save).filter(saved.removes ?? isOwnedChain);
  if (owned.length === 0) return script;
  const ownedSet = new Set(owned);
  const jumps: string[][] = [];
  for (const line of saved.save.split("\n")) {
    const match = /^-A (\S+) (?:(.*) )?-j (\S+)$/.exec(line);
    if (match?.[1] && match[3] && !ownedSet.has(match[1]) && ownedSet.has(match[3])) {
      jumps.push([match[1], ...splitSavedArgs(`${match[2] ?? ""} -j ${match[3]}`)]);
    }
  }
  for (const chain of owned) script.declareChain(saved.table, chain);
  for (const [chain, ...args] of jumps) script.deleteRule(saved.table, chain ?? "", args);
  for (const chain of owned) script.deleteChain(saved.table, chain);
  return script;
}

function splitSavedArgs(text: string): string[] {
  const args: string[] = [];
  const pattern = /"((?:[^"\\]|\\.)*)"|(\S+)/g;
  for (const match of text.matchAll(pattern)) args.push(match[1] ?? match[2] ?? "");
  return args;
}
