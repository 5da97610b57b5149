/**
 * Crash and restart of a real `deno run main.ts` process in the node
 * namespace: SIGKILL while `nft` reads a big full sync, repeated at spread
 * delays so that the kill lands at different bytes of the input; each time
 * the table must be the one before the sync or the complete new one. A new
 * start must then converge to exactly what a clean run renders; SIGTERM
 * must leave working rules behind.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  manifestText,
  nodeObject,
  serviceObject,
  sliceObject,
} from "../../scripts/testbed/objects.ts";
import type { ApiObject } from "../../scripts/testbed/fake_apiserver.ts";
import { assertServedBy } from "../../scripts/testbed/traffic.ts";
import {
  canonicalTable,
  createNamespace,
  deleteNamespace,
  nftIn,
} from "../../scripts/testbed/tables.ts";
import {
  createFaultTopology,
  faultsSkipReason,
  KproxyProcess,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { HostExecutor, type Pod, Topology } from "../../scripts/netns.ts";

const skipReason = await faultsSkipReason(["nft"]);

const WEB_IP = "10.96.0.10";
/** Enough services that writing one full nft input takes long enough to kill into. */
const BULK_SERVICES = 2000;
const BULK_ENDPOINTS = 10;
/**
 * When each victim is killed, as a share of the time a clean run's full input
 * takes to arrive at nft; one per round.
 */
const KILL_AT = [0.05, 0.15, 0.25, 0.35, 0.45, 0.55];

const PROGRAMMED = /Programmed the initial nftables rules/;
/** How long a start with the bulk services may take on a busy machine. */
const STARTUP_MS = 180_000;

/**
 * Copies stdin to stdout and to a record file, and writes how long the input
 * took to arrive to `<record>.span`. Its 1 MiB stdin pipe lets kproxy write
 * on without waiting for nft, as a fast reader would, so a kill lands
 * between writes as often as inside one. In an input of more than 4 KiB (not the
 * load guard's set-up), when the file `kill-after` exists, SIGKILLs the
 * process given as argument (the kproxy writing the input) that many
 * seconds after the first byte, and copies whatever it had written.
 */
const COPIER = `
import fcntl, os, signal, sys, threading, time
victim, record, kill_after = int(sys.argv[1]), sys.argv[2], sys.argv[3]
fcntl.fcntl(0, 1031, 1 << 20)  # F_SETPIPE_SZ: kproxy's writes do not wait for nft
delay = float(open(kill_after).read()) if os.path.exists(kill_after) else None
first = last = None
seen = 0
with open(record, "wb") as out:
    while True:
        block = os.read(0, 65536)
        if not block:
            break
        last = time.monotonic()
        first = first or last
        seen += len(block)
        if delay is not None and seen > 4096:
            threading.Timer(delay - (last - first), os.kill, (victim, signal.SIGKILL)).start()
            delay = None
        out.write(block)
        os.write(1, block)
with open(record + ".span", "w") as span:
    span.write(str((last or 0) - (first or 0)))
`;

/**
 * Writes an `nft` wrapper into `dir`: loads (`-f`) pass through
 * {@linkcode COPIER} to the real nft, which records each input in
 * `dir/input.<pid>` and kills the writing kproxy `dir/kill-after` seconds
 * into it; `dir/done.<pid>` appears when nft has exited.
 */
async function writeRecordingNft(dir: string): Promise<string> {
  const real = (await new HostExecutor().run({ program: "sh", args: ["-c", "command -v nft"] }))
    .stdout.trim();
  await Deno.writeTextFile(`${dir}/copy.py`, COPIER);
  await Deno.writeTextFile(
    `${dir}/nft`,
    [
      "#!/bin/sh",
      `if [ "$1" != "-f" ]; then exec ${real} "$@"; fi`,
      `python3 ${dir}/copy.py $PPID ${dir}/input.$$ ${dir}/kill-after | ${real} "$@"`,
      `echo $? > ${dir}/done.$$`,
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  return `${dir}:${Deno.env.get("PATH") ?? "/usr/sbin:/usr/bin:/sbin:/bin"}`;
}

/** One load the wrapper recorded. */
interface RecordedLoad {
  input: string;
  /** Seconds from its first to its last byte. */
  span: number;
  /** nft has exited. */
  done: boolean;
}

/** The loads the wrapper in `dir` recorded. */
async function recordedLoads(dir: string): Promise<RecordedLoad[]> {
  const loads = [];
  for await (const entry of Deno.readDir(dir)) {
    const pid = /^input\.(\d+)$/.exec(entry.name)?.[1];
    if (pid === undefined) continue;
    const done = await Deno.stat(`${dir}/done.${pid}`).then(() => true, () => false);
    const span = await Deno.readTextFile(`${dir}/${entry.name}.span`).then(Number, () => NaN);
    loads.push({ input: await Deno.readTextFile(`${dir}/${entry.name}`), span, done });
  }
  return loads;
}

async function clearRecords(dir: string): Promise<void> {
  for await (const entry of Deno.readDir(dir)) {
    if (/^(input|done)\./.test(entry.name)) await Deno.remove(`${dir}/${entry.name}`);
  }
}

/**
 * Starts main.ts in `namespace` on the manifests in `dir` (its `nft` found
 * through `path` when given) and adds it to `processes`.
 */
function startOnManifests(
  processes: KproxyProcess[],
  dir: string,
  namespace: string,
  path?: string,
): KproxyProcess {
  const process = new KproxyProcess({
    namespace,
    args: [
      `--manifests=${dir}`,
      "--healthz-bind-address=127.0.0.1:0",
      "--metrics-bind-address=127.0.0.1:0",
    ],
    path,
  });
  processes.push(process);
  return process;
}

/** How many loads the wrapper in `dir` has started to record. */
async function inputCount(dir: string): Promise<number> {
  let count = 0;
  for await (const entry of Deno.readDir(dir)) if (/^input\.\d+$/.test(entry.name)) count++;
  return count;
}

/** The largest recorded load: the full sync's, not the guard's set-up. */
function mainLoad(loads: RecordedLoad[]): RecordedLoad {
  return loads.reduce((a, b) => (b.input.length > a.input.length ? b : a));
}

/** Bulk services 0…n-1 with endpoints numbered from `first`, plus `web` served by `web`. */
function manifests(web: Pod, first: number): ApiObject[] {
  const objects: ApiObject[] = [
    nodeObject(),
    serviceObject({ name: "web", clusterIP: WEB_IP }),
    sliceObject("web", [web.ipv4]),
  ];
  for (let i = 0; i < BULK_SERVICES; i++) {
    const name = `bulk-${i}`;
    objects.push(serviceObject({ name, clusterIP: `10.96.${20 + (i >> 8)}.${i & 255}` }));
    const addresses = Array.from({ length: BULK_ENDPOINTS }, (_, j) => {
      const n = first + i * BULK_ENDPOINTS + j;
      return `10.250.${(n >> 8) & 255}.${n & 255}`;
    });
    objects.push(sliceObject(name, addresses));
  }
  return objects;
}

Deno.test({
  name: "main.ts killed with SIGKILL while nft reads its input leaves the old or the new table",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createFaultTopology("c", { localPods: 2 });
    const scratch = `kp-f-c${Topology.randomTag()}-scratch`;
    const dir = await Deno.makeTempDir({ prefix: "kp-f-manifests-" });
    const bin = await Deno.makeTempDir({ prefix: "kp-f-bin-" });
    const processes: KproxyProcess[] = [];
    const start = (ns: string, path?: string) => startOnManifests(processes, dir, ns, path);
    const table = async (ns: string) => JSON.stringify(await canonicalTable(ns));
    try {
      const [a1, a2] = topology.localPods as [Pod, Pod];
      const path = await writeRecordingNft(bin);
      // Two cluster states whose full loads rewrite every service.
      const states = [
        manifestText(manifests(a1, 0)),
        manifestText(manifests(a2, BULK_SERVICES * BULK_ENDPOINTS)),
      ];

      const complete: string[] = [];
      const cleanLoads: RecordedLoad[] = [];
      const record = async (ns: string) => {
        complete.push(await table(ns));
        cleanLoads.push(mainLoad(await recordedLoads(bin)));
      };
      // Every run here finds a kproxy table, as the victims do, so each loads in one batch
      // (on a node without one the first load is staged: the next test).
      const tableFound = async (ns: string) =>
        assert.notEqual(await nftIn(ns, ["add", "table", "ip", "kproxy"]), undefined);
      // State A: a first run in the node namespace, stopped by SIGTERM (its rules stay).
      await tableFound(topology.node);
      await Deno.writeTextFile(`${dir}/all.json`, states[0]!);
      const first = start(topology.node, path);
      await first.waitForLine(PROGRAMMED, STARTUP_MS);
      await assertServedBy(topology, WEB_IP, 80, [a1]);
      assert.equal((await first.kill("SIGTERM")).code, 0, "SIGTERM exit status");
      await record(topology.node);
      assert.match(complete[0]!, /"services"/, "the first run made a table");
      await assertServedBy(topology, WEB_IP, 80, [a1]);

      // State B as a clean run programs it, in a scratch namespace.
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
      await Deno.writeTextFile(`${dir}/all.json`, states[1]!);
      await clearRecords(bin);
      await tableFound(scratch);
      const clean = start(scratch, path);
      await clean.waitForLine(PROGRAMMED, STARTUP_MS);
      assert.equal((await clean.kill("SIGTERM")).code, 0, "SIGTERM exit status");
      await record(scratch);
      assert.notEqual(complete[0], complete[1]);

      let cut = 0;
      const cuts: string[] = [];
      for (const [round, share] of KILL_AT.entries()) {
        const before = await table(topology.node);
        const next = before === complete[0] ? 1 : 0;
        await Deno.writeTextFile(`${dir}/all.json`, states[next]!);
        await clearRecords(bin);
        const full = cleanLoads[next]!;
        const seconds = share * full.span;
        await Deno.writeTextFile(`${bin}/kill-after`, String(seconds));
        const victim = start(topology.node, path);
        const status = await victim.child.status;
        assert.equal(status.signal, "SIGKILL", "the victim was killed by the wrapper");
        await waitFor(
          "every nft the victim started to finish",
          async () => (await recordedLoads(bin)).every((load) => load.done),
          60_000,
        );
        const written = mainLoad(await recordedLoads(bin)).input.length;
        if (written < full.input.length) cut++;
        cuts.push(`${written}/${full.input.length}`);
        const after = await table(topology.node);
        assert.ok(
          after === before || after === complete[next],
          `round ${round + 1}: killed ${
            Math.round(seconds * 1000)
          } ms into its input, with ${written} of ${full.input.length} characters written, it left a table that is neither the old nor the new one`,
        );
        await assertServedBy(topology, WEB_IP, 80, [a1, a2]);
      }
      await Deno.remove(`${bin}/kill-after`);
      console.log(
        `SIGKILL rounds: characters written ${cuts.join(", ")}; full input in ${
          cleanLoads.map((load) => `${Math.round(load.span * 1000)} ms`).join(" / ")
        }`,
      );
      assert.ok(
        cut >= KILL_AT.length / 2,
        `only ${cut} of ${KILL_AT.length} kills landed mid-write`,
      );

      await Deno.writeTextFile(`${dir}/all.json`, states[1]!);
      const restarted = start(topology.node);
      await restarted.waitForLine(PROGRAMMED, STARTUP_MS);
      assert.equal(await table(topology.node), complete[1]);
      await assertServedBy(topology, WEB_IP, 80, [a2]);
      assert.equal((await restarted.kill("SIGTERM")).code, 0, "SIGTERM exit status");
      assert.equal(await table(topology.node), complete[1]);
      await assertServedBy(topology, WEB_IP, 80, [a2]);
    } finally {
      for (const process of processes) await process.kill("SIGKILL");
      await deleteNamespace(scratch);
      await Deno.remove(dir, { recursive: true });
      await Deno.remove(bin, { recursive: true });
      await topology.destroy();
    }
  },
});

Deno.test({
  name:
    "main.ts killed with SIGKILL during a staged first load leaves no hooked table; a restart completes it",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createFaultTopology("g", { localPods: 1 });
    const dir = await Deno.makeTempDir({ prefix: "kp-f-manifests-" });
    const bin = await Deno.makeTempDir({ prefix: "kp-f-bin-" });
    const processes: KproxyProcess[] = [];
    const start = (path?: string) => startOnManifests(processes, dir, topology.node, path);
    const slots = BULK_SERVICES * BULK_ENDPOINTS + 1;
    try {
      const [web] = topology.localPods as [Pod];
      const path = await writeRecordingNft(bin);
      await Deno.writeTextFile(`${dir}/all.json`, manifestText(manifests(web, 0)));
      const outcomes: string[] = [];
      // Killed once the n-th load started: the set-up (the guard's set-up is the first), an
      // element part, the last part or the hooks.
      for (const started of [2, 3, 4, 5]) {
        await nftIn(topology.node, ["flush", "ruleset"]);
        await clearRecords(bin);
        const victim = start(path);
        await waitFor(`load ${started}`, async () => (await inputCount(bin)) >= started, 60_000, 2);
        await victim.kill("SIGKILL");
        await waitFor(
          "every nft the victim started to finish",
          async () => (await recordedLoads(bin)).every((load) => load.done),
          60_000,
        );
        const table = await canonicalTable(topology.node);
        const hooked = Object.values(table?.chains ?? {}).some((chain) => chain.base);
        const filled = table?.sets["service-endpoints"]?.elements.length ?? 0;
        outcomes.push(`load ${started}: ${filled} slots, hooked ${hooked}`);
        assert.ok(!hooked || filled === slots, `a hooked partial table: ${outcomes.at(-1)}`);
      }
      console.log(`staged loads killed: ${outcomes.join("; ")}`);
      assert.ok(
        outcomes.some((o) => /[1-9]\d* slots, hooked false/.test(o)),
        "no kill landed between the elements and the hooks",
      );
      const restarted = start();
      await restarted.waitForLine(PROGRAMMED, STARTUP_MS);
      const table = await canonicalTable(topology.node);
      assert.equal(table?.sets["service-endpoints"]?.elements.length, slots);
      await assertServedBy(topology, WEB_IP, 80, [web]);
    } finally {
      for (const process of processes) await process.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true });
      await Deno.remove(bin, { recursive: true });
      await topology.destroy();
    }
  },
});
