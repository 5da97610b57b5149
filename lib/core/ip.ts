/**
 * Strict IP address and CIDR parsing shared by the parsers, the planner and
 * the backends.
 *
 * Only canonical, unambiguous spellings are accepted: IPv4 as four decimal
 * octets without leading zeros, IPv6 without zones and without IPv4-mapped
 * (`::ffff:a.b.c.d`) addresses. Accepted IPv6 text is normalised to its
 * RFC 5952 form (compressed, lower case), so equal addresses compare equal as
 * strings.
 *
 * @module
 */

import type { IpFamily } from "./model.ts";

/** A parsed IP address. */
export interface ParsedIP {
  family: IpFamily;
  /** 4 or 16 bytes, network order. */
  bytes: Uint8Array;
  /** The canonical text form. */
  address: string;
}

/** A parsed CIDR, normalised to its network address. */
export interface ParsedCIDR {
  family: IpFamily;
  /** The network address (host bits cleared), 4 or 16 bytes. */
  bytes: Uint8Array;
  prefixLength: number;
  /** The canonical text form, `network/prefix`. */
  cidr: string;
}

const DECIMAL_OCTET = /^(0|[1-9][0-9]{0,2})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

/**
 * Scans dotted-quad IPv4 without leading zeros, calling `octet` for each
 * value. A char loop without allocation: this is hot at 300k endpoints.
 */
function scanIPv4(text: string, octet?: (index: number, value: number) => void): boolean {
  let count = 0;
  let value = 0;
  let digits = 0;
  for (let i = 0; i <= text.length; i++) {
    const code = i < text.length ? text.charCodeAt(i) : 46;
    if (code === 46) {
      if (digits === 0 || count > 3) return false;
      octet?.(count, value);
      count++;
      value = 0;
      digits = 0;
    } else if (code >= 48 && code <= 57) {
      if (digits > 0 && value === 0) return false;
      value = value * 10 + code - 48;
      if (++digits > 3 || value > 255) return false;
    } else {
      return false;
    }
  }
  return count === 4;
}

function parseIPv4Bytes(text: string): Uint8Array | undefined {
  const bytes = new Uint8Array(4);
  return scanIPv4(text, (i, value) => bytes[i] = value) ? bytes : undefined;
}

function parseIPv6Groups(text: string): number[] | undefined {
  if (text.length === 0) return [];
  const groups: number[] = [];
  const parts = text.split(":");
  for (const [i, part] of parts.entries()) {
    if (i === parts.length - 1 && part.includes(".")) {
      const v4 = parseIPv4Bytes(part);
      if (!v4) return undefined;
      groups.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
    } else {
      if (!HEX_GROUP.test(part)) return undefined;
      groups.push(parseInt(part, 16));
    }
  }
  return groups;
}

function parseIPv6Bytes(text: string): Uint8Array | undefined {
  if (text.length > 45 || !/^[0-9a-fA-F:.]+$/.test(text)) return undefined;
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  let groups: number[];
  if (halves.length === 2) {
    const head = parseIPv6Groups(halves[0]!);
    const tail = parseIPv6Groups(halves[1]!);
    if (!head || !tail || head.length + tail.length > 7) return undefined;
    groups = [...head, ...new Array(8 - head.length - tail.length).fill(0), ...tail];
  } else {
    const all = parseIPv6Groups(text);
    if (!all || all.length !== 8) return undefined;
    groups = all;
  }
  const bytes = new Uint8Array(16);
  for (const [i, group] of groups.entries()) {
    bytes[2 * i] = group >> 8;
    bytes[2 * i + 1] = group & 0xff;
  }
  return bytes;
}

function isV4Mapped(bytes: Uint8Array): boolean {
  for (let i = 0; i < 10; i++) if (bytes[i] !== 0) return false;
  return bytes[10] === 0xff && bytes[11] === 0xff;
}

/** Formats 4 or 16 address bytes as canonical text (RFC 5952 for IPv6). */
export function formatIP(bytes: Uint8Array): string {
  if (bytes.length === 4) return `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((bytes[i]! << 8) | bytes[i + 1]!);
  let bestStart = -1;
  let bestLength = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength && j - i >= 2) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(":");
  const head = hex.slice(0, bestStart).join(":");
  const tail = hex.slice(bestStart + bestLength).join(":");
  return `${head}::${tail}`;
}

/**
 * Parses an IP address strictly.
 *
 * @param text The address text.
 * @returns The parsed address, or undefined when `text` is not a canonical
 * IPv4 address or an acceptable IPv6 address.
 */
export function parseIP(text: string): ParsedIP | undefined {
  if (typeof text !== "string") return undefined;
  if (text.includes(":")) {
    const bytes = parseIPv6Bytes(text);
    if (!bytes || isV4Mapped(bytes)) return undefined;
    return { family: "IPv6", bytes, address: formatIP(bytes) };
  }
  const bytes = parseIPv4Bytes(text);
  if (!bytes) return undefined;
  return { family: "IPv4", bytes, address: text };
}

/** Returns the canonical text of an IP address, or undefined when it is not one. */
export function canonicalIP(text: string): string | undefined {
  return normalizeIP(text)?.address;
}

/**
 * Checks an IP address and returns its canonical text and family, without
 * the bytes: the cheap form of {@linkcode parseIP} for validation.
 */
export function normalizeIP(text: string): { address: string; family: IpFamily } | undefined {
  if (typeof text !== "string") return undefined;
  if (!text.includes(":")) return scanIPv4(text) ? { address: text, family: "IPv4" } : undefined;
  const ip = parseIP(text);
  return ip && { address: ip.address, family: ip.family };
}

/** Returns the family of an IP address or CIDR, or undefined when it is neither. */
export function ipFamily(text: string): IpFamily | undefined {
  return text.includes("/") ? parseCIDR(text)?.family : parseIP(text)?.family;
}

/**
 * Parses a CIDR strictly and clears its host bits, so `10.0.0.1/8` becomes
 * `10.0.0.0/8`.
 *
 * @param text The CIDR text.
 * @returns The parsed CIDR, or undefined when `text` is not one.
 */
export function parseCIDR(text: string): ParsedCIDR | undefined {
  if (typeof text !== "string") return undefined;
  const slash = text.indexOf("/");
  if (slash < 0) return undefined;
  const ip = parseIP(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (!ip || !DECIMAL_OCTET.test(prefixText)) return undefined;
  const prefixLength = Number(prefixText);
  if (prefixLength > ip.bytes.length * 8) return undefined;
  const bytes = maskBytes(ip.bytes, prefixLength);
  return {
    family: ip.family,
    bytes,
    prefixLength,
    cidr: `${formatIP(bytes)}/${prefixLength}`,
  };
}

function maskBytes(bytes: Uint8Array, prefixLength: number): Uint8Array {
  const masked = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    const bits = Math.max(0, Math.min(8, prefixLength - 8 * i));
    masked[i] = bytes[i]! & ((0xff << (8 - bits)) & 0xff);
  }
  return masked;
}

/**
 * Tells whether `ip` lies inside `cidr`. False when either does not parse or
 * their families differ.
 */
export function cidrContains(cidr: string | ParsedCIDR, ip: string | ParsedIP): boolean {
  const network = typeof cidr === "string" ? parseCIDR(cidr) : cidr;
  const address = typeof ip === "string" ? parseIP(ip) : ip;
  if (!network || !address || network.family !== address.family) return false;
  const masked = maskBytes(address.bytes, network.prefixLength);
  return masked.every((byte, i) => byte === network.bytes[i]);
}

/** Tells whether `ip` is a loopback address (127.0.0.0/8 or ::1). */
export function isLoopback(ip: string): boolean {
  return specialAddress(ip) === "loopback";
}

/**
 * Kinds of address that are never a Service's: the categories of the
 * apiserver's `ValidateNonSpecialIP` (unspecified, loopback, link-local
 * unicast, link-local multicast), widened to every multicast group, plus the
 * limited broadcast address.
 */
export type SpecialAddress = "unspecified" | "loopback" | "link-local" | "multicast" | "broadcast";

/** The ranges of each {@linkcode SpecialAddress} kind, for messages. */
export const SPECIAL_ADDRESS_RANGES: Readonly<Record<SpecialAddress, string>> = Object.freeze({
  unspecified: "0.0.0.0, ::",
  loopback: "127.0.0.0/8, ::1",
  "link-local": "169.254.0.0/16, fe80::/10",
  multicast: "224.0.0.0/4, ff00::/8",
  broadcast: "255.255.255.255",
});

/**
 * Tells which kind of special address `ip` is.
 *
 * @example Usage
 * ```ts
 * import { specialAddress } from "./ip.ts";
 * specialAddress("169.254.169.254"); // "link-local"
 * specialAddress("10.0.0.1"); // undefined
 * ```
 *
 * @returns The kind, or undefined for an ordinary unicast address or text that
 * is no address.
 */
export function specialAddress(ip: string): SpecialAddress | undefined {
  if (!ip.includes(":")) {
    // Most addresses are ordinary: decide those from the first octet alone.
    let first = 0;
    for (let i = 0; i < ip.length && ip.charCodeAt(i) !== 46 && first < 256; i++) {
      first = first * 10 + ip.charCodeAt(i) - 48;
    }
    const maybe = first === 0 || first === 127 || first === 169 || first >= 224;
    if (!maybe) return undefined;
    const octets = [0, 0, 0, 0];
    if (!scanIPv4(ip, (i, value) => octets[i] = value)) return undefined;
    const [a, b, c, d] = octets as [number, number, number, number];
    if (a === 0 && b === 0 && c === 0 && d === 0) return "unspecified";
    if (a === 127) return "loopback";
    if (a === 169 && b === 254) return "link-local";
    if (a >= 224 && a <= 239) return "multicast";
    if (a === 255 && b === 255 && c === 255 && d === 255) return "broadcast";
    return undefined;
  }
  const bytes = parseIP(ip)?.bytes;
  if (bytes === undefined) return undefined;
  if (bytes[0] === 0xff) return "multicast";
  if (bytes[0] === 0xfe && (bytes[1]! & 0xc0) === 0x80) return "link-local";
  if (bytes.subarray(0, 15).every((byte) => byte === 0)) {
    if (bytes[15] === 0) return "unspecified";
    if (bytes[15] === 1) return "loopback";
  }
  return undefined;
}

/**
 * Drops duplicates and CIDRs inside another one of the list, keeping the
 * order of the rest: nftables interval sets refuse overlapping elements, and
 * a covered range adds nothing.
 *
 * @example Usage
 * ```ts
 * import { collapseCIDRs } from "./ip.ts";
 * collapseCIDRs(["10.1.0.0/16", "10.0.0.0/8", "10.0.0.0/8"]); // ["10.0.0.0/8"]
 * ```
 */
export function collapseCIDRs(cidrs: readonly string[]): string[] {
  const parsed = cidrs.map((text) => parseCIDR(text));
  const covered = (inner: ParsedCIDR, i: number) =>
    parsed.some((outer, j) =>
      outer !== undefined && j !== i && outer.family === inner.family &&
      cidrContains(outer, { family: inner.family, bytes: inner.bytes, address: "" }) &&
      (outer.prefixLength < inner.prefixLength ||
        (outer.prefixLength === inner.prefixLength && j < i))
    );
  return cidrs.filter((_, i) => {
    const cidr = parsed[i];
    return cidr === undefined || !covered(cidr, i);
  });
}

const IPV4_SHAPE = /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(\/\d{1,2})?$/;

/**
 * The family of an address or CIDR the parsers already validated: a cheap
 * shape check, undefined for anything else (e.g. "None"). Untrusted text goes
 * to {@linkcode ipFamily}.
 */
export function familyOfValidated(text: string): IpFamily | undefined {
  return text.includes(":") ? "IPv6" : IPV4_SHAPE.test(text) ? "IPv4" : undefined;
}

/**
 * `host:port`, with an IPv6 address in brackets (Go's `net.JoinHostPort`).
 *
 * @example
 * ```ts
 * import { joinHostPort } from "./ip.ts";
 * joinHostPort("fd00::1", 443); // "[fd00::1]:443"
 * ```
 */
export function joinHostPort(host: string, port: number | string): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}
