/**
 * Crash and restart of a real `deno run main.ts` process in the node
 * namespace: SIGKILL while `nft` is loading a big table, then a new start
 * must converge to exactly what a clean run renders; SIGTERM must leave
 * working rules behind.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  type ApiObject,
  assertServedBy,
  canonicalTable,
  createFaultTopology,
  createNamespace,
  deleteNamespace,
  faultsSkipReason,
  HostExecutor,
  KproxyProcess,
  manifestText,
  nodeObject,
  type Pod,
  serviceObject,
  sliceObject,
  Topology,
  waitFor,
} from "./harness.ts";

const skipReason = await faultsSkipReason(["nft"]);

const WEB_IP = "10.96.0.10";
/** Enough services that one full `nft -f` takes a noticeable time to kill into. */
const BULK_SERVICES = 2000;

const PROGRAMMED = /Programmed the initial nftables rules/;

/**
 * Writes an `nft` wrapper into `dir` that, for loads (`-f`), touches `mark`
 * and waits before running the real `nft`: kproxy is then blocked writing a
 * script bigger than a pipe buffer when the test kills it, so the real `nft`
 * reads a truncated script.
 */
async function writeSlowNft(dir: string, mark: string): Promise<string> {
  const real = (await new HostExecutor().run({ program: "sh", args: ["-c", "command -v nft"] }))
    .stdout.trim();
  await Deno.writeTextFile(
    `${dir}/nft`,
    `#!/bin/sh\nif [ "$1" = "-f" ]; then : > ${mark}; sleep 1; fi\nexec ${real} "$@"\n`,
    { mode: 0o755 },
  );
  return `${dir}:${Deno.env.get("PATH") ?? "/usr/sbin:/usr/bin:/sbin:/bin"}`;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

function manifests(pods: Pod[], web: Pod): ApiObject[] {
  const objects: ApiObject[] = [
    nodeObject(),
    serviceObject({ name: "web", clusterIP: WEB_IP }),
    sliceObject("web", [web.ipv4]),
  ];
  for (let i = 0; i < BULK_SERVICES; i++) {
    const name = `bulk-${i}`;
    objects.push(serviceObject({ name, clusterIP: `10.96.${20 + (i >> 8)}.${i & 255}` }));
    objects.push(sliceObject(name, pods.map((pod) => pod.ipv4)));
  }
  return objects;
}

Deno.test({
  name: "main.ts killed with SIGKILL during a sync converges on restart; SIGTERM keeps rules",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createFaultTopology("c", { localPods: 2 });
    const scratch = `kp-f-c${Topology.randomTag()}-scratch`;
    const dir = await Deno.makeTempDir({ prefix: "kp-f-manifests-" });
    const bin = await Deno.makeTempDir({ prefix: "kp-f-bin-" });
    const processes: KproxyProcess[] = [];
    const start = (ns: string, path?: string) => {
      const process = new KproxyProcess({
        namespace: ns,
        args: [
          `--manifests=${dir}`,
          "--healthz-bind-address=127.0.0.1:0",
          "--metrics-bind-address=127.0.0.1:0",
        ],
        path,
      });
      processes.push(process);
      return process;
    };
    try {
      const [a1, a2] = topology.localPods as [Pod, Pod];
      await Deno.writeTextFile(`${dir}/all.json`, manifestText(manifests([a1], a1)));
      const first = start(topology.node);
      await first.waitForLine(PROGRAMMED);
      await assertServedBy(topology, WEB_IP, 80, [a1]);
      assert.equal((await first.kill("SIGTERM")).code, 0, "SIGTERM exit status");
      const firstTable = await canonicalTable(topology.node);
      await assertServedBy(topology, WEB_IP, 80, [a1]);

      // Every service changes, so the next full load rewrites the whole table.
      await Deno.writeTextFile(`${dir}/all.json`, manifestText(manifests([a1, a2], a2)));
      const mark = `${bin}/loading`;
      const victim = start(topology.node, await writeSlowNft(bin, mark));
      await waitFor("the victim's nft load started", () => exists(mark), 60_000);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await victim.kill("SIGKILL");
      // The real nft now reads a truncated script; let it finish.
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const afterKill = await canonicalTable(topology.node);
      await assertServedBy(topology, WEB_IP, 80, [a1, a2]);

      await createNamespace(scratch);
      for (
        const args of [
          ["link", "add", "dummy0", "type", "dummy"],
          ["addr", "add", "10.201.0.1/24", "dev", "dummy0"],
          ["link", "set", "dummy0", "up"],
        ]
      ) {
        await new HostExecutor().run({ program: "ip", args: ["-n", scratch, ...args] });
      }
      const clean = start(scratch);
      const restarted = start(topology.node);
      await Promise.all([clean.waitForLine(PROGRAMMED), restarted.waitForLine(PROGRAMMED)]);
      const expected = await canonicalTable(scratch);
      const whole = [firstTable, expected].map((table) => JSON.stringify(table));
      assert.ok(whole.includes(JSON.stringify(afterKill)), "the killed sync left a mixed table");
      assert.ok(expected?.chains["services"], "the clean run made no table");
      assert.deepEqual(await canonicalTable(topology.node), expected);
      await assertServedBy(topology, WEB_IP, 80, [a2]);

      assert.equal((await restarted.kill("SIGTERM")).code, 0, "SIGTERM exit status");
      assert.deepEqual(await canonicalTable(topology.node), expected);
      await assertServedBy(topology, WEB_IP, 80, [a2]);
      await assertServedBy(topology, "10.96.20.7", 80, [a1, a2]);
    } finally {
      for (const process of processes) await process.kill("SIGKILL");
      await deleteNamespace(scratch);
      await Deno.remove(dir, { recursive: true });
      await Deno.remove(bin, { recursive: true });
      await topology.destroy();
    }
  },
});
