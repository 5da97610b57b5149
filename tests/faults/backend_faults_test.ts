/**
 * Backend faults in a real node namespace: the rule loader (`nft -f`,
 * `iptables-restore`) exits non-zero, hangs past the executor's timeout, or
 * is missing. The previous rules must stay and carry traffic, /healthz must
 * turn 503 after its timeout, `kproxy_sync_failures_total` must count the
 * failures, and the first sync after the fault must be full and repair
 * everything.
 *
 * @module
 */

import assert from "node:assert/strict";
import { assertServedBy } from "../../scripts/testbed/traffic.ts";
import {
  createFaultTopology,
  type FaultKind,
  faultsSkipReason,
  FaultyExecutor,
  LogCapture,
  ManualSource,
  sample,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { nodeObject, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import type { Topology } from "../../scripts/netns.ts";

const skipReason = await faultsSkipReason(["nft", "iptables-restore"]);

const WEB_IP = "10.96.0.10";

interface Scenario {
  mode: "nftables" | "iptables";
  kind: FaultKind;
}

const SCENARIOS: Scenario[] = [
  { mode: "nftables", kind: "exit" },
  { mode: "nftables", kind: "hang" },
  { mode: "nftables", kind: "missing" },
  { mode: "iptables", kind: "exit" },
  { mode: "iptables", kind: "hang" },
];

async function faultWhileRunning(topology: Topology, scenario: Scenario): Promise<void> {
  const [a1, a2, a3] = topology.localPods;
  const slice = (pods: typeof a1[]) => sliceObject("web", pods.map((pod) => pod!.ipv4));
  const source = ManualSource.listed([
    nodeObject(),
    serviceObject({ name: "web", clusterIP: WEB_IP }),
    slice([a1, a2]),
  ]);
  const executor = new FaultyExecutor({ namespace: topology.node, timeoutMs: 1500 });
  const kproxy = await startKproxy({
    source,
    executor,
    args: [`--proxy-mode=${scenario.mode}`, "--iptables-sync-period=1s"],
  });
  const failures = `kproxy_sync_failures_total{mode="${scenario.mode}"}`;
  const fullSyncs = `kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"}`;
  try {
    await waitFor("the initial sync", () => kproxy.app.proxier.lastSynced !== undefined);
    await assertServedBy(topology, WEB_IP, 80, [a1!, a2!]);
    assert.equal(await kproxy.healthz(), 200);
    const before = await kproxy.metricsText();

    executor.arm(scenario.kind);
    source.upsert(slice([a3]));
    await waitFor("a faulted load", () => executor.faulted >= 1, 5_000);
    await assertServedBy(topology, WEB_IP, 80, [a1!, a2!]);
    const unhealthyAfter = await waitFor(
      "/healthz 503",
      async () => await kproxy.healthz() === 503,
    );
    assert.ok(unhealthyAfter < 4_000, `/healthz turned 503 only after ${unhealthyAfter} ms`);
    await assertServedBy(topology, WEB_IP, 80, [a1!, a2!]);
    let during = "";
    await waitFor("the failure counted", async () => {
      during = await kproxy.metricsText();
      return sample(during, failures) >= sample(before, failures) + 1;
    });
    await assertServedBy(topology, WEB_IP, 80, [a1!, a2!]);

    executor.disarm();
    await waitFor("/healthz 200 again", async () => await kproxy.healthz() === 200);
    await assertServedBy(topology, WEB_IP, 80, [a3!]);
    const after = await kproxy.metricsText();
    assert.ok(sample(after, fullSyncs) > sample(during, fullSyncs), "the repair was not full");
  } finally {
    executor.disarm();
    await kproxy.stop();
    await kproxy.app.backend.cleanup().catch((error) => console.warn(`cleanup: ${error}`));
  }
}

Deno.test({
  name: "main() keeps the previous rules through backend faults and repairs them in full",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    await LogCapture.install(0);
    const topology = await createFaultTopology("b");
    try {
      for (const scenario of SCENARIOS) {
        await t.step(`${scenario.mode}: loader ${scenario.kind}`, async () => {
          await faultWhileRunning(topology, scenario);
        });
      }
    } finally {
      await topology.destroy();
    }
  },
});

Deno.test({
  name: "main() with nft missing from the start turns /healthz 503, then converges once it works",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await LogCapture.install(0);
    const topology = await createFaultTopology("m");
    const [a1] = topology.localPods;
    const source = ManualSource.listed([
      nodeObject(),
      serviceObject({ name: "web", clusterIP: WEB_IP }),
      sliceObject("web", [a1!.ipv4]),
    ]);
    const executor = new FaultyExecutor({ namespace: topology.node, timeoutMs: 1500 });
    executor.arm("missing", { program: "nft" });
    const kproxy = await startKproxy({ source, executor });
    try {
      await waitFor("/healthz 503", async () => await kproxy.healthz() === 503, 5_000);
      assert.equal(kproxy.app.proxier.lastSynced, undefined);
      const text = await kproxy.metricsText();
      assert.ok(sample(text, `kproxy_sync_failures_total{mode="nftables"}`) >= 1);
      executor.disarm();
      await waitFor("/healthz 200", async () => await kproxy.healthz() === 200, 5_000);
      await assertServedBy(topology, WEB_IP, 80, [a1!]);
    } finally {
      executor.disarm();
      await kproxy.stop();
      await kproxy.app.backend.cleanup().catch((error) => console.warn(`cleanup: ${error}`));
      await topology.destroy();
    }
  },
});
