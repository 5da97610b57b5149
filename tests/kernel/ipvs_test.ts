import {
  createTestTopology,
  kernelSkipReason,
  NetnsExecutor,
  testConfig,
  Topology,
} from "./netns.ts";
import { runKernelCases } from "./run_cases.ts";
import { createIpvsBackend } from "../../backends/ipvs/mod.ts";

/** Why IPVS cannot be used in a fresh namespace here, or undefined when it can. */
async function ipvsUnavailableReason(): Promise<string | undefined> {
  const ns = `kp-k-${Topology.randomTag()}-ipvs`;
  const add = await new Deno.Command("ip", { args: ["netns", "add", ns], stderr: "piped" })
    .output();
  if (!add.success) return `cannot create namespace ${ns}`;
  try {
    const list = await new Deno.Command("ip", {
      args: ["netns", "exec", ns, "ipvsadm", "-Ln"],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (list.success) return undefined;
    const stderr = new TextDecoder().decode(list.stderr).trim();
    return `ipvsadm -Ln failed: ${stderr.split("\n")[0]}`;
  } finally {
    await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
  }
}

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
