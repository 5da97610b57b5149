/**
 * The ipvs mode's leftover check against the real iptables-nft: each of its
 * chains is asked for by name, the tables are read only when one exists, and
 * what exists is removed with the jumps to it.
 */
import assert from "node:assert/strict";
import { removeChains } from "../../backends/iptables/cleanup.ts";
import { isIptablesModeChain } from "../../backends/iptables/chains.ts";
import { IPVS_MODE_CHAINS, isIpvsModeChain } from "../../backends/ipvs/iptables.ts";
import { TimingExecutor } from "../../scripts/bench/harness.ts";
import { createTestTopology, kernelSkipReason, NetnsExecutor } from "./netns.ts";

const skipReason = await kernelSkipReason(["iptables-nft", "iptables-nft-restore"]);

const IPVS_REMOVAL = {
  owns: isIpvsModeChain,
  names: IPVS_MODE_CHAINS,
  keep: isIptablesModeChain,
  owner: "ipvs mode",
  families: ["IPv4"] as const,
  variants: ["nft"] as const,
};

Deno.test({
  name: "removeChains() finds the ipvs mode's chains by name in iptables-nft, and only then reads",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createTestTopology();
    try {
      const node = new NetnsExecutor({ namespace: topology.node });
      const quiet = new TimingExecutor(topology.node);
      assert.deepEqual(await removeChains(quiet, IPVS_REMOVAL), []);
      const probes = quiet.commands.map((command) => command.program);
      assert.ok(probes.length > 0);
      assert.ok(probes.every((program) => program === "iptables-nft"), "no table read");

      await node.run({
        program: "iptables-nft-restore",
        args: ["--noflush"],
        stdin: [
          "*filter",
          ":KUBE-IPVS-FILTER - [0:0]",
          "-A INPUT -j KUBE-IPVS-FILTER",
          "-A INPUT -s 198.51.100.7/32 -j DROP",
          "COMMIT",
          "",
        ].join("\n"),
      });
      const counted = new TimingExecutor(topology.node);
      const removed = await removeChains(counted, IPVS_REMOVAL);
      assert.deepEqual(removed.map(({ table, chains }) => [table, chains]), [
        ["filter", ["KUBE-IPVS-FILTER"]],
      ]);
      assert.ok(counted.commands.some((command) => command.program === "iptables-nft-save"));
      const saved = await node.run({ program: "iptables-nft-save", args: [] });
      assert.doesNotMatch(saved.stdout, /KUBE-IPVS-FILTER/);
      assert.match(saved.stdout, /-A INPUT -s 198\.51\.100\.7\/32 -j DROP/);
    } finally {
      await topology.destroy();
    }
  },
});
