import assert from "node:assert/strict";
import { answer, clusterRecords } from "../../scripts/cluster/dns.ts";
import { comparisonTable, parseJunit } from "../../scripts/cluster/results.ts";
import { siteConfigMap } from "../../scripts/cluster/site_config.ts";
import { parse, parseAllDocuments } from "yaml";

function query(name: string, type: number, id = 0x1234): Uint8Array {
  const labels = name.split(".").flatMap((
    label,
  ) => [label.length, ...new TextEncoder().encode(label)]);
  return new Uint8Array([
    id >> 8,
    id & 0xff,
    1,
    0,
    0,
    1,
    0,
    0,
    0,
    0,
    0,
    0,
    ...labels,
    0,
    0,
    type,
    0,
    1,
  ]);
}

const SERVICES = [
  {
    metadata: { name: "web", namespace: "app" },
    spec: { clusterIP: "10.97.0.10", clusterIPs: ["10.97.0.10"] },
  },
  { metadata: { name: "db", namespace: "app" }, spec: { clusterIP: "None" } },
  {
    metadata: { name: "alias", namespace: "app" },
    spec: { type: "ExternalName", externalName: "web.app.svc.cluster.local." },
  },
];
const SLICES = [{
  addressType: "IPv4",
  metadata: { namespace: "app", labels: { "kubernetes.io/service-name": "db" } },
  endpoints: [
    { addresses: ["10.244.1.5"], conditions: { ready: true } },
    { addresses: ["10.244.2.6"], conditions: { ready: false } },
    { addresses: ["10.244.0.7"] },
  ],
}];

Deno.test("cluster DNS answers a Service's cluster IP, a headless Service's ready endpoints, and follows an ExternalName", async (t) => {
  const records = clusterRecords(SERVICES, SLICES, "cluster.local");
  const cases: {
    name: string;
    type: number;
    rcode: number;
    answers: number;
    lastAddress?: string;
  }[] = [
    { name: "web.app.svc.cluster.local", type: 1, rcode: 0, answers: 1, lastAddress: "10.97.0.10" },
    { name: "WEB.app.svc.cluster.local", type: 1, rcode: 0, answers: 1, lastAddress: "10.97.0.10" },
    { name: "db.app.svc.cluster.local", type: 1, rcode: 0, answers: 2, lastAddress: "10.244.1.5" },
    {
      name: "alias.app.svc.cluster.local",
      type: 1,
      rcode: 0,
      answers: 2,
      lastAddress: "10.97.0.10",
    },
    { name: "web.app.svc.cluster.local", type: 28, rcode: 0, answers: 0 },
    { name: "missing.app.svc.cluster.local", type: 1, rcode: 3, answers: 0 },
    { name: "example.com", type: 1, rcode: 3, answers: 0 },
  ];
  for (const c of cases) {
    await t.step(`${c.name} type ${c.type}`, () => {
      const reply = answer(query(c.name, c.type), records, "cluster.local")!;
      assert.equal((reply[0]! << 8) | reply[1]!, 0x1234);
      assert.equal(reply[3]! & 0x0f, c.rcode);
      assert.equal((reply[6]! << 8) | reply[7]!, c.answers);
      if (c.lastAddress) assert.equal([...reply.subarray(-4)].join("."), c.lastAddress);
    });
  }
});

Deno.test("cluster DNS refuses a truncated or compressed question without answering", () => {
  const records = clusterRecords(SERVICES, SLICES, "cluster.local");
  assert.equal(answer(new Uint8Array(10), records, "cluster.local"), undefined);
  const compressed = query("web.app.svc.cluster.local", 1);
  compressed[12] = 0xc0;
  assert.equal(answer(compressed, records, "cluster.local"), undefined);
});

Deno.test("results.ts reads e2e JUnit reports and puts two runs side by side", () => {
  const xml = `<testsuites><testsuite>
    <testcase name="[SynchronizedBeforeSuite]" time="1"></testcase>
    <testcase name="[sig-network] Services should serve a basic endpoint from pods" status="passed" time="12.4"></testcase>
    <testcase name="[sig-network] Services should fail &amp; say why" status="failed" time="3">
      <failure message="[FAILED] timed out&#10;second line" type="failed">x</failure></testcase>
    <testcase name="[sig-network] Services needs three nodes" status="skipped" time="0">
      <skipped message="skipped - Requires at least 3 nodes"></skipped></testcase>
    <testcase name="[sig-network] Services left out by focus" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite></testsuites>`;
  const outcomes = parseJunit(xml);
  assert.deepEqual([...outcomes.keys()].sort(), [
    "[sig-network] Services needs three nodes",
    "[sig-network] Services should fail & say why",
    "[sig-network] Services should serve a basic endpoint from pods",
  ]);
  assert.equal(outcomes.get("[sig-network] Services should fail & say why")!.result, "FAIL");
  const table = comparisonTable([
    { label: "kube-proxy", outcomes },
    { label: "kproxy", outcomes: new Map([...outcomes].filter(([, o]) => o.result !== "FAIL")) },
  ]);
  assert.match(table, /\| Services should fail & say why \| FAIL: timed out \| – \|/);
  assert.match(table, /kube-proxy: 1 passed, 1 failed, 1 skipped/);
  assert.match(table, /kproxy: 1 passed, 0 failed, 1 skipped/);
  assert.match(table, /Requires at least 3 nodes/);
});

Deno.test("site_config.ts fills the shipped ConfigMap's apiserver and pod CIDR and keeps the rest", async () => {
  const text = await Deno.readTextFile(
    new URL("../../scripts/deploy/configmap.yaml", import.meta.url),
  );
  const shipped = parseAllDocuments(text).map((d) => d.toJSON()).find((d) =>
    d?.kind === "ConfigMap"
  );
  const filled = siteConfigMap(shipped, {
    apiserver: "https://192.168.234.1:7443",
    clusterCIDR: "10.244.0.0/16",
    conntrackReadOnly: true,
  });
  const config = parse(filled.data["config.yaml"]);
  assert.equal(config.clusterCIDR, "10.244.0.0/16");
  assert.equal(config.conntrack.maxPerCore, 0);
  assert.equal(config.mode, parse(shipped.data["config.yaml"]).mode);
  const kubeconfigKey = Object.keys(filled.data).find((key) => /kubeconfig/i.test(key))!;
  const kubeconfig = parse(filled.data[kubeconfigKey]);
  assert.equal(kubeconfig.clusters[0].cluster.server, "https://192.168.234.1:7443");
});
