/**
 * Parses a Node (v1): only what the proxy needs.
 *
 * @module
 */

import type { Node } from "../model.ts";
import {
  arrayField,
  checkCIDR,
  checkDNSSubdomain,
  checkIP,
  checkLabelValue,
  checkQualifiedName,
  fail,
  isObject,
  type Json,
  metadataOf,
  objectField,
  type ParseResult,
  quote,
  stringField,
  stringMap,
  uniqueStrings,
  wrap,
} from "./fields.ts";

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
