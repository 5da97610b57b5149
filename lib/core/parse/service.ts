/**
 * Parses a Service (v1) into a validated {@linkcode Service}.
 *
 * @module
 */

import type { LoadBalancerIngress, Service, ServicePortSpec, ServiceType } from "../model.ts";
import {
  arrayField,
  checkCIDR,
  checkDNSLabel,
  checkIanaSvcName,
  checkIP,
  checkPort,
  checkProtocol,
  checkQualifiedName,
  checkTrafficPolicy,
  fail,
  isObject,
  type Json,
  keepOrdinary,
  objectField,
  ordinaryIPs,
  parseNamespaced,
  type ParseResult,
  specialProblem,
  stringField,
  stringMap,
  uniqueStrings,
} from "./fields.ts";
import { exactArray } from "../exact_array.ts";

/** Services carrying this label are handled by another proxy, as upstream does. */
export const SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name";

/** The annotation selecting topology-aware routing (newer spelling). */
export const TOPOLOGY_MODE_ANNOTATION = "service.kubernetes.io/topology-mode";
/** Upstream's winkernel annotation that turns the routing mesh off for a Service's node port and
 * load-balancer IPs. */
export const PRESERVE_DESTINATION_ANNOTATION = "preserve-destination";

/** The annotation selecting topology-aware hints (older spelling). */
export const TOPOLOGY_HINTS_ANNOTATION = "service.kubernetes.io/topology-aware-hints";

/** The session affinity timeout used when ClientIP affinity sets none. */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;

/** The largest ClientIP affinity timeout the API allows. */
export const MAX_AFFINITY_TIMEOUT_SECONDS = 86400;

/** The most topologyKeys a Service may list. */
export const MAX_TOPOLOGY_KEYS = 16;

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
  return parseNamespaced(raw, checkDNSLabel, (object) => {
    const { root, metadata, namespace, name, warnings, ignore } = object;
    const spec = objectField(root, "spec", "spec");
    const status = objectField(root, "status", "status");

    const labels = stringMap(metadata, "labels", "metadata.labels");
    if (labels[SERVICE_PROXY_NAME_LABEL] !== undefined) {
      return ignore("service-proxy-name");
    }
    const rawType = stringField(spec, "type", "spec.type") || "ClusterIP";
    if (rawType === "ExternalName") {
      return ignore("ExternalName");
    }
    if (!SERVICE_TYPES.includes(rawType)) {
      fail("spec.type", rawType, "is not one of ClusterIP, NodePort, LoadBalancer, ExternalName");
    }
    const type = rawType as ServiceType;

    const clusterIPs = parseClusterIPs(spec);
    if (clusterIPs === null) {
      return ignore("headless");
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
      clusterIPs: exactArray(clusterIPs),
      ports: exactArray(ports),
      externalIPs: exactArray(externalIPs),
      loadBalancerIngress: exactArray(loadBalancerIngress),
      loadBalancerSourceRanges: exactArray(loadBalancerSourceRanges),
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
      topologyKeys: exactArray(parseTopologyKeys(spec)),
      topologyMode,
      ...(annotations[PRESERVE_DESTINATION_ANNOTATION] === "true"
        ? { preserveDestination: true as const }
        : {}),
    };
    return service;
  });
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
