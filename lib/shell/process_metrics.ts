/**
 * The `process_*` metrics kube-proxy (like every Go component) exposes, read
 * at scrape time: CPU time, resident memory, start time, open and maximum
 * file descriptors.
 *
 * CPU comes from `Deno.cpuUsage()` (the runtime's reading behind
 * `node:process`'s `cpuUsage()`, present in Deno 2.9 though not in its
 * types; calling it directly keeps the Node compatibility layer asleep),
 * memory from
 * `Deno.memoryUsage()` and the start time from `performance.timeOrigin`: none
 * needs a permission. The descriptor counts come from `/proc/self/fd` and
 * `/proc/self/limits`, which Deno refuses to any process without
 * `--allow-all`, whatever `--allow-read` names: under the exact permissions of
 * `deno task launch` and the compiled binary these two are not served
 * (docs/ARCHITECTURE.md, "Metrics").
 *
 * @module
 */

import { Counter, Gauge, type Registry } from "./prometheus.ts";

/** Where the process figures come from; inject a fake one in tests. */
export interface ProcessStats {
  /** User and system CPU time since the process started, in seconds. */
  cpuSeconds(): number;
  residentMemoryBytes(): number;
  /** When the process started, in seconds since the epoch. */
  startTimeSeconds(): number;
  /** Open file descriptors; undefined when they cannot be counted. */
  openFds(): number | undefined;
  /** The soft limit on open file descriptors; undefined when unknown. */
  maxFds(): number | undefined;
}

/** Reads the soft "Max open files" limit from the text of `/proc/self/limits`. */
export function parseMaxOpenFiles(limits: string): number | undefined {
  const soft = limits.match(/^Max open files\s+(\d+|unlimited)\s/m)?.[1];
  if (soft === undefined) return undefined;
  return soft === "unlimited" ? Infinity : Number(soft);
}

function tryRead<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/** User and system CPU time in microseconds, as `node:process`'s `cpuUsage()`. */
type CpuUsage = () => { user: number; system: number };

const cpuUsage = (Deno as unknown as { cpuUsage?: CpuUsage }).cpuUsage ??
  (() => ({ user: NaN, system: NaN }));

/** The figures of this Deno process. */
export const denoProcessStats: ProcessStats = {
  cpuSeconds: () => {
    const { user, system } = cpuUsage();
    return (user + system) / 1e6;
  },
  residentMemoryBytes: () => Deno.memoryUsage().rss,
  startTimeSeconds: () => performance.timeOrigin / 1000,
  openFds: () => tryRead(() => [...Deno.readDirSync("/proc/self/fd")].length),
  maxFds: () => tryRead(() => parseMaxOpenFiles(Deno.readTextFileSync("/proc/self/limits"))),
};

/**
 * Registers the process metrics on `registry`. The descriptor gauges are
 * registered only when `stats` can read them now, so a scrape never shows a
 * family without a sample.
 */
export function registerProcessMetrics(
  registry: Registry,
  stats: ProcessStats = denoProcessStats,
): void {
  const registers = [registry];
  new Counter({
    name: "process_cpu_seconds_total",
    help: "Total user and system CPU time spent in seconds.",
    registers,
    collect() {
      this.reset();
      const seconds = stats.cpuSeconds();
      // A counter refuses NaN; an unreadable CPU time must not fail the scrape.
      if (Number.isFinite(seconds)) this.inc(seconds);
    },
  });
  new Gauge({
    name: "process_resident_memory_bytes",
    help: "Resident memory size in bytes.",
    registers,
    collect() {
      this.set(stats.residentMemoryBytes());
    },
  });
  new Gauge({
    name: "process_start_time_seconds",
    help: "Start time of the process since unix epoch in seconds.",
    registers,
  }).set(stats.startTimeSeconds());
  const gauges = [
    { name: "process_open_fds", help: "Number of open file descriptors.", read: stats.openFds },
    {
      name: "process_max_fds",
      help: "Maximum number of open file descriptors.",
      read: stats.maxFds,
    },
  ];
  for (const { name, help, read } of gauges) {
    if (read() === undefined) continue;
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read() ?? NaN);
      },
    });
  }
}
