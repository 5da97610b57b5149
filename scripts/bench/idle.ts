/**
 * Waits for the machine to go quiet before a measured run: after the bench
 * loads thousands of objects, the apiserver and etcd keep working for a while
 * (2026-12-05: the first 10k runs after a load took kube-proxy 60.1 s and
 * kproxy's change 1.9 s, against 12–31 s and 40 ms in the runs after).
 *
 * @module
 */

/** Busy and total CPU ticks of the whole machine (the first `cpu` line of /proc/stat). */
export interface CpuTimes {
  busy: number;
  total: number;
}

/**
 * Reads /proc/stat's text. Idle and iowait ticks count as not busy.
 *
 * @throws {Error} when the text has no `cpu` line.
 */
export function cpuTimes(stat: string): CpuTimes {
  const line = stat.split("\n").find((text) => text.startsWith("cpu "));
  if (line === undefined) throw new Error("/proc/stat has no cpu line");
  const ticks = line.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, idle, iowait, irq, softirq, steal] = ticks.map((n) => n || 0);
  const busy = user! + nice! + system! + irq! + softirq! + steal!;
  return { busy, total: busy + idle! + iowait! };
}

/** How many cores' worth of CPU time was busy between two readings of `cpus` cores. */
export function busyCores(before: CpuTimes, after: CpuTimes, cpus: number): number {
  const total = after.total - before.total;
  return total > 0 ? ((after.busy - before.busy) / total) * cpus : 0;
}

/**
 * Waits until less than `maxBusyCores` were busy over a `windowMs` window, or
 * `timeoutMs` passed.
 *
 * @returns how long it waited and the last window's busy cores.
 */
export async function untilIdle(options: {
  maxBusyCores: number;
  windowMs?: number;
  timeoutMs: number;
}): Promise<{ waitedMs: number; busyCores: number }> {
  const windowMs = options.windowMs ?? 1000;
  const cpus = navigator.hardwareConcurrency;
  const started = performance.now();
  let busy = Infinity;
  while (performance.now() - started < options.timeoutMs) {
    const before = cpuTimes(await Deno.readTextFile("/proc/stat"));
    await new Promise((resolve) => setTimeout(resolve, windowMs));
    busy = busyCores(before, cpuTimes(await Deno.readTextFile("/proc/stat")), cpus);
    if (busy < options.maxBusyCores) break;
  }
  return { waitedMs: performance.now() - started, busyCores: busy };
}
