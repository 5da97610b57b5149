/**
 * Security defaults proven with real traffic in namespaces: node ports are
 * not reachable on localhost (CVE-2020-8558), externalIPs outside
 * `--external-ip-allowed-cidrs` are refused (CVE-2020-8554), and metrics
 * listen on localhost only by default. Conntrack-invalid drops are proven in
 * `tests/kernel/cases.ts`; permission confinement in
 * `tests/e2e/confinement_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ADDRESSES, type Pod } from "../../scripts/netns.ts";
import { answeringPods, assertServedBy, httpStatus } from "../../scripts/testbed/traffic.ts";
import {
  createFaultTopology,
  faultsSkipReason,
  FaultyExecutor,
  KproxyProcess,
  LogCapture,
  ManualSource,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import {
  manifestText,
  nodeObject,
  serviceObject,
  sliceObject,
} from "../../scripts/testbed/objects.ts";

const skipReason = await faultsSkipReason(["nft", "curl"]);

const ALLOWED_EXTERNAL = "203.0.113.10";
const REFUSED_EXTERNAL = "198.51.100.10";

Deno.test({
  name:
    "main() serves node ports on the node address but not on localhost, and only allowed externalIPs",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await LogCapture.install(0);
    const topology = await createFaultTopology("s", { localPods: 1 });
    const [a1] = topology.localPods as [Pod];
    const source = ManualSource.listed([
      nodeObject(),
      serviceObject({ name: "np", clusterIP: "10.96.0.20", type: "NodePort", nodePort: 30080 }),
      sliceObject("np", [a1.ipv4]),
      serviceObject({
        name: "ext",
        clusterIP: "10.96.0.30",
        externalIPs: [ALLOWED_EXTERNAL, REFUSED_EXTERNAL],
      }),
      sliceObject("ext", [a1.ipv4]),
    ]);
    const kproxy = await startKproxy({
      source,
      executor: new FaultyExecutor({ namespace: topology.node }),
      args: ["--external-ip-allowed-cidrs=203.0.113.0/24"],
    });
    try {
      await waitFor("the initial sync", () => kproxy.app.proxier.lastSynced !== undefined);
      const ext = kproxy.app.proxier.lastSynced!.ipv4.services.find((s) => s.name === "ext");
      assert.deepEqual(ext?.externalIPs, [ALLOWED_EXTERNAL]);

      await assertServedBy(topology, ADDRESSES.nodeV4, 30080, [a1]);
      const fromNode = await topology.requests(topology.node, [
        { protocol: "TCP", ip: ADDRESSES.nodeV4, port: 30080 },
        { protocol: "TCP", ip: "127.0.0.1", port: 30080, timeoutMs: 1000 },
      ]);
      assert.equal(fromNode[0]!.ok, true, `node address: ${JSON.stringify(fromNode[0])}`);
      assert.equal(fromNode[1]!.ok, false, `localhost answered: ${JSON.stringify(fromNode[1])}`);

      await assertServedBy(topology, ALLOWED_EXTERNAL, 80, [a1]);
      const refused = await answeringPods(topology, REFUSED_EXTERNAL, 80, 1);
      assert.deepEqual(refused.pods, [], `${REFUSED_EXTERNAL} was forwarded`);
    } finally {
      await kproxy.stop();
      await kproxy.app.backend.cleanup().catch((error) => console.warn(`cleanup: ${error}`));
      await topology.destroy();
    }
  },
});

Deno.test({
  name: "main.ts binds metrics to 127.0.0.1:10249 by default: unreachable from another namespace",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createFaultTopology("s", { localPods: 1 });
    const dir = await Deno.makeTempDir({ prefix: "kp-f-manifests-" });
    let process: KproxyProcess | undefined;
    try {
      await Deno.writeTextFile(`${dir}/node.json`, manifestText([nodeObject()]));
      process = new KproxyProcess({ namespace: topology.node, args: [`--manifests=${dir}`] });
      await process.waitForLine(/Programmed the initial nftables rules/);
      await waitFor(
        "metrics on localhost",
        async () => await httpStatus(topology.node, "http://127.0.0.1:10249/metrics") === 200,
      );
      assert.equal(
        await httpStatus(topology.client, `http://${ADDRESSES.nodeV4}:10249/metrics`),
        0,
      );
      assert.equal(await httpStatus(topology.node, `http://${ADDRESSES.nodeV4}:10249/metrics`), 0);
      assert.equal(
        await httpStatus(topology.client, `http://${ADDRESSES.nodeV4}:10256/healthz`),
        200,
      );
    } finally {
      await process?.kill("SIGTERM");
      await Deno.remove(dir, { recursive: true });
      await topology.destroy();
    }
  },
});
