/**
 * The churn soak (`deno task soak`, `--duration=60s` for CI): kproxy runs
 * in-process in nftables mode against the fake apiserver, programming a node
 * network namespace, while services and endpoints churn at random and a
 * client namespace sends TCP requests to three stable services in a loop.
 *
 * At the end it checks that:
 * - the kernel tables equal a fresh full render of the final plan loaded
 *   into a scratch namespace (no leaked chains, maps or elements);
 * - the final plan equals a plan made from a fresh list of the apiserver;
 * - no request to a stable service failed;
 * - memory is flat: after warm-up, the average RSS of the last quarter is
 *   within 20% of the first quarter's (and so is the heap in use, when run
 *   with `--v8-flags=--expose-gc`, which collects garbage before each sample).
 *
 * It needs root, `ip`, `nft` and `python3`; it exits 0 when every check
 * holds, 1 when one fails and 2 on bad flags.
 *
 * ```sh
 * deno run --allow-all scripts/soak.ts --duration=10m --seed=7
 * ```
 *
 * @module
 */

import { planOnce } from "../lib/commands/app.ts";
import { stableJson } from "../lib/commands/stable_json.ts";
import { parseDuration } from "../lib/config/values.ts";
import { KubeSource } from "../lib/shell/source/kube.ts";
import { FakeApiServer, writeKubeconfig } from "./testbed/fake_apiserver.ts";
import {
  canonicalTable,
  createNamespace,
  deleteNamespace,
  diffTables,
  extraElements,
  loadFreshRender,
} from "./testbed/tables.ts";
import {
  faultsSkipReason,
  FaultyExecutor,
  LogCapture,
  type RunningKproxy,
  startKproxy,
  waitFor,
} from "./testbed/kproxy.ts";
import { nodeObject, serviceObject, sliceObject } from "./testbed/objects.ts";
import { type Pod, Topology } from "./netns.ts";
import { TrafficLoop } from "./testbed/traffic.ts";

/** Options for {@linkcode runSoak}. */
export interface SoakOptions {
  /** How long the churn runs. @default {600000} */
  durationMs?: number;
  /** Seed of the churn's random choices. @default {1} */
  seed?: number;
  /** Average pause between two churn operations. @default {100} */
  churnIntervalMs?: number;
  /** At most this many churned services exist at once. @default {60} */
  maxChurnServices?: number;
  /** Progress lines. @default {console.error} */
  log?: (line: string) => void;
}

/** What {@linkcode runSoak} found; `ok` when every check held. */
export interface SoakReport {
  ok: boolean;
  durationMs: number;
  churnOperations: number;
  requests: number;
  failedRequests: { target: string; detail: string; at: string }[];
  /** How the kernel tables differ from a fresh render of the final plan, per family. */
  tableMismatches: string[];
  /**
   * Extra elements in sets whose partial syncs only ever add (see
   * {@linkcode TOLERATED_LEAKS}), per family and set; not counted as a problem.
   */
  staleElements: Record<string, number>;
  /** True when the final plan equals a plan from a fresh apiserver list. */
  planMatchesApiserver: boolean;
  memory: {
    samples: number;
    firstQuarterMB: number;
    lastQuarterMB: number;
    growth: number;
    /** RSS in MB, one sample every 10 s. */
    trendMB: number[];
  };
  /** The same for the V8 heap in use, sampled after a full GC when `--expose-gc` is given. */
  heap: SoakReport["memory"] & { afterGC: boolean };
  syncFailures: number;
  problems: string[];
}

/**
 * Sets whose extra elements are reported but not failed. Empty: partial syncs
 * now delete the hairpin elements of endpoints gone, so every leak fails.
 */
export const TOLERATED_LEAKS: readonly string[] = [];

const STABLE = [
  { name: "stable-0", ip: "10.96.0.10" },
  { name: "stable-1", ip: "10.96.0.11" },
  { name: "stable-2", ip: "10.96.0.12" },
];

/** A small deterministic generator (mulberry32). */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** How long kproxy may take to stop once aborted. */
const STOP_TIMEOUT_MS = 20_000;

/** Whether `promise` settles within `ms`. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([promise.then(() => true, () => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function average(values: number[]): number {
  return values.reduce((sum, value) => sum + value, 0) / Math.max(values.length, 1);
}

/** Compares first- and last-quarter RSS after a warm-up of 20% of the samples (at most 30). */
function memoryTrend(samples: number[]): SoakReport["memory"] {
  const warmUp = Math.min(30, Math.floor(samples.length / 5));
  const steady = samples.slice(warmUp);
  const quarter = Math.max(1, Math.floor(steady.length / 4));
  const first = average(steady.slice(0, quarter));
  const last = average(steady.slice(-quarter));
  const mb = (bytes: number) => Math.round(bytes / 1e5) / 10;
  return {
    samples: samples.length,
    firstQuarterMB: mb(first),
    lastQuarterMB: mb(last),
    growth: Math.round((last / first - 1) * 1000) / 1000,
    trendMB: samples.filter((_, i) => i % 10 === 0).map(mb),
  };
}

/** The churn: random services with endpoints on the topology's pods. */
class Churn {
  operations = 0;
  readonly #server: FakeApiServer;
  readonly #pods: Pod[];
  readonly #next: () => number;
  readonly #max: number;
  readonly #live = new Set<number>();
  #created = 0;

  constructor(options: { server: FakeApiServer; pods: Pod[]; seed: number; max: number }) {
    this.#server = options.server;
    this.#pods = options.pods;
    this.#next = random(options.seed);
    this.#max = options.max;
  }

  #pick<T>(items: T[]): T {
    return items[Math.floor(this.#next() * items.length)]!;
  }

  #endpoints(): string[] {
    const count = 1 + Math.floor(this.#next() * this.#pods.length);
    return [...new Set(Array.from({ length: count }, () => this.#pick(this.#pods).ipv4))];
  }

  /** One random create, delete, endpoint change or port change. */
  step(): void {
    this.operations++;
    const roll = this.#next();
    const live = [...this.#live];
    if (live.length === 0 || (roll < 0.35 && live.length < this.#max)) {
      const id = this.#created++ % 4000;
      if (this.#live.has(id)) return;
      this.#live.add(id);
      this.#upsertService(id, 80);
      this.#server.upsert("endpointslices", sliceObject(`churn-${id}`, this.#endpoints()));
    } else if (roll < 0.6) {
      const id = this.#pick(live);
      this.#live.delete(id);
      this.#server.delete("services", `churn-${id}`, "default");
      this.#server.delete("endpointslices", `churn-${id}-1`, "default");
    } else if (roll < 0.9) {
      const id = this.#pick(live);
      const endpoints = this.#next() < 0.1 ? [] : this.#endpoints();
      this.#server.upsert("endpointslices", sliceObject(`churn-${id}`, endpoints));
    } else {
      this.#upsertService(this.#pick(live), 80 + Math.floor(this.#next() * 3));
    }
  }

  #upsertService(id: number, port: number): void {
    const service = serviceObject({
      name: `churn-${id}`,
      clusterIP: `10.96.${100 + (id >> 8)}.${id & 255}`,
      port,
      ...(this.#next() < 0.3 ? { type: "NodePort" as const, nodePort: 30000 + id } : {}),
    });
    this.#server.upsert("services", service);
  }
}

/**
 * Runs the soak in namespaces prefixed `kp-f-soak` and returns its report;
 * everything it created is removed before it returns.
 */
export async function runSoak(options: SoakOptions = {}): Promise<SoakReport> {
  const durationMs = options.durationMs ?? 600_000;
  const log = options.log ?? ((line: string) => console.error(line));
  const problems: string[] = [];
  const logs = await LogCapture.install(0);
  const topology = await Topology.create({
    prefix: `kp-f-soak${Topology.randomTag()}-`,
    localPods: 4,
    remotePods: 0,
    serverLifetimeSeconds: Math.ceil(durationMs / 1000) + 300,
    exitOnSigint: true,
  });
  const scratch = `kp-f-soak${Topology.randomTag()}-scratch`;
  const server = await FakeApiServer.start();
  const kubeconfig = await writeKubeconfig(server);
  const newSource = () =>
    new KubeSource({
      kubeconfig,
      master: "",
      nodeName: "node-a",
      backoff: { initialMs: 100, maxMs: 1000 },
    });
  let kproxy: RunningKproxy | undefined;
  let traffic: TrafficLoop | undefined;
  const rss: number[] = [];
  const heap: number[] = [];
  const collectGarbage = (globalThis as { gc?: () => void }).gc;
  try {
    const pods = topology.localPods;
    server.upsert("nodes", nodeObject());
    STABLE.forEach((stable, i) => {
      server.upsert("services", serviceObject({ name: stable.name, clusterIP: stable.ip }));
      const endpoints = [pods[i % pods.length]!, pods[(i + 1) % pods.length]!];
      server.upsert("endpointslices", sliceObject(stable.name, endpoints.map((pod) => pod.ipv4)));
    });
    kproxy = await startKproxy({
      source: newSource(),
      executor: new FaultyExecutor({ namespace: topology.node, timeoutMs: 60_000 }),
    });
    const running = kproxy;
    await waitFor("the initial sync", () => running.app.proxier.lastSynced !== undefined, 30_000);
    traffic = TrafficLoop.start({
      topology,
      targets: STABLE.map((stable) => ({ ip: stable.ip, port: 80 })),
    });

    const churn = new Churn({
      server,
      pods,
      seed: options.seed ?? 1,
      max: options.maxChurnServices ?? 60,
    });
    const interval = options.churnIntervalMs ?? 100;
    const started = Date.now();
    let lastSample = 0;
    let lastReport = started;
    let lastCompact = started;
    while (Date.now() - started < durationMs) {
      churn.step();
      const now = Date.now();
      if (now - lastSample >= 1000) {
        collectGarbage?.();
        const usage = Deno.memoryUsage();
        rss.push(usage.rss);
        heap.push(usage.heapUsed);
        lastSample = now;
      }
      if (now - lastCompact >= 15_000) {
        // Bounds the fake's history; the next dropped watch relists (410).
        server.compact();
        if (Math.random() < 0.5) server.dropWatches();
        lastCompact = now;
      }
      if (now - lastReport >= 10_000) {
        log(
          `soak: ${Math.round((now - started) / 1000)} s, ${churn.operations} operations, ` +
            `${traffic.sent} requests, ${traffic.failures.length} failed, ` +
            `rss ${Math.round(rss.at(-1)! / 1e6)} MB`,
        );
        lastReport = now;
      }
      await new Promise((resolve) => setTimeout(resolve, interval * 2 * Math.random()));
    }
    log(`soak: churn done after ${churn.operations} operations; checking the end state`);

    const fresh = await planOnce(running.app.config, newSource());
    let planMatchesApiserver = false;
    await waitFor("the final plan", () => {
      planMatchesApiserver = stableJson(running.app.proxier.lastSynced) === stableJson(fresh);
      return planMatchesApiserver;
    }, 20_000).catch(() => problems.push("the final plan differs from a fresh apiserver list"));
    await traffic.stop();

    const plans = running.app.proxier.lastSynced!;
    await createNamespace(scratch);
    await loadFreshRender(scratch, plans, running.app.config).catch((error) =>
      problems.push(error.message)
    );
    const tableMismatches: string[] = [];
    const staleElements: Record<string, number> = {};
    for (const family of ["ip", "ip6"]) {
      const kernel = await canonicalTable(topology.node, family);
      const expected = await canonicalTable(scratch, family);
      const tolerateExtraIn = [...TOLERATED_LEAKS];
      for (const difference of diffTables(kernel, expected, { tolerateExtraIn })) {
        tableMismatches.push(`${family}: ${difference}`);
      }
      for (const set of TOLERATED_LEAKS) {
        const extra = extraElements(kernel, expected, set).length;
        if (extra > 0) staleElements[`${family} ${set}`] = extra;
      }
    }
    if (tableMismatches.length > 0) {
      problems.push(`kernel tables differ from a fresh render in ${tableMismatches.length} ways`);
    }
    const failedRequests = traffic.failures.map((failure) => ({
      target: failure.target,
      detail: failure.reply.ok ? "" : `${failure.reply.error}: ${failure.reply.detail}`,
      at: new Date(failure.at).toISOString(),
    }));
    if (failedRequests.length > 0) {
      problems.push(`${failedRequests.length} requests to stable services failed`);
    }
    if (traffic.sent === 0) problems.push("no request was sent");
    const memory = memoryTrend(rss);
    if (memory.growth > 0.2) {
      problems.push(
        `RSS grew ${Math.round(memory.growth * 100)}% from the first to the last quarter`,
      );
    }
    const heapMemory = memoryTrend(heap);
    if (collectGarbage && heapMemory.growth > 0.2) {
      problems.push(
        `the heap after GC grew ${
          Math.round(heapMemory.growth * 100)
        }% from the first to the last quarter`,
      );
    }
    const metrics = await running.metricsText();
    const syncFailures = Number(
      metrics.match(/^kproxy_sync_failures_total\{mode="nftables"\} (\d+)/m)?.[1] ?? "0",
    );
    if (syncFailures > 0) problems.push(`${syncFailures} syncs failed`);
    log("soak: stopping kproxy");
    const stopped = await settlesWithin(running.stop(), STOP_TIMEOUT_MS);
    if (!stopped) {
      problems.push(
        `kproxy did not stop within ${STOP_TIMEOUT_MS} ms of its abort ` +
          `(${server.openWatches()} watches still open)`,
      );
    }
    const errors = logs.matching(/^[EF]\d{4} /);
    if (errors.length > 0) problems.push(`${errors.length} error lines logged: ${errors[0]}`);
    return {
      ok: problems.length === 0,
      durationMs,
      churnOperations: churn.operations,
      requests: traffic.sent,
      failedRequests,
      tableMismatches,
      staleElements,
      planMatchesApiserver,
      memory,
      heap: { ...heapMemory, afterGC: collectGarbage !== undefined },
      syncFailures,
      problems,
    };
  } finally {
    log("soak: cleaning up");
    await traffic?.stop();
    if (kproxy && !await settlesWithin(kproxy.stop(), STOP_TIMEOUT_MS)) {
      log("soak: kproxy did not stop; leaving it");
    }
    await settlesWithin(server.stop(), 10_000);
    await Deno.remove(kubeconfig).catch(() => undefined);
    await deleteNamespace(scratch);
    await topology.destroy();
  }
}

/** Parses `--duration=…`, `--seed=…` and `--churn-interval=…`. */
export function parseSoakArgs(args: string[]): SoakOptions {
  const options: SoakOptions = {};
  for (const arg of args) {
    const [flag, value = ""] = arg.split("=", 2) as [string, string?];
    const ms = parseDuration(value);
    if (flag === "--duration" && ms !== undefined && ms > 0) options.durationMs = ms;
    else if (flag === "--churn-interval" && ms !== undefined) options.churnIntervalMs = ms;
    else if (flag === "--seed" && /^\d+$/.test(value)) options.seed = Number(value);
    else {
      throw new TypeError(
        `Cannot parse soak flag "${arg}": expected --duration=DURATION, --seed=N or --churn-interval=DURATION`,
      );
    }
  }
  return options;
}

if (import.meta.main) {
  let options: SoakOptions;
  try {
    options = parseSoakArgs(Deno.args);
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    Deno.exit(2);
  }
  const reason = await faultsSkipReason(["nft"]);
  if (reason !== undefined) {
    console.error(`soak: cannot run: ${reason}`);
    Deno.exit(1);
  }
  const report = await runSoak(options);
  console.log(JSON.stringify(report, null, 2));
  Deno.exit(report.ok ? 0 : 1);
}
