/**
 * A full sync re-creates kproxy's table in one transaction (the takeover's
 * first sync deletes kube-proxy's in it too), and no connection may fail
 * while the kernel commits it. The commit makes the new rules live when it
 * flips the generation, then walks the rest of its work; an interval set
 * on kernel 6.18 publishes its lookup array only at the end of that walk, so
 * a new interval set matches nothing for as long as the walk takes (2 ms
 * with 20k elements). A NodePort looked up there was refused
 * (`@nodeport-ips` was an interval set); the sets the DNAT path consults are
 * hash sets, whose elements go live with the generation.
 */
import assert from "node:assert/strict";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { PacedClient } from "../../scripts/takeover.ts";
import { endpointOf, familyPlan, servicePort } from "../../scripts/testbed/plans.ts";
import {
  ADDRESSES,
  createTestTopology,
  kernelSkipReason,
  NetnsExecutor,
  testConfig,
} from "./netns.ts";

const skipReason = await kernelSkipReason(["nft"]);

/** Services beside the tested one: they make the commit's walk long enough to hit. */
const FILLER_SERVICES = 4000;
/** How long the client connects: full syncs follow one another until it ends. */
const CLIENT_MS = 4_000;
const NODE_PORT = 30080;

Deno.test({
  name: "full syncs that re-create the table refuse no NodePort connection",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createTestTopology();
    try {
      const [a1, a2] = topology.localPods;
      const filler = Array.from({ length: FILLER_SERVICES }, (_, i) =>
        servicePort({
          name: `filler-${i}`,
          clusterIP: `10.96.${10 + Math.floor(i / 250)}.${i % 250 + 1}`,
          endpoints: [endpointOf(a1!)],
        }));
      const plan = familyPlan("IPv4", [
        servicePort({
          name: "web",
          clusterIP: "10.96.0.10",
          nodePort: NODE_PORT,
          endpoints: [endpointOf(a1!), endpointOf(a2!)],
        }),
        ...filler,
      ]);
      const backend = createNftablesBackend({
        executor: new NetnsExecutor({ namespace: topology.node }),
        config: testConfig(),
        families: ["IPv4"],
      });
      const fullSync = () => backend.sync({ plans: [plan], changed: new Set(), full: true });
      await fullSync();
      let clientDone = false;
      const client = PacedClient.start({
        namespace: topology.client,
        targets: [{ ip: ADDRESSES.nodeV4, port: NODE_PORT }],
        intervalMs: 1,
        durationMs: CLIENT_MS,
      }).result().finally(() => clientDone = true);
      let syncs = 0;
      while (!clientDone) {
        await fullSync();
        syncs++;
      }
      const result = await client;
      assert.deepEqual(
        result.failures,
        [],
        `${result.failures.length} of ${result.attempts} connections failed over ${syncs} full syncs`,
      );
      assert.ok(syncs >= 3, `only ${syncs} full syncs while the client ran`);
      console.log(`  ${result.attempts} connections, 0 failed, over ${syncs} full syncs`);
    } finally {
      await topology.destroy();
    }
  },
});
