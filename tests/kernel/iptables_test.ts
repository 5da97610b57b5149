import { createTestTopology, kernelSkipReason, NetnsExecutor, testConfig } from "./netns.ts";
import { runKernelCases } from "./run_cases.ts";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";

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
