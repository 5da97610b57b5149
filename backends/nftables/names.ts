/**
 * Stable nftables object names for service ports, in the style of upstream's
 * `hashAndTruncate`: `<prefix>-<HASH>-<ns>/<name>/<proto>/<port name>`. The
 * hash makes the name unique whatever truncation or character replacement
 * did; the rest makes it recognisable in `nft list ruleset`.
 *
 * @module
 */

import type { ServicePortPlan } from "../../lib/plan.ts";

/** Longest name kproxy gives an nftables object (the kernel allows 255). */
export const MAX_NAME_LENGTH = 200;

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/**
 * 8 base32 characters (40 bits) of a fast 53-bit string hash (cyrb53). Not
 * cryptographic: the hash only keeps names unique when truncation or
 * character replacement makes the readable parts of two ids equal.
 */
export function shortHash(text: string): string {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  let value = (h2 & 0x1fffff) * 0x100000000 + (h1 >>> 0);
  let out = "";
  for (let i = 0; i < 8; i++) {
    out += BASE32[value % 32];
    value = Math.floor(value / 32);
  }
  return out;
}

function safe(text: string): string {
  return text.replace(/[^a-zA-Z0-9_.-]/g, "_");
}

/** Object kinds named per service port. */
export type ServiceObjectKind = "svc" | "ext" | "aff" | "affx";

/**
 * The part of a service port's object names after the kind:
 * `<HASH>-<ns>/<name>/<proto>/<port name or _>`.
 */
export function serviceNameSuffix(
  service: Pick<ServicePortPlan, "id" | "namespace" | "name" | "portName" | "protocol">,
): string {
  const readable = [
    safe(service.namespace),
    safe(service.name),
    service.protocol.toLowerCase(),
    service.portName === "" ? "_" : safe(service.portName),
  ].join("/");
  return `${shortHash(service.id)}-${readable}`;
}

/**
 * The name of one per-service-port object, derived from its id only.
 *
 * @example Usage
 * ```ts ignore
 * serviceObjectName("svc", plan) // "svc-ULMVA6XW-ns1/svc1/tcp/p80"
 * ```
 */
export function serviceObjectName(
  kind: ServiceObjectKind,
  service: Pick<ServicePortPlan, "id" | "namespace" | "name" | "portName" | "protocol">,
): string {
  return objectName(kind, serviceNameSuffix(service));
}

/** Joins a kind and a {@linkcode serviceNameSuffix}, truncated to {@linkcode MAX_NAME_LENGTH}. */
export function objectName(kind: ServiceObjectKind, suffix: string): string {
  return `${kind}-${suffix}`.slice(0, MAX_NAME_LENGTH);
}
