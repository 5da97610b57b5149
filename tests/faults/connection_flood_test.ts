/**
 * Connection exhaustion (issue 19): idle, half-sent and keep-alive
 * connections to the health server and the health-check node ports (both
 * reachable from the network) and to the metrics server must neither exhaust
 * kproxy's descriptors nor stop it answering probes or syncing. kproxy runs
 * as `deno run main.ts` under a lowered descriptor limit, in the node
 * namespace; the floods come from the client namespace (:10256, the
 * health-check node port) and from the node itself (127.0.0.1:10249). The
 * soak holds thousands of idle connections to :10256 for a minute while
 * traffic flows.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ADDRESSES, type Pod, type Topology } from "../../scripts/netns.ts";
import {
  manifestText,
  nodeObject,
  serviceObject,
  sliceObject,
} from "../../scripts/testbed/objects.ts";
import type { ApiObject } from "../../scripts/testbed/fake_apiserver.ts";
import {
  assertServedBy,
  ConnectionFlood,
  httpStatus,
  TrafficLoop,
} from "../../scripts/testbed/traffic.ts";
import {
  createFaultTopology,
  faultsSkipReason,
  KproxyProcess,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";

const skipReason = await faultsSkipReason(["nft", "curl", "prlimit"]);

const WEB_IP = "10.96.0.10";
const MAX_OPEN_FILES = 256;
/** The health-check node port of the `lb` Service (externalTrafficPolicy Local). */
const HEALTH_CHECK_PORT = 32000;

function manifests(endpoint: Pod): ApiObject[] {
  const lb = serviceObject({
    name: "lb",
    clusterIP: "10.96.0.20",
    type: "NodePort",
    nodePort: 30080,
  });
  Object.assign(lb.spec, {
    type: "LoadBalancer",
    externalTrafficPolicy: "Local",
    healthCheckNodePort: HEALTH_CHECK_PORT,
  });
  return [
    nodeObject(),
    serviceObject({ name: "web", clusterIP: WEB_IP }),
    sliceObject("web", [endpoint.ipv4]),
    lb,
    sliceObject("lb", [endpoint.ipv4]),
  ];
}

/** main.ts in a fresh fault topology, on a manifests directory that sends web to the first pod. */
class ManifestNode {
  private constructor(
    readonly topology: Topology,
    readonly process: KproxyProcess,
    readonly dir: string,
  ) {}

  /** Starts kproxy with `maxOpenFiles` descriptors; resolves once its first rules are in. */
  static async start(name: string, maxOpenFiles: number): Promise<ManifestNode> {
    const topology = await createFaultTopology(name, { localPods: 2 });
    const dir = await Deno.makeTempDir({ prefix: "kp-f-manifests-" });
    let process: KproxyProcess | undefined;
    try {
      await Deno.writeTextFile(`${dir}/all.json`, manifestText(manifests(topology.localPods[0]!)));
      process = new KproxyProcess({
        namespace: topology.node,
        args: [`--manifests=${dir}`],
        maxOpenFiles,
      });
      await process.waitForLine(/Programmed the initial nftables rules/);
      return new ManifestNode(topology, process, dir);
    } catch (error) {
      await process?.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true });
      await topology.destroy();
      throw error;
    }
  }

  get pods(): [Pod, Pod] {
    return this.topology.localPods as [Pod, Pod];
  }

  /** Rewrites the manifests so web goes to `pod`, and waits until the kernel says so. */
  async moveWebTo(pod: Pod): Promise<void> {
    await Deno.writeTextFile(`${this.dir}/all.json`, manifestText(manifests(pod)));
    await waitFor("the changed endpoint in the kernel", async () => {
      const replies = await this.topology.requests(this.topology.client, [
        { protocol: "TCP", ip: WEB_IP, port: 80, timeoutMs: 1000 },
      ]);
      return replies[0]?.ok === true && replies[0].pod === pod.name;
    }, 20_000);
  }

  /** The lines where kproxy said it ran out of descriptors. */
  descriptorErrors(): string[] {
    return this.process.lines.filter((line) => /Too many open files/.test(line));
  }

  /** Kills kproxy if it still runs and deletes the namespaces and the manifests. */
  async stop(): Promise<void> {
    await this.process.kill("SIGKILL");
    await Deno.remove(this.dir, { recursive: true });
    await this.topology.destroy();
  }
}

Deno.test({
  name:
    `main.ts with ${MAX_OPEN_FILES} descriptors survives idle, half-header and keep-alive floods: probes answer within 1 s, syncs go on`,
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const node = await ManifestNode.start("x", MAX_OPEN_FILES);
    const { topology, process } = node;
    const floods: ConnectionFlood[] = [];
    try {
      const [a1, a2] = node.pods;
      await assertServedBy(topology, WEB_IP, 80, [a1]);

      floods.push(
        ConnectionFlood.start({
          namespace: topology.client,
          host: ADDRESSES.nodeV4,
          port: 10256,
          connections: 2 * MAX_OPEN_FILES,
        }),
        ConnectionFlood.start({
          namespace: topology.node,
          host: "127.0.0.1",
          port: 10249,
          connections: MAX_OPEN_FILES,
        }),
        ConnectionFlood.start({
          namespace: topology.client,
          host: ADDRESSES.nodeV4,
          port: HEALTH_CHECK_PORT,
          connections: MAX_OPEN_FILES,
        }),
      );
      await Promise.all(floods.map((flood) => flood.ready));
      // The first burst (1024 connections in the listen queues) is accepted in a few hundred ms
      // on a busy machine; probes then measure the flood as it goes on: every closed connection
      // is opened again.
      await new Promise((resolve) => setTimeout(resolve, 1_000));

      const state = async () =>
        `kproxy ${await process.running() ? "runs" : "exited"}; its last lines:\n${
          process.lines.slice(-5).join("\n")
        }`;
      for (let i = 0; i < 5; i++) {
        const healthz = `http://${ADDRESSES.nodeV4}:10256/healthz`;
        const metrics = "http://127.0.0.1:10249/metrics";
        const serviceHealth = `http://${ADDRESSES.nodeV4}:${HEALTH_CHECK_PORT}/`;
        const answers = [
          await httpStatus(topology.client, healthz, { maxTimeSeconds: 1 }),
          await httpStatus(topology.node, metrics, { maxTimeSeconds: 1 }),
          await httpStatus(topology.client, serviceHealth, { maxTimeSeconds: 1 }),
        ];
        assert.deepEqual(answers, [200, 200, 200], await state());
      }

      await node.moveWebTo(a2);
      assert.ok(await process.running(), await state());

      const [health, metrics, serviceHealth] = await Promise.all(
        floods.map((flood) => flood.stop()),
      );
      console.log(`flood of :10256: ${JSON.stringify(health)}`);
      console.log(`flood of :10249: ${JSON.stringify(metrics)}`);
      console.log(`flood of :${HEALTH_CHECK_PORT}: ${JSON.stringify(serviceHealth)}`);
      assert.ok(
        health!.opened >= 2 * MAX_OPEN_FILES,
        "the flood opened fewer connections than asked",
      );
      assert.deepEqual(node.descriptorErrors(), [], "kproxy ran out of descriptors");
      assert.equal((await process.kill("SIGTERM")).code, 0, "SIGTERM exit status");
    } finally {
      for (const flood of floods) await flood.kill();
      await node.stop();
    }
  },
});

const SOAK_SECONDS = 60;
const SOAK_CONNECTIONS = 3_000;

Deno.test({
  name:
    `soak: ${SOAK_CONNECTIONS} idle connections to :10256 for ${SOAK_SECONDS} s; traffic flows, probes answer, a change reaches the kernel`,
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const node = await ManifestNode.start("y", 1024);
    const { topology, process } = node;
    let flood: ConnectionFlood | undefined;
    let traffic: TrafficLoop | undefined;
    try {
      const [, a2] = node.pods;
      flood = ConnectionFlood.start({
        namespace: topology.client,
        host: ADDRESSES.nodeV4,
        port: 10256,
        connections: SOAK_CONNECTIONS,
        kinds: ["idle"],
        reopenPerSecond: 500,
      });
      await flood.ready;
      traffic = TrafficLoop.start({ topology, targets: [{ ip: WEB_IP, port: 80 }], pauseMs: 200 });

      const started = Date.now();
      const probes: number[] = [];
      let changedAt: number | undefined;
      while (Date.now() - started < SOAK_SECONDS * 1000) {
        const healthz = `http://${ADDRESSES.nodeV4}:10256/healthz`;
        probes.push(await httpStatus(topology.client, healthz, { maxTimeSeconds: 1 }));
        if (changedAt === undefined && Date.now() - started > SOAK_SECONDS * 500) {
          await node.moveWebTo(a2);
          changedAt = Date.now() - started;
        }
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
      await traffic.stop();
      const stats = await flood.stop();
      console.log(
        `${SOAK_SECONDS} s: flood ${JSON.stringify(stats)}; ${traffic.sent} requests, ` +
          `${traffic.failures.length} failed; ${probes.length} probes; change applied at ${changedAt} ms`,
      );
      assert.ok(await process.running(), "kproxy exited");
      assert.deepEqual(node.descriptorErrors(), [], "kproxy ran out of descriptors");
      assert.ok(stats.opened >= SOAK_CONNECTIONS, "the flood opened fewer connections than asked");
      assert.deepEqual(probes.filter((status) => status !== 200), [], "probes that failed");
      assert.deepEqual(traffic.failures, [], "requests to the service that failed");
      await assertServedBy(topology, WEB_IP, 80, [a2]);
      assert.equal((await process.kill("SIGTERM")).code, 0, "SIGTERM exit status");
    } finally {
      await traffic?.stop();
      await flood?.kill();
      await node.stop();
    }
  },
});
