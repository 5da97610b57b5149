/**
 * The fixed chains of the iptables mode and the jumps that connect them to the
 * built-in chains, with kube-proxy's names and comments.
 *
 * @module
 */

/** A table kproxy writes to. */
export type IptablesTable = "filter" | "nat" | "mangle";

/** Top-level chains, named as upstream kube-proxy names them. */
export const Chains = Object.freeze({
  services: "KUBE-SERVICES",
  externalServices: "KUBE-EXTERNAL-SERVICES",
  nodePorts: "KUBE-NODEPORTS",
  postrouting: "KUBE-POSTROUTING",
  markMasq: "KUBE-MARK-MASQ",
  forward: "KUBE-FORWARD",
  proxyFirewall: "KUBE-PROXY-FIREWALL",
  /** Shared with kubelet: blocks martian localnet traffic when localhost node ports are on. */
  kubeletFirewall: "KUBE-FIREWALL",
  canary: "KUBE-PROXY-CANARY",
});

/** One rule in a built-in chain that jumps to a kproxy chain. */
export interface BaseJump {
  table: IptablesTable;
  /** Built-in chain holding the jump (INPUT, FORWARD, ...). */
  from: string;
  /** kproxy chain jumped to. */
  to: string;
  comment: string;
  /** Extra match arguments before the comment. */
  match: readonly string[];
}

const NEW = ["-m", "conntrack", "--ctstate", "NEW"] as const;

/** The jumps from built-in chains, as upstream's `iptablesJumpChains`. */
export const BASE_JUMPS: readonly BaseJump[] = Object.freeze([
  {
    table: "filter",
    from: "INPUT",
    to: Chains.externalServices,
    comment: "kubernetes externally-visible service portals",
    match: NEW,
  },
  {
    table: "filter",
    from: "FORWARD",
    to: Chains.externalServices,
    comment: "kubernetes externally-visible service portals",
    match: NEW,
  },
  {
    table: "filter",
    from: "INPUT",
    to: Chains.nodePorts,
    comment: "kubernetes health check service ports",
    match: [],
  },
  {
    table: "filter",
    from: "FORWARD",
    to: Chains.services,
    comment: "kubernetes service portals",
    match: NEW,
  },
  {
    table: "filter",
    from: "OUTPUT",
    to: Chains.services,
    comment: "kubernetes service portals",
    match: NEW,
  },
  {
    table: "filter",
    from: "FORWARD",
    to: Chains.forward,
    comment: "kubernetes forwarding rules",
    match: [],
  },
  {
    table: "filter",
    from: "INPUT",
    to: Chains.proxyFirewall,
    comment: "kubernetes load balancer firewall",
    match: NEW,
  },
  {
    table: "filter",
    from: "OUTPUT",
    to: Chains.proxyFirewall,
    comment: "kubernetes load balancer firewall",
    match: NEW,
  },
  {
    table: "filter",
    from: "FORWARD",
    to: Chains.proxyFirewall,
    comment: "kubernetes load balancer firewall",
    match: NEW,
  },
  {
    table: "nat",
    from: "OUTPUT",
    to: Chains.services,
    comment: "kubernetes service portals",
    match: [],
  },
  {
    table: "nat",
    from: "PREROUTING",
    to: Chains.services,
    comment: "kubernetes service portals",
    match: [],
  },
  {
    table: "nat",
    from: "POSTROUTING",
    to: Chains.postrouting,
    comment: "kubernetes postrouting rules",
    match: [],
  },
]);

/** Jumps to the kubelet-style localnet firewall, installed only with localhost node ports (IPv4). */
export const LOCALHOST_FIREWALL_JUMPS: readonly BaseJump[] = Object.freeze([
  { table: "filter", from: "INPUT", to: Chains.kubeletFirewall, comment: "", match: [] },
  { table: "filter", from: "OUTPUT", to: Chains.kubeletFirewall, comment: "", match: [] },
]);

/** The rule arguments of a base jump, without `-A`/`-I`/`-C` and chain. */
export function baseJumpArgs(jump: BaseJump): string[] {
  const comment = jump.comment === "" ? [] : ["-m", "comment", "--comment", jump.comment];
  return [...jump.match, ...comment, "-j", jump.to];
}

/**
 * Chains owned by kproxy (and kube-proxy) that `cleanup` flushes and deletes:
 * the fixed ones and every per-service chain. Kubelet's chains
 * (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-MARK-DROP) are left alone.
 */
export function isOwnedChain(name: string): boolean {
  return (Object.values(Chains) as string[]).includes(name) &&
      name !== Chains.kubeletFirewall ||
    PER_SERVICE_CHAIN.test(name);
}

/** A per-service chain: kube-proxy's name, or the alternate (`-2`) a chunked full sync writes. */
const PER_SERVICE_CHAIN = /^KUBE-(SVC|SVL|EXT|FW|SEP|XLB)-[A-Z2-7]{16}(-2)?$/;

/** Decides whether a chain of a table belongs to a mode. */
export type ChainOwnership = (table: string, chain: string) => boolean;

/** The fixed chains of the iptables mode per table, kproxy's and kube-proxy's alike. */
const IPTABLES_MODE_CHAINS: Readonly<Record<string, readonly string[]>> = {
  nat: [Chains.services, Chains.nodePorts, Chains.postrouting, Chains.markMasq, Chains.canary],
  filter: [
    Chains.services,
    Chains.externalServices,
    Chains.nodePorts,
    Chains.forward,
    Chains.proxyFirewall,
    Chains.canary,
  ],
  mangle: [Chains.canary],
};

/**
 * The chains of the iptables mode, which kproxy names as kube-proxy does: the
 * fixed chains of each table and the per-service chains of `nat`. As
 * upstream's cleanup, kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY and
 * KUBE-IPTABLES-HINT are not the mode's.
 */
export const isIptablesModeChain: ChainOwnership = (table, chain) =>
  (IPTABLES_MODE_CHAINS[table]?.includes(chain) ?? false) ||
  (table === "nat" && PER_SERVICE_CHAIN.test(chain));

/**
 * The jumps of `jumps` that `iptables-save` output of their tables does not
 * show: a rule in the built-in chain that jumps to the target and carries the
 * comment. Tables missing from `saves` count as holding no jump.
 */
export function missingJumps(
  saves: Partial<Record<IptablesTable, string>>,
  jumps: readonly BaseJump[],
): BaseJump[] {
  return jumps.filter((jump) => {
    const save = saves[jump.table] ?? "";
    // Only the built-in chain's own lines, not one line per rule of the table.
    const lines = save.matchAll(new RegExp(`^-A ${jump.from} .*$`, "gm"));
    return !lines.some(([line]) =>
      line.endsWith(` -j ${jump.to}`) &&
      (jump.comment === "" || line.includes(jump.comment)) &&
      jump.match.every((word) => line.includes(word))
    );
  });
}
