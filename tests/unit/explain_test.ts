import assert from "node:assert/strict";
import type {
  EndpointVerdict,
  ExplainInput,
  Explanation,
} from "../../lib/commands/explain/types.ts";
import { explain } from "../../lib/commands/explain/match.ts";
import { formatExplanation } from "../../lib/commands/explain/format.ts";
import { parseDestination } from "../../lib/commands/explain/destination.ts";
import { runExplain } from "../../lib/commands/explain/run.ts";
import { type PlannerOptions, planNode } from "../../lib/core/planner.ts";
import { parseManifest } from "../../lib/shell/source/manifest.ts";
import type { ObjectKind } from "../../lib/core/source.ts";
import type { ClusterState } from "../../lib/core/state.ts";
import { Tracker } from "../../lib/core/tracker.ts";

const MANIFESTS = new URL("../../scripts/manifests/", import.meta.url);

/** The shipped manifests, with optional extra or replacing objects applied after them. */
function loadState(overlay: Record<string, unknown>[] = []): ClusterState {
  const tracker = new Tracker({ nodeName: "node-a", clock: { now: () => 0 } });
  const files = [...Deno.readDirSync(MANIFESTS)]
    .map((entry) => entry.name)
    .filter((name) => /\.(ya?ml|json)$/.test(name))
    .sort();
  const objects = files.flatMap((file) =>
    parseManifest(Deno.readTextFileSync(new URL(file, MANIFESTS)), file)
  );
  for (const object of [...objects, ...overlay]) {
    tracker.apply({ type: "upsert", kind: object.kind as ObjectKind, object });
  }
  tracker.apply({ type: "synced" });
  return tracker.drain().state;
}

function plannerOptions(overrides: Partial<PlannerOptions> = {}): PlannerOptions {
  return {
    nodeName: "node-a",
    nodePortAddresses: ["primary"],
    localAddresses: [],
    clusterCIDRs: ["10.244.0.0/16", "fd00:244::/48"],
    detectLocalMode: "ClusterCIDR",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    masqueradeAll: false,
    serviceClusterIPRange: [],
    externalIPAllowedCIDRs: [],
    featureGates: {},
    ...overrides,
  };
}

interface Case {
  destination: string;
  from?: string;
  node?: string;
  options?: Partial<PlannerOptions>;
  overlay?: Record<string, unknown>[];
}

function run(c: Case): Explanation {
  const state = loadState(c.overlay);
  const options = plannerOptions(c.options);
  const input: ExplainInput = {
    state,
    plans: planNode({ state, options }),
    options,
    destination: c.destination,
    from: c.from,
    node: c.node,
  };
  return explain(input);
}

function endpoint(e: Explanation, ip: string): EndpointVerdict {
  const found = e.match?.endpoints.find((ep) => ep.ip === ip);
  assert.ok(found, `endpoint ${ip} missing in ${formatExplanation(e)}`);
  return found;
}

function slice(
  name: string,
  service: string,
  ports: Record<string, unknown>[],
  endpoints: Record<string, unknown>[],
): Record<string, unknown> {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      namespace: "default",
      name,
      labels: { "kubernetes.io/service-name": service },
    },
    addressType: "IPv4",
    ports,
    endpoints,
  };
}

const HTTP_PORT = [{ name: "http", protocol: "TCP", port: 8080 }];

// ------------------------------------------------------------ address kinds

Deno.test("explain() names the service port and the kind of every address", async (t) => {
  const table: {
    destination: string;
    id: string;
    kind: string;
    traffic: "internal" | "external";
  }[] = [
    {
      destination: "10.96.0.10:80",
      id: "default/web:http/TCP",
      kind: "cluster IP",
      traffic: "internal",
    },
    {
      destination: "10.96.0.10:80/tcp",
      id: "default/web:http/TCP",
      kind: "cluster IP",
      traffic: "internal",
    },
    {
      destination: "10.200.0.2:30080",
      id: "default/web-nodeport:http/TCP",
      kind: "node port",
      traffic: "external",
    },
    {
      destination: "198.51.100.20:80",
      id: "default/web-external:http/TCP",
      kind: "external IP",
      traffic: "external",
    },
    {
      destination: "198.51.100.10:80",
      id: "default/web-lb:http/TCP",
      kind: "load-balancer IP",
      traffic: "external",
    },
    {
      destination: "10.96.0.53:53/UDP",
      id: "kube-system/kube-dns:dns/UDP",
      kind: "cluster IP",
      traffic: "internal",
    },
    {
      destination: "[fd00:96::10]:80",
      id: "default/dual-stack:http/TCP",
      kind: "cluster IP",
      traffic: "internal",
    },
    { destination: "web:80", id: "default/web:http/TCP", kind: "cluster IP", traffic: "internal" },
    {
      destination: "default/web:http",
      id: "default/web:http/TCP",
      kind: "cluster IP",
      traffic: "internal",
    },
    {
      destination: "kube-system/kube-dns:53",
      id: "kube-system/kube-dns:dns-tcp/TCP",
      kind: "cluster IP",
      traffic: "internal",
    },
    {
      destination: "kube-system/kube-dns:53/udp",
      id: "kube-system/kube-dns:dns/UDP",
      kind: "cluster IP",
      traffic: "internal",
    },
  ];
  for (const row of table) {
    await t.step(row.destination, () => {
      const e = run({ destination: row.destination });
      assert.equal(e.match?.id, row.id, formatExplanation(e));
      assert.equal(e.match?.kind, row.kind);
      assert.equal(e.match?.traffic, row.traffic);
    });
  }
});

Deno.test("explain() resolves a dual-stack service name to the cluster IP of --from's family", () => {
  const v6 = run({ destination: "dual-stack:80", from: "fd00:244:1::9" });
  assert.equal(v6.ip, "fd00:96::10");
  assert.equal(v6.family, "IPv6");
  assert.deepEqual(v6.match?.endpoints.map((ep) => ep.ip), ["fd00:244:1::20"]);
  assert.equal(run({ destination: "dual-stack:80" }).ip, "10.96.0.18");
});

Deno.test("explain() explains addresses that are no service address", async (t) => {
  const table: { destination: string; outcome: RegExp; note?: RegExp }[] = [
    {
      destination: "10.96.0.99:80",
      outcome:
        /^not a service address; inside service CIDR 10\.96\.0\.0\/16: rejected as unallocated/,
    },
    {
      destination: "10.96.0.10:81",
      outcome: /inside service CIDR 10\.96\.0\.0\/16: rejected as an unknown service port/,
      note: /10\.96\.0\.10 is the cluster IP of default\/web, on 80\/TCP, not 81\/TCP/,
    },
    { destination: "8.8.8.8:53/UDP", outcome: /^not a service address: kproxy does not touch it$/ },
    { destination: "[fd00:96::99]:80", outcome: /inside service CIDR fd00:96::\/112/ },
    {
      destination: "127.0.0.1:30080",
      outcome: /^not a service address/,
      note:
        /node port of default\/web-nodeport:http\/TCP, but node ports are captured only on 10\.200\.0\.2 \(never on loopback\)/,
    },
    {
      destination: "10.200.0.2:32001",
      outcome: /health-check node port of default\/web-lb \(200 with 1 local ready endpoint/,
    },
  ];
  for (const row of table) {
    await t.step(row.destination, () => {
      const e = run({ destination: row.destination });
      assert.equal(e.match, undefined);
      assert.match(e.outcome, row.outcome);
      if (row.note) assert.ok(e.notes.some((n) => row.note!.test(n)), e.notes.join("\n"));
    });
  }
});

// ------------------------------------------------------------ exclusion reasons

Deno.test("explain() gives a reason for every endpoint that is not eligible", async (t) => {
  const table: (Case & { ip: string; reason: RegExp })[] = [
    {
      destination: "local-only:80",
      ip: "10.244.2.16",
      reason:
        /^other node: on node-b, and internalTrafficPolicy Local sends only to endpoints on node-a$/,
    },
    {
      destination: "198.51.100.10:80",
      from: "192.0.2.7",
      ip: "10.244.2.12",
      reason: /^other node: on node-b, and externalTrafficPolicy Local/,
    },
    {
      destination: "10.200.0.3:30081",
      from: "192.0.2.7",
      node: "node-b",
      ip: "10.244.1.12",
      reason:
        /^other node: on node-a, and externalTrafficPolicy Local sends only to endpoints on node-b$/,
    },
    {
      destination: "draining:80",
      ip: "10.244.1.18",
      reason: /^terminating, and ready endpoints exist$/,
    },
    {
      destination: "prefer-close:80",
      ip: "10.244.2.21",
      reason: /^other zone by hints: hint forZones=\[zone-b\], this node is in zone zone-a$/,
    },
    {
      destination: "prefer-close:80",
      node: "node-b",
      ip: "10.244.1.21",
      reason: /^other zone by hints: hint forZones=\[zone-a\], this node is in zone zone-b$/,
    },
    {
      destination: "topology-keys:80",
      options: { featureGates: { ServiceTopology: true } },
      ip: "10.244.2.22",
      reason:
        /^not matching topologyKeys \[kubernetes\.io\/hostname, topology\.kubernetes\.io\/zone, \*\]: first matching key kubernetes\.io\/hostname=node-a, endpoint has node-b$/,
    },
    {
      destination: "prefer-close:80",
      overlay: [
        slice("prefer-close-b7m3q", "prefer-close", HTTP_PORT, [
          {
            addresses: ["10.244.1.21"],
            nodeName: "node-a",
            zone: "zone-a",
            hints: { forNodes: [{ name: "node-a" }], forZones: [{ name: "zone-a" }] },
          },
          {
            addresses: ["10.244.2.21"],
            nodeName: "node-b",
            zone: "zone-b",
            hints: { forNodes: [{ name: "node-b" }], forZones: [{ name: "zone-b" }] },
          },
        ]),
      ],
      ip: "10.244.2.21",
      reason: /^other node by node hints: hint forNodes=\[node-b\], this node is node-a$/,
    },
    {
      destination: "web:80",
      overlay: [
        slice("web-unready", "web", HTTP_PORT, [{
          addresses: ["10.244.2.99"],
          conditions: { ready: false, serving: false, terminating: false },
          nodeName: "node-b",
        }]),
      ],
      ip: "10.244.2.99",
      reason: /^not ready \(and not serving\)$/,
    },
    {
      destination: "web:80",
      overlay: [
        slice("web-metrics", "web", [{ name: "metrics", protocol: "TCP", port: 9090 }], [{
          addresses: ["10.244.2.98"],
          nodeName: "node-b",
        }]),
      ],
      ip: "10.244.2.98",
      reason:
        /^port name not in the slice: web-metrics has no port "http"\/TCP \(it has metrics\/TCP\)$/,
    },
  ];
  for (const row of table) {
    await t.step(`${row.destination} ${row.ip}`, () => {
      const e = run(row);
      const ep = endpoint(e, row.ip);
      assert.equal(ep.eligible, false);
      assert.match(ep.reason, row.reason);
    });
  }
});

Deno.test("explain() marks eligible endpoints with why they are eligible", () => {
  const e = run({ destination: "prefer-close:80" });
  assert.equal(e.match?.eligibleCount, 1);
  assert.equal(endpoint(e, "10.244.1.21").reason, "ready; hint forZones=[zone-a]");
  const local = run({ destination: "local-only:80" });
  assert.equal(
    endpoint(local, "10.244.1.16").reason,
    "ready; on this node (internalTrafficPolicy Local)",
  );
});

Deno.test("explain() uses terminating endpoints when none is ready", () => {
  const e = run({
    destination: "draining:80",
    overlay: [
      slice("draining-h6n4t", "draining", HTTP_PORT, [{
        addresses: ["10.244.1.18"],
        conditions: { ready: false, serving: true, terminating: true },
        nodeName: "node-a",
      }]),
    ],
  });
  const ep = endpoint(e, "10.244.1.18");
  assert.equal(ep.eligible, true);
  assert.match(ep.reason, /^terminating but serving/);
  assert.match(e.outcome, /^forwarded \(DNAT\) to the only eligible endpoint$/);
});

Deno.test("explain() agrees with the plan on the eligible endpoints of every service port", () => {
  const state = loadState();
  for (const node of ["node-a", "node-b"]) {
    const options = plannerOptions({ nodeName: node, featureGates: { ServiceTopology: true } });
    const plans = planNode({ state, options });
    for (const plan of [plans.ipv4, plans.ipv6]) {
      for (const sp of plan.services) {
        const ip = sp.clusterIPs[0]!;
        const destination = `${plan.family === "IPv6" ? `[${ip}]` : ip}:${sp.port}/${sp.protocol}`;
        const e = explain({ state, plans, options, destination });
        const eligible = e.match!.endpoints.filter((ep) => ep.eligible).map((ep) =>
          `${ep.ip}:${ep.port}`
        );
        assert.deepEqual(
          eligible,
          sp.internal.endpoints.map((ep) => `${ep.ip}:${ep.port}`),
          `${node} ${destination}`,
        );
        for (const ep of e.match!.endpoints) {
          assert.ok(
            !ep.reason.startsWith("not chosen by the planner"),
            `${destination}: ${ep.reason}`,
          );
        }
      }
    }
  }
});

// ------------------------------------------------------------ no endpoints

Deno.test("explain() says what happens when no endpoint is eligible", async (t) => {
  const nodeC = {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "node-c", labels: { "topology.kubernetes.io/zone": "zone-c" } },
    status: { addresses: [{ type: "InternalIP", address: "10.200.0.4" }] },
  };
  const table: (Case & { outcome: string; verdict: "reject" | "drop" })[] = [
    {
      destination: "no-endpoints:80",
      outcome: "connection refused (no endpoints)",
      verdict: "reject",
    },
    {
      destination: "local-only:80",
      node: "node-c",
      overlay: [nodeC],
      outcome: "dropped (no local endpoint under Local policy)",
      verdict: "drop",
    },
    {
      destination: "10.200.0.4:30081",
      from: "192.0.2.7",
      node: "node-c",
      overlay: [nodeC],
      outcome: "dropped (no local endpoint under Local policy)",
      verdict: "drop",
    },
    {
      destination: "topology-keys:80",
      node: "node-c",
      options: { featureGates: { ServiceTopology: true } },
      overlay: [{
        ...nodeC,
        metadata: { name: "node-c", labels: { "topology.kubernetes.io/zone": "zone-c" } },
      }, {
        apiVersion: "v1",
        kind: "Service",
        metadata: { namespace: "default", name: "topology-keys" },
        spec: {
          clusterIP: "10.96.0.20",
          clusterIPs: ["10.96.0.20"],
          topologyKeys: ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
          ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }],
        },
      }],
      outcome: "dropped (no endpoint matches topologyKeys)",
      verdict: "drop",
    },
  ];
  for (const row of table) {
    await t.step(`${row.destination} on ${row.node ?? "node-a"}`, () => {
      const e = run(row);
      assert.equal(e.match?.eligibleCount, 0);
      assert.equal(e.match?.whenEmpty?.verdict, row.verdict);
      assert.equal(e.outcome, row.outcome);
    });
  }
  await t.step("topologyKeys exclusion names the keys", () => {
    const e = run(table[3]!);
    assert.match(
      endpoint(e, "10.244.1.22").reason,
      /^not matching topologyKeys \[kubernetes\.io\/hostname, topology\.kubernetes\.io\/zone\]: no key matches any endpoint$/,
    );
  });
});

// ------------------------------------------------------------ masquerade, affinity, ranges

Deno.test("explain() decides masquerading from the policy and the source", async (t) => {
  const table: (Case & { answer: string; reason: RegExp })[] = [
    {
      destination: "10.96.0.10:80",
      from: "10.244.1.5",
      answer: "no",
      reason: /10\.244\.1\.5 is local traffic \(inside ClusterCIDR 10\.244\.0\.0\/16\)/,
    },
    {
      destination: "10.96.0.10:80",
      from: "192.0.2.7",
      answer: "yes",
      reason: /192\.0\.2\.7 is not local traffic/,
    },
    { destination: "10.96.0.10:80", answer: "depends", reason: /give --from to decide/ },
    {
      destination: "10.96.0.10:80",
      from: "10.244.1.5",
      options: { masqueradeAll: true },
      answer: "yes",
      reason: /--masquerade-all/,
    },
    {
      destination: "10.96.0.10:80",
      from: "192.0.2.7",
      options: { detectLocalMode: "", clusterCIDRs: [] },
      answer: "no",
      reason: /no local-traffic detector/,
    },
    {
      destination: "10.96.0.10:80",
      from: "10.244.1.5",
      options: { detectLocalMode: "InterfaceNamePrefix", interfaceNamePrefix: "veth" },
      answer: "depends",
      reason: /interface named veth\*/,
    },
    {
      destination: "10.200.0.2:30080",
      from: "192.0.2.7",
      answer: "yes",
      reason: /^node port traffic under externalTrafficPolicy Cluster is always masqueraded$/,
    },
    {
      destination: "198.51.100.20:80",
      from: "10.244.1.5",
      answer: "yes",
      reason: /^external IP traffic under externalTrafficPolicy Cluster/,
    },
    {
      destination: "198.51.100.10:80",
      from: "192.0.2.7",
      answer: "no",
      reason: /externalTrafficPolicy Local: the client's source is preserved/,
    },
    {
      destination: "10.200.0.2:30081",
      from: "10.200.0.2",
      answer: "yes",
      reason: /comes from the node itself/,
    },
    // A local pod's packet to an externalTrafficPolicy Local address short-circuits to
    // the cluster-IP endpoints with its own source: --masquerade-all is for cluster IPs.
    ...["10.200.0.2:30081", "198.51.100.10:80"].flatMap((destination) =>
      [false, true].map((masqueradeAll) => ({
        destination,
        from: "10.244.1.5",
        options: { masqueradeAll },
        answer: "no",
        reason: /a local pod's packet .* keeps its source/,
      }))
    ),
    {
      destination: "10.200.0.2:30081",
      from: "10.244.1.5",
      options: { detectLocalMode: "InterfaceNamePrefix", interfaceNamePrefix: "veth" },
      answer: "no",
      reason: /keeps its source/,
    },
  ];
  for (const row of table) {
    await t.step(
      `${row.destination} from ${row.from ?? "?"} ${JSON.stringify(row.options ?? {})}`,
      () => {
        const masquerade = run(row).match?.masquerade;
        assert.equal(masquerade?.answer, row.answer);
        assert.match(masquerade!.reason, row.reason);
      },
    );
  }
  await t.step("ETP Local from the node uses the cluster-wide endpoints", () => {
    const e = run({ destination: "10.200.0.2:30081", from: "10.200.0.2" });
    assert.equal(e.match?.traffic, "internal");
    assert.equal(e.match?.eligibleCount, 2);
  });
  await t.step("hairpin is noted", () => {
    const e = run({ destination: "10.96.0.10:80", from: "10.244.1.10" });
    assert.ok(e.notes.some((n) => n.includes("hairpin")));
  });
});

Deno.test("explain() reports session affinity", () => {
  const sticky = run({ destination: "sticky:80" });
  assert.equal(sticky.match?.affinity.timeoutSeconds, 300);
  assert.match(sticky.outcome, /sticky per client for 300s/);
  assert.equal(run({ destination: "web:80" }).match?.affinity.text, "none");
});

Deno.test("explain() applies loadBalancerSourceRanges to the load-balancer IP", async (t) => {
  const table: (Case & { answer: string; outcome?: RegExp })[] = [
    { destination: "198.51.100.10:80", from: "192.0.2.7", answer: "allowed" },
    { destination: "198.51.100.10:80", from: "10.200.0.3", answer: "allowed" },
    {
      destination: "198.51.100.10:80",
      from: "203.0.113.5",
      answer: "dropped",
      outcome: /^dropped by loadBalancerSourceRanges$/,
    },
    { destination: "198.51.100.10:80", answer: "depends" },
    { destination: "10.200.0.2:30081", from: "203.0.113.5", answer: "any" },
    { destination: "web:80", from: "203.0.113.5", answer: "any" },
  ];
  for (const row of table) {
    await t.step(`${row.destination} from ${row.from ?? "?"}`, () => {
      const e = run(row);
      assert.equal(e.match?.sourceRanges.answer, row.answer);
      if (row.outcome) assert.match(e.outcome, row.outcome);
    });
  }
});

Deno.test("explain() says per mode what happens to traffic from the load-balancer IP itself", () => {
  // web-lb's ranges hold the node's address 10.200.0.2: Plan.allowFromLoadBalancerIPs.
  const self = run({ destination: "198.51.100.10:80", from: "198.51.100.10" });
  assert.equal(self.match?.sourceRanges.answer, "depends");
  assert.equal(
    self.match?.sourceRanges.text,
    "198.51.100.10 is a load-balancer IP of the service, outside loadBalancerSourceRanges " +
      "192.0.2.0/24, 10.200.0.0/24, which hold a node address: allowed in iptables mode; " +
      "dropped in nftables and ipvs modes; kernelspace mode does not enforce the ranges",
  );
  const unknown = run({ destination: "198.51.100.10:80" });
  assert.equal(
    unknown.match?.sourceRanges.text,
    "only from 192.0.2.0/24, 10.200.0.0/24; other sources are dropped. They hold a node " +
      "address, so traffic from the load-balancer IPs themselves is allowed in iptables mode; " +
      "dropped in nftables and ipvs modes; kernelspace mode does not enforce the ranges",
  );
  const noNodeAddress = run({
    destination: "198.51.100.10:80",
    from: "198.51.100.10",
    options: { nodeName: "node-z" },
  });
  assert.equal(noNodeAddress.match?.sourceRanges.answer, "dropped");
});

Deno.test("explain() names the other services that claim the frontend it matched", () => {
  const copy = {
    apiVersion: "v1",
    kind: "Service",
    metadata: { namespace: "default", name: "web-external-copy" },
    spec: {
      clusterIP: "10.96.0.99",
      clusterIPs: ["10.96.0.99"],
      externalIPs: ["198.51.100.20"],
      ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }],
    },
  };
  const e = run({ destination: "198.51.100.20:80", overlay: [copy] });
  // "web-external-copy:" sorts before "web-external:" ('-' < ':').
  assert.equal(e.match?.id, "default/web-external-copy:http/TCP");
  assert.ok(
    e.notes.includes(
      "default/web-external:http/TCP declares 198.51.100.20:80/TCP too; " +
        "default/web-external-copy:http/TCP holds it, as the lowest service port id claiming it",
    ),
    e.notes.join("\n"),
  );
});

// ------------------------------------------------------------ errors

Deno.test("parseDestination() rejects bad DEST with a clear error", async (t) => {
  const table: [string, RegExp][] = [
    ["", /it is empty/],
    ["10.96.0.10", /missing ':PORT'/],
    ["10.96.0.10:0", /port 0 is out of range/],
    ["10.96.0.10:70000", /port 70000 is out of range/],
    ["10.96.0.10:http", /port "http" is not a number/],
    ["fd00::1:80", /an IPv6 address needs brackets/],
    ["[fd00::1:80", /missing '\]'/],
    ["[10.0.0.1]:80", /"10\.0\.0\.1" is not an IPv6 address/],
    ["[fd00::1]80", /missing ':PORT' after the address/],
    ["10.96.0.10:80/icmp", /unknown protocol "ICMP"/],
    ["999.1.1.1:80", /"999\.1\.1\.1" is not an IPv4 address/],
    ["Default/Web:80", /namespace "Default" is not a DNS label/],
    ["a/b/c:80", /a service is NAMESPACE\/NAME/],
    ["web:http_x", /neither a port number nor a port name/],
  ];
  for (const [dest, why] of table) {
    await t.step(JSON.stringify(dest), () => {
      assert.throws(() => parseDestination(dest), (error: unknown) => {
        assert.ok(error instanceof TypeError);
        assert.match(error.message, /^Cannot parse DEST /);
        assert.match(error.message, why);
        assert.match(error.message, /want IP:PORT\[\/PROTO\]/);
        return true;
      });
    });
  }
});

Deno.test("parseDestination() accepts every DEST form", () => {
  assert.deepEqual(parseDestination("10.96.0.10:53/udp"), {
    kind: "address",
    ip: "10.96.0.10",
    family: "IPv4",
    port: 53,
    protocol: "UDP",
  });
  assert.deepEqual(parseDestination("[FD00:96:0::10]:80"), {
    kind: "address",
    ip: "fd00:96::10",
    family: "IPv6",
    port: 80,
    protocol: "TCP",
  });
  assert.deepEqual(parseDestination("web:http"), {
    kind: "service",
    namespace: "default",
    name: "web",
    port: "http",
  });
  assert.deepEqual(parseDestination("kube-system/kube-dns:53/SCTP"), {
    kind: "service",
    namespace: "kube-system",
    name: "kube-dns",
    port: 53,
    protocol: "SCTP",
  });
});

Deno.test("explain() rejects unknown services, ports, nodes and sources", async (t) => {
  const table: [Case, ErrorConstructor | RangeErrorConstructor | TypeErrorConstructor, RegExp][] = [
    [{ destination: "nope:80" }, RangeError, /no service default\/nope/],
    [
      { destination: "web:81" },
      RangeError,
      /service default\/web has no port 81 \(it has http=80\/TCP\)/,
    ],
    [{ destination: "headless:80" }, RangeError, /no service default\/headless/],
    [
      { destination: "web:80", node: "node-z" },
      RangeError,
      /no such node \(known: node-a, node-b\)/,
    ],
    [{ destination: "web:80", from: "10.0.0.300" }, TypeError, /Cannot parse --from/],
    [
      { destination: "[fd00:96::10]:80", from: "10.244.1.5" },
      TypeError,
      /source is IPv4 but the destination is IPv6/,
    ],
  ];
  for (const [c, type, message] of table) {
    await t.step(`${c.destination} ${c.node ?? ""} ${c.from ?? ""}`, () => {
      assert.throws(() => run(c), (error: unknown) => {
        assert.ok(error instanceof type, String(error));
        assert.match((error as Error).message, message);
        return true;
      });
    });
  }
});

// ------------------------------------------------------------ text and command

Deno.test("formatExplanation() prints every part of the answer", () => {
  const text = formatExplanation(run({ destination: "local-only:80", from: "10.244.1.5" }));
  const expected = [
    "10.96.0.15:80/TCP (local-only:80) on node node-a, from 10.244.1.5",
    "  service port:     default/local-only:http/TCP (cluster IP)",
    "  traffic:          internal (internalTrafficPolicy Local: 1 local endpoint)",
    "  endpoints:        1 of 2 eligible",
    "    + 10.244.1.16:8080       node-a zone-a    ready; on this node (internalTrafficPolicy Local)",
    "    - 10.244.2.16:8080       node-b zone-b    other node: on node-b, and internalTrafficPolicy Local sends only to endpoints on node-a",
    "  session affinity: none",
    "  masquerade:       no: 10.244.1.5 is local traffic (inside ClusterCIDR 10.244.0.0/16)",
    "  source ranges:    any source",
    "  result:           forwarded (DNAT) to the only eligible endpoint",
    "",
  ].join("\n");
  assert.equal(text, expected);
  assert.match(
    formatExplanation(run({ destination: "[fd00:96::99]:80" })),
    /^\[fd00:96::99\]:80\/TCP on node node-a\n {2}not a service address/,
  );
});

Deno.test("runExplain() prints the answer, or the error with exit code 2", () => {
  const state = loadState();
  const options = plannerOptions();
  const out: string[] = [];
  const err: string[] = [];
  const io = { stdout: (s: string) => out.push(s), stderr: (s: string) => err.push(s) };
  const ok = runExplain({
    commandLine: { args: ["10.96.0.10:80"], explain: { from: "", node: "node-a" } },
    io,
    state,
    plannerOptions: options,
  });
  assert.equal(ok, 0);
  assert.match(out.join(""), /default\/web:http\/TCP \(cluster IP\)/);
  const bad = runExplain({
    commandLine: { args: ["10.96.0.10"], explain: { from: "", node: "node-a" } },
    io,
    state,
    plannerOptions: options,
  });
  assert.equal(bad, 2);
  assert.match(err.join(""), /^kproxy: Cannot parse DEST "10\.96\.0\.10": missing ':PORT'/);
});

Deno.test("runExplain() prints the traced service port's counters, or why there are none", () => {
  const state = loadState();
  const run = (counters: Parameters<typeof runExplain>[0]["counters"]) => {
    const out: string[] = [];
    runExplain({
      commandLine: { args: ["10.96.0.10:80"], explain: { from: "", node: "node-a" } },
      io: { stdout: (s: string) => out.push(s), stderr: () => {} },
      state,
      plannerOptions: plannerOptions(),
      counters,
    });
    return out.join("");
  };
  const service = {
    id: "default/web:http/TCP",
    namespace: "default",
    name: "web",
    portName: "http",
    port: 80,
    protocol: "TCP" as const,
  };
  const text = run({
    samples: [
      { service, family: "IPv4", counter: "connections", packets: 12 },
      { service, family: "IPv4", counter: "no-endpoints", packets: 3 },
      { service, family: "IPv6", counter: "connections", packets: 99 },
      {
        service: { ...service, id: "default/other:http/TCP" },
        family: "IPv4",
        counter: "connections",
        packets: 7,
      },
    ],
  });
  assert.match(text, /\n {2}counters: {9}connections 12; refused packets: no-endpoints 3\n$/);
  assert.match(
    run({ unavailable: "nft: Operation not permitted" }),
    /counters: {9}unavailable: nft/,
  );
  assert.doesNotMatch(run(undefined), /counters:/);
});
