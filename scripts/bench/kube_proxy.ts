/**
 * Upstream kube-proxy's own figures, measured beside kproxy on a real
 * kube-apiserver (both built from source, Kubernetes 1.36, same machine kind,
 * same cluster: N selector-less ClusterIP services, one EndpointSlice of 10
 * endpoints each, objects as the real apiserver serves them; medians of 2–4
 * runs; `/work/shared/facts.md`, "Beside upstream kube-proxy on a real
 * kube-apiserver"). The bench cannot run kube-proxy itself (no build here): it
 * shows these beside its own figures, labelled as measured elsewhere.
 *
 * @module
 */

/** When and how the figures were measured. */
export const KUBE_PROXY_MEASURED =
  "kube-proxy 1.36 on a real kube-apiserver, measured 2026-11-24 on this machine kind";

/** One measured figure; `text` when it is a bound rather than a number. */
export interface KubeProxyFigure {
  ms?: number;
  mib?: number;
  text?: string;
}

type Key = `${"nftables" | "iptables"} ${number}`;

/** Process spawn → `kubeproxy_sync_proxy_rules_last_timestamp_seconds`. */
export const KUBE_PROXY_STARTUP: Readonly<Partial<Record<Key, KubeProxyFigure>>> = {
  "nftables 1000": { ms: 790 },
  "iptables 1000": { ms: 4500 },
  "nftables 10000": { ms: 11_200 },
  "iptables 10000": { text: "no sync within 900 s" },
};

/** An EndpointSlice PUT until the new endpoint is in the kernel. */
export const KUBE_PROXY_CHANGE: Readonly<Partial<Record<Key, KubeProxyFigure>>> = {
  "nftables 1000": { ms: 153 },
  "iptables 1000": { ms: 145 },
  "nftables 10000": { ms: 3700 },
};

/** VmHWM of the proxy process (not its nft / iptables-restore children). */
export const KUBE_PROXY_PEAK_RSS: Readonly<Partial<Record<Key, KubeProxyFigure>>> = {
  "nftables 1000": { mib: 105 },
  "iptables 1000": { mib: 91 },
  "nftables 10000": { mib: 424 },
};

/** Its own `SyncProxyRules complete elapsed=…` for the first (full) sync. */
export const KUBE_PROXY_FULL_SYNC: Readonly<Partial<Record<Key, KubeProxyFigure>>> = {
  "nftables 10000": { ms: 9986 },
  "iptables 10000": { text: "> 900 s (not finished)" },
};

/** kproxy's figures of the same runs (main of 2026-11-24, real apiserver): issue 23's "now". */
export const KPROXY_ON_REAL_APISERVER: Readonly<
  Partial<Record<Key, { startupMs: number; changeMs?: number; peakMiB: number }>>
> = {
  "nftables 1000": { startupMs: 600, changeMs: 19, peakMiB: 130 },
  "iptables 1000": { startupMs: 1400, changeMs: 55, peakMiB: 140 },
  "nftables 10000": { startupMs: 2600, changeMs: 16, peakMiB: 211 },
  "iptables 10000": { startupMs: 10_600, changeMs: 353, peakMiB: 355 },
};

/** The figure of `table` for a mode and size, if measured. */
export function kubeProxyFigure(
  table: Readonly<Partial<Record<Key, KubeProxyFigure>>>,
  mode: string,
  services: number,
): KubeProxyFigure | undefined {
  return table[`${mode} ${services}` as Key];
}
