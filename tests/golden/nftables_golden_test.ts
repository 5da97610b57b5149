/**
 * Golden files of the nftables renderer: one full script per service kind and
 * one incremental update. Regenerate with `UPDATE_GOLDEN=1`. Every rendered
 * script is also checked by the real `nft` in a throwaway network namespace.
 */

import assert from "node:assert/strict";
import { renderFull, renderIncremental } from "../../backends/nftables/render.ts";
import { GOLDEN_PLANS, incrementalCase } from "./nftables/fixtures.ts";
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

const rendered = Object.entries(GOLDEN_PLANS).map(([name, plan]) => ({
  name,
  script: renderFull(plan, { generation: 1 }).toString(),
}));

Deno.test("renderFull() matches the golden file of each service kind", async (t) => {
  for (const { name, script } of rendered) {
    await t.step(name, () => compareGolden(name, script));
  }
});

const inc = incrementalCase();
const incrementalBase = renderFull(inc.previous, { generation: 1 }).toString();
const incrementalScript = renderIncremental(
  { plan: inc.next, previous: inc.previous, changed: inc.changed },
  { generation: 2 },
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
        assert.match(listing, /svc-[A-Z2-7]{8}-ns1\/new\/tcp\/http/);
        assert.doesNotMatch(listing, /ns1\/gone/);
        assert.match(listing, /dnat to 10\.180\.0\.4:8080/);
        // Replacing with a full script again works atomically over the loaded table.
        await ns.nft(["-f", "-"], renderFull(inc.next, { generation: 3 }).toString());
      });
    });
  },
});
