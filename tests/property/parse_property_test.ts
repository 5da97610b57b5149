import assert from "node:assert/strict";
import fc from "fast-check";
import { parseEndpointSlice } from "../../lib/core/parse/endpoint_slice.ts";
import { parseNode } from "../../lib/core/parse/node.ts";
import type { ParseResult } from "../../lib/core/parse/fields.ts";
import { parseService } from "../../lib/core/parse/service.ts";
import { parseServiceCIDR } from "../../lib/core/parse/service_cidr.ts";
import type { EndpointSlice, Node, Service, ServiceCIDR } from "../../lib/core/model.ts";
import {
  cidrArb,
  fuzzRuns,
  garbageArb,
  HOSTILE_IPS,
  HOSTILE_PORTS,
  HOSTILE_STRINGS,
  hostileEndpointSliceArb,
  hostileNodeArb,
  hostileServiceArb,
  hostileServiceCIDRArb,
  largeSlice,
  rawEndpointSliceArb,
  rawNodeArb,
  rawServiceArb,
  rawServiceCIDRArb,
  setPath,
} from "./arbitraries.ts";

// Independent oracles: what may reach the model, written apart from lib/core/parse/.
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN =
  /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;
const QUALIFIED_NAME =
  /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const CANONICAL_IPV4 =
  /^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$/;
const CANONICAL_IPV6 = /^[0-9a-f:]{2,39}$/;
const PROTOCOLS = new Set(["TCP", "UDP", "SCTP"]);

const RUNS = fuzzRuns(300);

function isIP(ip: string): boolean {
  if (CANONICAL_IPV4.test(ip)) return true;
  if (!CANONICAL_IPV6.test(ip) || ip.includes(":::")) return false;
  // Canonical IPv6: lower case, no leading zeros, "::" at most once, not IPv4-mapped.
  return ip.split("::").length <= 2 &&
    ip.split(":").every((g) => g === "" || !/^0[0-9a-f]/.test(g)) &&
    !ip.startsWith("::ffff:");
}

function isCIDR(cidr: string): boolean {
  const [ip, prefix, extra] = cidr.split("/");
  if (ip === undefined || prefix === undefined || extra !== undefined || !isIP(ip)) return false;
  const bits = Number(prefix);
  return /^(0|[1-9][0-9]{0,2})$/.test(prefix) && bits <= (ip.includes(":") ? 128 : 32);
}

function isPort(port: unknown, allowZero = false): boolean {
  return Number.isInteger(port) && (port as number) <= 65535 &&
    ((port as number) >= 1 || (allowZero && port === 0));
}

function checkService(s: Service): void {
  assert.match(s.namespace, DNS_LABEL);
  assert.match(s.name, DNS_LABEL);
  assert.ok(["ClusterIP", "NodePort", "LoadBalancer"].includes(s.type), s.type);
  assert.ok(s.clusterIPs.length >= 1 && s.clusterIPs.length <= 2);
  for (const ip of [...s.clusterIPs, ...s.externalIPs, ...s.loadBalancerIngress.map((i) => i.ip)]) {
    assert.ok(isIP(ip), `not a canonical IP: ${JSON.stringify(ip)}`);
  }
  for (const cidr of s.loadBalancerSourceRanges) assert.ok(isCIDR(cidr), cidr);
  for (const p of s.ports) {
    assert.ok(p.name === "" || DNS_LABEL.test(p.name), p.name);
    assert.ok(PROTOCOLS.has(p.protocol), p.protocol);
    assert.ok(isPort(p.port), String(p.port));
    assert.ok(isPort(p.nodePort, true), String(p.nodePort));
    assert.ok(
      typeof p.targetPort === "number"
        ? isPort(p.targetPort)
        : /^[a-z0-9-]{1,15}$/.test(p.targetPort),
      String(p.targetPort),
    );
  }
  assert.ok(isPort(s.healthCheckNodePort, true));
  assert.ok(Number.isInteger(s.affinityTimeoutSeconds));
  assert.ok(s.affinityTimeoutSeconds >= 0 && s.affinityTimeoutSeconds <= 86400);
  assert.ok(["Cluster", "Local"].includes(s.internalTrafficPolicy));
  assert.ok(["Cluster", "Local"].includes(s.externalTrafficPolicy));
  assert.ok(s.trafficDistribution === "" || QUALIFIED_NAME.test(s.trafficDistribution));
  assert.match(s.topologyMode, LABEL_VALUE);
  for (const key of s.topologyKeys) assert.ok(key === "*" || QUALIFIED_NAME.test(key), key);
}

function checkSlice(s: EndpointSlice): void {
  assert.match(s.namespace, DNS_LABEL);
  assert.match(s.name, DNS_SUBDOMAIN);
  assert.match(s.serviceName, DNS_LABEL);
  for (const p of s.ports) {
    assert.ok(p.name === "" || DNS_LABEL.test(p.name), p.name);
    assert.ok(PROTOCOLS.has(p.protocol));
    assert.ok(isPort(p.port), String(p.port));
  }
  for (const e of s.endpoints) {
    assert.ok(isIP(e.ip), e.ip);
    assert.equal(e.ip.includes(":") ? "IPv6" : "IPv4", s.family, `${e.ip} in an ${s.family} slice`);
    assert.ok(e.nodeName === "" || DNS_SUBDOMAIN.test(e.nodeName), e.nodeName);
    assert.match(e.zone, LABEL_VALUE);
    for (const zone of e.hints?.forZones ?? []) assert.match(zone, LABEL_VALUE);
    for (const node of e.hints?.forNodes ?? []) assert.match(node, DNS_SUBDOMAIN);
  }
  assert.equal(
    new Set(s.endpoints.map((e) => e.ip)).size,
    s.endpoints.length,
    "duplicate endpoint",
  );
}

function checkNode(n: Node): void {
  assert.match(n.name, DNS_SUBDOMAIN);
  for (const [key, value] of Object.entries(n.labels)) {
    assert.match(key, QUALIFIED_NAME);
    assert.match(value, LABEL_VALUE);
  }
  for (const ip of n.addresses) assert.ok(isIP(ip), ip);
  for (const cidr of n.podCIDRs) assert.ok(isCIDR(cidr), cidr);
}

function checkServiceCIDR(c: ServiceCIDR): void {
  assert.match(c.name, DNS_SUBDOMAIN);
  for (const cidr of c.cidrs) assert.ok(isCIDR(cidr), cidr);
}

/** Runs a parser, failing the property if it throws or returns a malformed result. */
function run<T>(parse: (raw: unknown) => ParseResult<T>, raw: unknown): ParseResult<T> {
  const result = parse(raw);
  assert.equal(typeof result.ok, "boolean");
  if (!result.ok) {
    assert.equal(typeof result.error, "string");
    assert.ok(result.error.length > 0 && result.error.length < 2000, "bounded error text");
    assert.ok(!/[\n\r]/.test(result.error), `error has a raw newline: ${result.error}`);
  }
  return result;
}

const PARSERS = [
  {
    kind: "Service",
    parse: parseService,
    check: checkService,
    valid: rawServiceArb,
    hostile: hostileServiceArb,
  },
  {
    kind: "EndpointSlice",
    parse: parseEndpointSlice,
    check: checkSlice,
    valid: rawEndpointSliceArb(),
    hostile: hostileEndpointSliceArb,
  },
  { kind: "Node", parse: parseNode, check: checkNode, valid: rawNodeArb, hostile: hostileNodeArb },
  {
    kind: "ServiceCIDR",
    parse: parseServiceCIDR,
    check: checkServiceCIDR,
    valid: rawServiceCIDRArb,
    hostile: hostileServiceCIDRArb,
  },
] as const;

for (const { kind, parse, check, valid, hostile } of PARSERS) {
  const checkAny = check as (value: never) => void;
  const parseAny = parse as (raw: unknown) => ParseResult<unknown>;

  Deno.test(`${parse.name}() never throws on garbage`, () => {
    fc.assert(fc.property(garbageArb, (raw) => void run(parseAny, raw)), { numRuns: RUNS });
  });

  Deno.test(`${parse.name}() accepts every valid ${kind}`, () => {
    fc.assert(
      fc.property(valid, (raw) => {
        const result = run(parseAny, raw);
        assert.ok(
          result.ok,
          `rejected a valid ${kind}: ${!result.ok && result.error}\n${JSON.stringify(raw)}`,
        );
        if (result.value !== null) checkAny(result.value as never);
      }),
      { numRuns: RUNS },
    );
  });

  Deno.test(`${parse.name}() on a broken ${kind} errs or yields only safe values`, () => {
    fc.assert(
      fc.property(hostile, (raw) => {
        const result = run(parseAny, raw);
        if (result.ok && result.value !== null) checkAny(result.value as never);
      }),
      { numRuns: RUNS * 2 },
    );
  });
}

Deno.test("parseService() rejects each hostile value in each script-bound field", async (t) => {
  const base = {
    metadata: { namespace: "default", name: "web" },
    spec: {
      type: "LoadBalancer",
      clusterIP: "10.96.0.10",
      ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }],
      externalIPs: ["203.0.113.1"],
      loadBalancerSourceRanges: ["198.51.100.0/24"],
    },
    status: { loadBalancer: { ingress: [{ ip: "192.0.2.1" }] } },
  };
  assert.ok(parseService(base).ok, "the base service is valid");
  const fields: { path: (string | number)[]; values: readonly unknown[] }[] = [
    { path: ["metadata", "name"], values: HOSTILE_STRINGS },
    { path: ["metadata", "namespace"], values: HOSTILE_STRINGS },
    { path: ["spec", "ports", 0, "name"], values: HOSTILE_STRINGS.filter((s) => s !== "") },
    { path: ["spec", "ports", 0, "port"], values: HOSTILE_PORTS },
    {
      path: ["spec", "ports", 0, "nodePort"],
      values: HOSTILE_PORTS.filter((p) => p !== 0 && p !== null),
    },
    {
      path: ["spec", "ports", 0, "targetPort"],
      // "0x50" and "web" are valid port names (IANA_SVC_NAME).
      values: [...HOSTILE_PORTS, ...HOSTILE_STRINGS].filter((v) => v !== "0x50" && v !== "web"),
    },
    {
      path: ["spec", "ports", 0, "protocol"],
      values: [...HOSTILE_STRINGS.filter((s) => s !== ""), "tcp", 6],
    },
    {
      path: ["spec", "clusterIP"],
      values: HOSTILE_IPS.filter((v) => v !== "" && v !== "None" && v !== null),
    },
    { path: ["spec", "externalIPs", 0], values: HOSTILE_IPS },
    {
      path: ["spec", "loadBalancerSourceRanges", 0],
      values: [
        ...HOSTILE_IPS.filter((v) => v !== "1.2.3.4/32"),
        "1.2.3.4/33",
        "1.2.3.4/032",
        "1.2.3.4",
        "fe80::/64%eth0",
      ],
    },
    {
      path: ["status", "loadBalancer", "ingress", 0, "ip"],
      values: HOSTILE_IPS.filter((v) => v !== "" && v !== null),
    },
  ];
  for (const { path, values } of fields) {
    await t.step(path.join("."), () => {
      for (const value of values) {
        // targetPort "" and null mean "same as port"; a zero nodePort means "none".
        if (path.at(-1) === "targetPort" && (value === "" || value === null)) continue;
        const raw = setPath(structuredClone(base), path, value);
        const result = parseService(raw);
        assert.ok(!result.ok, `accepted ${path.join(".")} = ${JSON.stringify(value)}`);
      }
    });
  }
});

Deno.test("parseEndpointSlice() rejects a slice with an endpoint of the other family", () => {
  const slice = (address: string, addressType: string) => ({
    metadata: {
      namespace: "default",
      name: "web-1",
      labels: { "kubernetes.io/service-name": "web" },
    },
    addressType,
    ports: [{ name: "", port: 80 }],
    endpoints: [{ addresses: ["10.244.0.1"] }, { addresses: [address] }],
  });
  assert.ok(!parseEndpointSlice(slice("fd00::1", "IPv4")).ok);
  assert.ok(!parseEndpointSlice(slice("10.244.0.2", "IPv6")).ok);
  assert.ok(parseEndpointSlice(slice("10.244.0.2", "IPv4")).ok);
});

Deno.test("parseEndpointSlice() keeps all of a 1000-endpoint slice", () => {
  const result = parseEndpointSlice(largeSlice("default", "web"));
  assert.ok(result.ok && result.value);
  assert.equal(result.value.endpoints.length, 1000);
  checkSlice(result.value);
});

Deno.test("parseService() normalises IPv6 and CIDR spellings to one canonical text", () => {
  fc.assert(
    fc.property(cidrArb, (cidr) => {
      const result = parseService({
        metadata: { namespace: "default", name: "web" },
        spec: {
          type: "LoadBalancer",
          clusterIP: "10.96.0.1",
          ports: [{ port: 80 }],
          loadBalancerSourceRanges: [cidr],
        },
      });
      assert.ok(result.ok && result.value, `rejected ${cidr}`);
      const [range] = result.value.loadBalancerSourceRanges;
      assert.ok(range !== undefined && isCIDR(range), `not canonical: ${range}`);
    }),
    { numRuns: RUNS },
  );
});

// Regression test: Array#map skips holes, so a sparse list (never produced by
// JSON.parse, but possible from a JS caller) once made parseServiceCIDR()
// throw and let `undefined` into Service.externalIPs.
Deno.test({
  name: "parse*() never throw on sparse lists and never yield undefined entries",
  fn() {
    // deno-lint-ignore no-sparse-arrays
    const sparse = [, "1.2.3.4/32"];
    const cidr = parseServiceCIDR({ metadata: { name: "k" }, spec: { cidrs: sparse } });
    assert.ok(!cidr.ok);
    const service = parseService({
      metadata: { namespace: "default", name: "web" },
      // deno-lint-ignore no-sparse-arrays
      spec: { clusterIP: "10.96.0.1", ports: [{ port: 80 }], externalIPs: [, "1.2.3.4"] },
    });
    assert.ok(!service.ok || service.value?.externalIPs.every((ip) => typeof ip === "string"));
  },
});
