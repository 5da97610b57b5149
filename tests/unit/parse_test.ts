import assert from "node:assert/strict";
import { parseEndpointSlice } from "../../lib/core/parse/endpoint_slice.ts";
import { parseNode } from "../../lib/core/parse/node.ts";
import type { ParseResult } from "../../lib/core/parse/fields.ts";
import { parseService } from "../../lib/core/parse/service.ts";
import { parseServiceCIDR } from "../../lib/core/parse/service_cidr.ts";
import { canonicalIP, cidrContains, ipFamily, isLoopback, parseCIDR } from "../../lib/core/ip.ts";

type Json = Record<string, any>;

function service(spec: Json = {}, extra: Json = {}): Json {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { namespace: "default", name: "web", ...(extra.metadata ?? {}) },
    spec: {
      type: "ClusterIP",
      clusterIP: "10.96.0.10",
      clusterIPs: ["10.96.0.10"],
      ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }],
      ...spec,
    },
    status: extra.status ?? {},
  };
}

function slice(extra: Json = {}): Json {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      namespace: "default",
      name: "web-abc12",
      labels: { "kubernetes.io/service-name": "web" },
      ...(extra.metadata ?? {}),
    },
    addressType: extra.addressType ?? "IPv4",
    ports: extra.ports ?? [{ name: "http", protocol: "TCP", port: 8080 }],
    endpoints: extra.endpoints ?? [
      {
        addresses: ["10.244.1.5"],
        conditions: { ready: true },
        nodeName: "node-a",
        zone: "zone-a",
      },
    ],
  };
}

function node(extra: Json = {}): Json {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name: "node-a",
      labels: { "topology.kubernetes.io/zone": "zone-a" },
      ...(extra.metadata ?? {}),
    },
    spec: extra.spec ?? { podCIDRs: ["10.244.1.0/24"] },
    status: extra.status ?? {
      addresses: [
        { type: "Hostname", address: "node-a" },
        { type: "ExternalIP", address: "203.0.113.2" },
        { type: "InternalIP", address: "10.200.0.2" },
      ],
    },
  };
}

function value<T>(result: ParseResult<T>): T {
  if (!result.ok) assert.fail(`unexpected error: ${result.error}`);
  return result.value;
}

function error<T>(result: ParseResult<T>): string {
  if (result.ok) assert.fail(`expected an error, got ${JSON.stringify(result.value)}`);
  return result.error;
}

Deno.test("parseService() parses a ClusterIP service with defaults", () => {
  const parsed = value(parseService(service()));
  assert.deepEqual(parsed, {
    namespace: "default",
    name: "web",
    type: "ClusterIP",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 0 }],
    externalIPs: [],
    loadBalancerIngress: [],
    loadBalancerSourceRanges: [],
    affinityTimeoutSeconds: 0,
    internalTrafficPolicy: "Cluster",
    externalTrafficPolicy: "Cluster",
    healthCheckNodePort: 0,
    trafficDistribution: "",
    topologyKeys: [],
    topologyMode: "",
  });
});

Deno.test("parseService() parses every service type and optional field", async (t) => {
  const cases: { name: string; raw: Json; check: (s: any) => void }[] = [
    {
      name: "NodePort with protocol default and targetPort default",
      raw: service({ type: "NodePort", ports: [{ port: 53, nodePort: 30053 }] }),
      check: (s) => {
        assert.equal(s.type, "NodePort");
        assert.deepEqual(s.ports, [{
          name: "",
          protocol: "TCP",
          port: 53,
          targetPort: 53,
          nodePort: 30053,
        }]);
      },
    },
    {
      name: "LoadBalancer with ingress, source ranges and ETP Local",
      raw: service(
        {
          type: "LoadBalancer",
          ports: [{ name: "https", port: 443, targetPort: "https", nodePort: 31443 }],
          loadBalancerSourceRanges: ["192.0.2.7/24", " 2001:DB8::/32 "],
          externalTrafficPolicy: "Local",
          healthCheckNodePort: 32000,
        },
        {
          status: {
            loadBalancer: {
              ingress: [
                { ip: "198.51.100.10" },
                { ip: "198.51.100.11", ipMode: "Proxy" },
                { hostname: "lb.example.com" },
              ],
            },
          },
        },
      ),
      check: (s) => {
        assert.equal(s.type, "LoadBalancer");
        assert.equal(s.ports[0].targetPort, "https");
        assert.deepEqual(s.loadBalancerSourceRanges, ["192.0.2.0/24", "2001:db8::/32"]);
        assert.deepEqual(s.loadBalancerIngress, [
          { ip: "198.51.100.10", ipMode: "VIP" },
          { ip: "198.51.100.11", ipMode: "Proxy" },
        ]);
        assert.equal(s.externalTrafficPolicy, "Local");
        assert.equal(s.healthCheckNodePort, 32000);
      },
    },
    {
      name: "externalIPs normalised and deduplicated",
      raw: service({ externalIPs: ["192.0.2.50", "2001:0db8:0000::0001", "2001:db8::1"] }),
      check: (s) => assert.deepEqual(s.externalIPs, ["192.0.2.50", "2001:db8::1"]),
    },
    {
      name: "ClientIP affinity defaults its timeout",
      raw: service({ sessionAffinity: "ClientIP" }),
      check: (s) => assert.equal(s.affinityTimeoutSeconds, 10800),
    },
    {
      name: "ClientIP affinity with a timeout",
      raw: service({
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
      }),
      check: (s) => assert.equal(s.affinityTimeoutSeconds, 60),
    },
    {
      name: "dual-stack clusterIPs preferred over clusterIP and IPv6 compressed",
      raw: service({ clusterIP: "10.96.0.20", clusterIPs: ["FD00:96:0:0::10", "10.96.0.20"] }),
      check: (s) => assert.deepEqual(s.clusterIPs, ["fd00:96::10", "10.96.0.20"]),
    },
    {
      name: "clusterIP used when clusterIPs absent",
      raw: service({ clusterIPs: undefined, clusterIP: "10.96.0.11" }),
      check: (s) => assert.deepEqual(s.clusterIPs, ["10.96.0.11"]),
    },
    {
      name: "internalTrafficPolicy, trafficDistribution, topology annotation",
      raw: service(
        { internalTrafficPolicy: "Local", trafficDistribution: "PreferClose" },
        { metadata: { annotations: { "service.kubernetes.io/topology-aware-hints": "Auto" } } },
      ),
      check: (s) => {
        assert.equal(s.internalTrafficPolicy, "Local");
        assert.equal(s.trafficDistribution, "PreferClose");
        assert.equal(s.topologyMode, "Auto");
      },
    },
    {
      // As upstream's EndpointSlice controller (hintsEnabled): the older key, when set, wins.
      name: "the older topology-aware-hints annotation wins over topology-mode",
      raw: service({}, {
        metadata: {
          annotations: {
            "service.kubernetes.io/topology-mode": "Auto",
            "service.kubernetes.io/topology-aware-hints": "Disabled",
          },
        },
      }),
      check: (s) => assert.equal(s.topologyMode, ""),
    },
    {
      // upstream's winkernel: only the exact value "true" turns the routing mesh off.
      name: "the preserve-destination annotation",
      raw: service({}, { metadata: { annotations: { "preserve-destination": "true" } } }),
      check: (s) => assert.equal(s.preserveDestination, true),
    },
    {
      name: "preserve-destination other than true",
      raw: service({}, { metadata: { annotations: { "preserve-destination": "True" } } }),
      check: (s) => assert.equal(s.preserveDestination, undefined),
    },
    {
      name: "topologyKeys with catch-all last",
      raw: service({
        topologyKeys: ["kubernetes.io/hostname", "topology.kubernetes.io/zone", "*"],
      }),
      check: (s) =>
        assert.deepEqual(s.topologyKeys, [
          "kubernetes.io/hostname",
          "topology.kubernetes.io/zone",
          "*",
        ]),
    },
    {
      name: "UDP and SCTP protocols",
      raw: service({
        ports: [{ name: "dns", protocol: "UDP", port: 53 }, {
          name: "sctp",
          protocol: "SCTP",
          port: 53,
        }],
      }),
      check: (s) => assert.deepEqual(s.ports.map((p: any) => p.protocol), ["UDP", "SCTP"]),
    },
  ];
  for (const c of cases) {
    await t.step(c.name, () => c.check(value(parseService(c.raw))));
  }
});

Deno.test("parseService() ignores ExternalName and headless services", async (t) => {
  const cases: { name: string; raw: Json; ignored: string }[] = [
    {
      name: "ExternalName",
      raw: service({
        type: "ExternalName",
        externalName: "example.com",
        clusterIP: "",
        clusterIPs: undefined,
      }),
      ignored: "ExternalName",
    },
    {
      name: "clusterIP None",
      raw: service({ clusterIP: "None", clusterIPs: ["None"] }),
      ignored: "headless",
    },
    {
      name: "labelled for another proxy",
      raw: service({}, {
        metadata: { labels: { "service.kubernetes.io/service-proxy-name": "other" } },
      }),
      ignored: "service-proxy-name",
    },
    {
      name: "clusterIP empty",
      raw: service({ clusterIP: "", clusterIPs: undefined }),
      ignored: "headless",
    },
  ];
  for (const c of cases) {
    await t.step(c.name, () => {
      const result = parseService(c.raw);
      assert.deepEqual(result, { ok: true, value: null, ignored: c.ignored });
    });
  }
});

const hostileNames = [
  'web"; flush ruleset; "',
  "web;reboot",
  "web\nadd rule",
  "web{}",
  "wéb",
  "Web",
  "-web",
  "web-",
  "a".repeat(64),
  "",
  "web name",
  "web$(id)",
];

Deno.test("parseService() keeps a Service whatever its topology-mode annotation says", async (t) => {
  // Annotations are free text to the apiserver. Upstream's EndpointSlice controller
  // writes hints only for Auto/auto and kube-proxy never reads the annotation: an
  // unknown value only means the annotation does not explain any hints.
  const cases: [string | undefined, string | undefined, string][] = [
    ["Auto (see runbook)", undefined, ""],
    ["auto\n", undefined, ""],
    ["x".repeat(300), undefined, ""],
    ["Disabled", undefined, ""],
    ["PreferZone", undefined, ""],
    ["auto", undefined, "Auto"],
    ["Auto", undefined, "Auto"],
    [undefined, "auto", "Auto"],
    [undefined, "see runbook; Auto", ""],
  ];
  for (const [mode, hints, want] of cases) {
    await t.step(`${JSON.stringify(mode)} / ${JSON.stringify(hints)}`, () => {
      const annotations: Record<string, string> = {};
      if (mode !== undefined) annotations["service.kubernetes.io/topology-mode"] = mode;
      if (hints !== undefined) annotations["service.kubernetes.io/topology-aware-hints"] = hints;
      const parsed = value(parseService(service({}, { metadata: { annotations } })));
      assert.equal(parsed?.topologyMode, want);
    });
  }
});

Deno.test("parseService() rejects hostile names", async (t) => {
  for (const name of hostileNames) {
    await t.step(JSON.stringify(name), () => {
      assert.match(error(parseService(service({}, { metadata: { name } }))), /^metadata\.name: /);
      if (name !== "") {
        assert.match(
          error(parseService(service({}, { metadata: { namespace: name } }))),
          /^metadata\.namespace: /,
        );
      }
    });
  }
});

Deno.test("parseService() rejects every invalid field naming it", async (t) => {
  const port = (p: Json) => ({ ports: [{ name: "a", port: 80 }, { name: "b", port: 81, ...p }] });
  const cases: { raw: Json; error: string }[] = [
    {
      raw: service(port({ port: 70000 })),
      error: "spec.ports[1].port: 70000 is out of range 1-65535",
    },
    { raw: service(port({ port: 0 })), error: "spec.ports[1].port: 0 is out of range 1-65535" },
    { raw: service(port({ port: "80" })), error: 'spec.ports[1].port: "80" is not an integer' },
    { raw: service(port({ port: 80.5 })), error: "spec.ports[1].port: 80.5 is not an integer" },
    { raw: service(port({ port: undefined })), error: "spec.ports[1].port: undefined is required" },
    {
      raw: service(port({ nodePort: 65536 })),
      error: "spec.ports[1].nodePort: 65536 is out of range 1-65535",
    },
    {
      raw: service(port({ nodePort: -1 })),
      error: "spec.ports[1].nodePort: -1 is out of range 1-65535",
    },
    {
      raw: service(port({ targetPort: 0 })),
      error: "spec.ports[1].targetPort: 0 is out of range 1-65535",
    },
    {
      raw: service(port({ targetPort: "8080" })),
      error: 'spec.ports[1].targetPort: "8080" is not a valid IANA_SVC_NAME',
    },
    {
      raw: service(port({ targetPort: "a-very-long-port-name" })),
      error: 'spec.ports[1].targetPort: "a-very-long-port-name" is not a valid IANA_SVC_NAME',
    },
    {
      raw: service(port({ targetPort: "a--b" })),
      error: 'spec.ports[1].targetPort: "a--b" is not a valid IANA_SVC_NAME',
    },
    {
      raw: service(port({ targetPort: true })),
      error: "spec.ports[1].targetPort: true is not a port number or name",
    },
    {
      raw: service(port({ protocol: "ICMP" })),
      error: 'spec.ports[1].protocol: "ICMP" is not one of TCP, UDP, SCTP',
    },
    {
      raw: service(port({ protocol: "tcp" })),
      error: 'spec.ports[1].protocol: "tcp" is not one of TCP, UDP, SCTP',
    },
    {
      raw: service(port({ name: "B" })),
      error: 'spec.ports[1].name: "B" is not a valid DNS-1123 label',
    },
    { raw: service(port({ name: "a" })), error: 'spec.ports[1].name: "a" is duplicated' },
    { raw: service(port({ port: 80 })), error: "spec.ports[1].port: 80 is duplicated for TCP" },
    { raw: service({ ports: "80" }), error: 'spec.ports: "80" is not a list' },
    {
      raw: service({ type: "Bogus" }),
      error: 'spec.type: "Bogus" is not one of ClusterIP, NodePort, LoadBalancer, ExternalName',
    },
    {
      raw: service({ clusterIPs: ["10.96.0.010"] }),
      error: 'spec.clusterIPs[0]: "10.96.0.010" is not a valid IP address',
    },
    {
      raw: service({ clusterIPs: ["fe80::1%eth0"] }),
      error: 'spec.clusterIPs[0]: "fe80::1%eth0" is not a valid IP address',
    },
    {
      raw: service({ clusterIPs: ["::ffff:10.96.0.1"] }),
      error: 'spec.clusterIPs[0]: "::ffff:10.96.0.1" is not a valid IP address',
    },
    {
      raw: service({ clusterIPs: ["10.96.0.1", "10.96.0.2"] }),
      error: 'spec.clusterIPs: ["10.96.0.1","10.96.0.2"] lists two addresses of the same family',
    },
    {
      raw: service({ clusterIPs: undefined, clusterIP: "10.96.0.256" }),
      error: 'spec.clusterIP: "10.96.0.256" is not a valid IP address',
    },
    {
      raw: service({ externalIPs: ["1.2.3"] }),
      error: 'spec.externalIPs[0]: "1.2.3" is not a valid IP address',
    },
    {
      raw: service({ loadBalancerSourceRanges: ["10.0.0.0/33"] }),
      error: 'spec.loadBalancerSourceRanges[0]: "10.0.0.0/33" is not a valid CIDR',
    },
    {
      raw: service({ loadBalancerSourceRanges: ["10.0.0.0"] }),
      error: 'spec.loadBalancerSourceRanges[0]: "10.0.0.0" is not a valid CIDR',
    },
    {
      raw: service({ sessionAffinity: "Cookie" }),
      error: 'spec.sessionAffinity: "Cookie" is not one of None, ClientIP',
    },
    {
      raw: service({
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 0 } },
      }),
      error: "spec.sessionAffinityConfig.clientIP.timeoutSeconds: 0 is out of range 1-86400",
    },
    {
      raw: service({
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 86401 } },
      }),
      error: "spec.sessionAffinityConfig.clientIP.timeoutSeconds: 86401 is out of range 1-86400",
    },
    {
      raw: service({ externalTrafficPolicy: "OnlyLocal" }),
      error: 'spec.externalTrafficPolicy: "OnlyLocal" is not one of Cluster, Local',
    },
    {
      raw: service({ internalTrafficPolicy: "Global" }),
      error: 'spec.internalTrafficPolicy: "Global" is not one of Cluster, Local',
    },
    {
      raw: service({ healthCheckNodePort: 65536 }),
      error: "spec.healthCheckNodePort: 65536 is out of range 1-65535",
    },
    {
      raw: service({ topologyKeys: ["*", "kubernetes.io/hostname"] }),
      error: 'spec.topologyKeys[0]: "*" must be the last key',
    },
    {
      raw: service({ topologyKeys: ["bad key"] }),
      error: 'spec.topologyKeys[0]: "bad key" is not a valid label key',
    },
    {
      raw: service({ topologyKeys: ["Bad_Prefix/zone"] }),
      error: 'spec.topologyKeys[0]: "Bad_Prefix/zone" has an invalid prefix',
    },
    {
      raw: service({ topologyKeys: ["a", "a"] }),
      error: 'spec.topologyKeys[1]: "a" is duplicated',
    },
    {
      raw: service({ topologyKeys: Array.from({ length: 17 }, (_, i) => `k${i}`) }),
      error: 'spec.topologyKeys: "17 entries" exceeds 16 entries',
    },
    {
      raw: service({ trafficDistribution: "Prefer Close;" }),
      error: 'spec.trafficDistribution: "Prefer Close;" is not a valid label key',
    },
    {
      raw: service({}, { status: { loadBalancer: { ingress: [{ ip: "300.1.1.1" }] } } }),
      error: 'status.loadBalancer.ingress[0].ip: "300.1.1.1" is not a valid IP address',
    },
    {
      raw: service({}, {
        status: { loadBalancer: { ingress: [{ ip: "1.1.1.1", ipMode: "Tunnel" }] } },
      }),
      error: 'status.loadBalancer.ingress[0].ipMode: "Tunnel" is not one of VIP, Proxy',
    },
    {
      raw: { metadata: { namespace: "default", name: "web" }, spec: [] },
      error: "spec: [] is not an object",
    },
    { raw: "not an object" as unknown as Json, error: 'object: "not an object" is not an object' },
  ];
  for (const c of cases) {
    await t.step(c.error, () => assert.equal(error(parseService(c.raw)), c.error));
  }
});

Deno.test("parseService() refuses a special externalIP or load-balancer IP alone, keeping the Service", async (t) => {
  const lb = (...ips: string[]) => ({
    status: { loadBalancer: { ingress: ips.map((ip) => ({ ip })) } },
  });
  const cases: {
    name: string;
    raw: Json;
    externalIPs?: string[];
    lbIPs?: string[];
    warnings: string[];
  }[] = [
    {
      name: "externalIP 127.0.0.1 (the sshd case)",
      raw: service({ externalIPs: ["127.0.0.1", "203.0.113.7"] }),
      externalIPs: ["203.0.113.7"],
      warnings: ['spec.externalIPs[0]: "127.0.0.1" is a loopback address (127.0.0.0/8, ::1)'],
    },
    {
      name: "every kind in externalIPs",
      raw: service({
        externalIPs: [
          "0.0.0.0",
          "::",
          "169.254.169.254",
          "fe80::1",
          "224.0.0.251",
          "255.255.255.255",
        ],
      }),
      externalIPs: [],
      warnings: [
        'spec.externalIPs[0]: "0.0.0.0" is an unspecified address (0.0.0.0, ::)',
        'spec.externalIPs[1]: "::" is an unspecified address (0.0.0.0, ::)',
        'spec.externalIPs[2]: "169.254.169.254" is a link-local address (169.254.0.0/16, fe80::/10)',
        'spec.externalIPs[3]: "fe80::1" is a link-local address (169.254.0.0/16, fe80::/10)',
        'spec.externalIPs[4]: "224.0.0.251" is a multicast address (224.0.0.0/4, ff00::/8)',
        'spec.externalIPs[5]: "255.255.255.255" is a broadcast address (255.255.255.255)',
      ],
    },
    {
      name: "load-balancer ingress IPs",
      raw: service({ type: "LoadBalancer" }, lb("::1", "198.51.100.9", "ff02::fb")),
      lbIPs: ["198.51.100.9"],
      warnings: [
        'status.loadBalancer.ingress[0].ip: "::1" is a loopback address (127.0.0.0/8, ::1)',
        'status.loadBalancer.ingress[2].ip: "ff02::fb" is a multicast address (224.0.0.0/4, ff00::/8)',
      ],
    },
    {
      name: "ordinary addresses draw no warning",
      raw: service({ externalIPs: ["203.0.113.7"] }, lb("198.51.100.9")),
      externalIPs: ["203.0.113.7"],
      lbIPs: ["198.51.100.9"],
      warnings: [],
    },
  ];
  for (const c of cases) {
    await t.step(c.name, () => {
      const result = parseService(c.raw);
      assert.ok(result.ok && result.value, JSON.stringify(result));
      assert.deepEqual(result.value.externalIPs, c.externalIPs ?? []);
      assert.deepEqual(result.value.loadBalancerIngress.map((i) => i.ip), c.lbIPs ?? []);
      assert.deepEqual(result.warnings ?? [], c.warnings);
    });
  }
});

Deno.test("parseService() rejects a Service whose cluster IP is a special address", async (t) => {
  const cases: [Json, string][] = [
    [
      { clusterIP: "127.0.0.1", clusterIPs: ["127.0.0.1"] },
      'spec.clusterIPs[0]: "127.0.0.1" is a loopback address (127.0.0.0/8, ::1)',
    ],
    [
      { clusterIP: "0.0.0.0", clusterIPs: undefined },
      'spec.clusterIP: "0.0.0.0" is an unspecified address (0.0.0.0, ::)',
    ],
    [
      { clusterIPs: ["10.96.0.10", "fe80::10"] },
      'spec.clusterIPs[1]: "fe80::10" is a link-local address (169.254.0.0/16, fe80::/10)',
    ],
  ];
  for (const [spec, expected] of cases) {
    await t.step(expected, () => assert.equal(error(parseService(service(spec))), expected));
  }
});

Deno.test("parseEndpointSlice() refuses an endpoint at a special address, keeping the others", async (t) => {
  const cases: { name: string; raw: Json; ips: string[]; warnings: string[] }[] = [
    {
      name: "IPv4",
      raw: slice({
        endpoints: [
          { addresses: ["169.254.169.254"] },
          { addresses: ["10.244.1.5"] },
          { addresses: ["127.0.0.1"] },
        ],
      }),
      ips: ["10.244.1.5"],
      warnings: [
        'endpoints[0].addresses[0]: "169.254.169.254" is a link-local address (169.254.0.0/16, fe80::/10)',
        'endpoints[2].addresses[0]: "127.0.0.1" is a loopback address (127.0.0.0/8, ::1)',
      ],
    },
    {
      name: "IPv6",
      raw: slice({
        addressType: "IPv6",
        endpoints: [{ addresses: ["::"] }, { addresses: ["fd00:244::5"] }],
      }),
      ips: ["fd00:244::5"],
      warnings: ['endpoints[0].addresses[0]: "::" is an unspecified address (0.0.0.0, ::)'],
    },
  ];
  for (const c of cases) {
    await t.step(c.name, () => {
      const result = parseEndpointSlice(c.raw);
      assert.ok(result.ok && result.value, JSON.stringify(result));
      assert.deepEqual(result.value.endpoints.map((e) => e.ip), c.ips);
      assert.deepEqual(result.warnings, c.warnings);
    });
  }
});

Deno.test("parseEndpointSlice() parses endpoints, conditions, hints and ports", () => {
  const parsed = value(parseEndpointSlice(slice({
    endpoints: [
      {
        addresses: ["10.244.1.5", "10.244.1.99"],
        conditions: { ready: false, serving: true, terminating: true },
        nodeName: "node-a",
        zone: "zone-a",
        hints: { forZones: [{ name: "zone-a" }], forNodes: [{ name: "node-a" }] },
      },
      { addresses: ["10.244.2.5"] },
      { addresses: ["10.244.1.5"], nodeName: "node-b" },
    ],
    ports: [{ name: "http", port: 8080 }, { name: "all", protocol: "UDP", port: null }],
  })));
  assert.deepEqual(parsed, {
    namespace: "default",
    name: "web-abc12",
    serviceName: "web",
    family: "IPv4",
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
    endpoints: [
      {
        ip: "10.244.1.5",
        ready: false,
        serving: true,
        terminating: true,
        nodeName: "node-a",
        zone: "zone-a",
        hints: { forZones: ["zone-a"], forNodes: ["node-a"] },
      },
      { ip: "10.244.2.5", ready: true, serving: true, terminating: false, nodeName: "", zone: "" },
    ],
  });
});

Deno.test("parseEndpointSlice() derives serving from ready when unset", () => {
  const parsed = value(
    parseEndpointSlice(
      slice({ endpoints: [{ addresses: ["10.244.1.5"], conditions: { ready: false } }] }),
    ),
  );
  assert.equal(parsed?.endpoints[0]?.serving, false);
});

Deno.test("parseEndpointSlice() normalises IPv6 endpoints", () => {
  const parsed = value(parseEndpointSlice(slice({
    addressType: "IPv6",
    endpoints: [{ addresses: ["FD00:244:1:0:0:0:0:5"] }],
  })));
  assert.equal(parsed?.family, "IPv6");
  assert.equal(parsed?.endpoints[0]?.ip, "fd00:244:1::5");
});

Deno.test("parseEndpointSlice() ignores FQDN slices", () => {
  assert.deepEqual(
    parseEndpointSlice(slice({ addressType: "FQDN", endpoints: [{ addresses: ["example.com"] }] })),
    {
      ok: true,
      value: null,
      ignored: "FQDN",
    },
  );
});

Deno.test("parseEndpointSlice() rejects every invalid field naming it", async (t) => {
  const ep = (e: Json) => ({
    endpoints: [{ addresses: ["10.244.1.5"] }, { addresses: ["10.244.1.6"], ...e }],
  });
  const cases: { raw: Json; error: string }[] = [
    {
      raw: slice({ addressType: "IPv5" }),
      error: 'addressType: "IPv5" is not one of IPv4, IPv6, FQDN',
    },
    {
      raw: slice({ metadata: { labels: {} } }),
      error: 'metadata.labels["kubernetes.io/service-name"]: "" is required',
    },
    {
      raw: slice({ metadata: { labels: { "kubernetes.io/service-name": "web;x" } } }),
      error: 'metadata.labels["kubernetes.io/service-name"]: "web;x" is not a valid DNS-1123 label',
    },
    {
      raw: slice({ metadata: { name: "web_1" } }),
      error: 'metadata.name: "web_1" is not a valid DNS-1123 subdomain',
    },
    {
      raw: slice({ metadata: { namespace: "a.b" } }),
      error: 'metadata.namespace: "a.b" is not a valid DNS-1123 label',
    },
    {
      raw: slice({ ports: [{ name: "http", port: 65536 }] }),
      error: "ports[0].port: 65536 is out of range 1-65535",
    },
    {
      raw: slice({ ports: [{ name: "http", port: 0 }] }),
      error: "ports[0].port: 0 is out of range 1-65535",
    },
    {
      raw: slice({ ports: [{ name: 'h"', port: 80 }] }),
      error: 'ports[0].name: "h\\"" is not a valid DNS-1123 label',
    },
    {
      raw: slice({ ports: [{ port: 80, protocol: "IP" }] }),
      error: 'ports[0].protocol: "IP" is not one of TCP, UDP, SCTP',
    },
    {
      raw: slice(ep({ addresses: ["10.244.1.06"] })),
      error: 'endpoints[1].addresses[0]: "10.244.1.06" is not a valid IP address',
    },
    {
      raw: slice(ep({ addresses: ["fd00::6"] })),
      error: 'endpoints[1].addresses[0]: "fd00::6" is not an IPv4 address',
    },
    { raw: slice(ep({ addresses: [] })), error: "endpoints[1].addresses: [] must not be empty" },
    {
      raw: slice(ep({ nodeName: "node a" })),
      error: 'endpoints[1].nodeName: "node a" is not a valid DNS-1123 subdomain',
    },
    {
      raw: slice(ep({ zone: "zone a" })),
      error: 'endpoints[1].zone: "zone a" is not a valid label value',
    },
    {
      raw: slice(ep({ conditions: { ready: "yes" } })),
      error: 'endpoints[1].conditions.ready: "yes" is not a boolean',
    },
    {
      raw: slice(ep({ hints: { forZones: [{ name: "z}" }] } })),
      error: 'endpoints[1].hints.forZones[0].name: "z}" is not a valid label value',
    },
    {
      raw: slice(ep({ hints: { forNodes: [{ name: "N" }] } })),
      error: 'endpoints[1].hints.forNodes[0].name: "N" is not a valid DNS-1123 subdomain',
    },
    {
      raw: slice(ep({ hints: { forZones: [{}] } })),
      error: 'endpoints[1].hints.forZones[0].name: "" must not be empty',
    },
  ];
  for (const c of cases) {
    await t.step(c.error, () => assert.equal(error(parseEndpointSlice(c.raw)), c.error));
  }
});

Deno.test("parseNode() keeps addresses InternalIP first, labels, pod CIDRs", () => {
  assert.deepEqual(value(parseNode(node())), {
    name: "node-a",
    labels: { "topology.kubernetes.io/zone": "zone-a" },
    addresses: ["10.200.0.2", "203.0.113.2"],
    podCIDRs: ["10.244.1.0/24"],
    deleting: false,
  });
});

Deno.test("parseNode() reads spec.podCIDR and deletionTimestamp", () => {
  const parsed = value(parseNode(node({
    metadata: { deletionTimestamp: "2024-01-01T00:00:00Z" },
    spec: { podCIDR: "10.244.1.7/24" },
  })));
  assert.deepEqual(parsed.podCIDRs, ["10.244.1.0/24"]);
  assert.equal(parsed.deleting, true);
});

Deno.test("parseNode() counts a ToBeDeletedByClusterAutoscaler taint as deleting", async (t) => {
  const tainted = (taints: unknown) =>
    parseNode(node({ spec: { podCIDRs: ["10.244.1.0/24"], taints } }));
  await t.step("the cluster autoscaler's taint, any effect", () => {
    for (const effect of ["NoSchedule", "NoExecute", "PreferNoSchedule"]) {
      const taints = [
        { key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" },
        { key: "ToBeDeletedByClusterAutoscaler", value: "1735689600", effect },
      ];
      assert.equal(value(tainted(taints)).deleting, true, effect);
    }
  });
  await t.step("other taints and no taints", () => {
    assert.equal(value(tainted([{ key: "DeletionCandidateOfClusterAutoscaler" }])).deleting, false);
    assert.equal(value(tainted([{ key: "tobedeletedbyclusterautoscaler" }])).deleting, false);
    assert.equal(value(tainted([])).deleting, false);
  });
  await t.step("a malformed taint list", () => {
    assert.equal(
      error(tainted("ToBeDeletedByClusterAutoscaler")),
      'spec.taints: "ToBeDeletedByClusterAutoscaler" is not a list',
    );
    assert.equal(error(tainted([{ key: 7 }])), "spec.taints[0].key: 7 is not a string");
    assert.equal(error(tainted(["x"])), 'spec.taints[0]: "x" is not an object');
  });
});

Deno.test("parseNode() rejects invalid fields", async (t) => {
  const cases: { raw: Json; error: string }[] = [
    {
      raw: node({ metadata: { name: "Node;A" } }),
      error: 'metadata.name: "Node;A" is not a valid DNS-1123 subdomain',
    },
    {
      raw: node({ metadata: { labels: { "bad key!": "x" } } }),
      error: 'metadata.labels: "bad key!" is not a valid label key',
    },
    {
      raw: node({ metadata: { labels: { zone: "a b" } } }),
      error: 'metadata.labels["zone"]: "a b" is not a valid label value',
    },
    {
      raw: node({ status: { addresses: [{ type: "InternalIP", address: "10.0.0.1/24" }] } }),
      error: 'status.addresses[0].address: "10.0.0.1/24" is not a valid IP address',
    },
    {
      raw: node({ spec: { podCIDRs: ["10.244.1.0/40"] } }),
      error: 'spec.podCIDRs[0]: "10.244.1.0/40" is not a valid CIDR',
    },
  ];
  for (const c of cases) {
    await t.step(c.error, () => assert.equal(error(parseNode(c.raw)), c.error));
  }
});

Deno.test("parseServiceCIDR() normalises CIDRs and rejects bad ones", () => {
  const raw = (cidrs: unknown) => ({ metadata: { name: "kubernetes" }, spec: { cidrs } });
  assert.deepEqual(value(parseServiceCIDR(raw(["10.96.0.0/16", "FD00:96::/112"]))), {
    name: "kubernetes",
    cidrs: ["10.96.0.0/16", "fd00:96::/112"],
  });
  assert.equal(
    error(parseServiceCIDR(raw(["10.96.0.0/16", "10.97.0.0/16"]))),
    'spec.cidrs: ["10.96.0.0/16","10.97.0.0/16"] lists two CIDRs of the same family',
  );
  assert.equal(
    error(parseServiceCIDR(raw(["10.96.0.0/016"]))),
    'spec.cidrs[0]: "10.96.0.0/016" is not a valid CIDR',
  );
  assert.equal(
    error(parseServiceCIDR({ metadata: { name: "a b" } })),
    'metadata.name: "a b" is not a valid DNS-1123 subdomain',
  );
});

Deno.test("parseIP() accepts canonical forms and normalises IPv6", async (t) => {
  const cases: [string, string | undefined][] = [
    ["10.0.0.1", "10.0.0.1"],
    ["0.0.0.0", "0.0.0.0"],
    ["255.255.255.255", "255.255.255.255"],
    ["010.0.0.1", undefined],
    ["10.0.0", undefined],
    ["10.0.0.1.", undefined],
    [" 10.0.0.1", undefined],
    ["::", "::"],
    ["::1", "::1"],
    ["2001:DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"],
    ["2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"],
    ["fe80::1%eth0", undefined],
    ["::ffff:1.2.3.4", undefined],
    ["::ffff:102:304", undefined],
    ["64:ff9b::1.2.3.4", "64:ff9b::102:304"],
    ["1:2:3:4:5:6:7:8:9", undefined],
    ["1::2::3", undefined],
    ["12345::", undefined],
    ["", undefined],
  ];
  for (const [input, expected] of cases) {
    await t.step(JSON.stringify(input), () => assert.equal(canonicalIP(input), expected));
  }
});

Deno.test("parseCIDR() clears host bits; cidrContains, ipFamily and isLoopback agree", () => {
  assert.equal(parseCIDR("10.1.2.3/8")?.cidr, "10.0.0.0/8");
  assert.equal(parseCIDR("fd00:96::1:2/112")?.cidr, "fd00:96::1:0/112");
  assert.equal(parseCIDR("0.0.0.0/0")?.cidr, "0.0.0.0/0");
  assert.equal(parseCIDR("10.0.0.0/-1"), undefined);
  assert.equal(cidrContains("10.96.0.0/16", "10.96.255.1"), true);
  assert.equal(cidrContains("10.96.0.0/16", "10.97.0.1"), false);
  assert.equal(cidrContains("fd00:96::/112", "fd00:96::10"), true);
  assert.equal(cidrContains("10.0.0.0/8", "fd00::1"), false);
  assert.equal(ipFamily("fd00::1"), "IPv6");
  assert.equal(ipFamily("10.0.0.0/8"), "IPv4");
  assert.equal(ipFamily("nope"), undefined);
  assert.equal(isLoopback("127.3.0.1"), true);
  assert.equal(isLoopback("::1"), true);
  assert.equal(isLoopback("10.0.0.1"), false);
});
