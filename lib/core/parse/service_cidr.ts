/**
 * Parses a ServiceCIDR (networking.k8s.io).
 *
 * @module
 */

import type { ServiceCIDR } from "../model.ts";
import {
  arrayField,
  checkCIDR,
  checkDNSSubdomain,
  fail,
  type Json,
  metadataOf,
  objectField,
  type ParseResult,
  stringField,
  wrap,
} from "./fields.ts";

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
