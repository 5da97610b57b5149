import { createTestTopology, kernelSkipReason, NetnsExecutor, testConfig } from "./netns.ts";
import { runKernelCases } from "./run_cases.ts";
import assert from "node:assert/strict";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { endpointOf, plans, servicePort } from "../../scripts/testbed/plans.ts";
import { assertAnsweredBy } from "./cases.ts";

for (const variant of ["nft", "legacy"] as const) {
  const tools = [`iptables-${variant}-restore`, `ip6tables-${variant}-restore`, "conntrack"];
  const skipReason = await kernelSkipReason(tools);
  Deno.test({
    name:
      `createIptablesBackend() with backend "${variant}" carries real traffic as each Plan says`,
    ignore: skipReason !== undefined,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn(t) {
      const topology = await createTestTopology();
      try {
        const backend = createIptablesBackend({
          executor: new NetnsExecutor({ namespace: topology.node }),
          config: testConfig({ proxyMode: "iptables", iptablesBackend: variant }),
          families: ["IPv4", "IPv6"],
        });
        try {
          await runKernelCases(t, { mode: `iptables-${variant}`, topology, backend });
        } finally {
          await backend.cleanup().catch((error) => console.warn(`cleanup failed: ${error}`));
        }
      } finally {
        await topology.destroy();
      }
    },
  });
}

/** Every chain of an `iptables-save` table with its rules, chains named by their upstream names. */
function upstreamTable(save: string): string[] {
  return save.split("\n")
    .filter((line) => line.startsWith(":") || line.startsWith("-A "))
    .map((line) =>
      line.replace(/^:(\S+) \S+ \S+$/, ":$1").replace(
        /KUBE-(SVC|SVL|EXT|FW|SEP)-(\w{16})-2\b/g,
        "KUBE-$1-$2",
      )
    )
    .sort();
}

for (const variant of ["nft", "legacy"] as const) {
  const skipReason = await kernelSkipReason([`iptables-${variant}-restore`]);
  Deno.test({
    name:
      `createIptablesBackend() with backend "${variant}": a partial sync of many changed services leaves what a full sync makes, and traffic follows`,
    ignore: skipReason !== undefined,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      const topology = await createTestTopology();
      const node = new NetnsExecutor({ namespace: topology.node });
      try {
        const backend = createIptablesBackend({
          executor: node,
          config: testConfig({ proxyMode: "iptables", iptablesBackend: variant }),
          families: ["IPv4"],
          nftChainsPerRestore: 8,
        });
        const pods = topology.localPods;
        const storm = (shift: number, count: number) =>
          Array.from({ length: count }, (_, i) =>
            servicePort({
              name: `storm-${i}`,
              clusterIP: `10.96.3.${i + 1}`,
              nodePort: i % 5 === 0 ? 30600 + i : 0,
              // Even services keep one of their two endpoints: its chain stays as it is.
              endpoints: (i % 2 === 0 ? [0, 1] : [0]).map((k) =>
                endpointOf(pods[(i + shift + k) % pods.length]!)
              ),
            }));
        const previous = plans(storm(0, 40));
        await backend.sync({ plans: previous, changed: new Set(), full: true });
        // Every service moves to another pod, the last goes, two come.
        const next = plans([...storm(1, 39), ...storm(1, 42).slice(40)]);
        const changed = new Set(storm(0, 42).map((service) => service.id));
        const result = await backend.sync({ plans: next, changed, full: false });
        const summary = result.summary ?? "";
        assert.equal(result.full, false, summary);
        const scripts = Number(/in (\d+) scripts/.exec(summary)?.[1]);
        assert.ok(variant === "nft" ? scripts > 2 : scripts === 1, summary);

        for (let i = 0; i < 41; i++) {
          const ip = i < 39 ? `10.96.3.${i + 1}` : "10.96.3.42";
          const index = i < 39 ? i : 41;
          const allowed = (index % 2 === 0 ? [1, 2] : [1]).map((k) =>
            pods[(index + k) % pods.length]!.name
          );
          const replies = await topology.requests(topology.client, [
            { protocol: "TCP", ip, port: 80 },
          ]);
          assert.equal(assertAnsweredBy(replies, allowed).size, 1, ip);
        }
        const save = async (table: string) =>
          upstreamTable(
            (await node.run({ program: `iptables-${variant}-save`, args: ["-t", table] })).stdout,
          );
        const partial = { nat: await save("nat"), filter: await save("filter") };
        await backend.sync({ plans: next, changed: new Set(), full: true });
        assert.deepEqual(partial, { nat: await save("nat"), filter: await save("filter") });
        await backend.cleanup();
      } finally {
        await topology.destroy();
      }
    },
  });
}
