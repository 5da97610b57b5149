/**
 * Watch-event-to-kernel benchmarks: kproxy runs in-process (`main()` with
 * the real KubeSource and backend) against an in-process fake apiserver
 * serving a synthetic cluster; every kernel command runs in a throwaway
 * `kp-b-*` namespace. One-change latency and an event storm.
 *
 * @module
 */

import { main, type RunningApp } from "../../lib/commands/app.ts";
import { FakeApiServer, writeKubeconfig } from "../testbed/fake_apiserver.ts";
import { HostExecutor, NetnsExecutor } from "../netns.ts";
import { testCertificates } from "../testbed/tls.ts";
import {
  type ClusterSize,
  endpointIP,
  fillCluster,
  kproxyArgs,
  type ObjectShape,
  servicePortIdOf,
  sliceObject,
} from "./cluster.ts";
import { median, TimingExecutor, waitFor, withNamespace } from "./harness.ts";
import { histogramTotals } from "../../lib/shell/metrics.ts";

const IPV4 = { ip_family: "IPv4" };

/** Proxy modes the latency benches drive. */
export type BenchMode = "nftables" | "iptables";

/** A running in-process kproxy with its fake apiserver and namespace. */
interface Harness {
  server: FakeApiServer;
  app: RunningApp;
  executor: TimingExecutor;
  namespace: string;
  /** Milliseconds from `main()` to the first successful sync. */
  initialSyncMs: number;
}

/** Extra flags: long sync periods keep periodic full resyncs out of the figures. */
function benchFlags(mode: BenchMode): string[] {
  const flags = [`--${mode}-sync-period=1h`];
  if (mode === "iptables") flags.push("--iptables-backend=nft");
  return flags;
}

async function withKproxy<T>(
  mode: BenchMode,
  size: ClusterSize,
  fn: (harness: Harness) => Promise<T>,
): Promise<T> {
  return await withNamespace(`lat-${mode.slice(0, 3)}`, async (namespace) => {
    // HTTPS, as a real apiserver serves (the watch events' TLS is part of the latency).
    const server = await FakeApiServer.start({ tls: await testCertificates() });
    fillCluster(server, size);
    const kubeconfig = await writeKubeconfig(server);
    const executor = new TimingExecutor(namespace);
    const controller = new AbortController();
    const started = Promise.withResolvers<RunningApp>();
    const startedAt = performance.now();
    const running = main([...kproxyArgs({ mode, kubeconfig }), ...benchFlags(mode)], {
      executor,
      signal: controller.signal,
      handleSignals: false,
      setupLogging: false,
      onStarted: (app) => started.resolve(app),
    });
    running.then((code) => started.reject(new Error(`kproxy exited with ${code}`)));
    try {
      const app = await started.promise;
      await waitFor(() => app.proxier.lastSynced !== undefined, "the initial sync", {
        timeoutMs: 600_000,
        intervalMs: 5,
      });
      const initialSyncMs = performance.now() - startedAt;
      await waitFor(() => server.openWatches("endpointslices") > 0, "the EndpointSlice watch");
      return await fn({ server, app, executor, namespace, initialSyncMs });
    } finally {
      controller.abort();
      await running.catch(() => 1);
      await server.stop();
      await Deno.remove(kubeconfig).catch(() => undefined);
    }
  });
}

/**
 * True when the applied plan gives service `index` the endpoint `ip`. A binary
 * search on the sorted ids: this runs every millisecond in kproxy's process.
 */
function appliedHas(app: RunningApp, size: ClusterSize, index: number, ip: string): boolean {
  const services = app.proxier.lastSynced?.ipv4.services ?? [];
  const id = servicePortIdOf(index, size.shape);
  let low = 0;
  let high = services.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (services[middle]!.id < id) low = middle + 1;
    else high = middle;
  }
  const service = services[low];
  return service?.id === id && service.internal.endpoints.some((endpoint) => endpoint.ip === ip);
}

function shapeOf(size: ClusterSize): ObjectShape {
  return size.shape ?? "realistic";
}

/** One-change latency at one size and mode. */
export interface ChangeRow {
  mode: BenchMode;
  services: number;
  endpointsPerService: number;
  /** Shape of the API objects served; absent in runs before 2026-11-26 (minimal). */
  shape?: ObjectShape;
  /** Changes measured. */
  samples: number;
  /** Median wall time from the slice update to the end of the rule-loading command. */
  wallMs: number;
  /** Median of network_programming_duration_seconds observations, in ms. */
  metricMs: number;
  /** Median time of the rule-loading command alone. */
  applyMs: number;
  /** Median sync duration (sync_proxy_rules_duration_seconds), in ms. */
  syncMs: number;
  /** Time from `main()` to the first sync, for reference. */
  initialSyncMs: number;
}

/**
 * Changes one endpoint of `samples` services spread over the cluster, one at
 * a time, and measures each until the rule-loading command returned.
 */
export async function benchChange(options: {
  mode: BenchMode;
  size: ClusterSize;
  samples?: number;
}): Promise<ChangeRow> {
  const { mode, size } = options;
  const samples = options.samples ?? 7;
  return await withKproxy(mode, size, async ({ server, app, executor, initialSyncMs }) => {
    const wall: number[] = [];
    const metric: number[] = [];
    const apply: number[] = [];
    const sync: number[] = [];
    // Each sync observes every family's series: count the IPv4 ones, where the changes are.
    const npd = () => histogramTotals(app.metrics.networkProgrammingDuration, IPV4);
    const syncs = () => histogramTotals(app.metrics.syncProxyRulesDuration, IPV4);
    // Let the process settle after the initial sync (GC of the first plan).
    await new Promise((resolve) => setTimeout(resolve, 500));
    for (let k = 0; k < samples; k++) {
      const index = Math.min(size.services - 1, Math.floor((k * size.services) / samples));
      const generation = k + 1;
      const ip = endpointIP(index, 0, size.endpointsPerService, generation);
      const before = { npd: await npd(), syncs: await syncs() };
      const t0 = performance.now();
      server.upsert(
        "endpointslices",
        sliceObject(index, size.endpointsPerService, generation, shapeOf(size)),
      );
      await waitFor(
        async () => (await syncs()).count > before.syncs.count && appliedHas(app, size, index, ip),
        `change ${k} to reach the kernel`,
        { timeoutMs: 60_000, intervalMs: 1 },
      );
      const command = executor.firstApplyAfter(t0);
      if (!command) throw new Error("Cannot find the rule-loading command of the change");
      wall.push(command.endedAt - t0);
      apply.push(command.endedAt - command.startedAt);
      const after = { npd: await npd(), syncs: await syncs() };
      if (after.npd.count > before.npd.count) {
        metric.push(
          ((after.npd.sum - before.npd.sum) / (after.npd.count - before.npd.count)) * 1000,
        );
      }
      sync.push(
        ((after.syncs.sum - before.syncs.sum) / (after.syncs.count - before.syncs.count)) * 1000,
      );
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return {
      mode,
      services: size.services,
      endpointsPerService: size.endpointsPerService,
      shape: shapeOf(size),
      samples,
      wallMs: median(wall),
      metricMs: median(metric),
      applyMs: median(apply),
      syncMs: median(sync),
      initialSyncMs,
    };
  });
}

/** The outcome of an event storm. */
export interface StormRow {
  mode: BenchMode;
  services: number;
  endpointsPerService: number;
  /** Shape of the API objects served; absent in runs before 2026-11-26 (minimal). */
  shape?: ObjectShape;
  /** EndpointSlice updates sent. */
  changes: number;
  /** Time over which they were sent. */
  sendMs: number;
  /** Syncs that ran (from sync_proxy_rules_duration_seconds). */
  syncs: number;
  /** Full syncs among them. */
  fullSyncs: number;
  /** From the first update to the end of the rule load that holds the last one. */
  totalMs: number;
  /** Longest single sync during the storm. */
  maxSyncMs: number;
  /** Services whose new endpoint is not a DNAT target in the kernel. */
  missing: number;
  /** Services whose old endpoint is still a DNAT target in the kernel. */
  stale: number;
}

/** The IPv4 addresses the kernel's ruleset of the namespace DNATs to. */
async function kernelAddresses(mode: BenchMode, namespace: string): Promise<Set<string>> {
  const executor = new NetnsExecutor({ namespace, inner: new HostExecutor() });
  const result = await executor.run(
    mode === "nftables"
      ? { program: "nft", args: ["list", "ruleset"], timeoutMs: 300_000 }
      : { program: "iptables-nft-save", args: ["-t", "nat"], timeoutMs: 300_000 },
  );
  if (result.code !== 0) throw new Error(`Cannot list the ${mode} ruleset: ${result.stderr}`);
  // `dnat to IP:port` rules, `--to-destination` targets and slot-map elements (`… : IP . port`).
  const targets = result.stdout.matchAll(
    /(?:dnat to |--to-destination |: )(\d+\.\d+\.\d+\.\d+)(?=[: ])/g,
  );
  return new Set([...targets].map((match) => match[1]!));
}

/**
 * Sends `changes` EndpointSlice updates (each moves endpoint 0 of one service
 * to a new address) spread evenly over `windowMs`, waits until the kernel
 * holds the last one, then checks the whole ruleset for every new address and
 * no old one.
 */
export async function benchStorm(options: {
  mode: BenchMode;
  size: ClusterSize;
  changes?: number;
  windowMs?: number;
}): Promise<StormRow> {
  const { mode, size } = options;
  const changes = Math.min(options.changes ?? 10_000, size.services);
  const windowMs = options.windowMs ?? 10_000;
  return await withKproxy(mode, size, async ({ server, app, executor, namespace }) => {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const syncs = async () =>
      (await histogramTotals(app.metrics.syncProxyRulesDuration, IPV4)).count;
    const fulls = async () =>
      (await histogramTotals(app.metrics.syncFullProxyRulesDuration, IPV4)).count;
    const before = { syncs: await syncs(), fulls: await fulls() };
    const commandsBefore = executor.commands.length;
    const batches = 100;
    const perBatch = Math.ceil(changes / batches);
    const t0 = performance.now();
    let sent = 0;
    for (let b = 0; b < batches && sent < changes; b++) {
      const due = t0 + (b * windowMs) / batches;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      for (let k = 0; k < perBatch && sent < changes; k++, sent++) {
        server.upsert(
          "endpointslices",
          sliceObject(sent, size.endpointsPerService, 1, shapeOf(size)),
        );
      }
    }
    const sendMs = performance.now() - t0;
    const last = changes - 1;
    const lastIP = endpointIP(last, 0, size.endpointsPerService, 1);
    await waitFor(
      () => appliedHas(app, size, last, lastIP),
      "the last change to reach the kernel",
      {
        timeoutMs: 600_000,
        intervalMs: 5,
      },
    );
    const totalMs = (executor.lastApply()?.endedAt ?? performance.now()) - t0;
    const during = executor.commands.slice(commandsBefore).filter((c) => c.applies);
    const maxSyncMs = Math.max(0, ...during.map((c) => c.endedAt - c.startedAt));
    const found = await kernelAddresses(mode, namespace);
    let missing = 0;
    let stale = 0;
    for (let i = 0; i < changes; i++) {
      if (!found.has(endpointIP(i, 0, size.endpointsPerService, 1))) missing++;
      if (found.has(endpointIP(i, 0, size.endpointsPerService, 0))) stale++;
    }
    return {
      mode,
      services: size.services,
      endpointsPerService: size.endpointsPerService,
      shape: shapeOf(size),
      changes,
      sendMs,
      syncs: (await syncs()) - before.syncs,
      fullSyncs: (await fulls()) - before.fulls,
      totalMs,
      maxSyncMs,
      missing,
      stale,
    };
  });
}
