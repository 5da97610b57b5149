/**
 * Chain names of the iptables mode, computed exactly as kube-proxy computes
 * them (`servicePortChainNameBase`): the first 16 characters of the base32
 * sha256 of the service port name, protocol and endpoint. The names are
 * stable across restarts and identical to upstream's, so an operator (or a
 * kube-proxy replaced in place) sees the same chains.
 *
 * @module
 */

import { sha256 } from "../../lib/core/sha256.ts";
import type { PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";

const BASE32_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/** iptables refuses chain names longer than this. */
export const MAX_CHAIN_NAME_LENGTH = 28;

function base32(bytes: Uint8Array): string {
  let out = "";
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32_ALPHABET[(buffer >>> (bits - 5)) & 31];
      bits -= 5;
    }
    buffer &= (1 << bits) - 1;
  }
  if (bits > 0) out += BASE32_ALPHABET[(buffer << (5 - bits)) & 31];
  return out;
}

/** The first 16 base32 characters of SHA-256(`text`), as kube-proxy's chain names carry. */
export function hash16(text: string): string {
  return base32(sha256(text).subarray(0, 10));
}

/** The upstream `ServicePortName.String()`: `ns/name:port`, or `ns/name` for an unnamed port. */
export function servicePortName(service: ServicePortPlan): string {
  const base = `${service.namespace}/${service.name}`;
  return service.portName === "" ? base : `${base}:${service.portName}`;
}

/** `ip:port`, with IPv6 addresses in brackets (Go's `net.JoinHostPort`). */
export function endpointString(endpoint: Pick<PlanEndpoint, "ip" | "port">): string {
  return endpoint.ip.includes(":")
    ? `[${endpoint.ip}]:${endpoint.port}`
    : `${endpoint.ip}:${endpoint.port}`;
}

/** The per-service chain names of one service port. */
export interface ServiceChainNames {
  /** KUBE-SVC-: endpoints for Cluster policy. */
  cluster: string;
  /** KUBE-SVL-: endpoints for Local policy. */
  local: string;
  /** KUBE-EXT-: external traffic (node ports, external and load-balancer IPs). */
  external: string;
  /** KUBE-FW-: load-balancer source ranges. */
  firewall: string;
}

/** Names already computed, by plan object: the planner keeps an unchanged service port's object
 * from one plan to the next, so a sync hashes only the ports that changed. */
const CHAIN_NAMES = new WeakMap<ServicePortPlan, ServiceChainNames>();

/** Computes the KUBE-SVC/SVL/EXT/FW chain names of a service port. */
export function serviceChainNames(service: ServicePortPlan): ServiceChainNames {
  const known = CHAIN_NAMES.get(service);
  if (known !== undefined) return known;
  const base = hash16(servicePortName(service) + service.protocol.toLowerCase());
  const names: ServiceChainNames = {
    cluster: `KUBE-SVC-${base}`,
    local: `KUBE-SVL-${base}`,
    external: `KUBE-EXT-${base}`,
    firewall: `KUBE-FW-${base}`,
  };
  CHAIN_NAMES.set(service, names);
  return names;
}

/** Computes the KUBE-SEP chain name of one endpoint of a service port. */
export function endpointChainName(
  service: ServicePortPlan,
  endpoint: Pick<PlanEndpoint, "ip" | "port">,
): string {
  const text = servicePortName(service) + service.protocol.toLowerCase() +
    endpointString(endpoint);
  return `KUBE-SEP-${hash16(text)}`;
}

/**
 * The name a per-service chain is written under while its upstream name is
 * in use: a chunked full sync fills new chains beside the live ones and
 * switches to them in one commit (`render.ts`). Upstream's cleanup removes
 * both spellings: it matches the `KUBE-SVC-` etc. prefixes.
 */
export function alternateChainName(name: string): string {
  return `${name}-2`;
}

/** The upstream name of a per-service chain written under {@linkcode alternateChainName}; other names unchanged. */
export function upstreamChainName(name: string): string {
  return /^KUBE-(SVC|SVL|EXT|FW|SEP)-[A-Z2-7]{16}-2$/.test(name) ? name.slice(0, -2) : name;
}

/** True for the names of per-service and per-endpoint chains (the ones kproxy creates and deletes), in either spelling. */
export function isServiceChainName(name: string): boolean {
  return /^KUBE-(SVC|SVL|EXT|FW|SEP)-[A-Z2-7]{16}(-2)?$/.test(name);
}
