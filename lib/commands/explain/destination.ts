/**
 * The DEST of `kproxy explain`: an address and port, or a service by name.
 *
 * @module
 */

import { parseIP } from "../../core/ip.ts";
import type { IpFamily, Protocol } from "../../core/model.ts";

/** A parsed `DEST` argument. */
export type Destination =
  | {
    kind: "address";
    /** Canonical IP text. */
    ip: string;
    family: IpFamily;
    port: number;
    protocol: Protocol;
  }
  | {
    kind: "service";
    namespace: string;
    name: string;
    /** Service port number or port name. */
    port: number | string;
    /** undefined when DEST did not name one. */
    protocol?: Protocol;
  };

const PROTOCOLS: readonly Protocol[] = ["TCP", "UDP", "SCTP"];
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const PORT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DIGITS = /^[0-9]+$/;
const DEST_FORMS = "IP:PORT[/PROTO], [IPv6]:PORT[/PROTO], NAMESPACE/NAME:PORT or NAME:PORT";

function destError(text: string, why: string): TypeError {
  return new TypeError(`Cannot parse DEST ${JSON.stringify(text)}: ${why} (want ${DEST_FORMS})`);
}

function parsePortNumber(text: string, dest: string): number {
  if (!DIGITS.test(text)) throw destError(dest, `port ${JSON.stringify(text)} is not a number`);
  const port = Number(text);
  if (port < 1 || port > 65535) throw destError(dest, `port ${port} is out of range 1-65535`);
  return port;
}

/**
 * Parses the `DEST` of `kproxy explain`: `IP:PORT/PROTO` (IPv6 as
 * `[IP]:PORT/PROTO`, protocol TCP when omitted), or a service port as
 * `NAMESPACE/NAME:PORT` or `NAME:PORT` (namespace "default"), PORT being a
 * number or a port name, optionally followed by `/PROTO`.
 *
 * @example Usage
 * ```ts
 * import { parseDestination } from "./explain.ts";
 * parseDestination("10.96.0.10:53/udp"); // { kind: "address", ip: "10.96.0.10", port: 53, protocol: "UDP", ... }
 * parseDestination("kube-system/kube-dns:dns"); // { kind: "service", port: "dns", ... }
 * ```
 *
 * @param text The DEST argument.
 * @returns The parsed destination.
 * @throws {TypeError} When `text` is none of the accepted forms.
 */
export function parseDestination(text: string): Destination {
  const trimmed = text.trim();
  if (trimmed === "") throw destError(text, "it is empty");
  let body = trimmed;
  let protocol: Protocol | undefined;
  const lastSlash = trimmed.lastIndexOf("/");
  if (lastSlash >= 0) {
    const suffix = trimmed.slice(lastSlash + 1).toUpperCase();
    const known = PROTOCOLS.find((p) => p === suffix);
    if (known !== undefined) {
      protocol = known;
      body = trimmed.slice(0, lastSlash);
    } else if (!/[a-z]/i.test(trimmed.slice(0, lastSlash)) || trimmed.startsWith("[")) {
      throw destError(text, `unknown protocol ${JSON.stringify(suffix)} (want TCP, UDP or SCTP)`);
    }
  }
  if (body.startsWith("[")) {
    const close = body.indexOf("]");
    if (close < 0) throw destError(text, "missing ']' after the IPv6 address");
    const ip = parseIP(body.slice(1, close));
    if (ip?.family !== "IPv6") {
      throw destError(text, `${JSON.stringify(body.slice(1, close))} is not an IPv6 address`);
    }
    if (body[close + 1] !== ":") throw destError(text, "missing ':PORT' after the address");
    const port = parsePortNumber(body.slice(close + 2), text);
    return { kind: "address", ip: ip.address, family: "IPv6", port, protocol: protocol ?? "TCP" };
  }
  const colons = body.split(":").length - 1;
  if (colons === 0) throw destError(text, "missing ':PORT'");
  if (colons > 1) {
    throw destError(text, "an IPv6 address needs brackets, e.g. [fd00::1]:80");
  }
  const colon = body.indexOf(":");
  const host = body.slice(0, colon);
  const portText = body.slice(colon + 1);
  if (/^[0-9.]+$/.test(host)) {
    const ip = parseIP(host);
    if (ip === undefined) throw destError(text, `${JSON.stringify(host)} is not an IPv4 address`);
    const port = parsePortNumber(portText, text);
    return { kind: "address", ip: ip.address, family: "IPv4", port, protocol: protocol ?? "TCP" };
  }
  const parts = host.split("/");
  if (parts.length > 2) throw destError(text, "a service is NAMESPACE/NAME");
  const [namespace, name] = parts.length === 2 ? [parts[0]!, parts[1]!] : ["default", parts[0]!];
  for (const [what, value] of [["namespace", namespace], ["service name", name]] as const) {
    if (!DNS_LABEL.test(value)) {
      throw destError(text, `${what} ${JSON.stringify(value)} is not a DNS label`);
    }
  }
  let port: number | string;
  if (DIGITS.test(portText)) {
    port = parsePortNumber(portText, text);
  } else if (PORT_NAME.test(portText) && portText.length <= 63) {
    port = portText;
  } else {
    throw destError(text, `${JSON.stringify(portText)} is neither a port number nor a port name`);
  }
  return protocol === undefined
    ? { kind: "service", namespace, name, port }
    : { kind: "service", namespace, name, port, protocol };
}
