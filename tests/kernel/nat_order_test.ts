/**
 * Which of two NAT chains hooked at the same priority decides: the kernel
 * runs the one registered last first, and the first chain that NATs a
 * connection decides it. kproxy's full sync re-creates its table (so its
 * chains are registered last), which is why its rules decide while
 * kube-proxy's still exist during a takeover (`renderFull`).
 */
import assert from "node:assert/strict";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { KUBE_PROXY_MODES, loadKubeProxyRules } from "../../scripts/takeover.ts";
import { endpointOf, familyPlan, servicePort } from "../../scripts/testbed/plans.ts";
import {
  createTestTopology,
  kernelSkipReason,
  NetnsExecutor,
  testConfig,
  type Topology,
} from "./netns.ts";

const skipReason = await kernelSkipReason([
  "nft",
  "iptables-nft-restore",
  "iptables-legacy-restore",
  "nfacct",
  "conntrack",
]);

const VIP = "10.96.0.10";

/** The pods that answer six requests to the VIP. */
async function answering(topology: Topology): Promise<string[]> {
  const replies = await topology.requests(
    topology.client,
    Array.from({ length: 6 }, () => ({ protocol: "TCP" as const, ip: VIP, port: 80 })),
  );
  return [...new Set(replies.map((reply) => reply.ok ? reply.pod : reply.error))];
}

for (const other of KUBE_PROXY_MODES) {
  Deno.test({
    name: `the NAT chain registered last decides: kproxy's full sync vs kube-proxy (${other})`,
    ignore: skipReason !== undefined,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      const topology = await createTestTopology();
      const node = new NetnsExecutor({ namespace: topology.node });
      const [a1, a2] = topology.localPods;
      const theirs = familyPlan("IPv4", [
        servicePort({ name: "web", clusterIP: VIP, endpoints: [endpointOf(a1!)] }),
      ]);
      const ours = familyPlan("IPv4", [
        servicePort({ name: "web", clusterIP: VIP, endpoints: [endpointOf(a2!)] }),
      ]);
      const backend = createNftablesBackend({
        executor: node,
        config: testConfig(),
        families: ["IPv4"],
      });
      const fullSync = () => backend.sync({ plans: [ours], changed: new Set(), full: true });
      const flushConntrack = () => node.run({ program: "conntrack", args: ["-F"] });
      try {
        await loadKubeProxyRules(node, { mode: other, plan: theirs });
        assert.deepEqual(await answering(topology), [a1!.name], "kube-proxy's rules alone");

        await fullSync();
        await flushConntrack();
        assert.deepEqual(await answering(topology), [a2!.name], "kproxy registered last");

        // A nat chain registered after kproxy's now runs first: it decides.
        const later = "add table ip later\nadd chain ip later nat-prerouting " +
          "{ type nat hook prerouting priority -100 ; }\n" +
          `add rule ip later nat-prerouting ip daddr ${VIP} tcp dport 80 dnat to ${
            a1!.ipv4
          }:8080\n`;
        await node.run({ program: "nft", args: ["-f", "-"], stdin: later });
        await flushConntrack();
        assert.deepEqual(await answering(topology), [a1!.name], "a chain registered later");

        // kproxy's next full sync re-creates its table, registering its chains last again.
        await fullSync();
        await flushConntrack();
        assert.deepEqual(await answering(topology), [a2!.name], "after kproxy's full sync");
      } finally {
        await topology.destroy();
      }
    },
  });
}
