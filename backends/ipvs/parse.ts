/**
 * Parsers for ipvsadm's listings: `ipvsadm -Sn` (the table as restore input)
 * and `ipvsadm -Ln` (with the ActiveConn/InActConn columns).
 *
 * @module
 */

import { parseIP } from "../../lib/core/ip.ts";
import type { Protocol } from "../../lib/core/model.ts";
import { type RealServer, realServerKey, type VirtualServer, virtualServerKey } from "./render.ts";

/** Parses `addr:port` or `[v6addr]:port`. */
export function parseHostPort(text: string): { address: string; port: number } {
  const match = /^\[([0-9a-fA-F:.]+)\]:(\d+)$/.exec(text) ?? /^([0-9.]+):(\d+)$/.exec(text);
  const address = match?.[1] ?? "";
  const port = Number(match?.[2]);
  if (!match || parseIP(address) === undefined || port < 0 || port > 65535) {
    throw new TypeError(`Cannot parse IPVS address "${text}": expected address:port`);
  }
  return { address, port };
}

const PROTOCOL_FLAGS: Record<string, Protocol> = {
  "-t": "TCP",
  "--tcp-service": "TCP",
  "-u": "UDP",
  "--udp-service": "UDP",
  "--sctp-service": "SCTP",
};

const VALUE_OPTIONS = new Set(["-s", "-b", "-p", "-M", "-w", "-x", "-y", "-r", "-f", "--pe"]);

/**
 * Parses `ipvsadm -Sn` output into virtual servers (sorted, with their real
 * servers). Firewall-mark services are ignored: kproxy never creates them.
 *
 * @throws {TypeError} on a line it cannot parse
 */
export function parseIpvsadmSave(text: string): VirtualServer[] {
  const servers = new Map<string, VirtualServer>();
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "") continue;
    const tokens = line.split(/\s+/);
    const command = tokens[0];
    let protocol: Protocol | undefined;
    let service = "";
    const options = new Map<string, string>();
    for (let i = 1; i < tokens.length; i++) {
      const token = tokens[i] ?? "";
      if (token in PROTOCOL_FLAGS) {
        protocol = PROTOCOL_FLAGS[token];
        service = tokens[++i] ?? "";
      } else if (VALUE_OPTIONS.has(token)) {
        options.set(token, tokens[++i] ?? "");
      }
    }
    if (options.has("-f")) continue;
    if (protocol === undefined || (command !== "-A" && command !== "-a")) {
      throw new TypeError(`Cannot parse ipvsadm rule "${line}": expected -A or -a with a service`);
    }
    const { address, port } = parseHostPort(service);
    const key = virtualServerKey({ protocol, address, port });
    if (command === "-A") {
      const flags = options.get("-b");
      servers.set(key, {
        protocol,
        address,
        port,
        scheduler: options.get("-s") ?? "wlc",
        schedulerFlags: flags ? flags.split(",").sort() : [],
        persistenceSeconds: options.has("-p") ? Number(options.get("-p")) : 0,
        realServers: [],
      });
    } else {
      const vs = servers.get(key);
      if (vs === undefined) {
        throw new TypeError(`Cannot parse ipvsadm rule "${line}": real server before its service`);
      }
      const real = parseHostPort(options.get("-r") ?? "");
      vs.realServers.push({ ...real, weight: Number(options.get("-w") ?? "1") });
    }
  }
  const list = [...servers.values()].sort((a, b) => cmp(virtualServerKey(a), virtualServerKey(b)));
  for (const vs of list) vs.realServers.sort((a, b) => cmp(realServerKey(a), realServerKey(b)));
  return list;
}

/** Connection counts of one real server, from `ipvsadm -Ln`. */
export interface RealServerConnections extends RealServer {
  activeConnections: number;
  inactiveConnections: number;
}

/**
 * Parses `ipvsadm -Ln` output into the connection counts of each real server,
 * keyed by virtual server key, then real server key.
 */
export function parseIpvsadmList(text: string): Map<string, Map<string, RealServerConnections>> {
  const result = new Map<string, Map<string, RealServerConnections>>();
  let current: Map<string, RealServerConnections> | undefined;
  for (const line of text.split("\n")) {
    const service = /^(TCP|UDP|SCTP)\s+(\S+)/.exec(line);
    if (service) {
      const { address, port } = parseHostPort(service[2] ?? "");
      current = new Map();
      result.set(virtualServerKey({ protocol: service[1] as Protocol, address, port }), current);
      continue;
    }
    if (/^\S/.test(line)) current = undefined;
    const real = /^\s+->\s+(\S+)\s+\S+\s+(\d+)\s+(\d+)\s+(\d+)\s*$/.exec(line);
    if (real && current) {
      const { address, port } = parseHostPort(real[1] ?? "");
      current.set(realServerKey({ address, port }), {
        address,
        port,
        weight: Number(real[2]),
        activeConnections: Number(real[3]),
        inactiveConnections: Number(real[4]),
      });
    }
  }
  return result;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
