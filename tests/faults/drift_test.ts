/**
 * Drift: another tool deletes kproxy's nftables table, or flushes or edits
 * one of its skeleton chains, behind its back. With a 1 s sync period kproxy
 * must repair it within about one period, log the drift once, and count it in
 * `kproxy_drift_repairs_total`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { assertServedBy } from "../../scripts/testbed/traffic.ts";
import { canonicalTable, nftIn } from "../../scripts/testbed/tables.ts";
import {
  createFaultTopology,
  faultsSkipReason,
  FaultyExecutor,
  LogCapture,
  ManualSource,
  type RunningKproxy,
  sample,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { nodeObject, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import type { Topology } from "../../scripts/netns.ts";

const skipReason = await faultsSkipReason(["nft"]);

const WEB_IP = "10.96.0.10";
const DRIFT_LOG = /drifted from what was applied/;
const REPAIRS = `kproxy_drift_repairs_total{mode="nftables"}`;

interface DriftCase {
  name: string;
  /** Breaks the table in the node namespace. */
  tamper(topology: Topology): Promise<void>;
  /** Why the case cannot pass yet, or undefined. */
  pending?: string;
}

/** Deletes the first rule of `chain` that mentions `text`. */
async function deleteRule(topology: Topology, chain: string, text: string): Promise<void> {
  const listing = await nftIn(topology.node, ["-a", "list", "chain", "ip", "kproxy", chain]);
  const line = listing?.split("\n").find((l) => l.includes(text) && /# handle \d+/.test(l));
  const handle = line?.match(/# handle (\d+)/)?.[1];
  assert.ok(handle, `no rule with "${text}" in chain ${chain}:\n${listing}`);
  const deleted = await nftIn(topology.node, [
    "delete",
    "rule",
    "ip",
    "kproxy",
    chain,
    "handle",
    handle,
  ]);
  assert.notEqual(deleted, undefined, "nft delete rule failed");
}

const CASES: DriftCase[] = [
  {
    name: "nft delete table ip kproxy",
    tamper: async (topology) => {
      assert.notEqual(await nftIn(topology.node, ["delete", "table", "ip", "kproxy"]), undefined);
    },
  },
  {
    name: "nft flush ruleset",
    tamper: async (topology) => {
      assert.notEqual(await nftIn(topology.node, ["flush", "ruleset"]), undefined);
    },
  },
  {
    name: "one rule of the service dispatch deleted",
    tamper: (topology) => deleteRule(topology, "services", "vmap"),
  },
  {
    name: "a masquerading rule replaced",
    tamper: async (topology) => {
      const listing = await nftIn(topology.node, [
        "-a",
        "list",
        "chain",
        "ip",
        "kproxy",
        "masquerading",
      ]);
      const handle = listing?.match(/masquerade fully-random # handle (\d+)\n\s*\}/)?.[1];
      assert.ok(handle, `no final masquerade rule:\n${listing}`);
      const replaced = await nftIn(topology.node, [
        "replace",
        "rule",
        "ip",
        "kproxy",
        "masquerading",
        "handle",
        handle,
        "accept",
      ]);
      assert.notEqual(replaced, undefined, "nft replace rule failed");
    },
  },
  {
    name: "the nat prerouting chain flushed",
    tamper: async (topology) => {
      const chain = await firstBaseChain(topology, "prerouting");
      assert.notEqual(
        await nftIn(topology.node, ["flush", "chain", "ip", "kproxy", chain]),
        undefined,
      );
    },
  },
];

/** The name of kproxy's nat base chain on `hook`. */
async function firstBaseChain(topology: Topology, hook: string): Promise<string> {
  const table = await canonicalTable(topology.node);
  const name = Object.entries(table?.chains ?? {}).find(([, chain]) =>
    chain.base?.startsWith(`nat ${hook} `)
  )?.[0];
  assert.ok(name, `no nat ${hook} chain`);
  return name;
}

for (const driftCase of CASES) {
  Deno.test({
    name: `main() repairs nftables drift within one syncPeriod, logged once: ${driftCase.name}`,
    ignore: skipReason !== undefined || driftCase.pending !== undefined,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      if (driftCase.pending) console.warn(`pending: ${driftCase.pending}`);
      const logs = await LogCapture.install(0);
      const topology = await createFaultTopology("d");
      const [a1, a2] = topology.localPods;
      const source = ManualSource.listed([
        nodeObject(),
        serviceObject({ name: "web", clusterIP: WEB_IP }),
        sliceObject("web", [a1!.ipv4, a2!.ipv4]),
      ]);
      let kproxy: RunningKproxy | undefined;
      try {
        const executor = new FaultyExecutor({ namespace: topology.node });
        kproxy = await startKproxy({
          source,
          executor,
          // The test's 1 s sync period is 30 times shorter than the default:
          // let the skeleton listing take its share of that.
          backend: createNftablesBackend({
            executor,
            config: defaultConfig("node-a"),
            driftCheckBudget: 0.5,
          }),
        });
        await waitFor("the initial sync", () => kproxy!.app.proxier.lastSynced !== undefined);
        await assertServedBy(topology, WEB_IP, 80, [a1!, a2!]);
        // The first drift check after a full sync takes the skeleton's baseline.
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        const clean = await canonicalTable(topology.node);
        const repairsBefore = sample(await kproxy.metricsText(), REPAIRS);

        await driftCase.tamper(topology);
        assert.notDeepEqual(
          await canonicalTable(topology.node),
          clean,
          "tampering changed nothing",
        );
        const repairedAfter = await waitFor(
          "the table repaired",
          async () => JSON.stringify(await canonicalTable(topology.node)) === JSON.stringify(clean),
          5_000,
        );
        assert.ok(repairedAfter <= 2_500, `repaired after ${repairedAfter} ms, syncPeriod is 1 s`);
        await assertServedBy(topology, WEB_IP, 80, [a1!, a2!]);
        assert.equal(sample(await kproxy.metricsText(), REPAIRS), repairsBefore + 1);

        await new Promise((resolve) => setTimeout(resolve, 2_500));
        assert.equal(logs.matching(DRIFT_LOG).length, 1, logs.lines.join("\n"));
        assert.equal(sample(await kproxy.metricsText(), REPAIRS), repairsBefore + 1);
      } finally {
        await kproxy?.stop();
        await kproxy?.app.backend.cleanup().catch((error) => console.warn(`cleanup: ${error}`));
        await topology.destroy();
      }
    },
  });
}
