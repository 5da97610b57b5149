/**
 * kproxy's table probe against the real nft: a table present, a table
 * missing, and a table holding iptables-nft chains (backends/nftables/table_probe.ts).
 */
import assert from "node:assert/strict";
import { existingTables } from "../../backends/nftables/table_probe.ts";
import { TimingExecutor } from "../../scripts/bench/harness.ts";
import { createTestTopology, kernelSkipReason, NetnsExecutor } from "./netns.ts";

const skipReason = await kernelSkipReason(["nft", "iptables-nft-restore"]);

Deno.test({
  name: "existingTables() finds tables with the real nft, asking for one chain of each",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createTestTopology();
    try {
      const node = new NetnsExecutor({ namespace: topology.node });
      await node.run({ program: "nft", args: ["add", "table", "ip6", "kube-proxy"] });
      await node.run({
        program: "iptables-nft-restore",
        args: ["--noflush"],
        stdin: "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n",
      });
      const probing = new TimingExecutor(topology.node);
      const found = await existingTables(probing, ["ip", "ip6"], ["nat", "kube-proxy", "absent"]);
      assert.deepEqual(found, ["ip nat", "ip6 kube-proxy"]);
      assert.ok(
        probing.commands.every(({ args }) => args[0] === "list" && args[1] === "chain"),
        "no listing",
      );
    } finally {
      await topology.destroy();
    }
  },
});
