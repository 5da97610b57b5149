/**
 * Parses an EndpointSlice (discovery.k8s.io/v1) into a validated
 * {@linkcode EndpointSlice}.
 *
 * @module
 */

import type { EndpointHints, EndpointSlice, IpFamily, SliceEndpoint, SlicePort } from "../model.ts";
import {
  arrayField,
  checkDNSLabel,
  checkDNSSubdomain,
  checkIP,
  checkLabelValue,
  checkPort,
  checkProtocol,
  fail,
  isObject,
  type Json,
  keepOrdinary,
  objectField,
  optionalBoolean,
  parseNamespaced,
  type ParseResult,
  quote,
  stringField,
  stringMap,
} from "./fields.ts";
import { exactArray } from "../exact_array.ts";

/** How many distinct node and zone names {@linkcode shared} remembers before it starts over. */
const SHARED_NAMES_LIMIT = 65_536;
const sharedNames = new Map<string, string>();

/**
 * One string per distinct node or zone name: every endpoint on a node then
 * refers to the same string instead of its own copy from `JSON.parse` (a
 * 100k-service cluster has a million endpoints and a few thousand nodes).
 */
function shared(name: string): string {
  const known = sharedNames.get(name);
  if (known !== undefined) return known;
  if (sharedNames.size >= SHARED_NAMES_LIMIT) sharedNames.clear();
  sharedNames.set(name, name);
  return name;
}

/** The label naming the Service an EndpointSlice belongs to. */
export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";

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
  return parseNamespaced(raw, checkDNSSubdomain, (object) => {
    const { root, metadata, namespace, name, warnings, ignore } = object;
    const addressType = stringField(root, "addressType", "addressType");
    if (addressType === "FQDN") {
      return ignore("FQDN");
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
      ports: exactArray(parseSlicePorts(root)),
      endpoints: exactArray(parseEndpoints(root, addressType, warnings)),
    };
    return slice;
  });
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
    const endpoint: SliceEndpoint = {
      ip: ip.address,
      ready,
      serving,
      terminating,
      nodeName: shared(nodeName),
      zone: shared(zone),
    };
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
      return shared(check(name, `${entryField}.name`));
    });
  return {
    forZones: names("forZones", checkLabelValue),
    forNodes: names("forNodes", checkDNSSubdomain),
  };
}
