/**
 * kube-proxy-compatible configuration: the command line (kube-proxy's flag
 * names plus kproxy's own) and the KubeProxyConfiguration file
 * (kubeproxy.config.k8s.io/v1alpha1), merged into a validated {@linkcode Config}
 * with flags given on the command line winning over the file.
 *
 * Pure: the file system and the host name come through
 * {@linkcode ConfigEnvironment}.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { parse as parseYaml } from "yaml";
import type { Config, DetectLocalMode, PortRange, ProxyMode, SyncPeriods } from "./types.ts";
import { IPVS_SCHEDULERS } from "./types.ts";
import { parseCIDR, parseIP } from "../core/ip.ts";

/** A configuration problem; `field` names the flag (`--iptables-sync-period`) or file field (`iptables.syncPeriod`). */
export class ConfigError extends Error {
  /** The flag or file field at fault. */
  readonly field: string;

  constructor(field: string, message: string) {
    super(message);
    this.name = "ConfigError";
    this.field = field;
  }
}

/** What {@linkcode parseCommandLine} needs from the outside world. */
export interface ConfigEnvironment {
  /** Reads a whole text file; throws when it cannot. */
  readTextFile(path: string): string;
  /** The host's name, the default node name. */
  hostname(): string;
}

/** A subcommand of kproxy. */
export type Command =
  | "run"
  | "plan"
  | "demo"
  | "explain"
  | "diff"
  | "hand-back"
  | "version"
  | "help";

/** The parsed command line. */
export interface CommandLine {
  command: Command;
  config: Config;
  /** Positional arguments after the subcommand, e.g. explain's DEST. */
  args: string[];
  /** `--from` and `--node` of `explain` (node defaults to the node name); only for that command. */
  explain?: { from: string; node: string };
  /** Names of the flags given on the command line, without dashes, in order of first use. */
  flagsSet: string[];
  /** Non-fatal findings to log once logging is set up, e.g. ignored upstream fields. */
  warnings: string[];
}

/** Feature gates kproxy knows, with upstream's defaults. Any other gate is an error. */
export const FEATURE_GATE_DEFAULTS: Readonly<Record<string, boolean>> = Object.freeze({
  ServiceTopology: false,
  TopologyAwareHints: true,
  ServiceTrafficDistribution: true,
  PreferSameTrafficDistribution: true,
  WinDSR: false,
  WinOverlay: true,
  NFTablesProxyMode: true,
  MultiCIDRServiceAllocator: true,
  ProxyTerminatingEndpoints: true,
  ServiceInternalTrafficPolicy: true,
  KubeProxyDrainingTerminatingNodes: true,
});

const PROXY_MODES: readonly ProxyMode[] = ["nftables", "iptables", "ipvs", "kernelspace"];
const DETECT_LOCAL_MODES: readonly DetectLocalMode[] = [
  "ClusterCIDR",
  "NodeCIDR",
  "BridgeInterface",
  "InterfaceNamePrefix",
];
/** The Config sections that hold per-mode sync periods. */
const MODES = ["iptables", "nftables", "ipvs"] as const;
const IPTABLES_BACKENDS = ["auto", "nft", "legacy"] as const;
const CONFIG_API_VERSION = "kubeproxy.config.k8s.io/v1alpha1";
const CONFIG_KIND = "KubeProxyConfiguration";
const SUBCOMMANDS: readonly Command[] = [
  "plan",
  "demo",
  "explain",
  "diff",
  "hand-back",
  "version",
  "help",
];

/**
 * The configuration used when no flag or file says otherwise.
 *
 * @param hostname The host's name; lower-cased and trimmed like upstream's node name.
 * @returns A fresh, fully populated Config.
 * @example Usage
 * ```ts
 * import { defaultConfig } from "./command_line.ts";
 * defaultConfig("Node-A").hostnameOverride; // "node-a"
 * ```
 */
export function defaultConfig(hostname: string): Config {
  return {
    configFile: "",
    kubeconfig: "",
    master: "",
    manifests: "",
    hostnameOverride: hostname.trim().toLowerCase(),
    proxyMode: "nftables",
    clusterCIDRs: [],
    detectLocalMode: "ClusterCIDR",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    nodePortAddresses: ["primary"],
    masqueradeAll: false,
    bindAddress: "0.0.0.0",
    healthzBindAddress: "0.0.0.0:10256",
    metricsBindAddress: "127.0.0.1:10249",
    iptables: {
      syncPeriodMs: 30_000,
      minSyncPeriodMs: 1_000,
      masqueradeBit: 14,
      localhostNodePorts: false,
      backend: "auto",
    },
    nftables: { syncPeriodMs: 30_000, minSyncPeriodMs: 1_000 },
    ipvs: {
      syncPeriodMs: 30_000,
      minSyncPeriodMs: 1_000,
      scheduler: "rr",
      strictARP: false,
      tcpTimeoutMs: 0,
      tcpFinTimeoutMs: 0,
      udpTimeoutMs: 0,
    },
    winkernel: { sourceVip: "", enableDSR: false, networkName: "" },
    conntrack: { tcpBeLiberal: false },
    serviceClusterIPRange: [],
    externalIPAllowedCIDRs: [],
    serviceNodePortRange: { first: 30000, last: 32767 },
    featureGates: { ...FEATURE_GATE_DEFAULTS },
    cleanup: false,
    verbosity: 0,
  };
}

/**
 * The sync periods of the selected proxy mode. kernelspace uses iptables'
 * periods, as upstream does.
 *
 * @param config A parsed configuration.
 * @returns A copy of the mode's periods.
 */
export function effectiveSyncPeriods(config: Config): SyncPeriods {
  const periods = config.proxyMode === "nftables"
    ? config.nftables
    : config.proxyMode === "ipvs"
    ? config.ipvs
    : config.iptables;
  return { syncPeriodMs: periods.syncPeriodMs, minSyncPeriodMs: periods.minSyncPeriodMs };
}

// ---------------------------------------------------------------------------
// Values: one parser per kind, shared by flags and the file.

const DURATION_UNITS_NS: Readonly<Record<string, number>> = {
  ns: 1,
  us: 1e3,
  "µs": 1e3,
  "μs": 1e3,
  ms: 1e6,
  s: 1e9,
  m: 60e9,
  h: 3600e9,
};

/**
 * Parses a Go duration (`30s`, `1m30s`, `500ms`, `1.5h`, `0`) into milliseconds.
 *
 * @param text The duration text.
 * @returns Milliseconds (may be fractional below 1ms), or undefined when `text` is not a duration.
 */
export function parseDuration(text: string): number | undefined {
  const match = /^([-+]?)(.+)$/.exec(text);
  if (!match) return undefined;
  const [, sign, body] = match as unknown as [string, string, string];
  if (body === "0") return 0;
  const part = /(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)/y;
  let totalNs = 0;
  let offset = 0;
  while (offset < body.length) {
    part.lastIndex = offset;
    const unit = part.exec(body);
    if (!unit) return undefined;
    const [whole, intText = "", fracText = "", name = ""] = unit;
    if (intText === "" && fracText === "") return undefined;
    const scale = DURATION_UNITS_NS[name]!;
    totalNs += Number(intText || "0") * scale;
    if (fracText !== "") totalNs += (Number(fracText) * scale) / 10 ** fracText.length;
    offset += whole.length;
  }
  if (offset === 0 || totalNs > Number.MAX_SAFE_INTEGER) return undefined;
  const ms = totalNs / 1e6;
  return sign === "-" ? -ms : ms;
}

/** Formats milliseconds the way Go prints a duration: `30s`, `1m30s`, `500ms`, `0s`. */
export function formatDuration(ms: number): string {
  if (ms === 0) return "0s";
  if (ms < 0) return `-${formatDuration(-ms)}`;
  if (ms < 1000) return `${ms}ms`;
  const hours = Math.floor(ms / 3_600_000);
  const minutes = Math.floor((ms % 3_600_000) / 60_000);
  const seconds = (ms % 60_000) / 1000;
  if (hours > 0) return `${hours}h${minutes}m${seconds}s`;
  if (minutes > 0) return `${minutes}m${seconds}s`;
  return `${seconds}s`;
}

function fail(field: string, detail: string): never {
  throw new ConfigError(field, `Cannot parse ${field}: ${detail}`);
}

function quote(value: unknown): string {
  return JSON.stringify(typeof value === "string" ? value : String(value));
}

function toDuration(raw: string, field: string): number {
  const ms = parseDuration(raw);
  if (ms === undefined) fail(field, `${quote(raw)} is not a duration (e.g. 30s, 1m30s, 500ms)`);
  if (ms < 0) fail(field, `${quote(raw)} must not be negative`);
  return ms;
}

const GO_TRUE = ["1", "t", "T", "TRUE", "true", "True"];
const GO_FALSE = ["0", "f", "F", "FALSE", "false", "False"];

function toBool(raw: string, field: string): boolean {
  if (GO_TRUE.includes(raw)) return true;
  if (GO_FALSE.includes(raw)) return false;
  return fail(field, `${quote(raw)} is not a boolean (true or false)`);
}

function toInt(raw: string, field: string): number {
  if (!/^[-+]?\d+$/.test(raw)) fail(field, `${quote(raw)} is not an integer`);
  return Number(raw);
}

function toCIDR(raw: string, field: string): string {
  const cidr = parseCIDR(raw.trim());
  if (!cidr) fail(field, `${quote(raw)} is not a CIDR (e.g. 10.244.0.0/16 or fd00::/48)`);
  return cidr.cidr;
}

function splitList(raw: string): string[] {
  return raw.split(",").map((item) => item.trim()).filter((item) => item !== "");
}

function toCIDRList(raw: string, field: string): string[] {
  return splitList(raw).map((item) => toCIDR(item, field));
}

function toIP(raw: string, field: string): string {
  const ip = parseIP(raw);
  if (!ip) fail(field, `${quote(raw)} is not an IP address`);
  return raw;
}

/**
 * Parses `FIRST-LAST`, as the apiserver's --service-node-port-range.
 *
 * @throws {ConfigError} naming `field` when it is not a port range
 */
export function toPortRange(raw: string, field: string): PortRange {
  const match = /^(\d{1,5})-(\d{1,5})$/.exec(raw.trim());
  const [first, last] = [Number(match?.[1]), Number(match?.[2])];
  if (!match || first < 1 || last > 65535 || first > last) {
    fail(field, `${quote(raw)} is not a port range FIRST-LAST (e.g. 30000-32767)`);
  }
  return { first, last };
}

/** `IP:port` or `[IPv6]:port`; "" (disabled) is allowed. */
function toHostPort(raw: string, field: string): string {
  if (raw === "") return raw;
  const match = /^(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,5})$/.exec(raw);
  const host = match?.[1] ?? match?.[2];
  const ip = host === undefined ? undefined : parseIP(host);
  const port = Number(match?.[3]);
  const bracketsMatchFamily = ip !== undefined &&
    (match?.[1] !== undefined) === (ip.family === "IPv6");
  if (!ip || !bracketsMatchFamily || port > 65535) {
    fail(field, `${quote(raw)} is not an IP:port address (e.g. 0.0.0.0:10256 or [::]:10256)`);
  }
  return raw;
}

function toNodePortAddresses(raw: string | string[], field: string): string[] {
  const items = typeof raw === "string" ? splitList(raw) : raw.map((item) => item.trim());
  if (items.includes("primary")) {
    if (items.length > 1) fail(field, `"primary" cannot be combined with CIDRs`);
    return ["primary"];
  }
  return items.map((item) => toCIDR(item, field));
}

function toChoice<T extends string>(choices: readonly T[], what: string) {
  return (raw: string, field: string): T => {
    if ((choices as readonly string[]).includes(raw)) return raw as T;
    return fail(field, `unknown ${what} ${quote(raw)} (want one of ${choices.join(", ")})`);
  };
}

function toProxyMode(raw: string, field: string): ProxyMode {
  return raw === "" ? "nftables" : toChoice(PROXY_MODES, "proxy mode")(raw, field);
}

function toDetectLocalMode(raw: string, field: string): DetectLocalMode {
  return raw === "" ? "" : toChoice(DETECT_LOCAL_MODES, "detect-local mode")(raw, field);
}

function toScheduler(raw: string, field: string): string {
  return raw === "" ? "rr" : toChoice(IPVS_SCHEDULERS, "IPVS scheduler")(raw, field);
}

function toMasqueradeBit(value: number, field: string): number {
  if (value < 0 || value > 31) fail(field, `${value} is out of range 0..31`);
  return value;
}

function toVerbosity(value: number, field: string): number {
  if (value < 0) fail(field, `${value} must be 0 or more`);
  return value;
}

function checkGate(name: string, field: string): void {
  if (!Object.hasOwn(FEATURE_GATE_DEFAULTS, name)) {
    throw new ConfigError(
      field,
      `Cannot parse ${field}: unknown feature gate ${quote(name)} (known: ${
        Object.keys(FEATURE_GATE_DEFAULTS).join(", ")
      })`,
    );
  }
}

function toGates(raw: string, field: string): Record<string, boolean> {
  const gates: Record<string, boolean> = {};
  for (const pair of splitList(raw)) {
    const eq = pair.indexOf("=");
    if (eq < 0) fail(field, `${quote(pair)} is not name=true|false`);
    const name = pair.slice(0, eq).trim();
    checkGate(name, field);
    gates[name] = toBool(pair.slice(eq + 1).trim(), field);
  }
  return gates;
}

// ---------------------------------------------------------------------------
// Flags.

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

/** One command-line flag: how it shows in `--help` and how it changes the Config. */
interface FlagSpec {
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
    help: "A set of key=value pairs that describe feature gates. Options are: " +
      Object.entries(FEATURE_GATE_DEFAULTS)
        .map(([name, enabled]) => `${name}=true|false (default=${enabled})`)
        .join(", ") +
      ".",
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
    help: "Which proxy mode to use: 'nftables', 'iptables' or 'ipvs' on Linux; 'kernelspace' on " +
      "Windows.",
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
    apply: (c, raw, field) => (c.healthzBindAddress = toHostPort(raw, field)),
  },
  {
    name: "metrics-bind-address",
    group: "Networking",
    type: "ipport",
    key: "metricsBindAddress",
    help: "The IP address with port for the metrics server to serve on (0.0.0.0:10249 for all " +
      "IPv4 interfaces). Set empty to disable.",
    apply: (c, raw, field) => (c.metricsBindAddress = toHostPort(raw, field)),
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
      "InterfaceNamePrefix. Empty means no detection.",
    apply: (c, raw, field) => (c.detectLocalMode = toDetectLocalMode(raw, field)),
  },
  {
    name: "pod-bridge-interface",
    group: "Networking",
    type: "string",
    key: "bridgeInterface",
    help: "A bridge interface name. When --detect-local-mode is BridgeInterface, traffic " +
      "arriving on it is local.",
    apply: (c, raw) => (c.bridgeInterface = raw),
  },
  {
    name: "pod-interface-name-prefix",
    group: "Networking",
    type: "string",
    key: "interfaceNamePrefix",
    help: "An interface name prefix. When --detect-local-mode is InterfaceNamePrefix, traffic " +
      "arriving on interfaces with this prefix is local.",
    apply: (c, raw) => (c.interfaceNamePrefix = raw),
  },
  {
    name: "nodeport-addresses",
    group: "Networking",
    type: "strings",
    key: "nodePortAddresses",
    help: "A list of CIDR ranges that contain valid node IPs, or the single string 'primary'. " +
      "NodePort connections are accepted only on node IPs in these ranges, or on the node's " +
      "primary IP(s). Set empty to accept them on all local IPs.",
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
    name: "iptables-sync-period",
    group: "iptables",
    type: "duration",
    key: "iptables.syncPeriodMs",
    help: "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various " +
      "re-synchronizing and cleanup operations are performed. Must be greater than 0.",
    apply: (c, raw, field) => (c.iptables.syncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "iptables-min-sync-period",
    group: "iptables",
    type: "duration",
    key: "iptables.minSyncPeriodMs",
    help: "The minimum period between iptables rule resyncs (e.g. '5s', '1m', '2h22m'). 0 " +
      "means every Service or EndpointSlice change results in an immediate resync.",
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
    help: "How often nftables rules are fully re-synchronized (e.g. '5s', '1m'). Must be greater " +
      "than 0.",
    apply: (c, raw, field) => (c.nftables.syncPeriodMs = toDuration(raw, field)),
  },
  {
    name: "nftables-min-sync-period",
    group: "nftables",
    type: "duration",
    key: "nftables.minSyncPeriodMs",
    help: "The minimum period between nftables rule resyncs. 0 means every change results in an " +
      "immediate resync.",
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
  { name: "oom-score-adj", type: "int32" },
  { name: "conntrack-max-per-core", type: "int32" },
  { name: "conntrack-min", type: "int32" },
  { name: "conntrack-tcp-timeout-established", type: "duration" },
  { name: "conntrack-tcp-timeout-close-wait", type: "duration" },
  { name: "conntrack-udp-timeout", type: "duration" },
  { name: "conntrack-udp-timeout-stream", type: "duration" },
  { name: "config-sync-period", type: "duration" },
  { name: "kube-api-burst", type: "int32" },
  { name: "kube-api-qps", type: "float32" },
  { name: "kube-api-content-type", type: "string" },
  { name: "ipvs-exclude-cidrs", type: "strings" },
  { name: "proxy-port-range", type: "string" },
  { name: "show-hidden-metrics-for-version", type: "string" },
];

const ALL_FLAGS: readonly FlagSpec[] = [
  ...FLAGS,
  ...IGNORED_FLAGS.map((flag): FlagSpec => ({
    ...flag,
    group: "Accepted for compatibility, ignored",
    help: "Accepted for kube-proxy compatibility; has no effect in kproxy.",
  })),
];

const FLAGS_BY_NAME: ReadonlyMap<string, FlagSpec> = new Map(ALL_FLAGS.map((f) => [f.name, f]));

/** The label of a flag in errors and help: `-v` style for one letter is `--v` like klog. */
function flagLabel(name: string): string {
  return `--${name}`;
}

function isBooleanFlag(name: string): boolean {
  return FLAGS_BY_NAME.get(name)?.type === "";
}

/**
 * Rewrites boolean flags to always carry a value (`--cleanup` → `--cleanup=true`)
 * so `parseArgs` can treat every flag as a string and `--flag=false` works.
 */
function normaliseBooleanFlags(argv: string[]): string[] {
  const end = argv.indexOf("--");
  const head = end < 0 ? argv : argv.slice(0, end);
  const rewritten = head.map((arg) => {
    const match = /^--([^=]+)$/.exec(arg);
    return match && isBooleanFlag(match[1]!) && match[1] !== "help" && match[1] !== "version"
      ? `${arg}=true`
      : arg;
  });
  return end < 0 ? rewritten : [...rewritten, ...argv.slice(end)];
}

type ParsedToken =
  | { kind: "option"; name: string; value: string; rawName: string }
  | { kind: "positional"; value: string };

function tokenize(argv: string[]): ParsedToken[] {
  const options: Record<string, { type: "string" | "boolean"; short?: string }> = {};
  for (const flag of ALL_FLAGS) {
    options[flag.name] = {
      type: flag.name === "help" || flag.name === "version" ? "boolean" : "string",
    };
  }
  options.v = { type: "string", short: "v" };
  options.help = { type: "boolean", short: "h" };
  let tokens;
  try {
    ({ tokens } = parseArgs({
      args: normaliseBooleanFlags(argv),
      options,
      strict: true,
      allowPositionals: true,
      tokens: true,
    }));
  } catch (error) {
    throw flagError(error);
  }
  const out: ParsedToken[] = [];
  for (const token of tokens) {
    if (token.kind === "positional") out.push({ kind: "positional", value: token.value });
    if (token.kind === "option") {
      let value = token.value ?? "true";
      // `-v=4` arrives as "=4": accept it as pflag does.
      if (token.rawName === "-v" && value.startsWith("=")) value = value.slice(1);
      out.push({ kind: "option", name: token.name, value, rawName: token.rawName });
    }
  }
  return out;
}

/** Converts a `parseArgs` error into a one-line ConfigError naming the flag. */
function flagError(error: unknown): ConfigError {
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: string }).code;
  const flag = /'(-{1,2}[^' <=]+)/.exec(message)?.[1] ?? "flags";
  const field = flag === "-v" ? "--v" : flag;
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
    return new ConfigError(field, `Cannot parse ${field}: unknown flag (see --help)`);
  }
  if (/argument missing|ambiguous/.test(message)) {
    return new ConfigError(field, `Cannot parse ${field}: a value is required`);
  }
  if (/does not take an argument/.test(message)) {
    return new ConfigError(field, `Cannot parse ${field}: takes no value`);
  }
  return new ConfigError(field, `Cannot parse ${field}: ${message.split("\n")[0]}`);
}

// ---------------------------------------------------------------------------
// The KubeProxyConfiguration file.

/** Origins of Config fields: dotted Config key → the flag or file field that set it. */
type Origins = Map<string, string>;

type FileValue = unknown;

/** How one file field maps onto the Config. */
interface FileField {
  /** The Config field(s) it sets (dotted), for error labels. */
  key?: string | string[];
  apply(config: Config, value: FileValue, field: string, warnings: string[]): void;
}

type FileSchema = { readonly [name: string]: FileField | FileSchema };

function isFileField(node: FileField | FileSchema): node is FileField {
  return typeof (node as FileField).apply === "function";
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  return typeof value === "object" ? "a map" : `${typeof value} ${quote(value)}`;
}

function expectString(value: FileValue, field: string): string {
  if (typeof value !== "string") fail(field, `want a string, got ${typeName(value)}`);
  return value;
}

function expectBool(value: FileValue, field: string): boolean {
  if (typeof value !== "boolean") fail(field, `want true or false, got ${typeName(value)}`);
  return value;
}

function expectInt(value: FileValue, field: string): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    fail(field, `want an integer, got ${typeName(value)}`);
  }
  return value;
}

function expectStringList(value: FileValue, field: string): string[] {
  if (typeof value === "string") return splitList(value);
  if (!Array.isArray(value) || !value.every((item) => typeof item === "string")) {
    fail(field, `want a list of strings, got ${typeName(value)}`);
  }
  return value;
}

/** Upstream treats zero values in the file as "use the default". */
function isUnset(value: FileValue): boolean {
  return value === null || value === undefined || value === "" ||
    (Array.isArray(value) && value.length === 0);
}

function stringField(
  key: string | string[],
  set: (c: Config, value: string, field: string) => void,
): FileField {
  return {
    key,
    apply(config, value, field) {
      if (!isUnset(value)) set(config, expectString(value, field), field);
    },
  };
}

function durationField(key: string | string[], set: (c: Config, ms: number) => void): FileField {
  return stringField(key, (config, value, field) => {
    const ms = toDuration(value, field);
    if (ms !== 0) set(config, ms);
  });
}

function boolField(key: string, set: (c: Config, value: boolean) => void): FileField {
  return {
    key,
    apply(config, value, field) {
      if (!isUnset(value)) set(config, expectBool(value, field));
    },
  };
}

/** Tells whether a value is a zero value (null, "", 0, "0", "0s", false, []) or a map of them. */
function isZero(value: unknown): boolean {
  if (isUnset(value) || value === false || value === 0 || value === "0" || value === "0s") {
    return true;
  }
  return typeof value === "object" && !Array.isArray(value) &&
    Object.values(value as Record<string, unknown>).every(isZero);
}

/** A field upstream has and kproxy does not use: accepted, and a warning when it is set. */
const IGNORED: FileField = {
  apply(_config, value, field, warnings) {
    if (isZero(value)) return;
    warnings.push(`Ignoring ${field} in --config: kproxy does not support it`);
  },
};

/** Any value and any sub-field: for blocks whose contents kproxy ignores. */
const IGNORED_TREE: FileSchema = { "*": IGNORED };

const FILE_SCHEMA: FileSchema = {
  apiVersion: { apply: () => {} },
  kind: { apply: () => {} },
  clientConnection: {
    kubeconfig: stringField("kubeconfig", (c, v) => (c.kubeconfig = v)),
    acceptContentTypes: IGNORED,
    contentType: IGNORED,
    qps: IGNORED,
    burst: IGNORED,
  },
  hostnameOverride: stringField("hostnameOverride", (c, v) => {
    if (v.trim() !== "") c.hostnameOverride = v.trim().toLowerCase();
  }),
  mode: stringField("proxyMode", (c, v, f) => (c.proxyMode = toProxyMode(v, f))),
  clusterCIDR: {
    key: "clusterCIDRs",
    apply(config, value, field) {
      if (isUnset(value)) return;
      config.clusterCIDRs = expectStringList(value, field).map((item) => toCIDR(item, field));
    },
  },
  detectLocalMode: stringField(
    "detectLocalMode",
    (c, v, f) => (c.detectLocalMode = toDetectLocalMode(v, f)),
  ),
  detectLocal: {
    bridgeInterface: stringField("bridgeInterface", (c, v) => (c.bridgeInterface = v)),
    interfaceNamePrefix: stringField("interfaceNamePrefix", (c, v) => (c.interfaceNamePrefix = v)),
  },
  nodePortAddresses: {
    key: "nodePortAddresses",
    apply(config, value, field) {
      if (isUnset(value)) return;
      config.nodePortAddresses = toNodePortAddresses(expectStringList(value, field), field);
    },
  },
  masqueradeAll: boolField("masqueradeAll", (c, v) => (c.masqueradeAll ||= v)),
  bindAddress: stringField("bindAddress", (c, v, f) => (c.bindAddress = toIP(v, f))),
  healthzBindAddress: stringField(
    "healthzBindAddress",
    (c, v, f) => (c.healthzBindAddress = toHostPort(v, f)),
  ),
  metricsBindAddress: stringField(
    "metricsBindAddress",
    (c, v, f) => (c.metricsBindAddress = toHostPort(v, f)),
  ),
  bindAddressHardFail: IGNORED,
  enableProfiling: IGNORED,
  showHiddenMetricsForVersion: IGNORED,
  oomScoreAdj: IGNORED,
  portRange: IGNORED,
  configSyncPeriod: IGNORED,
  windowsRunAsService: IGNORED,
  featureGates: {
    key: "featureGates",
    apply(config, value, field) {
      if (isUnset(value)) return;
      if (typeof value !== "object" || Array.isArray(value)) {
        fail(field, `want a map of gate: true|false, got ${typeName(value)}`);
      }
      for (const [name, enabled] of Object.entries(value as Record<string, unknown>)) {
        checkGate(name, `${field}.${name}`);
        config.featureGates[name] = expectBool(enabled, `${field}.${name}`);
      }
    },
  },
  syncPeriod: durationField(MODES.map((mode) => `${mode}.syncPeriodMs`), (c, ms) => {
    c.iptables.syncPeriodMs = c.nftables.syncPeriodMs = c.ipvs.syncPeriodMs = ms;
  }),
  minSyncPeriod: durationField(MODES.map((mode) => `${mode}.minSyncPeriodMs`), (c, ms) => {
    c.iptables.minSyncPeriodMs = c.nftables.minSyncPeriodMs = c.ipvs.minSyncPeriodMs = ms;
  }),
  iptables: {
    masqueradeAll: boolField("masqueradeAll", (c, v) => (c.masqueradeAll ||= v)),
    masqueradeBit: {
      key: "iptables.masqueradeBit",
      apply(config, value, field) {
        if (value === null || value === undefined) return;
        config.iptables.masqueradeBit = toMasqueradeBit(expectInt(value, field), field);
      },
    },
    localhostNodePorts: boolField(
      "iptables.localhostNodePorts",
      (c, v) => (c.iptables.localhostNodePorts = v),
    ),
    syncPeriod: durationField("iptables.syncPeriodMs", (c, ms) => (c.iptables.syncPeriodMs = ms)),
    minSyncPeriod: durationField(
      "iptables.minSyncPeriodMs",
      (c, ms) => (c.iptables.minSyncPeriodMs = ms),
    ),
  },
  nftables: {
    masqueradeAll: boolField("masqueradeAll", (c, v) => (c.masqueradeAll ||= v)),
    masqueradeBit: IGNORED,
    syncPeriod: durationField("nftables.syncPeriodMs", (c, ms) => (c.nftables.syncPeriodMs = ms)),
    minSyncPeriod: durationField(
      "nftables.minSyncPeriodMs",
      (c, ms) => (c.nftables.minSyncPeriodMs = ms),
    ),
  },
  ipvs: {
    scheduler: stringField("ipvs.scheduler", (c, v, f) => (c.ipvs.scheduler = toScheduler(v, f))),
    strictARP: boolField("ipvs.strictARP", (c, v) => (c.ipvs.strictARP = v)),
    syncPeriod: durationField("ipvs.syncPeriodMs", (c, ms) => (c.ipvs.syncPeriodMs = ms)),
    minSyncPeriod: durationField("ipvs.minSyncPeriodMs", (c, ms) => (c.ipvs.minSyncPeriodMs = ms)),
    tcpTimeout: durationField("ipvs.tcpTimeoutMs", (c, ms) => (c.ipvs.tcpTimeoutMs = ms)),
    tcpFinTimeout: durationField("ipvs.tcpFinTimeoutMs", (c, ms) => (c.ipvs.tcpFinTimeoutMs = ms)),
    udpTimeout: durationField("ipvs.udpTimeoutMs", (c, ms) => (c.ipvs.udpTimeoutMs = ms)),
    excludeCIDRs: IGNORED,
  },
  winkernel: {
    sourceVip: stringField("winkernel.sourceVip", (c, v) => (c.winkernel.sourceVip = v)),
    enableDSR: boolField("winkernel.enableDSR", (c, v) => (c.winkernel.enableDSR = v)),
    networkName: stringField("winkernel.networkName", (c, v) => (c.winkernel.networkName = v)),
    rootHnsEndpointName: IGNORED,
    forwardHealthCheckVip: IGNORED,
  },
  conntrack: {
    tcpBeLiberal: boolField("conntrack.tcpBeLiberal", (c, v) => (c.conntrack.tcpBeLiberal = v)),
    maxPerCore: IGNORED,
    min: IGNORED,
    tcpEstablishedTimeout: IGNORED,
    tcpCloseWaitTimeout: IGNORED,
    udpTimeout: IGNORED,
    udpStreamTimeout: IGNORED,
  },
  logging: {
    verbosity: {
      key: "verbosity",
      apply(config, value, field) {
        if (value === null || value === undefined) return;
        config.verbosity = toVerbosity(expectInt(value, field), field);
      },
    },
    format: IGNORED,
    flushFrequency: IGNORED,
    vmodule: IGNORED,
    options: IGNORED_TREE,
  },
};

function applyFileObject(
  node: FileSchema,
  object: Record<string, unknown>,
  context: { config: Config; origins: Origins; warnings: string[]; prefix: string },
): void {
  for (const [name, value] of Object.entries(object)) {
    const field = context.prefix === "" ? name : `${context.prefix}.${name}`;
    const spec = node[name] ?? node["*"];
    if (spec === undefined) {
      throw new ConfigError(field, `Cannot parse --config: unknown field ${quote(field)}`);
    }
    if (isFileField(spec)) {
      spec.apply(context.config, value, field, context.warnings);
      if (!isUnset(value)) {
        for (const key of [spec.key ?? []].flat()) context.origins.set(key, field);
      }
      continue;
    }
    if (isUnset(value)) continue;
    if (typeof value !== "object" || Array.isArray(value)) {
      fail(field, `want a map, got ${typeName(value)}`);
    }
    applyFileObject(spec, value as Record<string, unknown>, { ...context, prefix: field });
  }
}

function applyConfigFile(
  text: string,
  context: { config: Config; origins: Origins; warnings: string[]; path: string },
): void {
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (error) {
    const detail = (error instanceof Error ? error.message : String(error)).split("\n")[0];
    throw new ConfigError("--config", `Cannot parse --config ${quote(context.path)}: ${detail}`);
  }
  if (typeof document !== "object" || document === null || Array.isArray(document)) {
    throw new ConfigError(
      "--config",
      `Cannot parse --config ${quote(context.path)}: want a KubeProxyConfiguration map`,
    );
  }
  const object = document as Record<string, unknown>;
  if (object.apiVersion !== CONFIG_API_VERSION) {
    throw new ConfigError(
      "apiVersion",
      `Cannot parse apiVersion: want ${quote(CONFIG_API_VERSION)}, got ${
        quote(object.apiVersion ?? "")
      } in ${quote(context.path)}`,
    );
  }
  if (object.kind !== CONFIG_KIND) {
    throw new ConfigError(
      "kind",
      `Cannot parse kind: want ${quote(CONFIG_KIND)}, got ${quote(object.kind ?? "")} in ${
        quote(context.path)
      }`,
    );
  }
  applyFileObject(FILE_SCHEMA, object, { ...context, prefix: "" });
}

// ---------------------------------------------------------------------------
// Cross-field validation.

function validate(config: Config, origins: Origins): void {
  const label = (key: string, flag: string) => origins.get(key) ?? flagLabel(flag);
  const invalid = (field: string, detail: string) => {
    throw new ConfigError(field, `Invalid ${field}: ${detail}`);
  };

  if (config.hostnameOverride === "") {
    invalid("--hostname-override", "the host name is empty; set --hostname-override");
  }
  const families = config.clusterCIDRs.map((cidr) => cidr.includes(":") ? "IPv6" : "IPv4");
  if (families.length > 2 || (families.length === 2 && families[0] === families[1])) {
    invalid(
      label("clusterCIDRs", "cluster-cidr"),
      "want one CIDR, or two of different IP families for dual-stack",
    );
  }
  if (config.detectLocalMode === "BridgeInterface" && config.bridgeInterface === "") {
    invalid(
      label("bridgeInterface", "pod-bridge-interface"),
      "required when the detect-local mode is BridgeInterface",
    );
  }
  if (config.detectLocalMode === "InterfaceNamePrefix" && config.interfaceNamePrefix === "") {
    invalid(
      label("interfaceNamePrefix", "pod-interface-name-prefix"),
      "required when the detect-local mode is InterfaceNamePrefix",
    );
  }
  for (const mode of MODES) {
    if (config[mode].syncPeriodMs <= 0) {
      invalid(label(`${mode}.syncPeriodMs`, `${mode}-sync-period`), "must be greater than 0");
    }
  }
  if (config.ipvs.minSyncPeriodMs > config.ipvs.syncPeriodMs) {
    invalid(
      label("ipvs.minSyncPeriodMs", "ipvs-min-sync-period"),
      `${formatDuration(config.ipvs.minSyncPeriodMs)} exceeds the sync period ${
        formatDuration(config.ipvs.syncPeriodMs)
      }`,
    );
  }
  if (config.winkernel.enableDSR && !config.featureGates.WinDSR) {
    invalid(label("winkernel.enableDSR", "enable-dsr"), "needs the WinDSR feature gate");
  }
}

// ---------------------------------------------------------------------------
// The command line.

/**
 * Parses kproxy's command line and its `--config` file into a validated Config.
 *
 * @param argv The arguments after the program name.
 * @param env Reads the config file and tells the host name.
 * @returns The subcommand, the configuration and the remaining arguments.
 * @throws {ConfigError} On any bad flag, file field or combination; `field` names it.
 * @example Usage
 * ```ts
 * import { parseCommandLine } from "./command_line.ts";
 * const env = { readTextFile: () => "", hostname: () => "node-a" };
 * parseCommandLine(["plan", "--proxy-mode=iptables"], env).config.proxyMode; // "iptables"
 * ```
 */
export function parseCommandLine(argv: string[], env: ConfigEnvironment): CommandLine {
  const tokens = tokenize(argv);
  const options = tokens.filter((t) => t.kind === "option");
  const positionals = tokens.filter((t) => t.kind === "positional").map((t) => t.value);
  const flagsSet = [...new Set(options.map((t) => t.name))];

  const first = positionals[0];
  const subcommand = SUBCOMMANDS.find((name) => name === first);
  const args = subcommand ? positionals.slice(1) : positionals;
  let command: Command = subcommand ?? "run";
  if (flagsSet.includes("version")) command = "version";
  if (flagsSet.includes("help")) command = "help";

  const config = defaultConfig(env.hostname());
  const origins: Origins = new Map();
  const warnings: string[] = [];
  if (command === "help" || command === "version") {
    return { command, config, args, flagsSet, warnings };
  }

  const configPath = options.findLast((t) => t.name === "config")?.value ?? "";
  if (configPath !== "") {
    let text: string;
    try {
      text = env.readTextFile(configPath);
    } catch (error) {
      const detail = error instanceof Error ? error.message.split("\n")[0] : String(error);
      throw new ConfigError("--config", `Cannot read --config ${quote(configPath)}: ${detail}`);
    }
    applyConfigFile(text, { config, origins, warnings, path: configPath });
  }

  for (const option of options) {
    const spec = FLAGS_BY_NAME.get(option.name);
    if (!spec?.apply) {
      if (spec?.group === "Accepted for compatibility, ignored") {
        warnings.push(`Ignoring ${flagLabel(option.name)}: kproxy does not support it`);
      }
      continue;
    }
    const field = flagLabel(option.name);
    spec.apply(config, option.value, field);
    if (spec.key !== undefined) origins.set(spec.key, field);
  }
  validate(config, origins);

  const line: CommandLine = { command, config, args, flagsSet, warnings };
  const from = options.findLast((t) => t.name === "from")?.value;
  const node = options.findLast((t) => t.name === "node")?.value;
  if (command === "explain") {
    if (args.length !== 1) {
      throw new ConfigError(
        "DEST",
        "Cannot parse explain: want one DEST (IP:port), e.g. explain 10.96.0.10:53",
      );
    }
    if (from !== undefined && from !== "") toIP(from, "--from");
    line.explain = {
      from: from ?? "",
      node: node?.trim().toLowerCase() || config.hostnameOverride,
    };
  } else {
    const stray = from !== undefined ? "--from" : node !== undefined ? "--node" : undefined;
    if (stray) {
      throw new ConfigError(stray, `Cannot parse ${stray}: only valid with the explain subcommand`);
    }
    if (command === "run" && args.length > 0) {
      throw new ConfigError(
        "command",
        `Cannot parse command: unknown subcommand ${
          quote(args[0])
        } (want plan, demo, explain, diff or hand-back)`,
      );
    }
  }
  return line;
}

// ---------------------------------------------------------------------------
// Help.

function getPath(config: Config, key: string): unknown {
  let value: unknown = config;
  for (const part of key.split(".")) value = (value as Record<string, unknown>)[part];
  return value;
}

function defaultText(spec: FlagSpec, defaults: Config): string {
  if (spec.defaultText !== undefined) return spec.defaultText;
  const value = getPath(defaults, spec.key!);
  if (spec.type === "duration") return formatDuration(value as number);
  if (Array.isArray(value)) return value.length === 0 ? "[]" : `[${value.join(",")}]`;
  if (value === "") return '""';
  return String(value);
}

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line === "" ? word : `${line} ${word}`;
    }
  }
  if (line !== "") lines.push(line);
  return lines;
}

/**
 * The `--help` text: usage, then every flag grouped kube-proxy style with its default.
 *
 * @returns Multi-line text ending in a newline.
 */
export function helpText(): string {
  const defaults = defaultConfig("");
  const out = [
    "kproxy: a drop-in replacement for kube-proxy. It watches Services and EndpointSlices",
    "and programs nftables, iptables, IPVS or Windows HNS so that Service traffic reaches",
    "its endpoints.",
    "",
    "Usage:",
    "  kproxy [flags]                          run the proxy",
    "  kproxy plan [flags]                     print the rules kproxy would install, and exit",
    "  kproxy diff [flags]                     show how the installed rules differ from the plan",
    "  kproxy demo [flags]                     run against the bundled demo manifests",
    "  kproxy explain DEST --from SRC [flags]  trace a packet to DEST (IP:port) through the plan",
    "  kproxy hand-back [flags]                once kube-proxy's rules are in, remove kproxy's own",
    "  kproxy --version | --help",
  ];
  const groups = [...new Set(ALL_FLAGS.map((flag) => flag.group))];
  for (const group of groups) {
    out.push("", `${group} flags:`, "");
    for (const spec of ALL_FLAGS.filter((flag) => flag.group === group)) {
      const short = spec.name === "v" ? "-v, " : spec.name === "help" ? "-h, " : "    ";
      const head = `  ${short}--${spec.name}${spec.type === "" ? "" : ` ${spec.type}`}`;
      const help = spec.group === "Accepted for compatibility, ignored"
        ? spec.help
        : `${spec.help} (default ${defaultText(spec, defaults)})`;
      const body = wrap(help, 100 - 40);
      const first = head.length < 38 ? head.padEnd(40) : `${head}\n${" ".repeat(40)}`;
      out.push(first + body[0], ...body.slice(1).map((line) => " ".repeat(40) + line));
    }
  }
  return out.join("\n") + "\n";
}
