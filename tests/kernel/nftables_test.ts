import { createTestTopology, kernelSkipReason, NetnsExecutor, testConfig } from "./netns.ts";
import { runKernelCases } from "./run_cases.ts";
import { KERNEL_CASES } from "./cases.ts";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import type { Command } from "../../lib/core/executor.ts";
import assert from "node:assert/strict";

const skipReason = await kernelSkipReason(["nft", "conntrack"]);

Deno.test({
  name: "createNftablesBackend() carries real traffic as each Plan says",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const topology = await createTestTopology();
    try {
      const backend = createNftablesBackend({
        executor: new NetnsExecutor({ namespace: topology.node }),
        config: testConfig({ proxyMode: "nftables" }),
        families: ["IPv4", "IPv6"],
      });
      try {
        await runKernelCases(t, { mode: "nftables", topology, backend });
      } finally {
        await backend.cleanup().catch((error) => console.warn(`cleanup failed: ${error}`));
      }
    } finally {
      await topology.destroy();
    }
  },
});

/** Cases whose first plan holds each kind of object: slots, node ports, ranges, affinity, IPv6. */
const STAGED_CASES = [
  "ClusterIP TCP spreads",
  "NodePort on the node address",
  "LoadBalancer IP with source ranges",
  "session affinity",
  "IPv6 ClusterIP",
];

Deno.test({
  name: "createNftablesBackend() a first load in stages carries real traffic as one batch does",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const topology = await createTestTopology();
    const node = new NetnsExecutor({ namespace: topology.node });
    let loads = 0;
    const executor = {
      run(command: Command) {
        if (command.program === "nft" && command.args.join(" ") === "-f -") loads++;
        return node.run(command);
      },
    };
    try {
      for (const prefix of STAGED_CASES) {
        const kernelCase = KERNEL_CASES.find((c) => c.name.startsWith(prefix))!;
        await node.run({ program: "nft", args: ["flush", "ruleset"] });
        const backend = createNftablesBackend({
          executor,
          config: testConfig({ proxyMode: "nftables" }),
          families: ["IPv4", "IPv6"],
          stagedLoad: { minElements: 1, parts: 2 },
        });
        await backend.warmUp!();
        const before = loads;
        try {
          const { passed } = await runKernelCases(t, {
            mode: "nftables",
            topology,
            backend,
            cases: [kernelCase],
          });
          assert.deepEqual(passed, [kernelCase.name]);
        } finally {
          await backend.cleanup().catch((error) => console.warn(`cleanup failed: ${error}`));
        }
        assert.ok(loads - before >= 3, `${loads - before} loads: set-up, elements, hooks`);
      }
    } finally {
      await topology.destroy();
    }
  },
});
