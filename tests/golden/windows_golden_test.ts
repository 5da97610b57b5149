import { deepStrictEqual as assertEquals, ok } from "node:assert/strict";
import { diffHns } from "../../backends/windows/applier.ts";
import { renderWindows, type WindowsRenderOptions } from "../../backends/windows/render.ts";
import { PROLOGUE, renderListScript, renderSyncScript } from "../../backends/windows/script.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { endpoint, planOf, SCENARIOS, servicePort } from "./ipvs/plans.ts";

const GOLDEN_DIR = new URL("./windows/", import.meta.url);
// Regenerate with: deno test --allow-all --ignore-env tests/golden/windows_golden_test.ts -- --update
const UPDATE = Deno.args.includes("--update");

async function assertGolden(name: string, actual: string): Promise<void> {
  const url = new URL(name, GOLDEN_DIR);
  if (UPDATE) {
    await Deno.mkdir(GOLDEN_DIR, { recursive: true });
    await Deno.writeTextFile(url, actual);
    return;
  }
  assertEquals(actual, await Deno.readTextFile(url), `golden file ${name} differs`);
}

/** The script creating everything for a plan from scratch, without the constant prologue. */
function createScript(plan: Plan, options: WindowsRenderOptions = {}): string {
  const state = renderWindows(plan, options);
  const script = renderSyncScript(
    diffHns({ loadBalancers: new Set(), endpoints: new Set() }, state),
    { networkName: "cbr0" },
  );
  ok(script.startsWith(PROLOGUE));
  const notes = state.unsupported.map((u) => `# unsupported: ${u.servicePortId}: ${u.reason}\n`);
  return notes.join("") + script.slice(PROLOGUE.length);
}

Deno.test("PROLOGUE matches golden file", async () => {
  await assertGolden("prologue.ps1", PROLOGUE);
  await assertGolden("list.ps1", renderListScript("cbr0").slice(PROLOGUE.length));
});

for (const name of Object.keys(SCENARIOS)) {
  Deno.test(`renderSyncScript() matches golden file for ${name}`, async () => {
    await assertGolden(`${name}.ps1`, createScript(SCENARIOS[name]!));
  });
}

const dsrPlan = planOf([
  servicePort({
    nodePort: 30080,
    loadBalancerIPs: ["203.0.113.10"],
    externalLocal: true,
    external: {
      endpoints: [endpoint("10.244.1.5", 8080, true)],
      whenEmpty: "drop",
      reason: "local endpoints only",
    },
  }),
]);

Deno.test("renderSyncScript() matches golden file for DSR off and on", async () => {
  await assertGolden("dsr-off.ps1", createScript(dsrPlan, { dsr: false }));
  await assertGolden("dsr-on.ps1", createScript(dsrPlan, { dsr: true }));
});

Deno.test("renderSyncScript() matches golden file for an overlay source VIP", async () => {
  await assertGolden(
    "overlay-source-vip.ps1",
    createScript(SCENARIOS.nodeport!, {
      sourceVip: "10.244.1.2",
      nodeIP: "10.201.0.1",
      network: {
        type: "Overlay",
        remoteSubnets: [{ destinationPrefix: "10.244.2.0/24", providerAddress: "192.168.1.12" }],
      },
    }),
  );
});
