/**
 * The conntrack kernel parameters kube-proxy 1.36 sets at start
 * (`pkg/proxy/conntrack/sysctls.go`), decided from the configuration and the
 * number of CPUs. Pure: `lib/shell/node_setup.ts` reads and writes them.
 *
 * @module
 */

/** The `conntrack` settings of a KubeProxyConfiguration; zero leaves a value as it is. */
export interface ConntrackSettings {
  /** Entries per CPU for nf_conntrack_max; 0 leaves the limit (and `min`) alone. */
  maxPerCore: number;
  /** Lower bound of nf_conntrack_max when `maxPerCore` is set. */
  min: number;
  tcpEstablishedTimeoutMs: number;
  tcpCloseWaitTimeoutMs: number;
  tcpBeLiberal: boolean;
  udpTimeoutMs: number;
  udpStreamTimeoutMs: number;
}

/** One kernel parameter to set: always (`set`), or only when its value is lower (`raise`). */
export interface ConntrackSysctl {
  key: string;
  value: string;
  only: "set" | "raise";
}

/** kube-proxy caps the scaled limit at 1M entries. */
const MAX_CONNTRACK = 1_048_576;
const PREFIX = "net.netfilter.nf_conntrack_";

/**
 * The conntrack sysctls to apply, in kube-proxy's order: nf_conntrack_max
 * (maxPerCore × CPUs, at least `min`, at most 1M) and its hash table raised to
 * a quarter of it (kube-proxy writes the module's `hashsize`; the sysctl
 * `nf_conntrack_buckets` is the same table), then the timeouts in whole
 * seconds and liberal TCP tracking.
 *
 * @param settings The configuration's conntrack settings.
 * @param cpus The number of CPUs.
 * @returns The parameters to apply; empty when every setting says "leave as is".
 * @example Usage
 * ```ts
 * conntrackSysctls({ maxPerCore: 0, min: 0, tcpEstablishedTimeoutMs: 0,
 *   tcpCloseWaitTimeoutMs: 0, tcpBeLiberal: true, udpTimeoutMs: 0, udpStreamTimeoutMs: 0 }, 2);
 * // [{ key: "net.netfilter.nf_conntrack_tcp_be_liberal", value: "1", only: "set" }]
 * ```
 */
export function conntrackSysctls(settings: ConntrackSettings, cpus: number): ConntrackSysctl[] {
  const out: ConntrackSysctl[] = [];
  const set = (name: string, value: number) =>
    out.push({ key: PREFIX + name, value: String(value), only: "set" });
  if (settings.maxPerCore > 0) {
    const scaled = settings.maxPerCore * cpus;
    const max = scaled > MAX_CONNTRACK ? MAX_CONNTRACK : Math.max(scaled, settings.min);
    if (max > 0) {
      set("max", max);
      out.push({ key: `${PREFIX}buckets`, value: String(Math.floor(max / 4)), only: "raise" });
    }
  }
  const seconds = (ms: number) => Math.floor(ms / 1000);
  if (settings.tcpEstablishedTimeoutMs > 0) {
    set("tcp_timeout_established", seconds(settings.tcpEstablishedTimeoutMs));
  }
  if (settings.tcpCloseWaitTimeoutMs > 0) {
    set("tcp_timeout_close_wait", seconds(settings.tcpCloseWaitTimeoutMs));
  }
  if (settings.tcpBeLiberal) set("tcp_be_liberal", 1);
  if (settings.udpTimeoutMs > 0) set("udp_timeout", seconds(settings.udpTimeoutMs));
  if (settings.udpStreamTimeoutMs > 0) {
    set("udp_timeout_stream", seconds(settings.udpStreamTimeoutMs));
  }
  return out;
}
