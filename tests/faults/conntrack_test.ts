/**
 * Stale UDP conntrack entries across a restart: a UDP client keeps one source
 * port while kproxy is stopped and the Service's endpoint changes; the first
 * sync of the next kproxy must drop the stale flow (kube-proxy 1.36 reconciles
 * conntrack against the whole state after every sync, so a flow made stale
 * while no proxy ran is not kept), and report it in its metrics.
 *
 * @module
 */

import assert from "node:assert/strict";
import { KPROXY_COMMAND_POLICY } from "../../lib/shell/command_policy.ts";
import { DenoExecutor } from "../../lib/shell/exec.ts";
import { ADDRESSES, NetnsExecutor, type Pod, type Topology } from "../../scripts/netns.ts";
import {
  createFaultTopology,
  faultsSkipReason,
  ManualSource,
  sample,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { nodeObject, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";

const skipReason = await faultsSkipReason(["nft", "iptables-restore", "conntrack"]);

const DNS_IP = "10.96.0.53";
const DNS_NODE_PORT = 30053;

function objects(pod: Pod) {
  return [
    nodeObject(),
    serviceObject({
      name: "dns",
      clusterIP: DNS_IP,
      port: 53,
      type: "NodePort",
      nodePort: DNS_NODE_PORT,
      protocol: "UDP",
    }),
    sliceObject("dns", [pod.ipv4], { protocol: "UDP" }),
  ];
}

/** The pods answering the two kept flows (cluster IP, node port), one request each. */
async function keptFlows(topology: Topology): Promise<string[]> {
  const replies = await topology.requests(topology.client, [
    { protocol: "UDP", ip: DNS_IP, port: 53, sourcePort: 40501, timeoutMs: 1000 },
    { protocol: "UDP", ip: ADDRESSES.nodeV4, port: DNS_NODE_PORT, sourcePort: 40502 },
  ]);
  return replies.map((reply) => reply.ok ? reply.pod : `failed: ${reply.error}`);
}

for (const mode of ["nftables", "iptables"] as const) {
  Deno.test({
    name: `${mode}: the first sync after a restart drops UDP flows made stale while stopped`,
    ignore: skipReason !== undefined,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      const topology = await createFaultTopology("ct", { localPods: 2 });
      const [a1, a2] = topology.localPods as [Pod, Pod];
      const executor = new NetnsExecutor({
        namespace: topology.node,
        inner: new DenoExecutor({ allowedPrograms: ["ip"], policy: KPROXY_COMMAND_POLICY }),
      });
      const args = [`--proxy-mode=${mode}`, "--iptables-sync-period=1s"];
      try {
        const first = await startKproxy({
          source: ManualSource.listed(objects(a1)),
          executor,
          args,
        });
        try {
          await waitFor("the first run's sync", () => first.app.proxier.lastSynced !== undefined);
          assert.deepEqual(await keptFlows(topology), [a1.name, a1.name]);
        } finally {
          await first.stop();
        }

        // While no kproxy runs, the Service's endpoint moves from pod-a1 to pod-a2.
        const second = await startKproxy({
          source: ManualSource.listed(objects(a2)),
          executor,
          args,
        });
        try {
          await waitFor("the second run's sync", () => second.app.proxier.lastSynced !== undefined);
          let answered: string[] = [];
          await waitFor(
            "the kept flows to reach pod-a2",
            async () => (answered = await keptFlows(topology)).every((pod) => pod === a2.name),
            5_000,
          ).catch((error) => assert.fail(`${error.message}; last answers: ${answered}`));
          const reconciled =
            'kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family="IPv4"}';
          assert.ok(sample(await second.metricsText(), reconciled) >= 1);
          const deleted = sample(
            await second.metricsText(),
            'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"}',
          );
          assert.equal(deleted, 2, "one stale entry per kept flow");
        } finally {
          await second.stop();
        }
      } finally {
        await topology.destroy();
      }
    },
  });
}
