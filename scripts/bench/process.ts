/**
 * Process benchmarks: start-up to first sync and peak RSS of a real kproxy
 * process (`deno run --allow-all main.ts`, with the V8 flags `deno task
 * compile` bakes into the executable) inside a `kp-b-*` namespace,
 * against a fake apiserver process serving a synthetic cluster in the same
 * namespace. The floor beside them: a Deno process that only loads kproxy's
 * modules.
 *
 * @module
 */

import { type ClusterSize, kproxyArgs, type ObjectShape } from "./cluster.ts";
import { median, withNamespace } from "./harness.ts";
import type { BenchMode } from "./latency.ts";
import { V8_FLAGS } from "../compile.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const MAIN = `${ROOT}main.ts`;
const APISERVER = new URL("./apiserver.ts", import.meta.url).pathname;
const FLOOR = new URL("./floor.ts", import.meta.url).pathname;
const QUIET_ENV = { RUST_BACKTRACE: "0", NO_COLOR: "1" };

/** Start-up and memory of one kproxy process. */
export interface ProcessRow {
  mode: BenchMode;
  services: number;
  endpointsPerService: number;
  /** Shape of the API objects served; absent in runs before 2026-11-26 (minimal). */
  shape?: ObjectShape;
  /** Fresh processes measured; the figures are their medians. Absent: 1. */
  runs?: number;
  /** The fake apiserver served HTTPS (absent in runs before 2026-11-26: plain HTTP). */
  https?: boolean;
  /** From spawning the process to the end of its first successful sync. */
  startupMs: number;
  /** From spawning the process to its "Initial lists complete" log line. */
  listedMs?: number;
  /** VmHWM after the first sync and a few changes-free seconds, in MiB. */
  peakRssMiB: number;
  /** Every run's peak RSS, in MiB. */
  peakRssRunsMiB?: number[];
  /** VmHWM read as the initial lists completed, in MiB. */
  peakAtListedMiB?: number;
  /** VmRSS at the same moment, in MiB. */
  rssMiB: number;
  /** Time the fake apiserver took to serve a full paged list of Services and EndpointSlices. */
  listFloorMs: number;
}

/** Memory of a Deno process that only loaded kproxy's modules (its floor). */
export interface FloorRow {
  startupMs: number;
  peakRssMiB: number;
}

/** Reads VmHWM and VmRSS (MiB) of a process. */
export async function memoryOf(pid: number): Promise<{ peak: number; rss: number }> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const field = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1]);
  return { peak: field("VmHWM") / 1024, rss: field("VmRSS") / 1024 };
}

/**
 * Reads lines from a stream until `match` returns a value; keeps draining
 * afterwards (handing every line to `onLine`).
 */
async function firstLine<T>(
  stream: ReadableStream<Uint8Array>,
  match: (line: string) => T | undefined,
  timeoutMs: number,
  what: string,
  onLine?: (line: string) => void,
): Promise<T> {
  const lines = stream.pipeThrough(new TextDecoderStream()).getReader();
  const found = Promise.withResolvers<T>();
  const timer = setTimeout(
    () => found.reject(new Error(`Timed out waiting for ${what}`)),
    timeoutMs,
  );
  const tail: string[] = [];
  (async () => {
    let buffer = "";
    let done = false;
    let matched = false;
    while (!done) {
      const chunk = await lines.read().catch(() => ({ done: true, value: undefined }));
      done = chunk.done ?? true;
      buffer += chunk.value ?? "";
      const parts = buffer.split("\n");
      buffer = parts.pop() ?? "";
      for (const line of parts) {
        onLine?.(line);
        if (matched) continue;
        tail.push(line);
        if (tail.length > 20) tail.shift();
        const value = match(line);
        if (value !== undefined) {
          matched = true;
          found.resolve(value);
        }
      }
    }
    if (!matched) found.reject(new Error(`${what} never came; last output:\n${tail.join("\n")}`));
  })();
  try {
    return await found.promise;
  } finally {
    clearTimeout(timer);
  }
}

async function stopChild(child: Deno.ChildProcess, signal: Deno.Signal): Promise<void> {
  try {
    child.kill(signal);
  } catch {
    // Already exited.
  }
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
  }, 10_000);
  await child.status;
  clearTimeout(timer);
}

/** One kproxy process's start-up and memory. */
type ProcessRun = Pick<
  ProcessRow,
  "startupMs" | "listedMs" | "peakRssMiB" | "peakAtListedMiB" | "rssMiB" | "listFloorMs"
>;

/**
 * Starts a fake apiserver and then kproxy in one namespace, `runs` times
 * (a fresh namespace and processes each time), times kproxy's start to its
 * "Initial lists complete" and "Programmed the initial" log lines, waits
 * `settleMs` and reads its peak RSS. The row holds the medians.
 */
export async function benchProcess(options: {
  mode: BenchMode;
  size: ClusterSize;
  settleMs?: number;
  /** @default {1} */
  runs?: number;
  /** Serve HTTPS, as a real apiserver. @default {true} */
  https?: boolean;
  /** The kproxy entry point to run, for A/B runs of two checkouts. @default {this checkout's main.ts} */
  main?: string;
  /** V8 flags of the kproxy process. @default {V8_FLAGS, as the compiled executable} */
  v8Flags?: readonly string[];
}): Promise<ProcessRow> {
  const runs: ProcessRun[] = [];
  for (let run = 0; run < (options.runs ?? 1); run++) runs.push(await processRun(options));
  const middle = (pick: (run: ProcessRun) => number | undefined) =>
    median(runs.map(pick).filter((value): value is number => value !== undefined));
  return {
    mode: options.mode,
    services: options.size.services,
    endpointsPerService: options.size.endpointsPerService,
    shape: options.size.shape ?? "realistic",
    runs: runs.length,
    https: options.https ?? true,
    startupMs: middle((run) => run.startupMs),
    listedMs: middle((run) => run.listedMs),
    peakRssMiB: middle((run) => run.peakRssMiB),
    peakRssRunsMiB: runs.map((run) => run.peakRssMiB),
    peakAtListedMiB: middle((run) => run.peakAtListedMiB),
    rssMiB: middle((run) => run.rssMiB),
    listFloorMs: middle((run) => run.listFloorMs),
  };
}

/**
 * The command line of a kproxy process as the bench runs it: `deno run
 * --allow-all main.ts ARGS` with the V8 flags `deno task compile` bakes into
 * the executable.
 */
export function kproxyCommand(
  args: readonly string[],
  options: { main?: string; v8Flags?: readonly string[] } = {},
): string[] {
  const v8Flags = options.v8Flags ?? V8_FLAGS;
  return [
    Deno.execPath(),
    "run",
    "--allow-all",
    ...(v8Flags.length === 0 ? [] : [`--v8-flags=${v8Flags.join(",")}`]),
    options.main ?? MAIN,
    ...args,
  ];
}

/** Options of {@linkcode spawnFakeApiserver}. */
export interface FakeApiserverProcess {
  namespace: string;
  services: number;
  endpointsPerService: number;
  shape: string;
  tls: boolean;
  /** Where it writes the kubeconfig kproxy reads. */
  kubeconfig: string;
}

/**
 * The bench's fake apiserver (`apiserver.ts`) as a process of its own in
 * `namespace`; its first stdout line is `ready PORT MS` (MS: one paged list).
 */
export function spawnFakeApiserver(options: FakeApiserverProcess): Deno.ChildProcess {
  return new Deno.Command("ip", {
    args: [
      "netns",
      "exec",
      options.namespace,
      Deno.execPath(),
      "run",
      "--allow-all",
      APISERVER,
      `--services=${options.services}`,
      `--endpoints=${options.endpointsPerService}`,
      `--objects=${options.shape}`,
      ...options.tls ? ["--tls"] : [],
      `--kubeconfig=${options.kubeconfig}`,
    ],
    cwd: ROOT,
    env: QUIET_ENV,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
}

async function processRun(options: {
  mode: BenchMode;
  size: ClusterSize;
  settleMs?: number;
  https?: boolean;
  main?: string;
  v8Flags?: readonly string[];
}): Promise<ProcessRun> {
  const { mode, size } = options;
  return await withNamespace(`proc-${mode.slice(0, 3)}`, async (namespace) => {
    const kubeconfig = await Deno.makeTempFile({ prefix: `${namespace}-`, suffix: ".kubeconfig" });
    const apiserver = spawnFakeApiserver({
      namespace,
      services: size.services,
      endpointsPerService: size.endpointsPerService,
      shape: size.shape ?? "realistic",
      tls: options.https ?? true,
      kubeconfig,
    });
    let kproxy: Deno.ChildProcess | undefined;
    try {
      const listFloorMs = await firstLine(
        apiserver.stdout,
        (line) => line.startsWith("ready ") ? Number(line.split(" ")[2]) : undefined,
        600_000,
        "the fake apiserver",
      );
      const startedAt = performance.now();
      kproxy = new Deno.Command("ip", {
        args: [
          "netns",
          "exec",
          namespace,
          ...kproxyCommand([
            ...kproxyArgs({ mode, kubeconfig }),
            `--${mode}-sync-period=1h`,
            "--v=2",
          ], { main: options.main, v8Flags: options.v8Flags }),
        ],
        cwd: ROOT,
        env: QUIET_ENV,
        stdin: "null",
        stdout: "null",
        stderr: "piped",
      }).spawn();
      const pid = kproxy.pid;
      let listed: Promise<{ at: number; peak: number }> | undefined;
      await firstLine(
        kproxy.stderr,
        (line) => line.includes("Programmed the initial") ? true : undefined,
        1_800_000,
        "kproxy's first sync",
        (line) => {
          if (listed === undefined && line.includes("Initial lists complete")) {
            const at = performance.now() - startedAt;
            listed = memoryOf(pid).then((memory) => ({ at, peak: memory.peak }));
          }
        },
      );
      const startupMs = performance.now() - startedAt;
      const atListed = await listed;
      await new Promise((resolve) => setTimeout(resolve, options.settleMs ?? 3000));
      const memory = await memoryOf(pid);
      return {
        startupMs,
        listedMs: atListed?.at,
        peakRssMiB: memory.peak,
        peakAtListedMiB: atListed?.peak,
        rssMiB: memory.rss,
        listFloorMs,
      };
    } finally {
      if (kproxy) await stopChild(kproxy, "SIGTERM");
      await apiserver.stdin.close().catch(() => undefined);
      await stopChild(apiserver, "SIGTERM");
      await Deno.remove(kubeconfig).catch(() => undefined);
    }
  });
}

/** Start-up time and peak RSS of a Deno process that only loads kproxy's modules. */
export async function benchFloor(): Promise<FloorRow> {
  const startedAt = performance.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", FLOOR],
    cwd: ROOT,
    env: QUIET_ENV,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  try {
    await firstLine(child.stdout, (l) => l === "ready" ? true : undefined, 60_000, "the floor");
    const startupMs = performance.now() - startedAt;
    await new Promise((resolve) => setTimeout(resolve, 1000));
    return { startupMs, peakRssMiB: (await memoryOf(child.pid)).peak };
  } finally {
    await child.stdin.close().catch(() => undefined);
    await stopChild(child, "SIGTERM");
  }
}
