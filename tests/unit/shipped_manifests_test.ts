/**
 * The manifests shipped in scripts/manifests must be accepted by a real
 * apiserver (`kubectl apply --server-side`), except the one case the API no
 * longer has: spec.topologyKeys, documented next to it.
 */

import assert from "node:assert/strict";
import { loadAll } from "js-yaml";
import { apiProblems } from "../support/api_shapes.ts";

const MANIFESTS = new URL("../../scripts/manifests/", import.meta.url);

/** Problems a real apiserver would report, and why each is there. */
const DOCUMENTED: Readonly<Record<string, string>> = {
  "95-topology.yaml: Service default/topology-keys: unknown field spec.topologyKeys":
    "removed from the API: only a manifests directory or an old apiserver can carry it",
};

async function shippedDocuments(): Promise<{ file: string; document: unknown }[]> {
  const files = [...Deno.readDirSync(MANIFESTS)]
    .map((entry) => entry.name)
    .filter((name) => /\.(ya?ml|json)$/.test(name))
    .sort();
  const documents = [];
  for (const file of files) {
    const text = await Deno.readTextFile(new URL(file, MANIFESTS));
    for (const document of loadAll(text)) documents.push({ file, document });
  }
  return documents;
}

Deno.test("shipped manifests use only the API's fields and no duplicate list-map keys", async () => {
  const problems = (await shippedDocuments()).flatMap(({ file, document }) =>
    apiProblems(document).map((problem) => `${file}: ${problem}`)
  );
  assert.deepEqual(problems, Object.keys(DOCUMENTED));
});

Deno.test("shipped manifests say where the API would refuse them", async () => {
  const readme = await Deno.readTextFile(new URL("README.md", MANIFESTS));
  const topology = await Deno.readTextFile(new URL("95-topology.yaml", MANIFESTS));
  for (const text of [readme, topology]) {
    assert.match(text, /topologyKeys[^\n]*\n?[^\n]*removed from the API/);
  }
});

Deno.test("apiProblems() finds unknown fields and duplicate keys", () => {
  const node = {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "n" },
    spec: { podCIDRs: ["10.0.0.0/24", "10.0.0.0/24"] },
    status: {
      addresses: [
        { type: "InternalIP", address: "10.0.0.1" },
        { type: "InternalIP", address: "fd00::1" },
      ],
    },
  };
  const service = {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: "s", namespace: "d", colour: "red" },
    spec: { ports: [{ port: 53, protocol: "TCP" }, { port: 53 }, { port: 53, protocol: "UDP" }] },
  };
  assert.deepEqual(apiProblems({ kind: "List", apiVersion: "v1", items: [node, service] }), [
    'Node n: spec.podCIDRs: duplicate entries for key ["10.0.0.0/24"]',
    'Node n: status.addresses: duplicate entries for key [type="InternalIP"]',
    "Service d/s: unknown field metadata.colour",
    'Service d/s: spec.ports: duplicate entries for key [port=53,protocol="TCP"]',
  ]);
  assert.deepEqual(
    apiProblems({ apiVersion: "v2", kind: "ServiceCIDR", metadata: { name: "x" } }),
    [
      "ServiceCIDR x: apiVersion v2 is not networking.k8s.io/v1",
    ],
  );
});
