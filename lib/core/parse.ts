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
 * @module
 */

import type {
  EndpointHints,
  EndpointSlice,
  IpFamily,
  LoadBalancerIngress,
  Node,
  Protocol,
  Service,
  ServiceCIDR,
  ServicePortSpec,
  ServiceType,
  SliceEndpoint,
  SlicePort,
  TrafficPolicy,
} from "./model.ts";
import { normalizeIP, parseCIDR, SPECIAL_ADDRESS_RANGES, specialAddress } from "./ip.ts";

/**
 * The outcome of parsing one object. `ignored` says why a null value was
 * dropped; `warnings` name the values left out of a parsed object.
 */
export type ParseResult<T> =
  | { ok: true; value: T; ignored?: string; warnings?: string[] }
  | { ok: false; error: string };

/** The label naming the Service an EndpointSlice belongs to. */
export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";
/** Services carrying this label are handled by another proxy, as upstream does. */
export const SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name";
/** The annotation selecting topology-aware routing (newer spelling). */
export const TOPOLOGY_MODE_ANNOTATION = "service.kubernetes.io/topology-mode";
/** The annotation selecting topology-aware hints (older spelling). */
export const TOPOLOGY_HINTS_ANNOTATION = "service.kubernetes.io/topology-aware-hints";
/** The session affinity timeout used when ClientIP affinity sets none. */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;
/** The largest ClientIP affinity timeout the API allows. */
export const MAX_AFFINITY_TIMEOUT_SECONDS = 86400;
/** The most topologyKeys a Service may list. */
export const MAX_TOPOLOGY_KEYS = 16;

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const IANA_SVC_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** Thrown inside the parsers and turned into a failed ParseResult at the edge. */
class FieldError extends Error {}

/** Quotes a value for an error message: JSON, so control characters stay escaped; bounded. */
function quote(value: unknown): string {
  let text: string;
  try {
    text = typeof value === "number" ? String(value) : JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function fail(field: string, value: unknown, problem: string): never {
  throw new FieldError(`${field}: ${quote(value)} ${problem}`);
}

function wrap<T>(parse: () => T): ParseResult<T> {
  try {
    return { ok: true, value: parse() };
  } catch (error) {
    if (error instanceof FieldError) return { ok: false, error: error.message };
    throw error;
  }
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function objectField(parent: Json, key: string, field: string): Json {
  const value = parent[key];
  if (value === undefined || value === null) return {};
  if (!isObject(value)) fail(field, value, "is not an object");
  return value;
}

function arrayField(parent: Json, key: string, field: string): unknown[] {
  const value = parent[key];
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) fail(field, value, "is not a list");
  return Array.from(value); // holes become undefined, which every validator rejects
}

function stringField(parent: Json, key: string, field: string): string {
  const value = parent[key];
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") fail(field, value, "is not a string");
  return value;
}

function optionalBoolean(parent: Json, key: string, field: string): boolean | undefined {
  const value = parent[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") fail(field, value, "is not a boolean");
  return value;
}

/** Whether `value` is a DNS-1123 label: 1 to 63 lower-case alphanumerics or `-`, alphanumeric at both ends. */
export function isDNS1123Label(value: string): boolean {
  return value.length > 0 && value.length <= 63 && DNS1123_LABEL.test(value);
}

function checkDNSLabel(value: string, field: string): string {
  if (value.length === 0) fail(field, value, "must not be empty");
  if (value.length > 63) fail(field, value, "is longer than 63 characters");
  if (!DNS1123_LABEL.test(value)) fail(field, value, "is not a valid DNS-1123 label");
  return value;
}

function checkDNSSubdomain(value: string, field: string): string {
  if (value.length === 0) fail(field, value, "must not be empty");
  if (value.length > 253) fail(field, value, "is longer than 253 characters");
  if (!DNS1123_SUBDOMAIN.test(value)) fail(field, value, "is not a valid DNS-1123 subdomain");
  return value;
}

function checkLabelValue(value: string, field: string): string {
  if (value.length > 63) fail(field, value, "is longer than 63 characters");
  if (!LABEL_VALUE.test(value)) fail(field, value, "is not a valid label value");
  return value;
}

function checkQualifiedName(value: string, field: string): string {
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
function checkIanaSvcName(value: string, field: string): string {
  if (
    value.length === 0 || value.length > 15 || !IANA_SVC_NAME.test(value) ||
    value.includes("--") || !/[a-z]/.test(value)
  ) {
    fail(field, value, "is not a valid IANA_SVC_NAME");
  }
  return value;
}

function checkPort(value: unknown, field: string, options: { allowZero: boolean }): number {
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

function checkProtocol(value: unknown, field: string): Protocol {
  if (value === undefined || value === null || value === "") return "TCP";
  if (value !== "TCP" && value !== "UDP" && value !== "SCTP") {
    fail(field, value, "is not one of TCP, UDP, SCTP");
  }
  return value;
}

function checkIP(value: unknown, field: string): { address: string; family: IpFamily } {
  if (typeof value !== "string") fail(field, value, "is not a string");
  const ip = normalizeIP(value);
  if (!ip) fail(field, value, "is not a valid IP address");
  return ip;
}

/** Why a valid address cannot be a service or endpoint address, or undefined when it can. */
function specialProblem(address: string): string | undefined {
  const kind = specialAddress(address);
  if (kind === undefined) return undefined;
  return `is ${kind === "unspecified" ? "an" : "a"} ${kind} address (${
    SPECIAL_ADDRESS_RANGES[kind]
  })`;
}

/** Whether `address` is an ordinary one; otherwise records why `field` is left out. */
function keepOrdinary(address: string, field: string, warnings: string[]): boolean {
  const problem = specialProblem(address);
  if (problem !== undefined) warnings.push(`${field}: ${quote(address)} ${problem}`);
  return problem === undefined;
}

function withWarnings<T>(result: ParseResult<T>, warnings: string[]): ParseResult<T> {
  return result.ok && warnings.length > 0 ? { ...result, warnings } : result;
}

function checkCIDR(value: unknown, field: string): { cidr: string; family: IpFamily } {
  if (typeof value !== "string") fail(field, value, "is not a string");
  const cidr = parseCIDR(value.trim());
  if (!cidr) fail(field, value, "is not a valid CIDR");
  return cidr;
}

function checkTrafficPolicy(value: unknown, field: string): TrafficPolicy {
  if (value === undefined || value === null || value === "") return "Cluster";
  if (value !== "Cluster" && value !== "Local") fail(field, value, "is not one of Cluster, Local");
  return value;
}

function stringMap(parent: Json, key: string, field: string): Record<string, string> {
  const raw = objectField(parent, key, field);
  const result: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw)) {
    if (typeof value !== "string") fail(`${field}[${quote(name)}]`, value, "is not a string");
    result[name] = value;
  }
  return result;
}

function metadataOf(raw: unknown): Json {
  if (!isObject(raw)) fail("object", raw, "is not an object");
  return objectField(raw, "metadata", "metadata");
}

function namespacedName(raw: unknown, nameCheck: typeof checkDNSLabel) {
  const metadata = metadataOf(raw);
  const namespace = checkDNSLabel(
    stringField(metadata, "namespace", "metadata.namespace"),
    "metadata.namespace",
  );
  const name = nameCheck(stringField(metadata, "name", "metadata.name"), "metadata.name");
  return { metadata, namespace, name };
}

const SERVICE_TYPES: readonly string[] = ["ClusterIP", "NodePort", "LoadBalancer"];

/**
 * Parses a core/v1 Service.
 *
 * @param raw The Service as API JSON.
 * @returns The validated Service; null (with `ignored`) for ExternalName and
 * headless services and those labelled for another proxy
 * (`service.kubernetes.io/service-proxy-name`); or the first invalid field.
 * Special externalIPs and ingress IPs are left out, each with a `warnings` entry.
 */
export function parseService(raw: unknown): ParseResult<Service | null> {
  let ignored: string | undefined;
  const warnings: string[] = [];
  const result = wrap(() => {
    const { metadata, namespace, name } = namespacedName(raw, checkDNSLabel);
    const root = raw as Json;
    const spec = objectField(root, "spec", "spec");
    const status = objectField(root, "status", "status");

    const labels = stringMap(metadata, "labels", "metadata.labels");
    if (labels[SERVICE_PROXY_NAME_LABEL] !== undefined) {
      ignored = "service-proxy-name";
      return null;
    }
    const rawType = stringField(spec, "type", "spec.type") || "ClusterIP";
    if (rawType === "ExternalName") {
      ignored = "ExternalName";
      return null;
    }
    if (!SERVICE_TYPES.includes(rawType)) {
      fail("spec.type", rawType, "is not one of ClusterIP, NodePort, LoadBalancer, ExternalName");
    }
    const type = rawType as ServiceType;

    const clusterIPs = parseClusterIPs(spec);
    if (clusterIPs === null) {
      ignored = "headless";
      return null;
    }

    const ports = parseServicePorts(spec);
    const externalIPs = ordinaryIPs(
      arrayField(spec, "externalIPs", "spec.externalIPs"),
      "spec.externalIPs",
      warnings,
    );
    const loadBalancerIngress = parseIngress(status, warnings);
    const loadBalancerSourceRanges = uniqueStrings(
      arrayField(spec, "loadBalancerSourceRanges", "spec.loadBalancerSourceRanges").map((
        range,
        i,
      ) => checkCIDR(range, `spec.loadBalancerSourceRanges[${i}]`).cidr),
    );
    const affinity = stringField(spec, "sessionAffinity", "spec.sessionAffinity") || "None";
    let affinityTimeoutSeconds = 0;
    if (affinity === "ClientIP") {
      affinityTimeoutSeconds = parseAffinityTimeout(spec);
    } else if (affinity !== "None") {
      fail("spec.sessionAffinity", affinity, "is not one of None, ClientIP");
    }
    const healthCheckNodePort = checkPort(spec.healthCheckNodePort, "spec.healthCheckNodePort", {
      allowZero: true,
    });
    const trafficDistribution = stringField(
      spec,
      "trafficDistribution",
      "spec.trafficDistribution",
    );
    if (trafficDistribution !== "") {
      checkQualifiedName(trafficDistribution, "spec.trafficDistribution");
    }
    const annotations = stringMap(metadata, "annotations", "metadata.annotations");
    const topologyMode = topologyModeOf(annotations);

    const service: Service = {
      namespace,
      name,
      type,
      clusterIPs,
      ports,
      externalIPs,
      loadBalancerIngress,
      loadBalancerSourceRanges,
      affinityTimeoutSeconds,
      internalTrafficPolicy: checkTrafficPolicy(
        spec.internalTrafficPolicy,
        "spec.internalTrafficPolicy",
      ),
      externalTrafficPolicy: checkTrafficPolicy(
        spec.externalTrafficPolicy,
        "spec.externalTrafficPolicy",
      ),
      healthCheckNodePort,
      trafficDistribution,
      topologyKeys: parseTopologyKeys(spec),
      topologyMode,
    };
    return service;
  });
  if (result.ok && ignored !== undefined) return { ok: true, value: null, ignored };
  return withWarnings(result, warnings);
}

/**
 * "Auto" when the topology annotation asks for hints ("Auto" or "auto"; the older key wins when
 * both are set), as upstream's EndpointSlice controller reads it, else "". Annotations are free
 * text: any other value (`"Auto (see runbook)"`, `Disabled`) means no hints were asked for,
 * never an invalid Service.
 */
function topologyModeOf(annotations: Readonly<Record<string, string>>): Service["topologyMode"] {
  const value = annotations[TOPOLOGY_HINTS_ANNOTATION] ?? annotations[TOPOLOGY_MODE_ANNOTATION];
  return value === "Auto" || value === "auto" ? "Auto" : "";
}

/** Cluster IPs from spec.clusterIPs, else spec.clusterIP; null when headless. */
function parseClusterIPs(spec: Json): string[] | null {
  let field = "spec.clusterIPs";
  let raw = arrayField(spec, "clusterIPs", field);
  if (raw.length === 0) {
    field = "spec.clusterIP";
    const single = stringField(spec, "clusterIP", field);
    raw = single === "" ? [] : [single];
  }
  if (raw.length === 0 || raw[0] === "None" || raw[0] === "") return null;
  if (raw.length > 2) fail(field, raw, "lists more than 2 addresses");
  const ips = raw.map((ip, i) => {
    const ipField = field === "spec.clusterIP" ? field : `${field}[${i}]`;
    const checked = checkIP(ip, ipField);
    const problem = specialProblem(checked.address);
    if (problem !== undefined) fail(ipField, ip, problem);
    return checked;
  });
  if (ips.length === 2 && ips[0]!.family === ips[1]!.family) {
    fail(field, raw, "lists two addresses of the same family");
  }
  return ips.map((ip) => ip.address);
}

function parseServicePorts(spec: Json): ServicePortSpec[] {
  const ports: ServicePortSpec[] = [];
  const names = new Set<string>();
  const portKeys = new Set<string>();
  const nodePortKeys = new Set<string>();
  for (const [i, item] of arrayField(spec, "ports", "spec.ports").entries()) {
    const field = `spec.ports[${i}]`;
    if (!isObject(item)) fail(field, item, "is not an object");
    const name = stringField(item, "name", `${field}.name`);
    if (name !== "") checkDNSLabel(name, `${field}.name`);
    if (names.has(name)) fail(`${field}.name`, name, "is duplicated");
    names.add(name);
    const protocol = checkProtocol(item.protocol, `${field}.protocol`);
    const port = checkPort(item.port, `${field}.port`, { allowZero: false });
    const portKey = `${protocol}/${port}`;
    if (portKeys.has(portKey)) fail(`${field}.port`, port, `is duplicated for ${protocol}`);
    portKeys.add(portKey);
    const nodePort = checkPort(item.nodePort, `${field}.nodePort`, { allowZero: true });
    if (nodePort !== 0) {
      const nodePortKey = `${protocol}/${nodePort}`;
      if (nodePortKeys.has(nodePortKey)) {
        fail(`${field}.nodePort`, nodePort, `is duplicated for ${protocol}`);
      }
      nodePortKeys.add(nodePortKey);
    }
    let targetPort: number | string = port;
    const rawTarget = item.targetPort;
    if (typeof rawTarget === "number") {
      targetPort = checkPort(rawTarget, `${field}.targetPort`, { allowZero: false });
    } else if (typeof rawTarget === "string" && rawTarget !== "") {
      targetPort = checkIanaSvcName(rawTarget, `${field}.targetPort`);
    } else if (rawTarget !== undefined && rawTarget !== null && rawTarget !== "") {
      fail(`${field}.targetPort`, rawTarget, "is not a port number or name");
    }
    ports.push({ name, protocol, port, targetPort, nodePort });
  }
  return ports;
}

function parseAffinityTimeout(spec: Json): number {
  const config = objectField(spec, "sessionAffinityConfig", "spec.sessionAffinityConfig");
  const clientIP = objectField(config, "clientIP", "spec.sessionAffinityConfig.clientIP");
  const field = "spec.sessionAffinityConfig.clientIP.timeoutSeconds";
  const value = clientIP.timeoutSeconds;
  if (value === undefined || value === null) return DEFAULT_AFFINITY_TIMEOUT_SECONDS;
  if (typeof value !== "number" || !Number.isInteger(value)) {
    fail(field, value, "is not an integer");
  }
  if (value < 1 || value > MAX_AFFINITY_TIMEOUT_SECONDS) {
    fail(field, value, `is out of range 1-${MAX_AFFINITY_TIMEOUT_SECONDS}`);
  }
  return value;
}

function parseIngress(status: Json, warnings: string[]): LoadBalancerIngress[] {
  const loadBalancer = objectField(status, "loadBalancer", "status.loadBalancer");
  const result: LoadBalancerIngress[] = [];
  const seen = new Set<string>();
  for (
    const [i, item] of arrayField(loadBalancer, "ingress", "status.loadBalancer.ingress").entries()
  ) {
    const field = `status.loadBalancer.ingress[${i}]`;
    if (!isObject(item)) fail(field, item, "is not an object");
    const rawIP = stringField(item, "ip", `${field}.ip`);
    const rawMode = stringField(item, "ipMode", `${field}.ipMode`) || "VIP";
    if (rawMode !== "VIP" && rawMode !== "Proxy") {
      fail(`${field}.ipMode`, rawMode, "is not one of VIP, Proxy");
    }
    if (rawIP === "") continue;
    const ip = checkIP(rawIP, `${field}.ip`).address;
    if (!keepOrdinary(ip, `${field}.ip`, warnings)) continue;
    if (seen.has(ip)) continue;
    seen.add(ip);
    result.push({ ip, ipMode: rawMode });
  }
  return result;
}

function parseTopologyKeys(spec: Json): string[] {
  const keys = arrayField(spec, "topologyKeys", "spec.topologyKeys");
  if (keys.length > MAX_TOPOLOGY_KEYS) {
    fail("spec.topologyKeys", `${keys.length} entries`, `exceeds ${MAX_TOPOLOGY_KEYS} entries`);
  }
  const seen = new Set<string>();
  return keys.map((key, i) => {
    const field = `spec.topologyKeys[${i}]`;
    if (typeof key !== "string") fail(field, key, "is not a string");
    if (key === "*") {
      if (i !== keys.length - 1) fail(field, key, "must be the last key");
    } else {
      checkQualifiedName(key, field);
    }
    if (seen.has(key)) fail(field, key, "is duplicated");
    seen.add(key);
    return key;
  });
}

function uniqueStrings(values: string[]): string[] {
  return [...new Set(values)];
}

/** The distinct valid addresses of a list, without special ones (recorded in `warnings`). */
function ordinaryIPs(values: unknown[], field: string, warnings: string[]): string[] {
  const addresses = values.map((value, i) => checkIP(value, `${field}[${i}]`).address);
  return uniqueStrings(
    addresses.filter((address, i) => keepOrdinary(address, `${field}[${i}]`, warnings)),
  );
}

/**
 * Parses a discovery.k8s.io/v1 EndpointSlice.
 *
 * @param raw The EndpointSlice as API JSON.
 * @returns The validated slice; null (with `ignored`) for FQDN slices; or
 * the first invalid field. Ports without a port number are skipped; of
 * endpoints sharing an address only the first is kept; endpoints at a special
 * address are left out, each with a `warnings` entry.
 */
export function parseEndpointSlice(raw: unknown): ParseResult<EndpointSlice | null> {
  let ignored: string | undefined;
  const warnings: string[] = [];
  const result = wrap(() => {
    const { metadata, namespace, name } = namespacedName(raw, checkDNSSubdomain);
    const root = raw as Json;
    const addressType = stringField(root, "addressType", "addressType");
    if (addressType === "FQDN") {
      ignored = "FQDN";
      return null;
    }
    if (addressType !== "IPv4" && addressType !== "IPv6") {
      fail("addressType", addressType, "is not one of IPv4, IPv6, FQDN");
    }
    const labels = stringMap(metadata, "labels", "metadata.labels");
    const labelField = `metadata.labels[${quote(SERVICE_NAME_LABEL)}]`;
    const serviceName = labels[SERVICE_NAME_LABEL];
    if (serviceName === undefined) fail(labelField, "", "is required");
    checkDNSLabel(serviceName, labelField);

    const slice: EndpointSlice = {
      namespace,
      name,
      serviceName,
      family: addressType,
      ports: parseSlicePorts(root),
      endpoints: parseEndpoints(root, addressType, warnings),
    };
    return slice;
  });
  if (result.ok && ignored !== undefined) return { ok: true, value: null, ignored };
  return withWarnings(result, warnings);
}

function parseSlicePorts(root: Json): SlicePort[] {
  const ports: SlicePort[] = [];
  const names = new Set<string>();
  for (const [i, item] of arrayField(root, "ports", "ports").entries()) {
    const field = `ports[${i}]`;
    if (!isObject(item)) fail(field, item, "is not an object");
    const name = stringField(item, "name", `${field}.name`);
    if (name !== "") checkDNSLabel(name, `${field}.name`);
    const protocol = checkProtocol(item.protocol, `${field}.protocol`);
    if (item.port === undefined || item.port === null) continue;
    const port = checkPort(item.port, `${field}.port`, { allowZero: false });
    const key = `${name}/${protocol}`;
    if (names.has(key)) fail(`${field}.name`, name, `is duplicated for ${protocol}`);
    names.add(key);
    ports.push({ name, protocol, port });
  }
  return ports;
}

function parseEndpoints(root: Json, family: IpFamily, warnings: string[]): SliceEndpoint[] {
  const endpoints: SliceEndpoint[] = [];
  const seen = new Set<string>();
  for (const [i, item] of arrayField(root, "endpoints", "endpoints").entries()) {
    const field = `endpoints[${i}]`;
    if (!isObject(item)) fail(field, item, "is not an object");
    const addresses = arrayField(item, "addresses", `${field}.addresses`);
    if (addresses.length === 0) fail(`${field}.addresses`, addresses, "must not be empty");
    const ip = checkIP(addresses[0], `${field}.addresses[0]`);
    if (ip.family !== family) {
      fail(`${field}.addresses[0]`, addresses[0], `is not an ${family} address`);
    }
    const conditions = objectField(item, "conditions", `${field}.conditions`);
    const ready = optionalBoolean(conditions, "ready", `${field}.conditions.ready`) ?? true;
    const serving = optionalBoolean(conditions, "serving", `${field}.conditions.serving`) ?? ready;
    const terminating =
      optionalBoolean(conditions, "terminating", `${field}.conditions.terminating`) ?? false;
    const nodeName = stringField(item, "nodeName", `${field}.nodeName`);
    if (nodeName !== "") checkDNSSubdomain(nodeName, `${field}.nodeName`);
    const zone = checkLabelValue(stringField(item, "zone", `${field}.zone`), `${field}.zone`);
    const hints = parseHints(item, field);
    if (!keepOrdinary(ip.address, `${field}.addresses[0]`, warnings)) continue;
    if (seen.has(ip.address)) continue;
    seen.add(ip.address);
    const endpoint: SliceEndpoint = { ip: ip.address, ready, serving, terminating, nodeName, zone };
    if (hints) endpoint.hints = hints;
    endpoints.push(endpoint);
  }
  return endpoints;
}

function parseHints(item: Json, field: string): EndpointHints | undefined {
  if (item.hints === undefined || item.hints === null) return undefined;
  const hints = objectField(item, "hints", `${field}.hints`);
  const names = (key: string, check: typeof checkLabelValue) =>
    arrayField(hints, key, `${field}.hints.${key}`).map((entry, i) => {
      const entryField = `${field}.hints.${key}[${i}]`;
      if (!isObject(entry)) fail(entryField, entry, "is not an object");
      const name = stringField(entry, "name", `${entryField}.name`);
      if (name === "") fail(`${entryField}.name`, name, "must not be empty");
      return check(name, `${entryField}.name`);
    });
  return {
    forZones: names("forZones", checkLabelValue),
    forNodes: names("forNodes", checkDNSSubdomain),
  };
}

/** The taint the cluster autoscaler puts on a node it is about to delete (kube-proxy's
 * `ToBeDeletedTaint`): such a node fails /healthz, as one with a deletionTimestamp. */
const TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler";

/**
 * Parses a core/v1 Node, keeping only what the proxy needs.
 *
 * @param raw The Node as API JSON.
 * @returns The validated Node or the first invalid field.
 */
export function parseNode(raw: unknown): ParseResult<Node> {
  return wrap(() => {
    const metadata = metadataOf(raw);
    const root = raw as Json;
    const name = checkDNSSubdomain(stringField(metadata, "name", "metadata.name"), "metadata.name");
    const labels = stringMap(metadata, "labels", "metadata.labels");
    for (const [key, value] of Object.entries(labels)) {
      checkQualifiedName(key, "metadata.labels");
      checkLabelValue(value, `metadata.labels[${quote(key)}]`);
    }
    const spec = objectField(root, "spec", "spec");
    const status = objectField(root, "status", "status");
    const internal: string[] = [];
    const external: string[] = [];
    for (const [i, item] of arrayField(status, "addresses", "status.addresses").entries()) {
      const field = `status.addresses[${i}]`;
      if (!isObject(item)) fail(field, item, "is not an object");
      const type = stringField(item, "type", `${field}.type`);
      if (type !== "InternalIP" && type !== "ExternalIP") continue;
      const ip = checkIP(item.address, `${field}.address`).address;
      (type === "InternalIP" ? internal : external).push(ip);
    }
    let podCIDRs = arrayField(spec, "podCIDRs", "spec.podCIDRs");
    let podField = "spec.podCIDRs";
    if (podCIDRs.length === 0) {
      const single = stringField(spec, "podCIDR", "spec.podCIDR");
      podCIDRs = single === "" ? [] : [single];
      podField = "spec.podCIDR";
    }
    const deletion = metadata.deletionTimestamp;
    const taints = arrayField(spec, "taints", "spec.taints").map((taint, i) => {
      if (!isObject(taint)) fail(`spec.taints[${i}]`, taint, "is not an object");
      return stringField(taint, "key", `spec.taints[${i}].key`);
    });
    const node: Node = {
      name,
      labels,
      addresses: uniqueStrings([...internal, ...external]),
      podCIDRs: uniqueStrings(
        podCIDRs.map((cidr, i) =>
          checkCIDR(cidr, podField === "spec.podCIDR" ? podField : `${podField}[${i}]`).cidr
        ),
      ),
      deleting: (deletion !== undefined && deletion !== null && deletion !== "") ||
        taints.includes(TO_BE_DELETED_TAINT),
    };
    return node;
  });
}

/**
 * Parses a networking.k8s.io/v1 ServiceCIDR.
 *
 * @param raw The ServiceCIDR as API JSON.
 * @returns The validated ServiceCIDR (CIDRs normalised) or the first invalid field.
 */
export function parseServiceCIDR(raw: unknown): ParseResult<ServiceCIDR> {
  return wrap(() => {
    const metadata = metadataOf(raw);
    const root = raw as Json;
    const name = checkDNSSubdomain(stringField(metadata, "name", "metadata.name"), "metadata.name");
    const spec = objectField(root, "spec", "spec");
    const raws = arrayField(spec, "cidrs", "spec.cidrs");
    if (raws.length > 2) fail("spec.cidrs", raws, "lists more than 2 CIDRs");
    const cidrs = raws.map((cidr, i) => checkCIDR(cidr, `spec.cidrs[${i}]`));
    if (cidrs.length === 2 && cidrs[0]!.family === cidrs[1]!.family) {
      fail("spec.cidrs", raws, "lists two CIDRs of the same family");
    }
    return { name, cidrs: cidrs.map((cidr) => cidr.cidr) };
  });
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
