/**
 * Topology-aware routing with real packets: the planner's hint handling,
 * rendered by the nftables backend, decides which pods answer the client.
 * The node is node-a in zone-a; pod-a1 runs on it, pod-a2 is in zone-a on
 * another node (node-c), pod-b1 is on node-b in zone-b.
 */
import assert from "node:assert/strict";
import { modelService } from "../support/model_fixtures.ts";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import type { EndpointHints, EndpointSlice, Node, Service } from "../../lib/core/model.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { changedServicePortIds, type PlannerOptions, planNode } from "../../lib/core/planner.ts";
import type { ClusterState } from "../../lib/core/state.ts";
import {
  ADDRESSES,
  createTestTopology,
  kernelSkipReason,
  NetnsExecutor,
  testConfig,
} from "./netns.ts";

const skipReason = await kernelSkipReason(["nft"]);

const CLUSTER_IP = "10.96.3.1";

const OPTIONS: PlannerOptions = {
  nodeName: "node-a",
  nodePortAddresses: ["primary"],
  localAddresses: [ADDRESSES.nodeV4],
  clusterCIDRs: [ADDRESSES.clusterCIDRV4],
  detectLocalMode: "ClusterCIDR",
  bridgeInterface: "",
  interfaceNamePrefix: "",
  masqueradeAll: false,
  serviceClusterIPRange: [ADDRESSES.serviceCIDRV4],
  externalIPAllowedCIDRs: [],
  featureGates: {},
};

function node(name: string, zone: string): Node {
  return {
    name,
    labels: { "topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name },
    addresses: name === "node-a" ? [ADDRESSES.nodeV4] : [],
    podCIDRs: [],
    deleting: false,
  };
}

const SERVICE = (trafficDistribution: string): Service =>
  modelService({
    name: "topo",
    clusterIPs: [CLUSTER_IP],
    ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 0 }],
    trafficDistribution,
  });

interface Placement {
  ip: string;
  nodeName: string;
  zone: string;
  hints?: EndpointHints;
}

function state(trafficDistribution: string, endpoints: Placement[]): ClusterState {
  const slice: EndpointSlice = {
    namespace: "default",
    name: "topo-1",
    serviceName: "topo",
    family: "IPv4",
    ports: [{ name: "http", protocol: "TCP", port: 8080 }],
    endpoints: endpoints.map((e) => ({
      ip: e.ip,
      ready: true,
      serving: true,
      terminating: false,
      nodeName: e.nodeName,
      zone: e.zone,
      hints: e.hints,
    })),
  };
  return {
    services: new Map([["default/topo", SERVICE(trafficDistribution)]]),
    slicesByService: new Map([["default/topo", [slice]]]),
    nodes: new Map(
      [node("node-a", "zone-a"), node("node-b", "zone-b"), node("node-c", "zone-a")].map((
        n,
      ) => [n.name, n]),
    ),
    serviceCIDRs: [],
  };
}

Deno.test({
  name: "topology hints decide which zone and node answer, with real packets (nftables)",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const topology = await createTestTopology();
    const backend = createNftablesBackend({
      executor: new NetnsExecutor({ namespace: topology.node }),
      config: testConfig({ proxyMode: "nftables" }),
      families: ["IPv4"],
    });
    let applied: Plan | undefined;
    const apply = async (clusterState: ClusterState): Promise<Plan> => {
      const plan = planNode({ state: clusterState, options: OPTIONS }).ipv4;
      const changed = applied
        ? changedServicePortIds(applied, plan)
        : new Set(plan.services.map((s) => s.id));
      await backend.sync({
        plans: [plan],
        changed,
        full: !applied,
      });
      applied = plan;
      return plan;
    };
    const answering = async (): Promise<Set<string>> => {
      const replies = await topology.requests(
        topology.client,
        Array.from({ length: 30 }, () => ({ protocol: "TCP" as const, ip: CLUSTER_IP, port: 80 })),
      );
      const pods = new Set<string>();
      for (const reply of replies) {
        assert.ok(reply.ok, `request failed: ${JSON.stringify(reply)}`);
        pods.add(reply.pod);
      }
      return pods;
    };
    try {
      const [a1, a2] = topology.pods.filter((pod) => pod.isLocal);
      const b1 = topology.pods.find((pod) => !pod.isLocal);
      assert.ok(a1 && a2 && b1, "two local pods and a remote one");
      const placements = (hints?: (p: Placement) => EndpointHints): Placement[] => {
        const list: Placement[] = [
          { ip: a1.ipv4, nodeName: "node-a", zone: "zone-a" },
          { ip: a2.ipv4, nodeName: "node-c", zone: "zone-a" },
          { ip: b1.ipv4, nodeName: "node-b", zone: "zone-b" },
        ];
        return list.map((p) => ({ ...p, hints: hints?.(p) }));
      };

      await t.step("zone hints: only zone-a endpoints answer", async () => {
        const plan = await apply(state(
          "PreferSameZone",
          placements((p) => ({ forZones: [p.zone], forNodes: [] })),
        ));
        assert.match(plan.services[0]!.internal.reason, /zone zone-a/);
        assert.deepEqual([...await answering()].sort(), [a1.name, a2.name].sort());
      });

      await t.step("hints gone: every zone answers", async () => {
        await apply(state("", placements()));
        assert.deepEqual([...await answering()].sort(), [a1.name, a2.name, b1.name].sort());
      });

      await t.step("PreferSameNode with a local endpoint: only the local one answers", async () => {
        const plan = await apply(state(
          "PreferSameNode",
          placements((p) => ({ forZones: [p.zone], forNodes: [p.nodeName] })),
        ));
        assert.match(plan.services[0]!.internal.reason, /node-a/);
        assert.deepEqual([...await answering()], [a1.name]);
      });
    } finally {
      await backend.cleanup().catch((error) => console.warn(`cleanup failed: ${error}`));
      await topology.destroy();
    }
  },
});
