/**
 * The command-line flags: kube-proxy's names plus kproxy's own, each with its
 * help text and how it changes the Config, and the tokenizer that reads them.
 *
 * @module
 */

import type { Config } from "./types.ts";
import { IPVS_SCHEDULERS } from "./types.ts";
import { featureGatesHelp } from "./gates.ts";
import {
  appendPortIfNeeded,
  ConfigError,
  IPTABLES_BACKENDS,
  toBool,
  toChoice,
  toCIDRList,
  toDetectLocalMode,
  toDuration,
  toGates,
  toHostPort,
  toInt,
  toInterfaceName,
  toIP,
  toMasqueradeBit,
  toNodePortAddresses,
  toNonNegative,
  toOomScoreAdj,
  toPortRange,
  toProxyMode,
  toScheduler,
  toVerbosity,
} from "./values.ts";
import { modeOf, PROXY_MODES } from "../../backends/registry.ts";

type FlagGroup =
  | "General"
  | "Proxy mode"
  | "Networking"
  | "iptables"
  | "nftables"
  | "IPVS"
  | "Windows (kernelspace)"
  | "Logging"
  | "explain"
  | "Accepted for compatibility, ignored";

/** The `--proxy-mode` help: the registry's modes by platform. */
function proxyModeHelp(): string {
  const named = (platform: string) => {
    const modes = PROXY_MODES.filter((mode) => modeOf(mode).platform === platform)
      .map((mode) => `'${mode}'`);
    return modes.length < 2
      ? modes.join("")
      : `${modes.slice(0, -1).join(", ")} or ${modes.at(-1)}`;
  };
  return `Which proxy mode to use: ${named("linux")} on Linux; ${named("windows")} on Windows.`;
}

/** One command-line flag: how it shows in `--help` and how it changes the Config. */
export interface FlagSpec {
  name: string;
  group: FlagGroup;
  /** Value placeholder in `--help`; "" for booleans. */
  type: string;
  help: string;
  /** The Config field it sets (dotted), for error labels and the default shown in `--help`. */
  key?: string;
  /** Shown instead of the default derived from `key`. */
  defaultText?: string;
  apply?(config: Config, raw: string, field: string): void;
}

const FLAGS: readonly FlagSpec[] = [
  {
    name: "config",
    group: "General",
    type: "string",
    key: "configFile",
    help: "The path to the configuration file (a KubeProxyConfiguration). Flags given on the " +
      "command line override its values.",
    apply: (c, raw) => (c.configFile = raw),
  },
  {
    name: "kubeconfig",
    group: "General",
    type: "string",
    key: "kubeconfig",
    help: "Path to kubeconfig file with authorization information (the master location can be " +
      "overridden by the master flag).",
    apply: (c, raw) => (c.kubeconfig = raw),
  },
  {
    name: "master",
    group: "General",
    type: "string",
    key: "master",
    help: "The address of the Kubernetes API server (overrides any value in kubeconfig).",
    apply: (c, raw) => (c.master = raw),
  },
  {
    name: "manifests",
    group: "General",
    type: "dir",
    key: "manifests",
    help: "kproxy: read Services and EndpointSlices from the manifests in this directory instead " +
      "of an API server.",
    apply: (c, raw) => (c.manifests = raw),
  },
  {
    name: "hostname-override",
    group: "General",
    type: "string",
    key: "hostnameOverride",
    defaultText: "the host name",
    help: "If non-empty, will be used as the name of the Node that kproxy is running on. If " +
      "unset, the node name is assumed to be the same as the node's hostname.",
    apply: (c, raw) => {
      if (raw.trim() !== "") c.hostnameOverride = raw.trim().toLowerCase();
    },
  },
  {
    name: "feature-gates",
    group: "General",
    type: "mapStringBool",
    key: "featureGates",
    defaultText: "none: each gate at its own default",
    help: "A set of key=value pairs that describe feature gates for alpha/experimental " +
      "features: every gate of Kubernetes 1.36 (an unknown one is logged and ignored). " +
      `Each is Name=true|false. Options are: ${featureGatesHelp()}.`,
    apply: (c, raw, field) => Object.assign(c.featureGates, toGates(raw, field)),
  },
  {
    name: "cleanup",
    group: "General",
    type: "",
    key: "cleanup",
    help: "If true cleanup iptables, nftables and ipvs rules and exit.",
    apply: (c, raw, field) => (c.cleanup = toBool(raw, field)),
  },
  {
    name: "init-only",
    group: "General",
    type: "",
    defaultText: "false",
    help: "If true, perform the initialization steps that need full root privileges (the " +
      "conntrack sysctls and the OOM score), and then exit.",
  },
  {
    name: "write-config-to",
    group: "General",
    type: "string",
    defaultText: '""',
    help: "Refused: kproxy writes no file. `kproxy --help` shows every default; " +
      "docs/CONFIG.md the file's fields.",
    apply: (_c, _raw, field) => {
      throw new ConfigError(
        field,
        `Cannot parse ${field}: kproxy writes no file (its permissions allow none); ` +
          "see --help and docs/CONFIG.md for the defaults",
      );
    },
  },
  {
    name: "healthz-port",
    group: "Networking",
    type: "int32",
    defaultText: "10256",
    help: "Deprecated: 0 disables the health check server (another port changes nothing, as " +
      "in kube-proxy); use --healthz-bind-address. Ignored with --config.",
  },
  {
    name: "metrics-port",
    group: "Networking",
    type: "int32",
    defaultText: "10249",
    help: "Deprecated: 0 disables the metrics server (another port changes nothing, as in " +
      "kube-proxy); use --metrics-bind-address. Ignored with --config.",
  },
  {
    name: "version",
    group: "General",
    type: "",
    defaultText: "false",
    help: "Print version information and quit.",
  },
  {
    name: "help",
    group: "General",
    type: "",
    defaultText: "false",
    help: "Print this help and quit.",
  },
  {
    name: "proxy-mode",
    group: "Proxy mode",
    type: "ProxyMode",
    key: "proxyMode",
    help: proxyModeHelp(),
    apply: (c, raw, field) => (c.proxyMode = toProxyMode(raw, field)),
  },
  {
    name: "bind-address",
    group: "Networking",
    type: "ip",
    key: "bindAddress",
    help: "Overrides kproxy's idea of what its node's primary IP is. kproxy does not bind any " +
      "socket to this IP.",
    apply: (c, raw, field) => (c.bindAddress = toIP(raw, field)),
  },
  {
    name: "healthz-bind-address",
    group: "Networking",
    type: "ipport",
    key: "healthzBindAddress",
    help: "The IP address with port for the health check server to serve on ([::]:10256 for all " +
      "IPv6 interfaces). Set empty to disable.",
    apply: (
      c,
      raw,
      field,
    ) => (c.healthzBindAddress = toHostPort(appendPortIfNeeded(raw, 10256), field)),
  },
  {
    name: "metrics-bind-address",
    group: "Networking",
    type: "ipport",
    key: "metricsBindAddress",
    help: "The IP address with port for the metrics server to serve on (0.0.0.0:10249 for all " +
      "IPv4 interfaces). Set empty to disable.",
    apply: (
      c,
      raw,
      field,
    ) => (c.metricsBindAddress = toHostPort(appendPortIfNeeded(raw, 10249), field)),
  },
  {
    name: "cluster-cidr",
    group: "Networking",
    type: "string",
    key: "clusterCIDRs",
    help: "The CIDR range of the pods in the cluster (comma-separated for dual-stack: one IPv4 " +
      "and one IPv6). Used to detect traffic from local pods with --detect-local-mode=ClusterCIDR.",
    apply: (c, raw, field) => (c.clusterCIDRs = toCIDRList(raw, field)),
  },
  {
    name: "detect-local-mode",
    group: "Networking",
    type: "LocalMode",
    key: "detectLocalMode",
    help: "Mode to use to detect local traffic: ClusterCIDR, NodeCIDR, BridgeInterface or " +
      "InterfaceNamePrefix. Empty means ClusterCIDR.",
    apply: (c, raw, field) => (c.detectLocalMode = toDetectLocalMode(raw, field)),
  },
  {
    name: "pod-bridge-interface",
    group: "Networking",
    type: "string",
    key: "bridgeInterface",
    help: "A bridge interface name. When --detect-local-mode is BridgeInterface, traffic " +
      "arriving on it is local.",
    apply: (c, raw, field) => (c.bridgeInterface = toInterfaceName(raw, field)),
  },
  {
    name: "pod-interface-name-prefix",
    group: "Networking",
    type: "string",
    key: "interfaceNamePrefix",
    help: "An interface name prefix. When --detect-local-mode is InterfaceNamePrefix, traffic " +
      "arriving on interfaces with this prefix is local.",
    apply: (c, raw, field) => (c.interfaceNamePrefix = toInterfaceName(raw, field)),
  },
  {
    name: "nodeport-addresses",
    group: "Networking",
    type: "strings",
    key: "nodePortAddresses",
    help: "A list of CIDR ranges that contain valid node IPs, or the single string 'primary'. " +
      "NodePort connections are accepted only on node IPs in these ranges (for an IP family " +
      "with no range: on all its local IPs), or on the node's primary IP(s) from the Node " +
      "object (or --bind-address). Empty: all local IPs in the iptables and ipvs modes, " +
      "'primary' in the nftables mode.",
    apply: (c, raw, field) => (c.nodePortAddresses = toNodePortAddresses(raw, field)),
  },
  {
    name: "masquerade-all",
    group: "Networking",
    type: "",
    key: "masqueradeAll",
    help: "SNAT all traffic sent via Service cluster IPs.",
    apply: (c, raw, field) => (c.masqueradeAll = toBool(raw, field)),
  },
  {
    name: "conntrack-tcp-be-liberal",
    group: "Networking",
    type: "",
    key: "conntrack.tcpBeLiberal",
    help: "Enable liberal mode for tracking TCP packets by setting nf_conntrack_tcp_be_liberal " +
      "to 1.",
    apply: (c, raw, field) => (c.conntrack.tcpBeLiberal = toBool(raw, field)),
  },
  {
    name: "conntrack-max-per-core",
    group: "Networking",
    type: "int32",
    key: "conntrack.maxPerCore",
    help: "Maximum number of NAT connections to track per CPU core (0 to leave the limit as-is " +
      "and ignore conntrack-min).",
    apply: (c, raw, field) => (c.conntrack.maxPerCore = toNonNegative(toInt(raw, field), field)),
  },
  {
    name: "conntrack-min",
    group: "Networking",
    type: "int32",
    key: "conntrack.min",
    help: "Minimum number of conntrack entries to allocate, regardless of " +
      "conntrack-max-per-core (set conntrack-max-per-core=0 to leave the limit as-is).",
    apply: (c, raw, field) => (c.conntrack.min = toNonNegative(toInt(raw, field), field)),
  },
  {
    name: "conntrack-tcp-timeout-established",
    group: "Networking",
    type: "duration",
    key: "conntrack.tcpEstablishedTimeoutMs",
    help: "Idle timeout for established TCP connections (0 to leave as-is).",
    apply: (c, raw, field) => (c.conntrack.tcpEstablishedTimeoutMs = toDuration(raw, field)),
  },
  {
    name: "conntrack-tcp-timeout-close-wait",
    group: "Networking",
    type: "duration",
    key: "conntrack.tcpCloseWaitTimeoutMs",
    help: "NAT timeout for TCP connections in the CLOSE_WAIT state (0 to leave as-is).",
    apply: (c, raw, field) => (c.conntrack.tcpCloseWaitTimeoutMs = toDuration(raw, field)),
  },
  {
    name: "conntrack-udp-timeout",
    group: "Networking",
    type: "duration",
    key: "conntrack.udpTimeoutMs",
    help: "Idle timeout for UNREPLIED UDP connections (0 to leave as-is).",
    apply: (c, raw, field) => (c.conntrack.udpTimeoutMs = toDuration(raw, field)),
  },
  {
    name: "conntrack-udp-timeout-stream",
    group: "Networking",
    type: "duration",
    key: "conntrack.udpStreamTimeoutMs",
    help: "Idle timeout for ASSURED UDP connections (0 to leave as-is).",
    apply: (c, raw, field) => (c.conntrack.udpStreamTimeoutMs = toDuration(raw, field)),
  },
  {
    name: "oom-score-adj",
    group: "General",
    type: "int32",
    key: "oomScoreAdj",
    help: "The oom-score-adj value for the kproxy process, set with choom at start (a failure " +
      "is logged at -v=4). Values must be within the range [-1000, 1000].",
    apply: (c, raw, field) => (c.oomScoreAdj = toOomScoreAdj(toInt(raw, field), field)),
  },
  {
    name: "service-cluster-ip-range",
    group: "Networking",
    type: "strings",
    key: "serviceClusterIPRange",
    help: "kproxy: the Service cluster IP ranges (comma-separated CIDRs), used when the cluster " +
      "has no ServiceCIDR objects.",
    apply: (c, raw, field) => (c.serviceClusterIPRange = toCIDRList(raw, field)),
  },
  {
    name: "service-node-port-range",
    group: "Networking",
    type: "string",
    key: "serviceNodePortRange",
    help: "kproxy: the apiserver's --service-node-port-range. Health-check node ports are served " +
      "only in this range: kproxy's permissions name each of its ports.",
    defaultText: "30000-32767",
    apply: (c, raw, field) => (c.serviceNodePortRange = toPortRange(raw, field)),
  },
  {
    name: "external-ip-allowed-cidrs",
    group: "Networking",
    type: "strings",
    key: "externalIPAllowedCIDRs",
    help: "kproxy: when set, Service externalIPs outside these comma-separated CIDRs are ignored " +
      "(CVE-2020-8554).",
    apply: (c, raw, field) => (c.externalIPAllowedCIDRs = toCIDRList(raw, field)),
  },
  {
    name: "service-counters",
    group: "Networking",
    type: "",
    key: "serviceCounters",
    help: "kproxy: keep per-Service-port traffic counters in the kernel (connections, and " +
      "packets refused for no endpoints, no local endpoint or a source range) and export " +
      "them as kproxy_service_connections_total and kproxy_service_refused_packets_total. " +
      "Set false for no counter in the rules and no series.",
    apply: (c, raw, field) => (c.serviceCounters = toBool(raw, field)),
  },
  {
    name: "iptables-sync-period",
    group: "iptables",
    type: "duration",
    key: "iptables.syncPeriodMs",
    help: "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various " +
      "re-synchronizing and cleanup operations are performed. Must be greater than 0. " +
      "Used by every mode but ipvs, as in kube-proxy.",
    apply: (c, raw, field) => (c.iptables.syncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "iptables-min-sync-period",
    group: "iptables",
    type: "duration",
    key: "iptables.minSyncPeriodMs",
    help: "The minimum period between iptables rule resyncs (e.g. '5s', '1m', '2h22m'). 0 " +
      "means every Service or EndpointSlice change results in an immediate resync. Used by " +
      "every mode but ipvs, as in kube-proxy.",
    apply: (c, raw, field) => (c.iptables.minSyncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "iptables-masquerade-bit",
    group: "iptables",
    type: "int32",
    key: "iptables.masqueradeBit",
    help: "The bit of the fwmark space to mark packets requiring SNAT with. Must be within " +
      "0..31.",
    apply: (
      c,
      raw,
      field,
    ) => (c.iptables.masqueradeBit = toMasqueradeBit(toInt(raw, field), field)),
  },
  {
    name: "iptables-localhost-nodeports",
    group: "iptables",
    type: "",
    key: "iptables.localhostNodePorts",
    help: "If true, NodePort services accept connections on 127.0.0.1 (iptables mode only). " +
      "Off by default in kproxy (CVE-2020-8558).",
    apply: (c, raw, field) => (c.iptables.localhostNodePorts = toBool(raw, field)),
  },
  {
    name: "iptables-backend",
    group: "iptables",
    type: "string",
    key: "iptables.backend",
    help: "kproxy: which iptables binaries to use: auto, nft (iptables-nft) or legacy " +
      "(iptables-legacy).",
    apply: (
      c,
      raw,
      field,
    ) => (c.iptables.backend = toChoice(IPTABLES_BACKENDS, "iptables backend")(raw, field)),
  },
  {
    name: "nftables-sync-period",
    group: "nftables",
    type: "duration",
    key: "nftables.syncPeriodMs",
    help: "kproxy: the nftables mode's sync period, over --iptables-sync-period (e.g. '5s', " +
      "'1m'). Must be greater than 0.",
    apply: (c, raw, field) => (c.nftables.syncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "nftables-min-sync-period",
    group: "nftables",
    type: "duration",
    key: "nftables.minSyncPeriodMs",
    help: "kproxy: the nftables mode's minimum period between resyncs, over " +
      "--iptables-min-sync-period. 0 means every change results in an immediate resync.",
    apply: (c, raw, field) => (c.nftables.minSyncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "ipvs-sync-period",
    group: "IPVS",
    type: "duration",
    key: "ipvs.syncPeriodMs",
    help: "How often IPVS rules are fully re-synchronized (e.g. '5s', '1m'). Must be greater " +
      "than 0.",
    apply: (c, raw, field) => (c.ipvs.syncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "ipvs-min-sync-period",
    group: "IPVS",
    type: "duration",
    key: "ipvs.minSyncPeriodMs",
    help: "The minimum period between IPVS rule resyncs. 0 means every change results in an " +
      "immediate resync. Must not exceed --ipvs-sync-period.",
    apply: (c, raw, field) => (c.ipvs.minSyncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "ipvs-scheduler",
    group: "IPVS",
    type: "string",
    key: "ipvs.scheduler",
    help: `The IPVS scheduler: ${IPVS_SCHEDULERS.join(", ")}. Empty means rr.`,
    apply: (c, raw, field) => (c.ipvs.scheduler = toScheduler(raw, field)),
  },
  {
    name: "ipvs-strict-arp",
    group: "IPVS",
    type: "",
    key: "ipvs.strictARP",
    help: "Enable strict ARP by setting arp_ignore to 1 and arp_announce to 2.",
    apply: (c, raw, field) => (c.ipvs.strictARP = toBool(raw, field)),
  },
  {
    name: "ipvs-tcp-timeout",
    group: "IPVS",
    type: "duration",
    key: "ipvs.tcpTimeoutMs",
    help: "The timeout for idle IPVS TCP connections (e.g. '5s', '1m'). 0 leaves it unchanged.",
    apply: (c, raw, field) => (c.ipvs.tcpTimeoutMs = toDuration(raw, field)),
  },
  {
    name: "ipvs-tcpfin-timeout",
    group: "IPVS",
    type: "duration",
    key: "ipvs.tcpFinTimeoutMs",
    help: "The timeout for IPVS TCP connections after receiving a FIN packet. 0 leaves it " +
      "unchanged.",
    apply: (c, raw, field) => (c.ipvs.tcpFinTimeoutMs = toDuration(raw, field)),
  },
  {
    name: "ipvs-udp-timeout",
    group: "IPVS",
    type: "duration",
    key: "ipvs.udpTimeoutMs",
    help: "The timeout for IPVS UDP packets. 0 leaves it unchanged.",
    apply: (c, raw, field) => (c.ipvs.udpTimeoutMs = toDuration(raw, field)),
  },
  {
    name: "source-vip",
    group: "Windows (kernelspace)",
    type: "string",
    key: "winkernel.sourceVip",
    help: "The IP address of the source VIP for non-DSR.",
    apply: (c, raw) => (c.winkernel.sourceVip = raw),
  },
  {
    name: "enable-dsr",
    group: "Windows (kernelspace)",
    type: "",
    key: "winkernel.enableDSR",
    help: "If true make kproxy apply DSR policies for service VIP (needs --feature-gates " +
      "WinDSR=true).",
    apply: (c, raw, field) => (c.winkernel.enableDSR = toBool(raw, field)),
  },
  {
    name: "network-name",
    group: "Windows (kernelspace)",
    type: "string",
    key: "winkernel.networkName",
    help: "The name of the cluster network.",
    apply: (c, raw) => (c.winkernel.networkName = raw),
  },
  {
    name: "root-hnsendpoint-name",
    group: "Windows (kernelspace)",
    type: "string",
    key: "winkernel.rootHnsEndpointName",
    help: "The name of the hns endpoint name for root namespace attached to l2bridge " +
      '(default "cbr0").',
    apply: (c, raw) => (c.winkernel.rootHnsEndpointName = raw),
  },
  {
    name: "forward-healthcheck-vip",
    group: "Windows (kernelspace)",
    type: "",
    key: "winkernel.forwardHealthCheckVip",
    help: "If true forward service VIP for health check port.",
    apply: (c, raw, field) => (c.winkernel.forwardHealthCheckVip = toBool(raw, field)),
  },
  {
    name: "v",
    group: "Logging",
    type: "Level",
    key: "verbosity",
    help: "Number for the log level verbosity: 0 warnings, errors and startup " +
      "information; 1-2 info; 3-4 debug; 5 and up trace.",
    apply: (c, raw, field) => (c.verbosity = toVerbosity(toInt(raw, field), field)),
  },
  {
    name: "from",
    group: "explain",
    type: "ip",
    defaultText: '""',
    help: "explain: the client's source IP address.",
  },
  {
    name: "node",
    group: "explain",
    type: "string",
    defaultText: "the node name",
    help: "explain: the node the packet enters the cluster on.",
  },
];

/** Upstream kube-proxy flags kproxy accepts and ignores, so existing unit files keep working. */
const IGNORED_FLAGS: readonly { name: string; type: string }[] = [
  { name: "bind-address-hard-fail", type: "" },
  { name: "profiling", type: "" },
  { name: "config-sync-period", type: "duration" },
  { name: "kube-api-burst", type: "int32" },
  { name: "kube-api-qps", type: "float32" },
  { name: "kube-api-content-type", type: "string" },
  { name: "ipvs-exclude-cidrs", type: "strings" },
  { name: "show-hidden-metrics-for-version", type: "string" },
  { name: "log-flush-frequency", type: "duration" },
  { name: "logging-format", type: "string" },
  { name: "log-json-info-buffer-size", type: "quantity" },
  { name: "log-json-split-stream", type: "" },
  { name: "log-text-info-buffer-size", type: "quantity" },
  { name: "log-text-split-stream", type: "" },
  { name: "vmodule", type: "pattern=N,..." },
  { name: "windows-service", type: "" },
  { name: "boot-id-file", type: "string" },
  { name: "machine-id-file", type: "string" },
];

export const ALL_FLAGS: readonly FlagSpec[] = [
  ...FLAGS,
  ...IGNORED_FLAGS.map((flag): FlagSpec => ({
    ...flag,
    group: "Accepted for compatibility, ignored",
    help: "Accepted for kube-proxy compatibility; has no effect in kproxy.",
  })),
];

export const FLAGS_BY_NAME: ReadonlyMap<string, FlagSpec> = new Map(
  ALL_FLAGS.map((f) => [f.name, f]),
);

/** The label of a flag in errors and help: `-v` style for one letter is `--v` like klog. */
export function flagLabel(name: string): string {
  return `--${name}`;
}

function isBooleanFlag(name: string): boolean {
  return FLAGS_BY_NAME.get(name)?.type === "";
}

type ParsedToken =
  | { kind: "option"; name: string; value: string; rawName: string }
  | { kind: "positional"; value: string };

/** Flags that only switch something on: `--help` and `--version` take no value at all. */
const SWITCHES = new Set(["help", "version"]);

/**
 * Splits a command line into flags and positionals as kube-proxy's pflag
 * reads it: `--name=value` and `--name value`; a boolean flag alone means
 * true and takes its value only inline (`--cleanup=false`); `-v=4`, `-v4`,
 * `-v 4` and `-h`; everything after `--` is positional. A flag that needs a
 * value and is followed by nothing or by another flag is an error, as is a
 * flag kproxy does not have.
 *
 * @throws {ConfigError} naming the flag
 */
export function tokenize(argv: string[]): ParsedToken[] {
  const out: ParsedToken[] = [];
  for (let index = 0; index < argv.length; index++) {
    const arg = argv[index]!;
    if (arg === "--") {
      for (const rest of argv.slice(index + 1)) out.push({ kind: "positional", value: rest });
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      out.push({ kind: "positional", value: arg });
      continue;
    }
    const long = arg.startsWith("--");
    const [name, inline] = long ? splitLong(arg.slice(2)) : splitShort(arg.slice(1));
    const rawName = long ? `--${name}` : `-${name}`;
    const field = name === "v" ? "--v" : rawName;
    if (!long && name !== "v" && name !== "h") {
      throw new ConfigError(rawName, `Cannot parse ${rawName}: unknown flag (see --help)`);
    }
    const canonical = name === "h" ? "help" : name;
    if (long && !FLAGS_BY_NAME.has(canonical)) {
      throw new ConfigError(field, `Cannot parse ${field}: unknown flag (see --help)`);
    }
    if (SWITCHES.has(canonical)) {
      if (inline !== undefined) {
        throw new ConfigError(field, `Cannot parse ${field}: takes no value`);
      }
      out.push({ kind: "option", name: canonical, value: "true", rawName });
      continue;
    }
    let value = inline;
    if (value === undefined && isBooleanFlag(canonical)) value = "true";
    if (value === undefined) {
      const next = argv[index + 1];
      if (next === undefined || (next.startsWith("-") && next !== "-")) {
        throw new ConfigError(field, `Cannot parse ${field}: a value is required`);
      }
      value = next;
      index++;
    }
    out.push({ kind: "option", name: canonical, value, rawName });
  }
  return out;
}

/** `name=value` → [name, value]; `name` → [name, undefined]. */
function splitLong(text: string): [string, string | undefined] {
  const equals = text.indexOf("=");
  return equals < 0 ? [text, undefined] : [text.slice(0, equals), text.slice(equals + 1)];
}

/** `v=4`, `v4` → ["v", "4"]; `h` → ["h", undefined]. */
function splitShort(text: string): [string, string | undefined] {
  const rest = text.slice(1);
  return [text.slice(0, 1), rest === "" ? undefined : rest.replace(/^=/, "")];
}
