import {
  createTestTopology,
  ipvsUnavailableReason,
  kernelSkipReason,
  NetnsExecutor,
  testConfig,
} from "./netns.ts";
import { runKernelCases } from "./run_cases.ts";
import { createIpvsBackend } from "../../backends/ipvs/applier.ts";

const baseReason = await kernelSkipReason(["ipvsadm", "conntrack"]);
const ipvsReason = baseReason ?? await ipvsUnavailableReason();
if (baseReason === undefined && ipvsReason !== undefined) {
  console.warn(`ipvs kernel tests ignored: ${ipvsReason}`);
}

Deno.test({
  name: "ipvsadm -Ln works inside a test namespace",
  ignore: ipvsReason !== undefined,
  fn() {
    // Reaching here means ipvsUnavailableReason() listed the (empty) IPVS table.
  },
});

Deno.test({
  name: "createIpvsBackend() carries real traffic as each Plan says",
  ignore: ipvsReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const topology = await createTestTopology();
    try {
      const backend = createIpvsBackend({
        executor: new NetnsExecutor({ namespace: topology.node }),
        config: testConfig({ proxyMode: "ipvs" }),
        families: ["IPv4", "IPv6"],
      });
      try {
        await runKernelCases(t, { mode: "ipvs", topology, backend });
      } finally {
        await backend.cleanup().catch((error) => console.warn(`cleanup failed: ${error}`));
      }
    } finally {
      await topology.destroy();
    }
  },
});
