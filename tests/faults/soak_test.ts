/**
 * The CI version of the churn soak: `scripts/soak.ts --duration=45s` in its
 * own process (so its RSS is kproxy's and the soak's alone), which must
 * exit 0 with every check of its report holding.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  canonicalTable,
  createNamespace,
  deleteNamespace,
  diffTables,
  loadFreshRender,
} from "../../scripts/testbed/tables.ts";
import {
  createFaultTopology,
  faultsSkipReason,
  FaultyExecutor,
  LogCapture,
  ManualSource,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { nodeObject, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import { type Pod, Topology } from "../../scripts/netns.ts";

const skipReason = await faultsSkipReason(["nft"]);

const SOAK = new URL("../../scripts/soak.ts", import.meta.url).pathname;

Deno.test({
  name:
    "scripts/soak.ts --duration=45s: tables equal a fresh render, no stable request fails, flat memory",
  ignore: skipReason !== undefined,
  async fn() {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-all",
        "--v8-flags=--expose-gc",
        SOAK,
        "--duration=45s",
        "--seed=11",
      ],
      env: { RUST_BACKTRACE: "0" },
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    // SIGINT first: the soak's topology deletes its namespaces on SIGINT.
    const interrupt = setTimeout(() => child.kill("SIGINT"), 150_000);
    const kill = setTimeout(() => child.kill("SIGKILL"), 160_000);
    const output = await child.output().finally(() => {
      clearTimeout(interrupt);
      clearTimeout(kill);
    });
    const stdout = new TextDecoder().decode(output.stdout);
    const stderr = new TextDecoder().decode(output.stderr);
    let report: Record<string, any>;
    try {
      report = JSON.parse(stdout);
    } catch {
      throw new Error(`the soak printed no report (exit ${output.code}):\n${stderr.slice(-4000)}`);
    }
    assert.deepEqual(report.problems, [], JSON.stringify(report, null, 2));
    assert.equal(output.code, 0);
    assert.ok(report.requests > 100, `only ${report.requests} requests`);
    assert.ok(report.churnOperations > 100, `only ${report.churnOperations} churn operations`);
    assert.deepEqual(report.tableMismatches, []);
    assert.equal(report.planMatchesApiserver, true);
    assert.ok(report.memory.growth <= 0.2, `RSS grew ${report.memory.growth}`);
    assert.equal(report.heap.afterGC, true);
    assert.ok(report.heap.growth <= 0.2, `the heap grew ${report.heap.growth}`);
  },
});

interface Transition {
  name: string;
  change(source: ManualSource, pods: Pod[]): void;
}

const WEB = { name: "web", clusterIP: "10.96.0.10" };

const TRANSITIONS: Transition[] = [
  {
    name: "a ClusterIP service with one endpoint",
    change: (source, [a1]) => {
      source.upsert(serviceObject(WEB));
      source.upsert(sliceObject("web", [a1!.ipv4]));
    },
  },
  {
    name: "ClusterIP to NodePort",
    change: (source) => source.upsert(serviceObject({ ...WEB, type: "NodePort", nodePort: 30001 })),
  },
  {
    name: "port 80 to 81",
    change: (source) =>
      source.upsert(serviceObject({ ...WEB, type: "NodePort", nodePort: 30001, port: 81 })),
  },
  {
    name: "NodePort back to ClusterIP",
    change: (source) => source.upsert(serviceObject({ ...WEB, port: 81 })),
  },
  {
    name: "no endpoints",
    change: (source) => source.upsert(sliceObject("web", [])),
  },
  {
    name: "two endpoints",
    change: (source, [a1, a2]) => source.upsert(sliceObject("web", [a1!.ipv4, a2!.ipv4])),
  },
  {
    name: "an externalIP added",
    change: (source) =>
      source.upsert(serviceObject({ ...WEB, port: 81, externalIPs: ["203.0.113.5"] })),
  },
  {
    name: "the service deleted",
    change: (source) => source.delete(serviceObject(WEB)),
  },
];

Deno.test({
  name: "main() partial nftables syncs leave exactly what a full render makes, hairpin included",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: (t) => checkTransitions(t, true),
});

async function checkTransitions(t: Deno.TestContext, strictHairpin: boolean): Promise<void> {
  await LogCapture.install(0);
  const topology = await createFaultTopology("t", { localPods: 2 });
  const scratch = `kp-f-t${Topology.randomTag()}-scratch`;
  const source = ManualSource.listed([nodeObject()]);
  const kproxy = await startKproxy({
    source,
    executor: new FaultyExecutor({ namespace: topology.node }),
  });
  try {
    await createNamespace(scratch);
    await waitFor("the initial sync", () => kproxy.app.proxier.lastSynced !== undefined);
    for (const transition of TRANSITIONS) {
      await t.step(transition.name, async () => {
        const before = kproxy.app.proxier.lastSynced;
        transition.change(source, topology.localPods);
        await waitFor("a sync", () => kproxy.app.proxier.lastSynced !== before);
        await loadFreshRender(scratch, kproxy.app.proxier.lastSynced!, kproxy.app.config);
        for (const family of ["ip", "ip6"]) {
          const kernel = await canonicalTable(topology.node, family);
          const expected = await canonicalTable(scratch, family);
          const differences = diffTables(kernel, expected, {
            tolerateExtraIn: strictHairpin ? [] : ["hairpin"],
          });
          assert.deepEqual(differences, [], `${family} table`);
        }
      });
    }
  } finally {
    await kproxy.stop();
    await deleteNamespace(scratch);
    await topology.destroy();
  }
}
