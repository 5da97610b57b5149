import { createTestTopology, kernelSkipReason, NetnsExecutor, testConfig } from "./netns.ts";
import { runKernelCases } from "./run_cases.ts";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";

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
