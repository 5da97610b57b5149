import assert from "node:assert/strict";
import { FakeExecutor } from "../support/fake_executor.ts";
import { countSynFin, sendSynFin } from "./cases.ts";
import { ADDRESSES, kernelSkipReason, NetnsExecutor, Topology } from "./netns.ts";

Deno.test("NetnsExecutor.run() runs the command through ip netns exec, stdin and timeout kept", async () => {
  const inner = new FakeExecutor();
  const executor = new NetnsExecutor({ namespace: "kp-k-test-node", inner });
  await executor.run({ program: "nft", args: ["-f", "-"], stdin: "flush ruleset\n", timeoutMs: 5 });
  assert.deepEqual(inner.calls, [{
    program: "ip",
    args: ["netns", "exec", "kp-k-test-node", "nft", "-f", "-"],
    stdin: "flush ruleset\n",
    timeoutMs: 5,
  }]);
});

const skipReason = await kernelSkipReason([]);

async function namespacesWithPrefix(prefix: string): Promise<string[]> {
  const output = await new Deno.Command("ip", { args: ["netns", "list"], stdout: "piped" })
    .output();
  return new TextDecoder().decode(output.stdout).split("\n")
    .map((line) => line.split(" ")[0] ?? "")
    .filter((name) => name.startsWith(prefix));
}

Deno.test({
  name: "Topology carries pod traffic, reports refused and timeout, and destroy() deletes it all",
  ignore: skipReason !== undefined,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const prefix = `kp-k-${Topology.randomTag()}-`;
    const topology = await Topology.create({ prefix, localPods: 2, remotePods: 1 });
    try {
      assert.equal((await namespacesWithPrefix(prefix)).length, 6);
      const [a1, a2, b1] = topology.pods;
      const replies = await topology.requests(topology.client, [
        { protocol: "TCP", ip: a1!.ipv4, port: 8080 },
        { protocol: "UDP", ip: b1!.ipv4, port: 8080 },
        { protocol: "TCP", ip: a2!.ipv6, port: 8080 },
        { protocol: "TCP", ip: a1!.ipv4, port: 8080, sourceIp: ADDRESSES.clientV4Other },
        { protocol: "TCP", ip: ADDRESSES.nodeV4, port: 81 },
        { protocol: "TCP", ip: "10.205.0.99", port: 80, timeoutMs: 300 },
      ]);
      assert.deepEqual(replies.map((r) => r.ok ? r.text : r.error), [
        `pod-a1 ${ADDRESSES.clientV4} 8080`,
        `pod-b1 ${ADDRESSES.clientV4} 8080`,
        `pod-a2 ${ADDRESSES.clientV6} 8080`,
        `pod-a1 ${ADDRESSES.clientV4Other} 8080`,
        "refused",
        "timeout",
      ]);
      const fromPod = await topology.tcpRequest(a2!.ns, a1!.ipv4, 8080);
      assert.ok(fromPod.ok && fromPod.text === `pod-a1 ${a2!.ipv4} 8080`, JSON.stringify(fromPod));
      const fromNode = await topology.udpRequest(topology.node, b1!.ipv6, 8080);
      assert.ok(fromNode.ok && fromNode.pod === "pod-b1", JSON.stringify(fromNode));
      // Without proxy rules, crafted conntrack-invalid packets do reach a pod.
      const arrived = await countSynFin(topology, a1!);
      await sendSynFin(topology, {
        fromNs: topology.client,
        sourceIp: ADDRESSES.clientV4,
        ip: a1!.ipv4,
        port: 8080,
      });
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(await arrived(), 3);
    } finally {
      await topology.destroy();
    }
    assert.deepEqual(await namespacesWithPrefix(prefix), []);
  },
});
