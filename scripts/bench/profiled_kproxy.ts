/**
 * kproxy under a profiler, for `scripts/bench/profile.ts`: runs `main()` with
 * the given kproxy flags (apiserver source, nftables or iptables mode) while
 * V8's sampling CPU profiler runs, and records when each phase of the start
 * ended and the process's memory then: kproxy's modules loaded, first list
 * page, initial lists complete, rules handed to `nft`/`*-restore`, first sync
 * done. After the first sync and `--settle-ms` it writes everything to
 * `--out` (a JSON report, `.cpuprofile` beside it, a `.heapsnapshot` with
 * `--heap-snapshot`) and exits. `--list-page-size` sets the source's `limit`
 * (500 as kproxy's default), for A/B runs. With `--changes=N` it then writes
 * `<out>.ready`, profiles the next N syncs on their own
 * (`<out>.changes.cpuprofile`) and records each one's duration.
 *
 * ```sh
 * ip netns exec NS deno run --allow-all scripts/bench/profiled_kproxy.ts \
 *   --out=/tmp/kp-prof --settle-ms=3000 -- --proxy-mode=nftables --kubeconfig=…
 * ```
 *
 * @module
 */

import inspector from "node:inspector";
import v8 from "node:v8";
import { parseArgs } from "node:util";
import type { RunningApp } from "../../lib/commands/app.ts";
import { residentByKind } from "./smaps.ts";

/** The memory of this process at one moment. */
export interface MemorySample {
  /** VmRSS, MiB. */
  rssMiB: number;
  /** VmHWM (peak RSS so far), MiB. */
  hwmMiB: number;
  /** V8 heap in use, MiB. */
  heapUsedMiB: number;
  /** V8 heap reserved, MiB. */
  heapTotalMiB: number;
  /** Memory of objects outside the V8 heap that JS objects hold (buffers), MiB. */
  externalMiB: number;
  /** Resident memory by kind of mapping ({@linkcode smapsByKind}), MiB. */
  smaps: Record<string, number>;
}

/** When a phase ended, in ms since the process started, and the memory then. */
export interface Phase extends MemorySample {
  name: string;
  atMs: number;
}

/** What the child writes to `<out>.json`. */
export interface ProfileReport {
  args: string[];
  phases: Phase[];
  /** Rule-loading and other commands, with their time and stdin size. */
  commands: { program: string; args: string[]; startMs: number; ms: number; stdinBytes: number }[];
  /** Objects the source reported before its initial lists completed, per kind. */
  listed: Record<string, number>;
  /** V8 heap spaces after the settle time, MiB used. */
  heapSpaces: Record<string, number>;
  /** With `--changes`: each sync after the first, ms (sync_proxy_rules_duration). */
  changeSyncsMs?: number[];
  /** With `--changes`: network_programming_duration of each, ms. */
  changeProgrammingMs?: number[];
}

const MiB = 1024 * 1024;

async function sample(): Promise<MemorySample> {
  const status = await Deno.readTextFile("/proc/self/status");
  const field = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1]) / 1024;
  const memory = Deno.memoryUsage();
  return {
    rssMiB: field("VmRSS"),
    hwmMiB: field("VmHWM"),
    heapUsedMiB: memory.heapUsed / MiB,
    heapTotalMiB: memory.heapTotal / MiB,
    externalMiB: memory.external / MiB,
    smaps: await smapsByKind(),
  };
}

/** Resident memory of `/proc/self/smaps` by kind of mapping, in MiB. */
async function smapsByKind(): Promise<Record<string, number>> {
  return residentByKind(await Deno.readTextFile("/proc/self/smaps"), Deno.execPath());
}

function post<T>(session: inspector.Session, method: string, params: object = {}): Promise<T> {
  return new Promise((resolve, reject) =>
    session.post(method, params, (error, result) => error ? reject(error) : resolve(result as T))
  );
}

function stdinBytes(stdin: unknown): number {
  if (typeof stdin === "string") return stdin.length;
  if (stdin === undefined || stdin === null) return 0;
  let bytes = 0;
  for (const chunk of stdin as Iterable<string>) bytes += chunk.length;
  return bytes;
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: {
      out: { type: "string", default: "/tmp/kp-profile" },
      "settle-ms": { type: "string", default: "3000" },
      "heap-snapshot": { type: "boolean", default: false },
      "sampling-us": { type: "string", default: "1000" },
      "list-page-size": { type: "string", default: "500" },
      changes: { type: "string", default: "0" },
    },
  });
  const phases: Phase[] = [];
  const mark = async (name: string) => {
    phases.push({ name, atMs: performance.now(), ...await sample() });
  };
  const session = new inspector.Session();
  session.connect();
  await post(session, "Profiler.enable");
  await post(session, "Profiler.setSamplingInterval", { interval: Number(values["sampling-us"]) });
  await post(session, "Profiler.start");
  await mark("profiler started");

  const { main } = await import("../../lib/commands/app.ts");
  const { DenoExecutor } = await import("../../lib/shell/exec.ts");
  const { MODE_PROGRAMS } = await import("../../lib/shell/permissions.ts");
  const { KubeSource } = await import("../../lib/shell/source/kube.ts");
  const { histogramTotals } = await import("../../lib/shell/metrics.ts");
  await mark("kproxy's modules loaded");

  const flag = (name: string) =>
    positionals.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3) ?? "";
  const mode = flag("proxy-mode") as keyof typeof MODE_PROGRAMS;
  const inner = new DenoExecutor({ allowedPrograms: MODE_PROGRAMS[mode] });
  const commands: ProfileReport["commands"] = [];
  let loads = 0;
  const executor = {
    async run(command: Parameters<typeof inner.run>[0]) {
      const startMs = performance.now();
      const bytes = stdinBytes(command.stdin);
      const first = (command.program === "nft" && command.args.includes("-f") ||
        command.program.endsWith("-restore")) && loads++ === 0;
      if (first) {
        await mark(`rules rendered (${(bytes / MiB).toFixed(1)} MiB), ${command.program} started`);
      }
      try {
        return await inner.run(command);
      } finally {
        if (first) await mark(`${command.program} done`);
        commands.push({
          program: command.program,
          args: command.args,
          startMs,
          ms: performance.now() - startMs,
          stdinBytes: bytes,
        });
      }
    },
  };
  const listed: Record<string, number> = {};
  let firstPage = false;
  let synced = false;
  const kube = new KubeSource({
    kubeconfig: flag("kubeconfig"),
    master: "",
    nodeName: flag("hostname-override"),
    listPageSize: Number(values["list-page-size"]),
  });
  const source = {
    start(listener: Parameters<typeof kube.start>[0], signal: AbortSignal) {
      return kube.start((event) => {
        if (event.type === "synced") {
          synced = true;
          listener(event);
          void mark("initial lists complete");
          return;
        }
        if (!synced) {
          listed[event.kind] = (listed[event.kind] ?? 0) + 1;
          if (!firstPage) {
            firstPage = true;
            void mark("first object listed");
          }
        }
        listener(event);
      }, signal);
    },
  };
  const controller = new AbortController();
  const started = Promise.withResolvers<RunningApp>();
  const running = main(positionals, {
    executor,
    source,
    signal: controller.signal,
    handleSignals: false,
    onStarted: (app) => started.resolve(app),
  });
  const app = await started.promise;
  while (app.proxier.lastSynced === undefined) {
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  await mark("first sync done");
  await new Promise((resolve) => setTimeout(resolve, Number(values["settle-ms"])));
  await mark("settled");
  const { profile } = await post<{ profile: unknown }>(session, "Profiler.stop");
  await Deno.writeTextFile(`${values.out}.cpuprofile`, JSON.stringify(profile));
  const changes = Number(values.changes);
  let changeSyncsMs: number[] | undefined;
  let changeProgrammingMs: number[] | undefined;
  if (changes > 0) {
    const syncs = () => histogramTotals(app.metrics.syncProxyRulesDuration);
    const programming = () => histogramTotals(app.metrics.networkProgrammingDuration);
    changeSyncsMs = [];
    changeProgrammingMs = [];
    await post(session, "Profiler.start");
    await Deno.writeTextFile(`${values.out}.ready`, "ready for changes\n");
    let seen = { syncs: await syncs(), programming: await programming() };
    // Changes that arrive during a sync coalesce: stop 10 s after the last sync.
    let lastSyncAt = performance.now() + 50_000;
    while (changeSyncsMs.length < changes && performance.now() - lastSyncAt < 10_000) {
      await new Promise((resolve) => setTimeout(resolve, 1));
      const now = { syncs: await syncs(), programming: await programming() };
      if (now.syncs.count === seen.syncs.count) continue;
      lastSyncAt = performance.now();
      changeSyncsMs.push((now.syncs.sum - seen.syncs.sum) * 1000);
      if (now.programming.count > seen.programming.count) {
        changeProgrammingMs.push((now.programming.sum - seen.programming.sum) * 1000);
      }
      seen = now;
    }
    const changed = await post<{ profile: unknown }>(session, "Profiler.stop");
    await Deno.writeTextFile(`${values.out}.changes.cpuprofile`, JSON.stringify(changed.profile));
    await mark(`${changeSyncsMs.length} syncs of ${changes} changes`);
  }
  const heapSpaces: Record<string, number> = {};
  for (const space of v8.getHeapSpaceStatistics()) {
    heapSpaces[space.space_name] = space.space_used_size / MiB;
  }
  const report: ProfileReport = {
    args: positionals,
    phases: phases.sort((a, b) => a.atMs - b.atMs),
    commands,
    listed,
    heapSpaces,
    changeSyncsMs,
    changeProgrammingMs,
  };
  await Deno.writeTextFile(`${values.out}.json`, JSON.stringify(report, null, 2));
  if (values["heap-snapshot"]) v8.writeHeapSnapshot(`${values.out}.heapsnapshot`);
  controller.abort();
  Deno.exit(
    await Promise.race([running, new Promise<number>((r) => setTimeout(() => r(0), 5000))]),
  );
}
