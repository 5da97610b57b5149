/**
 * Renders a {@linkcode Plan} as `iptables-restore` input with kube-proxy's
 * chain structure. Pure: no I/O. A full script declares every chain kproxy
 * owns; a partial script holds only the chains whose rules changed, so an
 * endpoint change rewrites that service's chains and nothing else.
 *
 * @module
 */

import type { IpFamily } from "../../lib/core/model.ts";
import type {
  LocalTrafficDetector,
  Plan,
  PlanEndpoint,
  ServicePortPlan,
} from "../../lib/core/plan.ts";
import { cidrContains } from "../../lib/core/ip.ts";
import { type BaseJump, baseJumpArgs, Chains, type IptablesTable, isOwnedChain } from "./chains.ts";
import { type ServiceLayout, serviceLayout } from "./layout.ts";
import {
  alternateChainName,
  endpointChainName,
  endpointString,
  isServiceChainName,
} from "./names.ts";
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
 * Renders the complete ruleset of a plan in one script: every chain kproxy
 * owns is declared (so flushed) and refilled, and per-service chains listed
 * in `existingChains` that the plan no longer uses are deleted. What a
 * scratch load (`kproxy diff`) and the golden files use; a sync applies
 * {@linkcode renderFullSync}.
 *
 * @example Usage
 * ```ts ignore
 * const script = renderFull(plan, { masqueradeBit: 14 });
 * await executor.run({ program: "iptables-restore", args: ["-w", "5", "--noflush", "--counters"], stdin: script.toString() });
 * ```
 */
export function renderFull(plan: Plan, options: RenderFullOptions = {}): IptablesRestoreScript {
  const script = new IptablesRestoreScript(plan.family);
  const top = renderTopLevelChains(plan, options);
  const services = serviceChainGroups(plan);
  script.declareChain("mangle", Chains.canary);
  writeChains(script, "filter", top.filter);
  writeChains(script, "nat", new Map([...top.nat, ...services.flatMap((chains) => [...chains])]));
  for (const jump of options.insertJumps ?? []) {
    script.insertRule(jump.table, jump.from, baseJumpArgs(jump));
  }
  const used = new Set([...top.nat.keys(), ...services.flatMap((chains) => [...chains.keys()])]);
  for (const chain of options.existingChains ?? []) {
    if (!used.has(chain) && isOwnedChain(chain) && !top.filter.has(chain)) {
      script.deleteChain("nat", chain);
    }
  }
  return script;
}

/** The per-service chains of every service port of `plan`, one map per service port. */
function serviceChainGroups(plan: Plan): ChainRules[] {
  const largeCluster = isLargeCluster(plan);
  return plan.services.map((service) => renderServiceChains(service, plan, largeCluster));
}

/**
 * The same chains with per-service chains renamed by `name` (upstream name
 * to the name written), as declared and as jump targets.
 */
function renamed(chains: ChainRules, name: (chain: string) => string): ChainRules {
  const out: ChainRules = new Map();
  for (const [chain, rules] of chains) {
    out.set(
      name(chain),
      rules.map((rule) => rule.map((arg, i) => (rule[i - 1] === "-j" ? name(arg) : arg))),
    );
  }
  return out;
}

/** What a full sync found in the kernel, from `iptables-save` of nat and filter. */
export interface KernelChains {
  /** The chains of the nat table. */
  nat: readonly string[];
  /** The chains some nat rule jumps to: a per-service chain among them is in use. */
  natTargets: ReadonlySet<string>;
  /** The chains of the filter table. */
  filter: readonly string[];
}

/** Options of {@linkcode renderFullSync}. */
export interface FullSyncOptions extends IptablesRenderOptions {
  kernel: KernelChains;
  /** Jumps from built-in chains to insert (those not yet in the kernel). */
  insertJumps?: readonly BaseJump[];
  /**
   * Per-service chains per staging input, each service port whole in one;
   * `Infinity` writes them all in the switching nat commit.
   */
  maxChainsPerChunk: number;
}

/**
 * The restore inputs of one sync, in the order they run. iptables-restore
 * commits each `*table … COMMIT` block of an input atomically, one after
 * the other, in both the legacy and the nft variant; no input is ever
 * atomic across tables. So a sync is a sequence of table commits, arranged
 * so that a writer that stops anywhere leaves every service address
 * behaving as before the sync or as after it.
 */
export interface SyncInputs {
  /** Inputs that only create chains nothing references yet. */
  staging: IptablesRestoreScript[];
  /**
   * The switching input, as blocks: the filter table widened (rules added,
   * none removed), nat (the switch), then filter narrowed to the new rules
   * and mangle's canary. The filter table holds only REJECT, DROP and
   * ACCEPT rules for un-DNATed destinations, so while it is widened the old
   * nat table still decides every address as before.
   */
  commit: IptablesRestoreScript[];
  /** Inputs that delete chains nothing references any more. */
  cleanup: IptablesRestoreScript[];
  /** Upstream names of the per-service chains written under their alternate name. */
  alternates: Set<string>;
}

/** The blocks of an input as its text. */
export function inputText(blocks: readonly IptablesRestoreScript[]): string {
  return blocks.map(String).join("");
}

function widenFilter(
  script: IptablesRestoreScript,
  previous: ChainRules | undefined,
  next: ChainRules,
  kernel: ReadonlySet<string>,
): void {
  for (const [chain, rules] of next) {
    const before = previous?.get(chain);
    if (previous !== undefined && sameRules(before, rules)) continue;
    if (kernel.has(chain)) script.keepChain("filter", chain);
    else script.declareChain("filter", chain);
    const old = new Set((before ?? []).map((rule) => rule.join(" ")));
    for (const rule of rules) {
      if (!old.has(rule.join(" "))) script.appendRule("filter", chain, rule);
    }
  }
}

/** Where a per-service chain stands in the jumps between them: callers first. */
function callerRank(chain: string): number {
  const kind = /^KUBE-([A-Z]+)-/.exec(chain)?.[1];
  return kind === "FW" ? 0 : kind === "EXT" ? 1 : kind === "SEP" ? 3 : 2;
}

function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/**
 * Renders a full sync. With `maxChainsPerChunk` finite (iptables-nft-restore
 * is quadratic in the chains one input declares: 2k services × 10 endpoints
 * took 68 s in one input), the per-service chains are first written in
 * bounded staging inputs under names no rule uses yet (the upstream name, or
 * its alternate while the upstream one is in use), the commit switches the
 * top-level chains to them, and the chains left behind are deleted after.
 * A live chain is never rewritten before the switch.
 */
export function renderFullSync(plan: Plan, options: FullSyncOptions): SyncInputs {
  const { kernel } = options;
  const chunked = options.maxChainsPerChunk !== Infinity;
  const alternates = new Set<string>();
  const name = (chain: string) => {
    if (!chunked || !isServiceChainName(chain) || !kernel.natTargets.has(chain)) return chain;
    alternates.add(chain);
    return alternateChainName(chain);
  };
  const top = renderTopLevelChains(plan, options);
  const services = serviceChainGroups(plan).map((chains) => renamed(chains, name));
  const topNat = renamed(top.nat, name);

  const widen = new IptablesRestoreScript(plan.family);
  widenFilter(widen, undefined, top.filter, new Set(kernel.filter));
  const nat = new IptablesRestoreScript(plan.family);
  const staging: IptablesRestoreScript[] = [];
  if (chunked) {
    // Service chains jump to KUBE-MARK-MASQ: create it, if missing, before them.
    let chunk = new Map<string, string[][]>();
    const flush = () => {
      if (chunk.size === 0) return;
      const script = new IptablesRestoreScript(plan.family);
      writeChains(script, "nat", chunk);
      staging.push(script);
      chunk = new Map();
    };
    if (!kernel.nat.includes(Chains.markMasq)) {
      chunk.set(Chains.markMasq, topNat.get(Chains.markMasq) ?? []);
    }
    for (const chains of services) {
      if (chunk.size > 0 && chunk.size + chains.size > options.maxChainsPerChunk) flush();
      for (const [chain, rules] of chains) chunk.set(chain, rules);
    }
    flush();
    writeChains(nat, "nat", topNat);
  } else {
    writeChains(nat, "nat", new Map([...topNat, ...services.flatMap((chains) => [...chains])]));
  }
  const narrow = new IptablesRestoreScript(plan.family);
  narrow.declareChain("mangle", Chains.canary);
  writeChains(narrow, "filter", top.filter);
  for (const jump of options.insertJumps ?? []) {
    (jump.table === "nat" ? nat : narrow).insertRule(jump.table, jump.from, baseJumpArgs(jump));
  }

  const used = new Set([...topNat.keys(), ...services.flatMap((chains) => [...chains.keys()])]);
  const stale = kernel.nat.filter((chain) =>
    !used.has(chain) && isOwnedChain(chain) && !top.filter.has(chain)
  );
  const cleanup: IptablesRestoreScript[] = [];
  if (chunked) {
    // Callers before callees (FW → EXT → SVC/SVL → SEP): an input flushes
    // and deletes chains whose callers went in the same input or earlier.
    const sorted = [...stale].sort((a, b) => callerRank(a) - callerRank(b));
    for (const group of chunks(sorted, options.maxChainsPerChunk)) {
      const script = new IptablesRestoreScript(plan.family);
      for (const chain of group) script.deleteChain("nat", chain);
      cleanup.push(script);
    }
  } else {
    for (const chain of stale) nat.deleteChain("nat", chain);
  }
  const commit = [widen, nat, narrow].filter((script) => !script.isEmpty || script.error);
  return { staging, commit, cleanup, alternates };
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

/** Options of {@linkcode renderPartialSync}. */
export interface PartialSyncOptions extends IptablesRenderOptions {
  /** Upstream names of the per-service chains that live under their alternate name. */
  alternates?: ReadonlySet<string>;
}

/**
 * Renders the changes from `previous` to `next` as one switching input
 * ({@linkcode SyncInputs.commit}): the per-service chains of changed
 * services whose rules differ, rewritten in place under the names they
 * have, top-level chains only when their rules differ (an endpoint-only
 * change leaves KUBE-SERVICES alone), and `-X` for chains of removed
 * services and endpoints. Empty when nothing changed.
 */
export function renderPartialSync(
  change: PartialChange,
  options: PartialSyncOptions = {},
): SyncInputs {
  const { previous, next } = change;
  const live = options.alternates ?? new Set<string>();
  const name = (chain: string) => live.has(chain) ? alternateChainName(chain) : chain;
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
  const alternates = new Set(
    [...live].filter((chain) => !oldChains.has(chain) || newChains.has(chain)),
  );
  const widen = new IptablesRestoreScript(next.family);
  widenFilter(widen, oldTop.filter, newTop.filter, new Set(oldTop.filter.keys()));
  const nat = new IptablesRestoreScript(next.family);
  writeChangedChains(nat, "nat", renamed(oldTop.nat, name), renamed(newTop.nat, name));
  const [oldNamed, newNamed] = [renamed(oldChains, name), renamed(newChains, name)];
  writeChangedChains(nat, "nat", oldNamed, newNamed);
  deleteRemovedChains(nat, "nat", oldNamed, newNamed);
  const narrow = new IptablesRestoreScript(next.family);
  writeChangedChains(narrow, "filter", oldTop.filter, newTop.filter);
  deleteRemovedChains(narrow, "filter", oldTop.filter, newTop.filter);
  const commit = [widen, nat, narrow].filter((script) => !script.isEmpty || script.error);
  return { staging: [], commit, cleanup: [], alternates };
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

/** Reads the chains rules jump or go to from `iptables-save` output of one table. */
export function parseSavedTargets(save: string): Set<string> {
  const targets = new Set<string>();
  for (const match of save.matchAll(/^-A \S+ .*-[jg] (\S+)/gm)) targets.add(match[1]!);
  return targets;
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
