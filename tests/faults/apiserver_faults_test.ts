/**
 * Apiserver faults against the real nftables backend in a node namespace,
 * with the fake apiserver behind kproxy's KubeSource: unreachable at start,
 * a restart mid-run, repeated 410 Gone, 500s, a watch that stalls silently
 * and slow responses. Traffic from the client namespace to a service runs
 * the whole time and must never fail: the node keeps forwarding to the last
 * known endpoints while the apiserver misbehaves.
 *
 * @module
 */

import assert from "node:assert/strict";
import { KubeSource } from "../../lib/shell/source/kube.ts";
import { FakeApiServer, writeKubeconfig } from "../../scripts/testbed/fake_apiserver.ts";
import { answeringPods, TrafficLoop } from "../../scripts/testbed/traffic.ts";
import { canonicalTable } from "../../scripts/testbed/tables.ts";
import {
  createFaultTopology,
  faultsSkipReason,
  FaultyExecutor,
  LogCapture,
  type RunningKproxy,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { nodeObject, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import type { Pod, Topology } from "../../scripts/netns.ts";

const skipReason = await faultsSkipReason(["nft"]);

const WEB_IP = "10.96.0.10";

/** Waits until every request to the web service is answered by `pod`. */
async function converged(topology: Topology, pod: Pod, timeoutMs = 10_000): Promise<number> {
  return await waitFor(`web served by ${pod.name} only`, async () => {
    const { pods, failures } = await answeringPods(topology, WEB_IP, 80, 3);
    return failures.length === 0 && pods.length === 1 && pods[0] === pod.name;
  }, timeoutMs);
}

Deno.test({
  name: "main() with KubeSource keeps forwarding through apiserver faults and converges after each",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const logs = await LogCapture.install(1);
    const topology = await createFaultTopology("a");
    const [a1, a2, a3] = topology.localPods as [Pod, Pod, Pod];
    const server = await FakeApiServer.start();
    const kubeconfig = await writeKubeconfig(server);
    const setEndpoints = (pod: Pod) =>
      server.upsert("endpointslices", sliceObject("web", [pod.ipv4]));
    server.upsert("nodes", nodeObject());
    server.upsert("services", serviceObject({ name: "web", clusterIP: WEB_IP }));
    setEndpoints(a1);
    const newSource = () =>
      new KubeSource({
        kubeconfig,
        master: "",
        nodeName: "node-a",
        watchIdleTimeoutMs: 1500,
        backoff: { initialMs: 100, maxMs: 500 },
      });
    let kproxy: RunningKproxy | undefined;
    let traffic: TrafficLoop | undefined;
    const executor = new FaultyExecutor({ namespace: topology.node, timeoutMs: 10_000 });
    const nftLoads = () =>
      executor.loads.filter((load) => load.program === "nft" && !load.guardOnly).length;
    try {
      await t.step(
        "unreachable at start: earlier rules stay until the first complete list",
        async () => {
          const first = await startKproxy({ source: newSource(), executor });
          await converged(topology, a1);
          await first.stop();
          const table = await canonicalTable(topology.node);
          assert.ok(table?.chains["services"], "the first run left no table");

          traffic = TrafficLoop.start({ topology, targets: [{ ip: WEB_IP, port: 80 }] });
          await server.stop();
          setEndpoints(a2);
          const loadsBefore = nftLoads();
          kproxy = await startKproxy({ source: newSource(), executor });
          await waitFor(
            "/healthz 503 while never synced",
            async () => await kproxy!.healthz() === 503,
          );
          assert.equal(nftLoads(), loadsBefore, "kproxy loaded rules without a complete list");
          assert.deepEqual(await canonicalTable(topology.node), table, "the table changed");
          const { pods, failures } = await answeringPods(topology, WEB_IP, 80);
          assert.deepEqual({ pods, failures }, { pods: [a1.name], failures: [] });

          await server.restart();
          await converged(topology, a2);
          await waitFor("/healthz 200", async () => await kproxy!.healthz() === 200);
        },
      );

      await t.step("apiserver restart mid-run", async () => {
        await server.stop();
        setEndpoints(a3);
        await new Promise((resolve) => setTimeout(resolve, 1000));
        assert.deepEqual((await answeringPods(topology, WEB_IP, 80)).pods, [a2.name]);
        await server.restart();
        await converged(topology, a3);
      });

      await t.step(
        "repeated 410 Gone: each relist reveals the changes watches missed",
        async () => {
          for (const pod of [a1, a2, a3]) {
            server.silently(() => setEndpoints(pod));
            server.compact();
            server.dropWatches({ abrupt: true });
            await converged(topology, pod);
          }
          assert.ok(logs.matching(/410 Gone/).length >= 3, "no relist after 410 was logged");
        },
      );

      await t.step("500s on list and watch: retried with backoff", async () => {
        server.failNext(6, 500);
        server.dropWatches();
        setEndpoints(a1);
        await converged(topology, a1);
      });

      await t.step("a watch that stalls silently is re-established", async () => {
        server.stallWatches();
        setEndpoints(a2);
        // Within a few idle timeouts, long before the server would end the watch.
        await converged(topology, a2, 8_000);
        assert.ok(logs.matching(/sent nothing for/).length >= 1, "no idle re-watch was logged");
      });

      await t.step("slow responses", async () => {
        server.slowResponses(1200);
        server.dropWatches();
        setEndpoints(a3);
        await converged(topology, a3, 20_000);
        server.slowResponses(0);
      });

      await traffic?.stop();
      // The loop ran through every fault: each step lasts seconds and a round takes about one
      // second on a busy machine, so a handful of requests is the floor, whatever the load.
      assert.ok(traffic!.sent >= 6, `only ${traffic!.sent} requests were sent`);
      assert.deepEqual(traffic!.failures, [], "a request failed while the apiserver misbehaved");
    } finally {
      await traffic?.stop();
      server.slowResponses(0);
      await kproxy?.stop();
      await kproxy?.app.backend.cleanup().catch((error) => console.warn(`cleanup: ${error}`));
      await server.stop();
      await Deno.remove(kubeconfig);
      await topology.destroy();
    }
  },
});
