/**
 * Where a kproxy start's time and memory go: runs kproxy
 * (`scripts/bench/profiled_kproxy.ts`) against the bench's fake apiserver
 * (HTTPS, realistic objects by default) in a throwaway `kp-b-*` namespace,
 * under V8's CPU profiler, and prints the phases with the process's memory
 * at each, the CPU time by file and by function, GC totals (`--trace-gc`),
 * resident memory by kind of mapping (`/proc/self/smaps`), the rule-loading
 * command's input size and time, and, with `--heap-snapshot`, the heap by
 * constructor after the first sync. Files stay in `--out.*` (`.json`,
 * `.cpuprofile` for Chrome's DevTools, `.gc.txt`, `.heapsnapshot`).
 *
 * ```sh
 * deno run --allow-all scripts/bench/profile.ts --services=10000
 * deno run --allow-all scripts/bench/profile.ts --services=1000 --heap-snapshot
 * deno run --allow-all scripts/bench/profile.ts --services=100000 --mode=iptables
 * deno run --allow-all scripts/bench/profile.ts --list-page-size=100 --env=MALLOC_ARENA_MAX=1
 * deno run --allow-all scripts/bench/profile.ts --services=100000 --changes=20  # partial syncs
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { kproxyArgs, OBJECT_SHAPES, type ObjectShape } from "./cluster.ts";
import { withNamespace } from "./harness.ts";
import type { ProfileReport } from "./profiled_kproxy.ts";
import { V8_FLAGS } from "../compile.ts";
import { spawnFakeApiserver } from "./process.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const CHILD = new URL("./profiled_kproxy.ts", import.meta.url).pathname;
const QUIET_ENV = { RUST_BACKTRACE: "0", NO_COLOR: "1" };

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
}

/** Where a profile node's code lives: a kproxy file, an npm package, the runtime, or V8. */
export function codeOrigin(url: string, functionName: string): string {
  if (url === "") return functionName === "" ? "(anonymous V8)" : functionName;
  const npm = /\/npm\/[^/]+\/(@[^/]+\/[^/]+|[^/]+)\//.exec(url) ??
    /node_modules\/(@[^/]+\/[^/]+|[^/]+)\//.exec(url);
  if (npm) return `npm:${npm[1]}`;
  if (url.startsWith("ext:") || url.startsWith("node:")) return url.split("/")[0]!;
  const local = url.indexOf("/scale-measure/") >= 0 ? url.split("/scale-measure/")[1] : undefined;
  if (local) return local;
  const repo = /\/(lib|backends|scripts|tests)\/.*$/.exec(url);
  return repo ? repo[0].slice(1) : url;
}

/** Self time (ms) per key of the profile's samples. */
export function selfTime(
  profile: CpuProfile,
  key: (frame: CpuProfile["nodes"][number]["callFrame"]) => string,
): Map<string, number> {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const totals = new Map<string, number>();
  profile.samples.forEach((id, i) => {
    const node = byId.get(id);
    if (!node) return;
    const k = key(node.callFrame);
    totals.set(k, (totals.get(k) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  });
  return totals;
}

/** One kind of GC in a `--trace-gc` log: pauses, their total, the largest heap after one. */
export interface GcTotal {
  count: number;
  ms: number;
  /** Largest committed heap (MB) reported after a collection of this kind. */
  maxCommittedMB: number;
}

/**
 * Totals of V8's `--trace-gc` lines per kind (Scavenge, Mark-Compact, …), e.g.
 * `Scavenge 3.4 (4.4) -> 3.0 (5.2) MB, pooled: 0.0 MB, 3.97 / 0.00 ms …`.
 */
export function gcTotals(lines: string[]): Map<string, GcTotal> {
  const totals = new Map<string, GcTotal>();
  const pattern =
    /\d+ ms: ((?:Incremental |Minor )?Mark-Compact|Scavenge)(?: \(reduce\))? [\d.]+ \([\d.]+\) -> [\d.]+ \(([\d.]+)\) MB,(?: pooled: [\d.]+ MB,)? ([\d.]+) \/ [\d.]+ ms/;
  for (const line of lines) {
    const match = pattern.exec(line);
    if (!match) continue;
    const total = totals.get(match[1]!) ?? { count: 0, ms: 0, maxCommittedMB: 0 };
    total.count++;
    total.ms += Number(match[3]);
    total.maxCommittedMB = Math.max(total.maxCommittedMB, Number(match[2]));
    totals.set(match[1]!, total);
  }
  return totals;
}

/** Self size (MiB) and count per `type:name` of a V8 heap snapshot, largest first. */
export function heapByConstructor(
  snapshot: {
    snapshot: { meta: { node_fields: string[]; node_types: unknown[] } };
    nodes: number[];
    strings: string[];
  },
): [string, { mib: number; count: number }][] {
  const fields = snapshot.snapshot.meta.node_fields;
  const types = snapshot.snapshot.meta.node_types[0] as string[];
  const width = fields.length;
  const [typeAt, nameAt, sizeAt] = ["type", "name", "self_size"].map((f) => fields.indexOf(f));
  const totals = new Map<string, { mib: number; count: number }>();
  for (let i = 0; i < snapshot.nodes.length; i += width) {
    const type = types[snapshot.nodes[i + typeAt!]!]!;
    const name = snapshot.strings[snapshot.nodes[i + nameAt!]!]!;
    const key = type === "object" || type === "closure" || type === "hidden" || type === "array"
      ? `${type}:${name.slice(0, 60)}`
      : type;
    const total = totals.get(key) ?? { mib: 0, count: 0 };
    total.mib += snapshot.nodes[i + sizeAt!]! / 1024 / 1024;
    total.count++;
    totals.set(key, total);
  }
  return [...totals].sort((a, b) => b[1].mib - a[1].mib);
}

/**
 * Self time per key in each window between consecutive phase ends (ms since
 * the process started; the profile starts at the first phase).
 */
export function selfTimeByPhase(
  profile: CpuProfile,
  phaseEnds: { name: string; atMs: number }[],
  key: (frame: CpuProfile["nodes"][number]["callFrame"]) => string,
): { name: string; totals: Map<string, number> }[] {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const windows = phaseEnds.slice(1).map((phase) => ({
    ...phase,
    totals: new Map<string, number>(),
  }));
  let at = phaseEnds[0]?.atMs ?? 0;
  let window = 0;
  profile.samples.forEach((id, i) => {
    const delta = (profile.timeDeltas[i] ?? 0) / 1000;
    at += delta;
    while (window < windows.length - 1 && at > windows[window]!.atMs) window++;
    const node = byId.get(id);
    if (!node || windows.length === 0) return;
    const totals = windows[window]!.totals;
    const k = key(node.callFrame);
    totals.set(k, (totals.get(k) ?? 0) + delta);
  });
  return windows.map(({ name, totals }) => ({ name, totals }));
}

function top(totals: Map<string, number>, count: number): string[] {
  const all = [...totals.values()].reduce((a, b) => a + b, 0);
  return [...totals].sort((a, b) => b[1] - a[1]).slice(0, count).map(([key, ms]) =>
    `${ms.toFixed(0).padStart(7)} ms ${(100 * ms / all).toFixed(1).padStart(5)}%  ${key}`
  );
}

async function lines(stream: ReadableStream<Uint8Array>, into: string[]): Promise<void> {
  let buffer = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    const parts = buffer.split("\n");
    buffer = parts.pop() ?? "";
    into.push(...parts);
  }
  if (buffer !== "") into.push(buffer);
}

/** Resolves once `path` exists, or never when `until` settles first. */
async function appears(path: string, until: Promise<unknown>): Promise<boolean> {
  let done = false;
  until.finally(() => done = true);
  while (!done) {
    try {
      await Deno.stat(path);
      return true;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  return false;
}

/** Sends `count` EndpointSlice updates spread over the services to the fake apiserver. */
async function sendChanges(
  stdin: WritableStream<Uint8Array>,
  options: { count: number; services: number; gapMs: number },
): Promise<void> {
  const writer = stdin.getWriter();
  const encoder = new TextEncoder();
  for (let k = 0; k < options.count; k++) {
    await new Promise((resolve) => setTimeout(resolve, options.gapMs));
    const index = Math.floor((k * options.services) / options.count);
    await writer.write(encoder.encode(`slice ${index} ${k + 1}\n`));
  }
  writer.releaseLock();
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      services: { type: "string", default: "10000" },
      endpoints: { type: "string", default: "10" },
      objects: { type: "string", default: "realistic" },
      mode: { type: "string", default: "nftables" },
      out: { type: "string" },
      "heap-snapshot": { type: "boolean", default: false },
      "settle-ms": { type: "string", default: "3000" },
      "v8-flags": { type: "string", default: "" },
      "list-page-size": { type: "string", default: "500" },
      env: { type: "string", default: "" },
      changes: { type: "string", default: "0" },
    },
  });
  const shape = values.objects as ObjectShape;
  if (!OBJECT_SHAPES.includes(shape)) throw new Error(`Cannot parse --objects ${shape}`);
  const mode = values.mode as "nftables" | "iptables";
  const out = values.out ?? `/tmp/kp-profile-${mode}-${values.services}`;
  await withNamespace(`prof-${mode.slice(0, 3)}`, async (namespace) => {
    const kubeconfig = `${out}.kubeconfig`;
    const apiserver = spawnFakeApiserver({
      namespace,
      services: Number(values.services),
      endpointsPerService: Number(values.endpoints),
      shape,
      tls: true,
      kubeconfig,
    });
    try {
      const ready = apiserver.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      while (!text.includes("\n")) {
        const { value, done } = await ready.read();
        if (done) throw new Error("the fake apiserver ended before it was ready");
        text += value;
      }
      console.log(`fake apiserver: ${text.trim()} (port, ms to serve one paged list)`);
      const v8Flags = [...V8_FLAGS, "--trace-gc", ...values["v8-flags"].split(",")]
        .filter((flag) => flag !== "");
      const child = new Deno.Command("ip", {
        args: [
          "netns",
          "exec",
          namespace,
          Deno.execPath(),
          "run",
          "--allow-all",
          `--v8-flags=${v8Flags.join(",")}`,
          CHILD,
          `--out=${out}`,
          `--settle-ms=${values["settle-ms"]}`,
          `--list-page-size=${values["list-page-size"]}`,
          `--changes=${values.changes}`,
          ...values["heap-snapshot"] ? ["--heap-snapshot"] : [],
          "--",
          ...kproxyArgs({ mode, kubeconfig }),
          `--${mode}-sync-period=1h`,
          "--v=2",
        ],
        cwd: ROOT,
        env: {
          ...QUIET_ENV,
          ...Object.fromEntries(
            values.env.split(",").filter((pair) => pair !== "").map((pair) => pair.split("=", 2)),
          ),
        },
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
      const gcLines: string[] = [];
      await Deno.remove(`${out}.ready`).catch(() => undefined);
      const changing = (async () => {
        if (Number(values.changes) === 0) return;
        if (!await appears(`${out}.ready`, child.status)) return;
        await sendChanges(apiserver.stdin, {
          count: Number(values.changes),
          services: Number(values.services),
          gapMs: 500,
        });
      })();
      const [status] = await Promise.all([child.status, lines(child.stdout, gcLines), changing]);
      if (!status.success) throw new Error(`the profiled kproxy failed (${status.code})`);
      await Deno.writeTextFile(`${out}.gc.txt`, gcLines.join("\n"));
      const report: ProfileReport = JSON.parse(await Deno.readTextFile(`${out}.json`));
      console.log(
        `\nphases (${mode}, ${values.services} services × ${values.endpoints}, ${shape}):`,
      );
      console.log(
        "   at ms   +ms    RSS    HWM   heap used/total  external  anon  malloc  binary  phase",
      );
      let last = 0;
      for (const phase of report.phases) {
        console.log(
          [
            phase.atMs.toFixed(0).padStart(8),
            (phase.atMs - last).toFixed(0).padStart(5),
            phase.rssMiB.toFixed(0).padStart(6),
            phase.hwmMiB.toFixed(0).padStart(6),
            `${phase.heapUsedMiB.toFixed(0).padStart(8)}/${
              phase.heapTotalMiB.toFixed(0).padEnd(6)
            }`,
            phase.externalMiB.toFixed(0).padStart(8),
            (phase.smaps.anonymous ?? 0).toFixed(0).padStart(5),
            (phase.smaps.malloc ?? 0).toFixed(0).padStart(7),
            (phase.smaps.binary ?? 0).toFixed(0).padStart(7),
            ` ${phase.name}`,
          ].join(" "),
        );
        last = phase.atMs;
      }
      console.log(`listed: ${JSON.stringify(report.listed)}`);
      for (const command of report.commands) {
        console.log(
          `command: ${command.program} ${command.args.join(" ")}: ${command.ms.toFixed(0)} ms, ` +
            `stdin ${(command.stdinBytes / 1024 / 1024).toFixed(2)} MiB`,
        );
      }
      const profile: CpuProfile = JSON.parse(await Deno.readTextFile(`${out}.cpuprofile`));
      console.log("\nCPU self time by file:");
      console.log(top(selfTime(profile, (f) => codeOrigin(f.url, f.functionName)), 25).join("\n"));
      console.log("\nCPU self time per phase (ms; the largest files):");
      for (
        const { name, totals } of selfTimeByPhase(
          profile,
          report.phases,
          (f) => codeOrigin(f.url, f.functionName),
        )
      ) {
        const entries = [...totals].sort((a, b) => b[1] - a[1]);
        const busy = entries.filter(([k]) => k !== "(idle)").reduce((sum, [, ms]) => sum + ms, 0);
        console.log(
          `  ${name}: ${busy.toFixed(0)} ms busy; ` +
            entries.filter(([k]) => k !== "(idle)").slice(0, 7)
              .map(([k, ms]) => `${k} ${ms.toFixed(0)}`).join(", "),
        );
      }
      console.log("\nCPU self time by function:");
      console.log(
        top(
          selfTime(
            profile,
            (f) =>
              `${f.functionName || "(anonymous)"} ${codeOrigin(f.url, "")}:${f.lineNumber + 1}`,
          ),
          30,
        ).join("\n"),
      );
      if (report.changeSyncsMs) {
        const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
        const middle = (values: number[]) => sorted(values)[values.length >> 1] ?? NaN;
        const loads = report.commands.filter((c) => c.program === "nft" && c.args.includes("-f"))
          .slice(1).map((c) => c.ms);
        console.log(
          `\n${report.changeSyncsMs.length} one-endpoint changes: sync median ` +
            `${middle(report.changeSyncsMs).toFixed(1)} ms (${
              sorted(report.changeSyncsMs).map((v) => v.toFixed(0)).join(" ")
            }), network programming median ${
              middle(report.changeProgrammingMs ?? []).toFixed(1)
            } ` +
            `ms, nft -f median ${middle(loads).toFixed(1)} ms`,
        );
        const changes: CpuProfile = JSON.parse(
          await Deno.readTextFile(`${out}.changes.cpuprofile`),
        );
        console.log("CPU self time during the changes, by function:");
        console.log(
          top(
            selfTime(
              changes,
              (f) =>
                `${f.functionName || "(anonymous)"} ${codeOrigin(f.url, "")}:${f.lineNumber + 1}`,
            ),
            25,
          ).join("\n"),
        );
      }
      console.log("\nGC pauses (--trace-gc):");
      for (const [kind, total] of gcTotals(gcLines)) {
        console.log(
          `  ${kind}: ${total.count} pauses, ${total.ms.toFixed(0)} ms, ` +
            `largest committed heap after one ${total.maxCommittedMB.toFixed(0)} MB`,
        );
      }
      console.log(`V8 heap spaces used (MiB): ${JSON.stringify(report.heapSpaces, null, 0)}`);
      if (values["heap-snapshot"]) {
        const snapshot = JSON.parse(await Deno.readTextFile(`${out}.heapsnapshot`));
        console.log("\nheap after the first sync by type:constructor (self size):");
        for (const [key, { mib, count }] of heapByConstructor(snapshot).slice(0, 30)) {
          console.log(`${mib.toFixed(2).padStart(9)} MiB ${String(count).padStart(9)}  ${key}`);
        }
      }
      console.log(
        `\nfiles: ${out}.json, ${out}.cpuprofile${
          values["heap-snapshot"] ? `, ${out}.heapsnapshot` : ""
        }; GC trace lines: ${gcLines.length}`,
      );
    } finally {
      await apiserver.stdin.close().catch(() => undefined);
      await apiserver.status;
      await Deno.remove(`${out}.kubeconfig`).catch(() => undefined);
    }
  });
}
