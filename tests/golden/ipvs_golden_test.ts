import { deepStrictEqual as assertEquals } from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";
import { renderDummyBatch, renderIpsetRestoreFull, renderIpvs, renderIpvsadmRestore } from "../../backends/ipvs/render.ts";
import { IPVS_SCHEDULERS } from "../../lib/config/types.ts";
import { renderIpvsIptables } from "../../backends/ipvs/iptables.ts";
import { spawnCommand } from "../../lib/shell/exec.ts";
import { planOf, SCENARIOS, servicePort } from "./ipvs/plans.ts";

const GOLDEN_DIR = new URL("./ipvs/", import.meta.url);
// Regenerate with: deno test --allow-all --ignore-env tests/golden/ipvs_golden_test.ts -- --update
const UPDATE = Deno.args.includes("--update");

async function assertGolden(name: string, actual: string): Promise<void> {
  const url = new URL(name, GOLDEN_DIR);
  if (UPDATE) {
    await Deno.writeTextFile(url, actual);
    return;
  }
  assertEquals(actual, await Deno.readTextFile(url), `golden file ${name} differs`);
}

function renderAll(name: string): string {
  const plan = SCENARIOS[name]!;
  const state = renderIpvs(plan, { scheduler: "rr" });
  return [
    "# ipvsadm --restore",
    renderIpvsadmRestore(state),
    "# ip -batch -",
    renderDummyBatch(plan.family, { add: state.dummyAddresses, remove: [] }),
    "# ipset restore -exist",
    renderIpsetRestoreFull(state),
    "# iptables-restore --noflush",
    renderIpvsIptables(plan, { masqueradeBit: 14 }),
  ].join("\n");
}

for (const name of Object.keys(SCENARIOS)) {
  Deno.test(`renderIpvs() matches golden file for ${name}`, async () => {
    await assertGolden(`${name}.txt`, renderAll(name));
  });
}

for (const scheduler of IPVS_SCHEDULERS) {
  Deno.test(`renderIpvs() matches golden file for scheduler ${scheduler}`, async () => {
    const plan = planOf([servicePort({ nodePort: 30080, affinityTimeoutSeconds: 600 })]);
    await assertGolden(
      `scheduler-${scheduler}.txt`,
      renderIpvsadmRestore(renderIpvs(plan, { scheduler })),
    );
  });
}

Deno.test("renderIpvs() sets mh-port and never mh-fallback for mh", () => {
  const text = renderIpvsadmRestore(renderIpvs(SCENARIOS.clusterip!, { scheduler: "mh" }));
  assertEquals(text.includes("-s mh -b mh-port"), true);
  assertEquals(text.includes("mh-fallback"), false);
});

Deno.test("renderIpvs() is deterministic regardless of endpoint order", () => {
  const plan = SCENARIOS["loadbalancer-source-ranges"]!;
  const reversed = structuredClone(plan);
  for (const service of reversed.services) service.external.endpoints.reverse();
  assertEquals(isDeepStrictEqual(renderIpvs(plan), renderIpvs(reversed)), true);
});

// ---- Kernel validation inside throwaway network namespaces. ----

async function run(args: string[], stdin?: string): Promise<{ code: number; out: string }> {
  const { code, stdout, stderr } = await spawnCommand({ program: args[0]!, args: args.slice(1), stdin });
  return { code, out: stdout + stderr };
}

async function canUseNetns(): Promise<string | undefined> {
  try {
    if (Deno.uid() !== 0) return "not root";
    for (const tool of ["ip", "ipset", "iptables-restore", "ip6tables-restore"]) {
      const { code } = await run(["sh", "-c", `command -v ${tool}`]);
      if (code !== 0) return `${tool} is not installed`;
    }
    return undefined;
  } catch (error) {
    return String(error);
  }
}

async function canUseDummy(): Promise<string | undefined> {
  const ns = `kp-ipvs-${crypto.randomUUID().slice(0, 8)}`;
  try {
    if ((await run(["ip", "netns", "add", ns])).code !== 0) return "cannot create a netns";
    const link = await run(["ip", "netns", "exec", ns, "ip", "link", "add", "d0", "type", "dummy"]);
    return link.code === 0 ? undefined : `no dummy interfaces in this kernel: ${link.out.trim()}`;
  } finally {
    await run(["ip", "netns", "del", ns]);
  }
}

const skipReason = await canUseNetns();
if (skipReason) console.log(`ipvs kernel validation skipped: ${skipReason}`);
const dummySkipReason = skipReason ?? await canUseDummy();
if (dummySkipReason) console.log(`kube-ipvs0 batch validation skipped: ${dummySkipReason}`);

Deno.test({
  name: "renderIpvs() ipsets and iptables rules load into the real ipset and iptables-restore",
  ignore: skipReason !== undefined,
  fn: async (t) => {
    const ns = `kp-ipvs-${crypto.randomUUID().slice(0, 8)}`;
    const created = await run(["ip", "netns", "add", ns]);
    assertEquals(created.code, 0, created.out);
    try {
      for (const name of Object.keys(SCENARIOS)) {
        await t.step(name, async () => {
          const plan = SCENARIOS[name]!;
          const state = renderIpvs(plan);
          const exec = ["ip", "netns", "exec", ns];
          const ipset = await run([...exec, "ipset", "restore", "-exist"], renderIpsetRestoreFull(state));
          assertEquals(ipset.code, 0, ipset.out);
          // A second full restore over existing sets must succeed too (resync).
          const again = await run([...exec, "ipset", "restore", "-exist"], renderIpsetRestoreFull(state));
          assertEquals(again.code, 0, again.out);
          const saved = await run([...exec, "ipset", "save"]);
          for (const set of state.ipsets) {
            for (const entry of set.entries) {
              // ipset prints host networks without their /32 or /128.
              const shown = entry.replace(/\/(32|128)$/, "");
              assertEquals(saved.out.includes(`add ${set.name} ${shown}`), true, `${set.name} ${entry}`);
            }
          }
          const restore = plan.family === "IPv4" ? "iptables-restore" : "ip6tables-restore";
          const rules = renderIpvsIptables(plan);
          const tested = await run([...exec, restore, "--test", "--noflush"], rules);
          assertEquals(tested.code, 0, tested.out);
          const applied = await run([...exec, restore, "--noflush"], rules);
          assertEquals(applied.code, 0, applied.out);
        });
      }
    } finally {
      await run(["ip", "netns", "del", ns]);
    }
  },
});

Deno.test({
  name: "renderDummyBatch() output is accepted by ip -batch on a real dummy interface",
  ignore: dummySkipReason !== undefined,
  fn: async () => {
    const ns = `kp-ipvs-${crypto.randomUUID().slice(0, 8)}`;
    const created = await run(["ip", "netns", "add", ns]);
    assertEquals(created.code, 0, created.out);
    try {
      const exec = ["ip", "netns", "exec", ns];
      const link = await run([...exec, "ip", "link", "add", "kube-ipvs0", "type", "dummy"]);
      assertEquals(link.code, 0, link.out);
      const add = renderDummyBatch("IPv4", { add: ["10.96.0.10", "203.0.113.10"], remove: [] });
      assertEquals((await run([...exec, "ip", "-batch", "-"], add)).code, 0);
      assertEquals((await run([...exec, "ip", "-batch", "-"], add)).code, 0, "replace is idempotent");
      const del = renderDummyBatch("IPv4", { add: [], remove: ["203.0.113.10"] });
      assertEquals((await run([...exec, "ip", "-batch", "-"], del)).code, 0);
      const shown = await run([...exec, "ip", "-o", "address", "show", "dev", "kube-ipvs0"]);
      assertEquals(shown.out.includes("10.96.0.10/32"), true);
      assertEquals(shown.out.includes("203.0.113.10"), false);
    } finally {
      await run(["ip", "netns", "del", ns]);
    }
  },
});
