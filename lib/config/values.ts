/**
 * Configuration values: one parser per kind (durations, booleans, CIDRs,
 * addresses, port ranges, choices, feature gates), shared by the flags and
 * the file, and the error they throw.
 *
 * @module
 */

import type { PortRange, ProxyMode, SyncPeriodSection } from "./types.ts";
import type { DetectLocalMode } from "../core/plan.ts";
import { IPVS_SCHEDULERS } from "./types.ts";
import { joinHostPort, parseCIDR, parseIP } from "../core/ip.ts";
import { isInterfaceName } from "../core/interface_name.ts";
import { modeOf, PROXY_MODES } from "../../backends/registry.ts";

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

const DETECT_LOCAL_MODES: readonly DetectLocalMode[] = [
  "ClusterCIDR",
  "NodeCIDR",
  "BridgeInterface",
  "InterfaceNamePrefix",
];
/** The Config sections that hold per-mode sync periods, one or more modes' each. */
export const SYNC_PERIOD_SECTIONS: readonly SyncPeriodSection[] = [
  ...new Set(PROXY_MODES.map((mode) => modeOf(mode).syncPeriods)),
];
export const IPTABLES_BACKENDS = ["auto", "nft", "legacy"] as const;
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

export function fail(field: string, detail: string): never {
  throw new ConfigError(field, `Cannot parse ${field}: ${detail}`);
}

export function quote(value: unknown): string {
  return JSON.stringify(typeof value === "string" ? value : String(value));
}

export function toDuration(raw: string, field: string): number {
  const ms = parseDuration(raw);
  if (ms === undefined) fail(field, `${quote(raw)} is not a duration (e.g. 30s, 1m30s, 500ms)`);
  if (ms < 0) fail(field, `${quote(raw)} must not be negative`);
  return ms;
}

const GO_TRUE = ["1", "t", "T", "TRUE", "true", "True"];
const GO_FALSE = ["0", "f", "F", "FALSE", "false", "False"];

export function toBool(raw: string, field: string): boolean {
  if (GO_TRUE.includes(raw)) return true;
  if (GO_FALSE.includes(raw)) return false;
  return fail(field, `${quote(raw)} is not a boolean (true or false)`);
}

export function toInt(raw: string, field: string): number {
  if (!/^[-+]?\d+$/.test(raw)) fail(field, `${quote(raw)} is not an integer`);
  return Number(raw);
}

export function toCIDR(raw: string, field: string): string {
  const cidr = parseCIDR(raw.trim());
  if (!cidr) fail(field, `${quote(raw)} is not a CIDR (e.g. 10.244.0.0/16 or fd00::/48)`);
  return cidr.cidr;
}

export function splitList(raw: string): string[] {
  return raw.split(",").map((item) => item.trim()).filter((item) => item !== "");
}

export function toCIDRList(raw: string, field: string): string[] {
  return splitList(raw).map((item) => toCIDR(item, field));
}

export function toIP(raw: string, field: string): string {
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

/** An address without a port gets `port`, as kube-proxy's AppendPortIfNeeded. */
export function appendPortIfNeeded(address: string, port: number): string {
  return parseIP(address) === undefined ? address : joinHostPort(address, port);
}

/** `IP:port` or `[IPv6]:port`; "" (disabled) is allowed. */
export function toHostPort(raw: string, field: string): string {
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

export function toNodePortAddresses(raw: string | string[], field: string): string[] {
  const items = typeof raw === "string" ? splitList(raw) : raw.map((item) => item.trim());
  if (items.includes("primary")) {
    if (items.length > 1) fail(field, `"primary" cannot be combined with CIDRs`);
    return ["primary"];
  }
  return items.map((item) => toCIDR(item, field));
}

export function toChoice<T extends string>(choices: readonly T[], what: string) {
  return (raw: string, field: string): T => {
    if ((choices as readonly string[]).includes(raw)) return raw as T;
    return fail(field, `unknown ${what} ${quote(raw)} (want one of ${choices.join(", ")})`);
  };
}

/**
 * The mode an empty `mode` / `--proxy-mode` means, as kube-proxy's
 * platformApplyDefaults: iptables on Linux, kernelspace on Windows.
 */
export function defaultProxyMode(os: string = Deno.build.os): ProxyMode {
  return os === "windows" ? "kernelspace" : "iptables";
}

export function toProxyMode(raw: string, field: string): ProxyMode {
  return raw === "" ? defaultProxyMode() : toChoice(PROXY_MODES, "proxy mode")(raw, field);
}

/** An interface name or prefix ("" for none), as the renderers accept it. */
export function toInterfaceName(raw: string, field: string): string {
  if (raw === "" || isInterfaceName(raw)) return raw;
  return fail(
    field,
    `${
      quote(raw)
    } is not an interface name (1 to 15 of A-Z a-z 0-9 _ . : @ -, not starting with -)`,
  );
}

export function toDetectLocalMode(raw: string, field: string): DetectLocalMode {
  // Empty is ClusterCIDR, as kube-proxy's platformApplyDefaults makes it.
  return raw === "" ? "ClusterCIDR" : toChoice(DETECT_LOCAL_MODES, "detect-local mode")(raw, field);
}

export function toScheduler(raw: string, field: string): string {
  return raw === "" ? "rr" : toChoice(IPVS_SCHEDULERS, "IPVS scheduler")(raw, field);
}

export function toMasqueradeBit(value: number, field: string): number {
  if (value < 0 || value > 31) fail(field, `${value} is out of range 0..31`);
  return value;
}

/** An integer that must not be negative (conntrack.maxPerCore, conntrack.min). */
export function toNonNegative(value: number, field: string): number {
  if (value < 0) fail(field, `${value} must be greater than or equal to 0`);
  return value;
}

/** oomScoreAdj: within [-1000, 1000], as kube-proxy validates it. */
export function toOomScoreAdj(value: number, field: string): number {
  if (value < -1000 || value > 1000) fail(field, `${value} must be within the range [-1000, 1000]`);
  return value;
}

export function toVerbosity(value: number, field: string): number {
  if (value < 0) fail(field, `${value} must be 0 or more`);
  return value;
}

export function toGates(raw: string, field: string): Record<string, boolean> {
  const gates: Record<string, boolean> = {};
  for (const pair of splitList(raw)) {
    const eq = pair.indexOf("=");
    if (eq < 0) fail(field, `${quote(pair)} is not name=true|false`);
    const name = pair.slice(0, eq).trim();
    gates[name] = toBool(pair.slice(eq + 1).trim(), field);
  }
  return gates;
}
/** Origins of Config fields: dotted Config key → the flag or file field that set it. */
export type Origins = Map<string, string>;
