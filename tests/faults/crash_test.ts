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
  manifestText,
  nodeObject,
  type Pod,
  serviceObject,
  sliceObject,
  Topology,
  waitFor,
} from "./harness.ts";

const skipReason = await faultsSkipReason(["nft"]);

const MAIN = new URL("../../main.ts", import.meta.url).pathname;
const WEB_IP = "10.96.0.10";
/** Enough services that one full `nft -f` takes a noticeable time to kill into. */
const BULK_SERVICES = 3000;

/** A `deno run main.ts` in a namespace, with its stderr lines collected. */
class KproxyProcess {
  readonly lines: string[] = [];
  readonly child: Deno.ChildProcess;
  readonly #reading: Promise<void>;

  constructor(ns: string, manifests: string) {
    this.child = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        ns,
        Deno.execPath(),
        "run",
        "--allow-all",
        MAIN,
        "--proxy-mode=nftables",
        `--manifests=${manifests}`,
        "--hostname-override=node-a",
        "--cluster-cidr=10.244.0.0/16",
        "--healthz-bind-address=127.0.0.1:0",
        "--metrics-bind-address=127.0.0.1:0",
        "-v=2",
      ],
      env: { RUST_BACKTRACE: "0" },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    this.#reading = this.#read();
  }

  async #read(): Promise<void> {
    let rest = "";
    for await (const chunk of this.child.stderr.pipeThrough(new TextDecoderStream())) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop() ?? "";
      this.lines.push(...parts);
    }
    if (rest !== "") this.lines.push(rest);
  }

  /** Waits for a log line matching `pattern`. */
  async waitForLine(pattern: RegExp, timeoutMs = 60_000): Promise<void> {
    await waitFor(`a log line ${pattern}`, () => this.lines.some((l) => pattern.test(l)), timeoutMs)
      .catch((error) => {
        throw new Error(`${error.message}\n${this.lines.slice(-20).join("\n")}`);
      });
  }

  /** Sends `signal` and returns the exit status. */
  async kill(signal: Deno.Signal): Promise<Deno.CommandStatus> {
    try {
      this.child.kill(signal);
    } catch {
      // Already exited.
    }
    const status = await this.child.status;
    await this.#reading;
    return status;
  }
}

const PROGRAMMED = /Programmed the initial nftables rules/;

/** Whether a process named `name` runs in namespace `ns`. */
async function running(ns: string, name: string): Promise<boolean> {
  const result = await new HostExecutor().run({ program: "ip", args: ["netns", "pids", ns] });
  for (const pid of result.stdout.split("\n").filter((line) => line !== "")) {
    try {
      if ((await Deno.readTextFile(`/proc/${pid}/comm`)).trim() === name) return true;
    } catch {
      // Exited meanwhile.
    }
  }
  return false;
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
    const processes: KproxyProcess[] = [];
    const start = (ns: string) => {
      const process = new KproxyProcess(ns, dir);
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
      await assertServedBy(topology, WEB_IP, 80, [a1]);

      // Every service changes, so the next full load rewrites the whole table.
      await Deno.writeTextFile(`${dir}/all.json`, manifestText(manifests([a1, a2], a2)));
      const victim = start(topology.node);
      await waitFor("nft running in the node namespace", () => running(topology.node, "nft"), 60_000);
      await victim.kill("SIGKILL");
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
      await topology.destroy();
    }
  },
});
