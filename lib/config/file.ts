/**
 * The KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1): its
 * schema, field by field, and how it is applied to a Config.
 *
 * @module
 */

import { parseYamlDocument } from "../core/yaml.ts";
import { parseIP } from "../core/ip.ts";
import type { Config } from "./types.ts";
import {
  appendPortIfNeeded,
  ConfigError,
  fail,
  type Origins,
  quote,
  splitList,
  toCIDR,
  toDetectLocalMode,
  toDuration,
  toHostPort,
  toInterfaceName,
  toIP,
  toMasqueradeBit,
  toNodePortAddresses,
  toNonNegative,
  toOomScoreAdj,
  toProxyMode,
  toScheduler,
  toVerbosity,
} from "./values.ts";

const CONFIG_API_VERSION = "kubeproxy.config.k8s.io/v1alpha1";
const CONFIG_KIND = "KubeProxyConfiguration";

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

/** A duration where an explicit zero counts (a pointer field upstream); null takes the default. */
function zeroableDurationField(key: string, set: (c: Config, ms: number) => void): FileField {
  return stringField(key, (config, value, field) => set(config, toDuration(value, field)));
}

/** An integer (a pointer field upstream): null takes the default, any number counts. */
function intField(key: string, set: (c: Config, value: number, field: string) => void): FileField {
  return {
    key,
    apply(config, value, field) {
      if (value !== null && value !== undefined) set(config, expectInt(value, field), field);
    },
  };
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

const HEALTHZ_PORT = 10256;
const METRICS_PORT = 10249;

/**
 * The servers' defaults follow an IPv6 bindAddress, as v1alpha1's defaulting
 * (getDefaultAddresses): `[::]:10256` and `[::1]:10249` when the file leaves
 * them empty.
 */
function defaultServerAddresses(config: Config, object: Record<string, unknown>): void {
  if (parseIP(config.bindAddress)?.family !== "IPv6") return;
  if (isUnset(object.healthzBindAddress)) config.healthzBindAddress = `[::]:${HEALTHZ_PORT}`;
  if (isUnset(object.metricsBindAddress)) config.metricsBindAddress = `[::1]:${METRICS_PORT}`;
}

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
    bridgeInterface: stringField(
      "bridgeInterface",
      (c, v, f) => (c.bridgeInterface = toInterfaceName(v, f)),
    ),
    interfaceNamePrefix: stringField(
      "interfaceNamePrefix",
      (c, v, f) => (c.interfaceNamePrefix = toInterfaceName(v, f)),
    ),
  },
  nodePortAddresses: {
    key: "nodePortAddresses",
    apply(config, value, field) {
      if (isUnset(value)) return;
      config.nodePortAddresses = toNodePortAddresses(expectStringList(value, field), field);
    },
  },
  serviceCounters: boolField("serviceCounters", (c, v) => (c.serviceCounters = v)),
  bindAddress: stringField("bindAddress", (c, v, f) => (c.bindAddress = toIP(v, f))),
  healthzBindAddress: stringField(
    "healthzBindAddress",
    (c, v, f) => (c.healthzBindAddress = toHostPort(appendPortIfNeeded(v, HEALTHZ_PORT), f)),
  ),
  metricsBindAddress: stringField(
    "metricsBindAddress",
    (c, v, f) => (c.metricsBindAddress = toHostPort(appendPortIfNeeded(v, METRICS_PORT), f)),
  ),
  bindAddressHardFail: IGNORED,
  enableProfiling: IGNORED,
  showHiddenMetricsForVersion: IGNORED,
  oomScoreAdj: intField("oomScoreAdj", (c, v, f) => (c.oomScoreAdj = toOomScoreAdj(v, f))),
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
        config.featureGates[name] = expectBool(enabled, `${field}.${name}`);
      }
    },
  },
  iptables: {
    masqueradeAll: boolField("masqueradeAll", (c, v) => {
      if (c.proxyMode !== "nftables") c.masqueradeAll = v;
    }),
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
    masqueradeAll: boolField("masqueradeAll", (c, v) => {
      if (c.proxyMode === "nftables") c.masqueradeAll = v;
    }),
    masqueradeBit: intField(
      "nftables.masqueradeBit",
      (c, v, f) => (c.nftables.masqueradeBit = toMasqueradeBit(v, f)),
    ),
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
    rootHnsEndpointName: stringField(
      "winkernel.rootHnsEndpointName",
      (c, v) => (c.winkernel.rootHnsEndpointName = v),
    ),
    forwardHealthCheckVip: boolField(
      "winkernel.forwardHealthCheckVip",
      (c, v) => (c.winkernel.forwardHealthCheckVip = v),
    ),
  },
  conntrack: {
    tcpBeLiberal: boolField("conntrack.tcpBeLiberal", (c, v) => (c.conntrack.tcpBeLiberal = v)),
    maxPerCore: intField(
      "conntrack.maxPerCore",
      (c, v, f) => (c.conntrack.maxPerCore = toNonNegative(v, f)),
    ),
    min: intField("conntrack.min", (c, v, f) => (c.conntrack.min = toNonNegative(v, f))),
    // Pointers in v1alpha1: null takes the default, an explicit 0s leaves the kernel's value.
    tcpEstablishedTimeout: zeroableDurationField(
      "conntrack.tcpEstablishedTimeoutMs",
      (c, ms) => (c.conntrack.tcpEstablishedTimeoutMs = ms),
    ),
    tcpCloseWaitTimeout: zeroableDurationField(
      "conntrack.tcpCloseWaitTimeoutMs",
      (c, ms) => (c.conntrack.tcpCloseWaitTimeoutMs = ms),
    ),
    udpTimeout: durationField("conntrack.udpTimeoutMs", (c, ms) => (c.conntrack.udpTimeoutMs = ms)),
    udpStreamTimeout: durationField(
      "conntrack.udpStreamTimeoutMs",
      (c, ms) => (c.conntrack.udpStreamTimeoutMs = ms),
    ),
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
      // kube-proxy decodes leniently when strict decoding fails: unknown fields are dropped.
      context.warnings.push(`Ignoring unknown field ${quote(field)} in --config`);
      continue;
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

export function applyConfigFile(
  text: string,
  context: { config: Config; origins: Origins; warnings: string[]; path: string },
): void {
  let document: unknown;
  try {
    document = parseYamlDocument(text);
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
  // The file's own mode picks the section of masqueradeAll, as v1alpha1's conversion does.
  const { mode, ...rest } = object;
  applyFileObject(FILE_SCHEMA, mode === undefined ? rest : { mode, ...rest }, {
    ...context,
    prefix: "",
  });
  defaultServerAddresses(context.config, object);
}
