/**
 * Golden files of the iptables renderer, one per service kind and partial
 * sync, each also loaded by the real iptables-restore (nft and legacy) with
 * `--test` inside a throwaway network namespace.
 *
 * Update the golden files with:
 * `deno test --allow-all --ignore-env tests/golden/iptables_golden_test.ts -- --update`
 */

import assert from "node:assert/strict";
import { inputText, renderFull, renderFullSync } from "../../backends/iptables/render.ts";
import type { IptablesRenderOptions } from "../../backends/iptables/rules.ts";
import { renderPartialSync } from "../../backends/iptables/partial.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { GOLDEN_CASES, PARTIAL_CASES } from "./iptables/fixtures.ts";
import { nfacctRestoreInput, planNfacctNames } from "../../backends/iptables/counters.ts";
import { spawnCommand } from "../../lib/shell/exec.ts";
import { NetnsChecker, netnsSkipReason } from "../support/netns_check.ts";
import { programRuns } from "../support/programs.ts";

const GOLDEN_DIR = new URL("./iptables/", import.meta.url);
const UPDATE = Deno.args.includes("--update");
const VARIANTS = ["nft", "legacy"] as const;

interface Rendered {
  name: string;
  family: Plan["family"];
  /** Full script to load first (for partial scripts), then the script under test. */
  setup?: string;
  script: string;
}

function renderAll(): Rendered[] {
  const rendered: Rendered[] = [];
  for (const [name, plan] of Object.entries(GOLDEN_CASES)) {
    rendered.push({ name, family: plan.family, script: renderFull(plan).toString() });
  }
  const localhost: IptablesRenderOptions = { localhostNodePorts: true };
  rendered.push({
    name: "nodeport_localhost",
    family: "IPv4",
    script: renderFull(GOLDEN_CASES.nodeport!, localhost).toString(),
  });
  rendered.push({
    name: "masquerade_bit_0",
    family: "IPv4",
    script: renderFull(GOLDEN_CASES.nodeport!, { masqueradeBit: 0 }).toString(),
  });
  for (const [name, change] of Object.entries(PARTIAL_CASES)) {
    rendered.push({
      name,
      family: change.next.family,
      setup: renderFull(change.previous).toString(),
      script: inputText(renderPartialSync(change).commit),
    });
  }
  return rendered;
}

const RENDERED = renderAll();

Deno.test("renderFull()/renderPartialSync() match the golden files", async (t) => {
  for (const { name, script } of RENDERED) {
    await t.step(name, async () => {
      const file = new URL(`${name}.txt`, GOLDEN_DIR);
      if (UPDATE) await Deno.writeTextFile(file, script);
      assert.equal(script, await Deno.readTextFile(file));
    });
  }
});

const HAS_NFACCT = await programRuns("nfacct", ["version"]);
if (!HAS_NFACCT) {
  console.warn("iptables golden restore check: the Service counter cases ignored: nfacct is not installed");
}

const SKIP = await netnsSkipReason(
  VARIANTS.flatMap((v) => [`iptables-${v}-restore`, `ip6tables-${v}-restore`] as const),
);

Deno.test({
  name: "every rendered script passes iptables-restore --test (nft and legacy) in a netns",
  ignore: SKIP !== undefined,
  fn: async (t) => {
    const checker = await NetnsChecker.create("kp-ipt");
    try {
      // Rules name nfacct objects that must exist (the backend creates them first).
      if (HAS_NFACCT) {
        const counters = nfacctRestoreInput(planNfacctNames(GOLDEN_CASES.service_counters!));
        const nfacct = await spawnCommand({
          program: "ip",
          args: ["netns", "exec", checker.name, "nfacct", "restore"],
          stdin: counters,
        });
        assert.equal(nfacct.code, 0, nfacct.stderr);
      }
      for (const variant of VARIANTS) {
        for (const { name, family, setup, script } of RENDERED) {
          const needsNfacct = /-m nfacct /.test(script);
          await t.step({ name: `${variant}: ${name}`, ignore: needsNfacct && !HAS_NFACCT, fn: async () => {
            const restore = `${family === "IPv4" ? "iptables" : "ip6tables"}-${variant}-restore` as const;
            if (setup) {
              const loaded = await checker.apply(restore, setup);
              assert.equal(loaded.code, 0, `loading ${name} setup: ${loaded.stderr}`);
            }
            const tested = await checker.check(restore, script);
            assert.equal(tested.code, 0, `${restore} --test ${name}: ${tested.stderr}`);
          } });
        }
      }
      for (const variant of VARIANTS) {
        await t.step(`${variant}: full sync in chunks applies in order`, async () => {
          const plan = GOLDEN_CASES.etp_local!;
          const kernel = { nat: [], natTargets: new Set<string>(), filter: [] };
          const sync = renderFullSync(plan, { maxChainsPerChunk: 2, kernel });
          const inputs = [...sync.staging.map(String), inputText(sync.commit)];
          for (const [i, input] of inputs.entries()) {
            const applied = await checker.apply(`iptables-${variant}-restore`, input);
            assert.equal(applied.code, 0, `input ${i}: ${applied.stderr}`);
          }
        });
      }
    } finally {
      await checker.destroy();
    }
  },
});
