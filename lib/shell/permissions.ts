/**
 * The narrowest Deno permissions kproxy runs with, computed from its
 * configuration: which programs it may spawn, which hosts it may reach or bind,
 * which files and environment variables it may read.
 *
 * Used by `scripts/launch.ts` (runs the bundle with exact flags computed at
 * start) and `scripts/compile.ts` (bakes flags into the executable).
 *
 * @module
 */

import { joinHostPort } from "../core/ip.ts";
import {
  kubeconfigFiles,
  kubeconfigServer,
  parseKubeconfig,
  SERVICE_ACCOUNT_DIR,
} from "./source/kubeconfig.ts";
import type { Config, PortRange, ProxyMode } from "../config/types.ts";
import { modeOf, programsOf, PROXY_MODES } from "../../backends/registry.ts";

/** Programs each mode runs, from its registry entry. */
export const MODE_PROGRAMS: Readonly<Record<ProxyMode, readonly string[]>> = Object.freeze(
  Object.fromEntries(PROXY_MODES.map((mode) => [mode, programsOf(mode)])) as Record<
    ProxyMode,
    readonly string[]
  >,
);

/** Every Linux program any mode may run (mode switching cleans up the other modes). */
export const LINUX_PROGRAMS: readonly string[] = [
  ...new Set(
    PROXY_MODES.filter((mode) => modeOf(mode).platform === "linux").flatMap(programsOf),
  ),
].sort();

/** Environment variables kproxy (and its client library) reads. */
const ENV_VARS: readonly string[] = [
  "KUBERNETES_SERVICE_HOST",
  "KUBERNETES_SERVICE_PORT",
  "KUBECONFIG",
  "HOME",
  "NODE_NAME",
  "KUBE_NETWORK",
  "LOG_TOKENS",
  "LOG_STREAM",
  "GLIBC_TUNABLES",
  // Whether the default TLS root store is empty (lib/shell/source/transport.ts).
  "DENO_TLS_CA_STORE",
  "DENO_CERT",
];

/** A set of Deno permissions. Empty lists grant nothing. */
export interface PermissionSet {
  run: string[];
  /**
   * `host:port` entries to connect to or listen on. Deno checks listening and
   * connecting against the same entries, so every entry names a port: a bare
   * `0.0.0.0` would also allow connecting to `0.0.0.0:ANY`, which Linux
   * delivers to loopback.
   */
  net: string[];
  read: string[];
  env: string[];
  sys: string[];
}

/** What kproxy needs to know to compute its permissions. */
export interface PermissionInput {
  mode: ProxyMode;
  /** `host:port` of each apiserver, "" when reading manifests only. */
  apiservers: string[];
  /** Listening addresses: healthz and metrics `host:port`. */
  listen: string[];
  /** Health-check node ports: served on `host` at the ports of `ports`. Absent: none. */
  healthCheckNodePorts?: { host: string; ports: PortRange };
  /** Files and directories read: config, kubeconfig and the files it names, manifests. */
  read: string[];
  /** Allow every Linux mode's programs (for cleaning up after a mode switch). */
  allModes?: boolean;
}

/** Where kproxy serves health-check node ports (as upstream without nodePortAddresses). */
export const HEALTH_CHECK_NODE_PORT_HOST = "0.0.0.0";

/**
 * The most ports one `--allow-net` flag may name: Linux limits one argument
 * to 128 KiB, and each `0.0.0.0:NNNNN,` takes 14 bytes.
 */
const MAX_GRANTED_PORTS = 8192;

const HOST_PORT = /^(?:\[[0-9A-Fa-f:.]+\]|[^:\[\]\s,]+):\d{1,5}$/;

/**
 * Computes the permission set for a configuration. Pure.
 *
 * @throws {TypeError} when a net entry names no port
 * @throws {RangeError} when the health-check node port range is wider than {@linkcode MAX_GRANTED_PORTS}
 */
export function permissionsFor(input: PermissionInput): PermissionSet {
  const linux = modeOf(input.mode).platform === "linux";
  const programs = linux && input.allModes ? LINUX_PROGRAMS : programsOf(input.mode);
  const net = [...input.apiservers, ...input.listen].filter((entry) => entry !== "");
  if (input.healthCheckNodePorts) {
    const { host, ports } = input.healthCheckNodePorts;
    const count = ports.last - ports.first + 1;
    if (count > MAX_GRANTED_PORTS) {
      throw new RangeError(
        `Cannot grant health-check node ports ${ports.first}-${ports.last}: ${count} ports, ` +
          `more than the ${MAX_GRANTED_PORTS} one --allow-net flag can name`,
      );
    }
    for (let port = ports.first; port <= ports.last; port++) net.push(joinHostPort(host, port));
  }
  for (const entry of net) {
    if (!HOST_PORT.test(entry)) {
      throw new TypeError(`Cannot grant network access to "${entry}": it names no single port`);
    }
  }
  return {
    run: [...new Set(programs)].sort(),
    net: [...new Set(net)].sort(),
    read: [...new Set(input.read.filter((path) => path !== ""))].sort(),
    env: [...ENV_VARS],
    sys: ["hostname", "networkInterfaces"],
  };
}

/** Renders a permission set as `deno run`/`deno compile` flags. */
export function denoFlags(permissions: PermissionSet): string[] {
  const flag = (name: string, values: string[]) =>
    values.length > 0 ? [`--allow-${name}=${values.join(",")}`] : [];
  return [
    ...flag("run", permissions.run),
    ...flag("net", permissions.net),
    ...flag("read", permissions.read),
    ...flag("env", permissions.env),
    ...flag("sys", permissions.sys),
    "--ignore-env",
    "--no-prompt",
  ];
}

/** Splits a URL like `https://10.0.0.1:6443` into the `host:port` Deno's --allow-net takes. */
export function hostPortOfURL(url: string): string {
  const parsed = new URL(url);
  const port = parsed.port || (parsed.protocol === "https:" ? "443" : "80");
  return `${parsed.hostname}:${port}`;
}

/** What {@linkcode permissionInputFor} may read: files and environment variables. */
export interface PermissionEnvironment {
  readTextFile(path: string): string;
  getEnv(name: string): string | undefined;
}

/**
 * Derives the exact permission input of a configuration: the apiserver from
 * `--master`, the kubeconfig's current cluster, or the in-cluster service
 * variables; the files the kubeconfig names; the listening addresses.
 *
 * @throws {Error} when the kubeconfig cannot be read or names no server
 */
export function permissionInputFor(config: Config, env: PermissionEnvironment): PermissionInput {
  const read = [config.configFile, config.manifests];
  const apiservers: string[] = [];
  if (config.manifests === "") {
    if (config.master !== "") apiservers.push(hostPortOfURL(config.master));
    if (config.kubeconfig !== "") {
      read.push(config.kubeconfig);
      const kubeconfig = parseKubeconfig(env.readTextFile(config.kubeconfig), config.kubeconfig);
      if (config.master === "") {
        const server = kubeconfigServer(kubeconfig);
        if (server === "") {
          throw new Error(
            `Cannot find the apiserver in kubeconfig "${config.kubeconfig}": no cluster server`,
          );
        }
        apiservers.push(hostPortOfURL(server));
      }
      read.push(...kubeconfigFiles(kubeconfig));
    } else if (config.master === "") {
      const host = env.getEnv("KUBERNETES_SERVICE_HOST");
      const port = env.getEnv("KUBERNETES_SERVICE_PORT") ?? "443";
      if (!host) {
        throw new Error(
          "Cannot find the apiserver: no --master, --kubeconfig or in-cluster environment",
        );
      }
      apiservers.push(joinHostPort(host, port));
      read.push(SERVICE_ACCOUNT_DIR);
    }
  }
  return {
    mode: config.proxyMode,
    apiservers,
    listen: [config.healthzBindAddress, config.metricsBindAddress].filter((a) => a !== ""),
    healthCheckNodePorts: { host: HEALTH_CHECK_NODE_PORT_HOST, ports: config.serviceNodePortRange },
    read,
    allModes: modeOf(config.proxyMode).platform === "linux",
  };
}
