/**
 * The KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1): its
 * schema, field by field, and how it is applied to a Config.
 *
 * @module
 */

import { parse as parseYaml } from "yaml";
import type { Config } from "./types.ts";
import {
  checkGate,
  ConfigError,
  fail,
  type Origins,
  quote,
  splitList,
  SYNC_PERIOD_SECTIONS,
  toCIDR,
  toDetectLocalMode,
  toDuration,
  toHostPort,
  toInterfaceName,
  toIP,
  toMasqueradeBit,
  toNodePortAddresses,
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
  masqueradeAll: boolField("masqueradeAll", (c, v) => (c.masqueradeAll ||= v)),
  serviceCounters: boolField("serviceCounters", (c, v) => (c.serviceCounters = v)),
  bindAddress: stringField("bindAddress", (c, v, f) => (c.bindAddress = toIP(v, f))),
  healthzBindAddress: stringField(
    "healthzBindAddress",
    (c, v, f) => (c.healthzBindAddress = toHostPort(v, f)),
  ),
  metricsBindAddress: stringField(
    "metricsBindAddress",
    (c, v, f) => (c.metricsBindAddress = toHostPort(v, f)),
  ),
  bindAddressHardFail: IGNORED,
  enableProfiling: IGNORED,
  showHiddenMetricsForVersion: IGNORED,
  oomScoreAdj: IGNORED,
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
        checkGate(name, `${field}.${name}`);
        config.featureGates[name] = expectBool(enabled, `${field}.${name}`);
      }
    },
  },
  syncPeriod: durationField(SYNC_PERIOD_SECTIONS.map((mode) => `${mode}.syncPeriodMs`), (c, ms) => {
    c.iptables.syncPeriodMs = c.nftables.syncPeriodMs = c.ipvs.syncPeriodMs = ms;
  }),
  minSyncPeriod: durationField(
    SYNC_PERIOD_SECTIONS.map((mode) => `${mode}.minSyncPeriodMs`),
    (c, ms) => {
      c.iptables.minSyncPeriodMs = c.nftables.minSyncPeriodMs = c.ipvs.minSyncPeriodMs = ms;
    },
  ),
  iptables: {
    masqueradeAll: boolField("masqueradeAll", (c, v) => (c.masqueradeAll ||= v)),
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
    masqueradeAll: boolField("masqueradeAll", (c, v) => (c.masqueradeAll ||= v)),
    masqueradeBit: IGNORED,
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
    maxPerCore: IGNORED,
    min: IGNORED,
    tcpEstablishedTimeout: IGNORED,
    tcpCloseWaitTimeout: IGNORED,
    udpTimeout: IGNORED,
    udpStreamTimeout: IGNORED,
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
      throw new ConfigError(field, `Cannot parse --config: unknown field ${quote(field)}`);
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
    document = parseYaml(text);
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
  applyFileObject(FILE_SCHEMA, object, { ...context, prefix: "" });
}
