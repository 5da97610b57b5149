/**
 * Golden files of the nftables renderer: one full script per service kind and
 * one incremental update. Regenerate with `UPDATE_GOLDEN=1`. Every rendered
 * script is also checked by the real `nft` in a throwaway network namespace.
 */

import assert from "node:assert/strict";
import { renderFull } from "../../backends/nftables/render.ts";
import { parseCanaryGeneration } from "../../backends/nftables/skeleton.ts";
import { renderIncremental } from "../../backends/nftables/incremental.ts";
import type { ServicePortPlan } from "../../lib/core/plan.ts";
import {
  endpoint,
  GOLDEN_PLANS,
  incrementalCase,
  plan as planOf,
  servicePort,
  withCounters,
} from "./nftables/fixtures.ts";
import { nftUnavailable, withNftNamespace } from "./nftables/nft_check.ts";

const DIR = new URL("./nftables/", import.meta.url);
const update = Deno.env.get("UPDATE_GOLDEN") === "1";
const noNft = await nftUnavailable();
if (noNft !== undefined) console.warn(`nftables golden scripts not checked by nft: ${noNft}`);

async function compareGolden(name: string, actual: string): Promise<void> {
  const file = new URL(`${name}.nft`, DIR);
  if (update) {
    await Deno.writeTextFile(file, actual);
    return;
  }
  const expected = await Deno.readTextFile(file);
  assert.equal(actual, expected, `${name}.nft differs; run with UPDATE_GOLDEN=1 after reviewing`);
}

/** Two preset `dnat-E…` chains of each kind keep the golden files short (the default is 64). */
const PRESET = { presetSlotChains: 2 };

const rendered = Object.entries(GOLDEN_PLANS).map(([name, plan]) => ({
  name,
  script: renderFull(plan, { ...PRESET, generation: 1 }).toString(),
}));

Deno.test("renderFull() matches the golden file of each service kind", async (t) => {
  for (const { name, script } of rendered) {
    await t.step(name, () => compareGolden(name, script));
  }
});

const inc = incrementalCase();
const incrementalBase = renderFull(inc.previous, { ...PRESET, generation: 1 }).toString();
const incrementalScript = renderIncremental(
  { plan: inc.next, previous: inc.previous, changed: inc.changed },
  { ...PRESET, generation: 2 },
)!.toString();

Deno.test("renderIncremental() matches the golden incremental update", async () => {
  await compareGolden("incremental", incrementalScript);
});

Deno.test({
  name: "renderFull() and renderIncremental() scripts are accepted by nft",
  ignore: noNft !== undefined,
  fn: async (t) => {
    await withNftNamespace(async (ns) => {
      for (const { name, script } of rendered) {
        await t.step(name, async () => {
          await ns.nft(["-c", "-f", "-"], script);
        });
      }
      await t.step("incremental applied over the previous full script", async () => {
        await ns.nft(["-f", "-"], incrementalBase);
        await ns.nft(["-f", "-"], incrementalScript);
        const listing = (await ns.nft(["list", "table", "ip", "kproxy"])).stdout;
        assert.match(listing, /172\.30\.0\.13 \. tcp \. 80 : goto dnat-2-masq-nonlocal/);
        assert.match(listing, /172\.30\.0\.13 \. tcp \. 80 \. 1 : 10\.180\.0\.2 \. 8080/);
        assert.doesNotMatch(listing, /172\.30\.0\.12 /);
        assert.match(listing, /dnat to 10\.180\.0\.4:8080/);
        // Replacing with a full script again works atomically over the loaded table.
        await ns.nft(["-f", "-"], renderFull(inc.next, { generation: 3 }).toString());
        const canary = (await ns.nft(["list", "set", "ip", "kproxy", "canary"])).stdout;
        assert.equal(parseCanaryGeneration(canary), 3);
      });
    });
  },
});

for (const counters of [false, true]) {
Deno.test({
  name: `renderIncremental() sequences apply cleanly over real nft${counters ? " with counters" : ""}`,
  ignore: noNft !== undefined,
  fn: async (t) => {
    const plan = (services: ServicePortPlan[]) =>
      planOf(counters ? services.map(withCounters) : services, { counters });
    const base = servicePort("ns1", "seq", {
      affinityTimeoutSeconds: 60,
      nodePort: 30200,
      loadBalancerIPs: ["1.2.3.9"],
      sourceRanges: ["10.9.0.0/16"],
    });
    const other = servicePort("ns1", "other", { clusterIPs: ["172.30.0.99"] });
    const steps: [string, ServicePortPlan | undefined][] = [
      ["affinity timeout changed", { ...base, affinityTimeoutSeconds: 120 }],
      ["endpoint removed from an affinity service", {
        ...base,
        affinityTimeoutSeconds: 120,
        internal: { ...base.internal, endpoints: [endpoint("10.180.0.1")] },
        external: { ...base.external, endpoints: [endpoint("10.180.0.1")] },
      }],
      ["affinity and source ranges removed", { ...base, affinityTimeoutSeconds: 0, sourceRanges: [] }],
      ["no endpoints any more", {
        ...base,
        internal: { endpoints: [], whenEmpty: "reject", reason: "" },
        external: { endpoints: [], whenEmpty: "reject", reason: "" },
      }],
      ["endpoints back, Local policy", { ...base, externalLocal: true }],
      ["service removed", undefined],
      ["service re-added", base],
    ];
    await withNftNamespace(async (ns) => {
      let previous = plan([base, other]);
      await ns.nft(["-f", "-"], renderFull(previous, { generation: 1 }).toString());
      let generation = 1;
      for (const [name, next] of steps) {
        await t.step(name, async () => {
          const nextPlan = plan(next === undefined ? [other] : [next, other]);
          const tx = renderIncremental({ plan: nextPlan, previous, changed: new Set([base.id]) }, {
            generation: ++generation,
          })!;
          assert.equal(tx.error, undefined);
          await ns.nft(["-f", "-"], tx.toString());
          previous = nextPlan;
        });
      }
      const listing = (await ns.nft(["list", "table", "ip", "kproxy"])).stdout;
      const expected = renderFull(previous).toString();
      for (const name of ["svc-", "ext-", "aff-"]) {
        const inKernel = new Set(listing.match(new RegExp(`\\b${name}[^\\s,:]+`, "g")));
        const inFull = new Set(expected.match(new RegExp(`\\b${name}[^\\s,:]+`, "g")));
        assert.deepEqual([...inKernel].sort(), [...inFull].sort(), `${name} objects match a full render`);
      }
      if (counters) {
        // Both service ports have endpoints again: each cluster IP key counts its connections.
        for (const ip of ["172.30.0.10", "172.30.0.99"]) {
          assert.match(listing, new RegExp(`${ip.replaceAll(".", "\\.")} \\. tcp \\. 80 counter packets 0`));
        }
      } else {
        assert.doesNotMatch(listing, /counter/);
      }
    });
  },
});
}
