/**
 * nftables object names for service ports:
 * `<kind>-<namespace>/<name>/<protocol>/<port name, or _ when unnamed>`.
 *
 * Collision-free by construction, with nothing cut and nothing hashed: the
 * namespace, the name and a port name are DNS-1123 labels (`lib/parse.ts`
 * admits nothing else, and {@linkcode serviceNameSuffix} checks again), so
 * none holds `/`, and `_` is no port name; the kind (`svc`, `ext`, `aff`,
 * `affx`) ends at its first `-`. Two service ports therefore share a name only
 * when they share an id. The longest name (`affx-`, two 63-character labels,
 * `sctp`, a 63-character port name) is 201 characters, within the 255 the
 * kernel allows a chain or set name.
 *
 * @module
 */

import { isDNS1123Label } from "../../lib/core/parse/fields.ts";
import type { ServicePortPlan } from "../../lib/core/plan.ts";

/** Object kinds named per service port. */
export type ServiceObjectKind = "svc" | "ext" | "aff" | "affx";

/** The fields of a service port its object names are made of. */
export type NamedServicePort = Pick<
  ServicePortPlan,
  "id" | "namespace" | "name" | "portName" | "protocol"
>;

function label(service: NamedServicePort, field: string, value: string): string {
  if (!isDNS1123Label(value)) {
    throw new TypeError(
      `Cannot name service port "${service.id}": ${field} "${value}" is not a DNS-1123 label`,
    );
  }
  return value;
}

/**
 * The part of a service port's object names after the kind:
 * `<ns>/<name>/<proto>/<port name or _>`.
 *
 * @throws {TypeError} when the namespace, name or port name is not a DNS-1123
 * label or the protocol is not TCP, UDP or SCTP
 */
export function serviceNameSuffix(service: NamedServicePort): string {
  if (!["TCP", "UDP", "SCTP"].includes(service.protocol)) {
    throw new TypeError(
      `Cannot name service port "${service.id}": protocol "${service.protocol}" is not TCP, UDP or SCTP`,
    );
  }
  return [
    label(service, "namespace", service.namespace),
    label(service, "name", service.name),
    service.protocol.toLowerCase(),
    service.portName === "" ? "_" : label(service, "port name", service.portName),
  ].join("/");
}

/**
 * The name of one per-service-port object.
 *
 * @example Usage
 * ```ts ignore
 * serviceObjectName("svc", plan) // "svc-ns1/svc1/tcp/p80"
 * ```
 */
export function serviceObjectName(kind: ServiceObjectKind, service: NamedServicePort): string {
  return objectName(kind, serviceNameSuffix(service));
}

/** Joins a kind and a {@linkcode serviceNameSuffix}. */
export function objectName(kind: ServiceObjectKind, suffix: string): string {
  return `${kind}-${suffix}`;
}
