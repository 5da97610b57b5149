/**
 * Validators from raw API JSON (API field names) to the types of
 * `lib/model.ts`.
 *
 * Every value that may reach a kernel script is checked here: names, ports,
 * protocols, addresses, CIDRs, labels. An object with any invalid field is
 * rejected whole, with one error sentence naming the field and the value,
 * e.g. `spec.ports[1].port: 70000 is out of range 1-65535`. Objects kproxy
 * deliberately ignores (ExternalName and headless services, FQDN slices)
 * parse to `null` with the reason in `ignored`.
 *
 * Special addresses (unspecified, loopback, link-local, multicast, broadcast:
 * {@linkcode specialAddress}) are refused where the apiserver refuses them and
 * also in load-balancer ingress IPs: an externalIP, ingress IP or endpoint at
 * one is dropped alone, with a `warnings` entry naming the field, and the rest
 * of the object is used; a cluster IP at one rejects the Service whole.
 *
 * This file holds what every parser shares: the result type, the field
 * accessors and the checks of names, ports, protocols, addresses and CIDRs;
 * one file per kind holds its parser.
 *
 * @module
 */

import type { IpFamily, Protocol, TrafficPolicy } from "../model.ts";
import { normalizeIP, parseCIDR, SPECIAL_ADDRESS_RANGES, specialAddress } from "../ip.ts";

/**
 * The outcome of parsing one object. `ignored` says why a null value was
 * dropped; `warnings` name the values left out of a parsed object.
 */
export type ParseResult<T> =
  | { ok: true; value: T; ignored?: string; warnings?: string[] }
  | { ok: false; error: string };

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

const IANA_SVC_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** Thrown inside the parsers and turned into a failed ParseResult at the edge. */
class FieldError extends Error {}

/** Quotes a value for an error message: JSON, so control characters stay escaped; bounded. */
export function quote(value: unknown): string {
  let text: string;
  try {
    text = typeof value === "number" ? String(value) : JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

export function fail(field: string, value: unknown, problem: string): never {
  throw new FieldError(`${field}: ${quote(value)} ${problem}`);
}

export function wrap<T>(parse: () => T): ParseResult<T> {
  try {
    return { ok: true, value: parse() };
  } catch (error) {
    if (error instanceof FieldError) return { ok: false, error: error.message };
    throw error;
  }
}

export type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function objectField(parent: Json, key: string, field: string): Json {
  const value = parent[key];
  if (value === undefined || value === null) return {};
  if (!isObject(value)) fail(field, value, "is not an object");
  return value;
}

export function arrayField(parent: Json, key: string, field: string): unknown[] {
  const value = parent[key];
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) fail(field, value, "is not a list");
  return Array.from(value); // holes become undefined, which every validator rejects
}

export function stringField(parent: Json, key: string, field: string): string {
  const value = parent[key];
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") fail(field, value, "is not a string");
  return value;
}

export function optionalBoolean(parent: Json, key: string, field: string): boolean | undefined {
  const value = parent[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") fail(field, value, "is not a boolean");
  return value;
}

/** Whether `value` is a DNS-1123 label: 1 to 63 lower-case alphanumerics or `-`, alphanumeric at both ends. */
export function isDNS1123Label(value: string): boolean {
  return value.length > 0 && value.length <= 63 && DNS1123_LABEL.test(value);
}

export function checkDNSLabel(value: string, field: string): string {
  if (value.length === 0) fail(field, value, "must not be empty");
  if (value.length > 63) fail(field, value, "is longer than 63 characters");
  if (!DNS1123_LABEL.test(value)) fail(field, value, "is not a valid DNS-1123 label");
  return value;
}

export function checkDNSSubdomain(value: string, field: string): string {
  if (value.length === 0) fail(field, value, "must not be empty");
  if (value.length > 253) fail(field, value, "is longer than 253 characters");
  if (!DNS1123_SUBDOMAIN.test(value)) fail(field, value, "is not a valid DNS-1123 subdomain");
  return value;
}

export function checkLabelValue(value: string, field: string): string {
  if (value.length > 63) fail(field, value, "is longer than 63 characters");
  if (!LABEL_VALUE.test(value)) fail(field, value, "is not a valid label value");
  return value;
}

export function checkQualifiedName(value: string, field: string): string {
  const slash = value.indexOf("/");
  const name = slash < 0 ? value : value.slice(slash + 1);
  if (slash >= 0) {
    const prefix = value.slice(0, slash);
    if (prefix.length === 0 || prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix)) {
      fail(field, value, "has an invalid prefix");
    }
  }
  if (name.length === 0 || name.length > 63 || !QUALIFIED_NAME_PART.test(name)) {
    fail(field, value, "is not a valid label key");
  }
  return value;
}

/** IANA_SVC_NAME: at most 15 characters, lower-case alphanumerics and single hyphens, a letter. */
export function checkIanaSvcName(value: string, field: string): string {
  if (
    value.length === 0 || value.length > 15 || !IANA_SVC_NAME.test(value) ||
    value.includes("--") || !/[a-z]/.test(value)
  ) {
    fail(field, value, "is not a valid IANA_SVC_NAME");
  }
  return value;
}

export function checkPort(value: unknown, field: string, options: { allowZero: boolean }): number {
  if (value === undefined || value === null) {
    if (options.allowZero) return 0;
    fail(field, value, "is required");
  }
  if (typeof value !== "number" || !Number.isInteger(value)) {
    fail(field, value, "is not an integer");
  }
  if (options.allowZero && value === 0) return 0;
  if (value < 1 || value > 65535) fail(field, value, "is out of range 1-65535");
  return value;
}

export function checkProtocol(value: unknown, field: string): Protocol {
  if (value === undefined || value === null || value === "") return "TCP";
  if (value !== "TCP" && value !== "UDP" && value !== "SCTP") {
    fail(field, value, "is not one of TCP, UDP, SCTP");
  }
  return value;
}

export function checkIP(value: unknown, field: string): { address: string; family: IpFamily } {
  if (typeof value !== "string") fail(field, value, "is not a string");
  const ip = normalizeIP(value);
  if (!ip) fail(field, value, "is not a valid IP address");
  return ip;
}

/** Why a valid address cannot be a service or endpoint address, or undefined when it can. */
export function specialProblem(address: string): string | undefined {
  const kind = specialAddress(address);
  if (kind === undefined) return undefined;
  return `is ${kind === "unspecified" ? "an" : "a"} ${kind} address (${
    SPECIAL_ADDRESS_RANGES[kind]
  })`;
}

/** Whether `address` is an ordinary one; otherwise records why `field` is left out. */
export function keepOrdinary(address: string, field: string, warnings: string[]): boolean {
  const problem = specialProblem(address);
  if (problem !== undefined) warnings.push(`${field}: ${quote(address)} ${problem}`);
  return problem === undefined;
}

export function checkCIDR(value: unknown, field: string): { cidr: string; family: IpFamily } {
  if (typeof value !== "string") fail(field, value, "is not a string");
  const cidr = parseCIDR(value.trim());
  if (!cidr) fail(field, value, "is not a valid CIDR");
  return cidr;
}

export function checkTrafficPolicy(value: unknown, field: string): TrafficPolicy {
  if (value === undefined || value === null || value === "") return "Cluster";
  if (value !== "Cluster" && value !== "Local") fail(field, value, "is not one of Cluster, Local");
  return value;
}

export function stringMap(parent: Json, key: string, field: string): Record<string, string> {
  const raw = objectField(parent, key, field);
  const result: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw)) {
    if (typeof value !== "string") fail(`${field}[${quote(name)}]`, value, "is not a string");
    result[name] = value;
  }
  return result;
}

export function metadataOf(raw: unknown): Json {
  if (!isObject(raw)) fail("object", raw, "is not an object");
  return objectField(raw, "metadata", "metadata");
}

/** A namespaced object being parsed by {@linkcode parseNamespaced}. */
export interface NamespacedObject {
  root: Json;
  metadata: Json;
  namespace: string;
  name: string;
  /** Values left out of the object, one line each. */
  warnings: string[];
  /** Marks the object as ignored for `reason` (not an error); returns null to return. */
  ignore(reason: string): null;
}

/**
 * Parses a namespaced object whose name `nameCheck` validates: `parse` gets
 * it with its metadata and returns the value, or null through `ignore`.
 *
 * @returns The value with any `warnings`; null with `ignored`; or the first
 * invalid field.
 */
export function parseNamespaced<T>(
  raw: unknown,
  nameCheck: typeof checkDNSLabel,
  parse: (object: NamespacedObject) => T | null,
): ParseResult<T | null> {
  let ignored: string | undefined;
  const warnings: string[] = [];
  const ignore = (reason: string) => {
    ignored = reason;
    return null;
  };
  const result = wrap(() => {
    const metadata = metadataOf(raw);
    const namespace = checkDNSLabel(
      stringField(metadata, "namespace", "metadata.namespace"),
      "metadata.namespace",
    );
    const name = nameCheck(stringField(metadata, "name", "metadata.name"), "metadata.name");
    return parse({ root: raw as Json, metadata, namespace, name, warnings, ignore });
  });
  if (result.ok && ignored !== undefined) return { ok: true, value: null, ignored };
  return result.ok && warnings.length > 0 ? { ...result, warnings } : result;
}

export function uniqueStrings(values: string[]): string[] {
  return [...new Set(values)];
}

/** The distinct valid addresses of a list, without special ones (recorded in `warnings`). */
export function ordinaryIPs(values: unknown[], field: string, warnings: string[]): string[] {
  const addresses = values.map((value, i) => checkIP(value, `${field}[${i}]`).address);
  return uniqueStrings(
    addresses.filter((address, i) => keepOrdinary(address, `${field}[${i}]`, warnings)),
  );
}

/**
 * Reads `namespace/name` (or just `name` for cluster-scoped kinds) from raw
 * metadata without validating the rest, for log lines and deletes.
 */
export function objectKeyOf(raw: unknown): { namespace: string; name: string } {
  const metadata = isObject(raw) && isObject(raw.metadata) ? raw.metadata : {};
  const namespace = typeof metadata.namespace === "string" ? metadata.namespace : "";
  const name = typeof metadata.name === "string" ? metadata.name : "";
  return { namespace, name };
}
