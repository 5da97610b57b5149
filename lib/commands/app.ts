/**
 * The wiring of kproxy's commands: flags to a running proxy (`run`), a
 * one-shot plan (`plan`), cleanup, help and version. `main.ts` only calls
 * {@linkcode main}; tests call it in-process with injected parts.
 *
 * @module
 */

import { getLogger } from "../core/logger.ts";
import denoJson from "../../deno.json" with { type: "json" };
import { type Backend, CountersUnavailableError, ModeUnavailableError } from "../core/backend.ts";
import { createBackend, modeOf } from "../../backends/registry.ts";
import {
  type CommandLine,
  type ConfigEnvironment,
  parseCommandLine,
} from "../config/command_line.ts";
import { ConfigError } from "../config/values.ts";
import { effectiveSyncPeriods } from "../config/defaults.ts";
import { helpText } from "../config/help.ts";
import type { Config } from "../config/types.ts";
import { ConntrackReconciler } from "../shell/conntrack_reconciler.ts";
import { systemClock } from "../shell/clock.ts";
import { DenoExecutor } from "../shell/exec.ts";
import type { Executor } from "../core/executor.ts";
import { ProxyHealth } from "../shell/health.ts";
import { setUpNode } from "../shell/node_setup.ts";
import { ServiceHealthServers, startHealthServer } from "../shell/servers.ts";
import type { HttpServer } from "../shell/http_server.ts";
import { ConnectionLimit } from "../shell/connection_limit.ts";
import { setupLogging } from "../shell/log.ts";
import { ProxyMetrics } from "../shell/metrics.ts";
import { registerProcessMetrics } from "../shell/process_metrics.ts";
import { serviceCounterExposition, ServiceCounterReader } from "../shell/service_counters.ts";
import { startMetricsServer } from "../shell/servers.ts";
import { MODE_PROGRAMS } from "../shell/permissions.ts";
import type { NodePlans } from "../core/plan.ts";
import { type PlannerOptions, planNode } from "../core/planner.ts";
import { Proxier } from "../shell/proxier.ts";
import { BoundedFrequencyRunner } from "../shell/runner.ts";
import type { Source } from "../core/source.ts";
import { Tracker } from "../core/tracker.ts";
import { kernelDiff } from "./diff.ts";
import { runExplain, type RunExplainOptions } from "./explain/run.ts";
import { formatServiceDiffs } from "./diff.ts";
import type { ClusterState } from "../core/state.ts";
import { countPlans, summarizeTraffic, type TrafficSummary } from "./status/snapshot.ts";
import { statusHandler } from "./status/handler.ts";
import { SyncHistory } from "../shell/sync_history.ts";
import { cleanupEveryMode, handBack, LeftoverRemoval } from "../shell/takeover.ts";
import { releaseThen, StartupRelease } from "../shell/list_garbage.ts";
import { stableJson, writeStableJson } from "./stable_json.ts";

const logger = getLogger(["kproxy", "app"]);
/** Start-up and shutdown lines: shown at every verbosity, -v=0 too (lib/shell/log.ts). */
const startupLogger = getLogger(["kproxy", "main"]);

/** kproxy's version, from deno.json. */
const VERSION: string = denoJson.version;

/** Where command output goes. */
export interface AppIO {
  stdout(text: string): void;
  stderr(text: string): void;
}

/** The parts of a running proxy, handed to {@linkcode AppOptions.onStarted}. */
export interface RunningApp {
  config: Config;
  backend: Backend;
  proxier: Proxier;
  health: ProxyHealth;
  metrics: ProxyMetrics;
  serviceHealth: ServiceHealthServers;
  healthServer?: HttpServer;
  metricsServer?: HttpServer;
}

/** Injection points for {@linkcode main}; every one defaults to the real thing. */
export interface AppOptions {
  io?: AppIO;
  /** Files and host name for flag parsing. */
  env?: ConfigEnvironment;
  executor?: Executor;
  /** Used instead of the mode's backend (also for `--cleanup`). */
  backend?: Backend;
  /** Used instead of the manifests directory or the apiserver. */
  source?: Source;
  /** Stops `run` when aborted, in addition to SIGTERM and SIGINT. */
  signal?: AbortSignal;
  /** Listen for SIGTERM and SIGINT. @default {true} */
  handleSignals?: boolean;
  /** Configure log sinks. @default {true} */
  setupLogging?: boolean;
  /** Where formatted log lines go when logging is set up. @default stderr */
  logSink?: (line: string) => void;
  /** Address of the health-check node port servers. @default {"0.0.0.0"} */
  serviceHealthHostname?: string;
  /** Called once `run` has started its servers, source and runner. */
  onStarted?: (app: RunningApp) => void;
  /**
   * Sets the node up before proxying, as kube-proxy does: conntrack sysctls and
   * the OOM score. Defaults to {@linkcode setUpNode} on Linux, and to nothing
   * when a backend or an executor is injected (tests leave the node alone).
   */
  setUpNode?: (config: Config, executor: Executor) => Promise<void>;
  /**
   * Loads the kernel demo's module (`scripts/demo.ts`, its `runDemo`), which
   * lives outside lib/; without it, or when it fails to load, `demo` prints
   * the plan of the shipped manifests instead.
   */
  loadDemo?: () => Promise<Record<string, unknown>>;
}

const encoder = new TextEncoder();

function writeAllSync(file: { writeSync(p: Uint8Array): number }, text: string): void {
  const bytes = encoder.encode(text);
  let written = 0;
  while (written < bytes.length) written += file.writeSync(bytes.subarray(written));
}

/** Writes to the process's stdout and stderr. */
const processIO: AppIO = {
  stdout: (text) => writeAllSync(Deno.stdout, text),
  stderr: (text) => writeAllSync(Deno.stderr, text),
};

function granted(descriptor: Deno.PermissionDescriptor): boolean {
  try {
    return Deno.permissions.querySync(descriptor).state === "granted";
  } catch {
    return false;
  }
}

/** Flag-parsing environment that never prompts for a permission it lacks. */
const processEnvironment: ConfigEnvironment = {
  readTextFile: (path) => Deno.readTextFileSync(path),
  hostname: () => {
    if (granted({ name: "sys", kind: "hostname" })) return Deno.hostname();
    if (granted({ name: "read", path: "/etc/hostname" })) {
      try {
        return Deno.readTextFileSync("/etc/hostname").trim();
      } catch {
        return "";
      }
    }
    return "";
  },
};

/**
 * Runs kproxy with `argv` and returns its exit status: 0 on success, 2 on a
 * configuration error, 1 on any other failure.
 */
export async function main(argv: string[], options: AppOptions = {}): Promise<number> {
  const io = options.io ?? processIO;
  let commandLine: CommandLine;
  try {
    commandLine = parseCommandLine(argv, options.env ?? processEnvironment);
  } catch (error) {
    if (error instanceof ConfigError) {
      io.stderr(`kproxy: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
  try {
    return await runCommand(commandLine, options);
  } catch (error) {
    if (error instanceof ConfigError) {
      io.stderr(`kproxy: ${error.message}\n`);
      return 2;
    }
    if (error instanceof ModeUnavailableError) {
      io.stderr(`kproxy: ${error.message}\n`);
      return 1;
    }
    logger.fatal("kproxy failed: {error}", { error });
    io.stderr(`kproxy: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}

async function runCommand(commandLine: CommandLine, options: AppOptions): Promise<number> {
  const io = options.io ?? processIO;
  const { command, config } = commandLine;
  switch (command) {
    case "help":
      io.stdout(helpText());
      return 0;
    case "version":
      io.stdout(`kproxy ${VERSION} (deno ${Deno.version.deno}, ${Deno.build.target})\n`);
      return 0;
  }
  if (options.setupLogging ?? true) {
    await setupLogging({ verbosity: config.verbosity, sink: options.logSink });
  }
  for (const warning of commandLine.warnings) logger.warn("{warning}", { warning });
  switch (command) {
    case "plan": {
      const plans = await planOnce(config, options.source);
      writeStableJson(plans, io.stdout);
      io.stdout("\n");
      return 0;
    }
    case "demo":
      return await runDemo(commandLine, options);
    case "explain": {
      const state = await loadState(config, options.source);
      const plannerOptions = plannerOptionsFrom(config, localAddresses());
      return runExplain({
        commandLine,
        io,
        state,
        plannerOptions,
        counters: await explainCounters(
          config,
          options,
          planNode({ state, options: plannerOptions }),
        ),
      });
    }
    case "diff":
      return await runDiff(config, options);
    case "hand-back":
      return await runHandBack(config, options);
    case "init-only": {
      const executor = options.executor ??
        new DenoExecutor({ allowedPrograms: MODE_PROGRAMS[config.proxyMode] });
      await nodeSetupOf(config, options)?.(config, executor);
      return 0;
    }
    case "run":
      return config.cleanup ? await cleanup(config, options) : await runProxy(config, options);
  }
}

/** Builds the planner's options from the configuration and the node's addresses. */
export function plannerOptionsFrom(config: Config, localAddresses: string[]): PlannerOptions {
  return {
    nodeName: config.hostnameOverride,
    nodePortAddresses: config.nodePortAddresses,
    localAddresses,
    bindAddress: config.bindAddress,
    clusterCIDRs: config.clusterCIDRs,
    detectLocalMode: config.detectLocalMode,
    bridgeInterface: config.bridgeInterface,
    interfaceNamePrefix: config.interfaceNamePrefix,
    masqueradeAll: config.masqueradeAll,
    serviceClusterIPRange: config.serviceClusterIPRange,
    externalIPAllowedCIDRs: config.externalIPAllowedCIDRs,
    featureGates: config.featureGates,
    serviceCounters: config.serviceCounters,
  };
}

/** The node's interface addresses, or none when Deno may not list them. */
function localAddresses(): string[] {
  if (!granted({ name: "sys", kind: "networkInterfaces" })) return [];
  return [...new Set(Deno.networkInterfaces().map((nic) => nic.address.split("%")[0]!))];
}

/** Throws a {@linkcode ConfigError} naming `--manifests` when `dir` is not a readable directory. */
async function checkManifestsDir(dir: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(dir);
  } catch (error) {
    const reason = error instanceof Deno.errors.NotFound
      ? "no such directory"
      : error instanceof Error
      ? error.message
      : String(error);
    throw new ConfigError("--manifests", `Cannot read --manifests "${dir}": ${reason}`);
  }
  if (!info.isDirectory) {
    throw new ConfigError("--manifests", `Cannot read --manifests "${dir}": not a directory`);
  }
}

async function createSource(config: Config): Promise<Source> {
  if (config.manifests !== "") {
    await checkManifestsDir(config.manifests);
    const { FileSource } = await import("../shell/source/file.ts");
    return new FileSource({ dir: config.manifests });
  }
  const { KubeSource } = await import("../shell/source/kube.ts");
  return new KubeSource({
    kubeconfig: config.kubeconfig,
    master: config.master,
    nodeName: config.hostnameOverride,
  });
}

/** Reads the source until its initial list is complete and returns the cluster state. */
export async function loadState(config: Config, injected?: Source): Promise<ClusterState> {
  const source = injected ?? await createSource(config);
  const tracker = new Tracker({ nodeName: config.hostnameOverride, clock: systemClock });
  const controller = new AbortController();
  let synced = false;
  await source.start((event) => {
    if (controller.signal.aborted) return;
    tracker.apply(event);
    if (event.type === "synced") {
      synced = true;
      controller.abort();
    }
  }, controller.signal);
  if (!synced) throw new Error("Cannot plan: the source stopped before listing every object");
  return tracker.drain().state;
}

/**
 * Reads the source until its initial list is complete and plans the node once.
 * No root, no kernel.
 */
export async function planOnce(config: Config, injected?: Source): Promise<NodePlans> {
  return planNode({
    state: await loadState(config, injected),
    options: plannerOptionsFrom(config, localAddresses()),
  });
}

/** `--cleanup`: removes every mode's rules, kproxy's and kube-proxy's. */
async function cleanup(config: Config, options: AppOptions): Promise<number> {
  if (options.backend) await options.backend.cleanup();
  else await cleanupEveryMode({ config, executor: options.executor });
  return 0;
}

/** The node set-up to run: the injected one, else the real one on Linux unless a part is injected. */
function nodeSetupOf(
  config: Config,
  options: AppOptions,
): ((config: Config, executor: Executor) => Promise<void>) | undefined {
  if (options.setUpNode !== undefined) return options.setUpNode;
  const injected = options.backend !== undefined || options.executor !== undefined;
  if (injected || modeOf(config.proxyMode).platform !== "linux") return undefined;
  return (config, executor) => setUpNode({ config, executor });
}

/**
 * The mode's backend, checked: when the program that counts Service traffic is missing, the
 * config without Service counters and a backend made for it (a missing counter must not keep a
 * node's Services from being served, nor `diff` from running).
 */
async function preflightBackend(
  config: Config,
  executor: Executor,
  options: AppOptions,
): Promise<{ config: Config; backend: Backend }> {
  let backend = options.backend ?? await createBackend(config.proxyMode, { executor, config });
  try {
    await backend.preflight?.();
  } catch (error) {
    if (!(error instanceof CountersUnavailableError)) throw error;
    logger.warn("{reason}; running without Service counters", { reason: error.message });
    config = { ...config, serviceCounters: false };
    backend = options.backend ?? await createBackend(config.proxyMode, { executor, config });
    await backend.preflight?.();
  }
  return { config, backend };
}

async function runProxy(config: Config, options: AppOptions): Promise<number> {
  const executor = options.executor ??
    new DenoExecutor({ allowedPrograms: MODE_PROGRAMS[config.proxyMode] });
  let backend: Backend;
  ({ config, backend } = await preflightBackend(config, executor, options));
  // The sysctls and the OOM score (a few processes) go on while the lists run; the first sync waits.
  const nodeSetUp = nodeSetupOf(config, options)?.(config, executor) ?? Promise.resolve();
  let nodeSetUpFailure: { error: unknown } | undefined;
  nodeSetUp.catch((error) => (nodeSetUpFailure = { error }));
  let source: Source;
  try {
    source = options.source ?? await createSource(config);
  } catch (error) {
    await nodeSetUp;
    throw error;
  }
  // Program first, then clean: other modes' rules go once kproxy's first sync is in.
  const leftovers = options.backend
    ? undefined
    : new LeftoverRemoval({ config, executor: options.executor });
  const { syncPeriodMs, minSyncPeriodMs } = effectiveSyncPeriods(config);
  const health = new ProxyHealth({ healthTimeoutMs: 2 * syncPeriodMs });
  const metrics = new ProxyMetrics({ mode: backend.mode });
  registerProcessMetrics(metrics.registry);
  const counters = config.serviceCounters && backend.readServiceCounters !== undefined
    ? new ServiceCounterReader({ read: () => backend.readServiceCounters!(), clock: systemClock })
    : undefined;
  const counterFamilies = counters === undefined ? [] : [serviceCounterExposition(counters)];
  // One cap over every server: a flood of one cannot take the descriptors the others need.
  const connections = new ConnectionLimit();
  const serviceHealth = new ServiceHealthServers({
    hostname: options.serviceHealthHostname ?? "0.0.0.0",
    health,
    connections,
  });
  const tracker = new Tracker({
    nodeName: config.hostnameOverride,
    clock: systemClock,
    featureGates: config.featureGates,
  });
  const history = new SyncHistory();
  const startedAt = { wall: systemClock.wallNow(), monotonic: systemClock.now() };
  const conntrack = modeOf(config.proxyMode).reconcilesConntrack
    ? new ConntrackReconciler({ executor, metrics })
    : undefined;
  const startupRelease = new StartupRelease();
  const proxier = new Proxier({
    backend,
    tracker,
    plannerOptions: plannerOptionsFrom(config, localAddresses()),
    readLocalAddresses: localAddresses,
    health,
    metrics,
    syncPeriodMs,
    fullSyncPeriodMs: Math.max(syncPeriodMs, FULL_SYNC_PERIOD_MS),
    requestSync: () => runner.run(),
    serviceHealth,
    history,
    beforeApply: () => startupRelease.beforeApply(),
    afterSync: releaseThen(startupRelease, [conntrack, leftovers]),
  });
  const runner = new BoundedFrequencyRunner({
    name: "sync-proxy-rules",
    fn: async () => {
      await nodeSetUp.catch(() => {});
      if (nodeSetUpFailure === undefined) await proxier.sync();
    },
    minIntervalMs: minSyncPeriodMs,
    maxIntervalMs: Math.max(syncPeriodMs, minSyncPeriodMs),
    retryIntervalMs: Math.min(1000, Math.max(syncPeriodMs, 1)),
  });

  const controller = new AbortController();
  const stop = () => controller.abort();
  options.signal?.addEventListener("abort", stop);
  if (options.signal?.aborted) stop();
  const handleSignals = options.handleSignals ?? true;
  const signals: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGTERM", "SIGINT"];
  if (handleSignals) { for (const name of signals) Deno.addSignalListener(name, stop); }

  const { signal } = controller;
  const app: RunningApp = { config, backend, proxier, health, metrics, serviceHealth };
  let exitCode = 0;
  startupLogger.info("Starting kproxy", {
    version: VERSION,
    mode: backend.mode,
    node: config.hostnameOverride,
    families: "IPv4,IPv6",
  });
  try {
    if (config.healthzBindAddress !== "") {
      app.healthServer = startHealthServer({
        address: config.healthzBindAddress,
        health,
        metrics,
        signal,
        connections,
      });
    }
    if (config.metricsBindAddress !== "") {
      app.metricsServer = startMetricsServer({
        address: config.metricsBindAddress,
        registry: metrics.registry,
        families: counterFamilies,
        health,
        metrics,
        signal,
        connections,
        routes: {
          "/statusz": statusHandler(() => ({
            version: VERSION,
            mode: backend.mode,
            node: config.hostnameOverride,
            startedAt: startedAt.wall,
            now: systemClock.wallNow(),
            uptimeMs: systemClock.now() - startedAt.monotonic,
            healthy: health.status().healthy,
            families: countPlans(proxier.lastSynced),
            syncs: history.entries(),
            totalSyncs: history.total,
            failedSyncs: history.failures,
            lastFailure: history.lastFailure,
            driftRepairs: proxier.driftRepairs,
            traffic: counters === undefined ? undefined : trafficNow(counters),
          })),
        },
      });
    }
    if (app.healthServer) {
      startupLogger.info("Serving health checks on {address} (/healthz, /livez)", {
        address: formatAddress(app.healthServer.addr),
      });
    }
    if (app.metricsServer) {
      startupLogger.info("Serving metrics on {address} (/metrics, /statusz)", {
        address: formatAddress(app.metricsServer.addr),
      });
    }
    nodeSetUp.catch(stop);
    // As kube-proxy, once the servers are up; best effort, never awaited.
    void source.recordStarting?.(signal);
    const looping = runner.loop(signal);
    const watching = source.start((event) => proxier.onEvent(event), signal).catch((error) => {
      logger.fatal("The source of API objects failed: {error}", { error });
      exitCode = 1;
      stop();
    });
    // Kernel set-up that needs no Service, while the lists run; the first sync waits for it.
    void backend.warmUp?.();
    options.onStarted?.(app);
    if (!signal.aborted) {
      await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
    }
    if (nodeSetUpFailure === undefined) {
      startupLogger.info("Stopping; the installed rules stay in place");
    }
    await Promise.all([looping, watching]);
  } finally {
    stop();
    if (handleSignals) { for (const name of signals) Deno.removeSignalListener(name, stop); }
    options.signal?.removeEventListener("abort", stop);
    await Promise.all([
      app.healthServer?.finished,
      app.metricsServer?.finished,
      serviceHealth.close(),
    ]);
  }
  if (nodeSetUpFailure !== undefined) throw nodeSetUpFailure.error;
  return exitCode;
}

/** `host:port`, with brackets around an IPv6 host. */
function formatAddress(addr: Deno.NetAddr): string {
  return addr.hostname.includes(":")
    ? `[${addr.hostname}]:${addr.port}`
    : `${addr.hostname}:${addr.port}`;
}

/**
 * The node's Service counters for `kproxy explain`, read once from the
 * kernel by the configured mode; why not when they cannot be read.
 */
async function explainCounters(
  config: Config,
  options: AppOptions,
  plans: NodePlans,
): Promise<RunExplainOptions["counters"]> {
  if (!config.serviceCounters) return undefined;
  try {
    const executor = options.executor ??
      new DenoExecutor({ allowedPrograms: MODE_PROGRAMS[config.proxyMode] });
    const backend = options.backend ?? await createBackend(config.proxyMode, { executor, config });
    if (backend.readServiceCounters === undefined) {
      return { unavailable: `the ${config.proxyMode} mode keeps none` };
    }
    return { samples: await backend.readServiceCounters([plans.ipv4, plans.ipv6]) };
  } catch (error) {
    return { unavailable: error instanceof Error ? error.message : String(error) };
  }
}

/**
 * The status page's traffic summary from the readings already taken; asks
 * for a new reading (at most one per interval) for the next view.
 */
function trafficNow(counters: ServiceCounterReader): TrafficSummary {
  counters.samples().catch(() => {}); // serviceCounterExposition logs failures on /metrics
  return summarizeTraffic(counters.traffic(), counters.windowSeconds());
}

/**
 * Full rewrites happen at start, after a failure, on drift, and hourly, as
 * kube-proxy's FullSyncPeriod: every syncPeriod only a cheap canary is
 * checked, so a 30k-service node does not reload its whole ruleset twice a
 * minute.
 */
const FULL_SYNC_PERIOD_MS = 3_600_000;

/** `kproxy hand-back`: exit 0 once kproxy's own rules are gone (or there were none), 1 on timeout. */
async function runHandBack(config: Config, options: AppOptions): Promise<number> {
  const result = await handBack({ config, executor: options.executor });
  if (result.outcome !== "timed out") return 0;
  (options.io ?? processIO).stderr(`kproxy: ${result.message}\n`);
  return 1;
}

/** `kproxy diff`: exit 0 when the kernel holds what the next sync would program, 1 when not. */
async function runDiff(config: Config, options: AppOptions): Promise<number> {
  const io = options.io ?? processIO;
  const executor = options.executor ??
    new DenoExecutor({ allowedPrograms: [...MODE_PROGRAMS[config.proxyMode], "ip"] });
  let backend: Backend;
  ({ config, backend } = await preflightBackend(config, executor, options));
  const plans = await planOnce(config, options.source);
  const groups = await kernelDiff({ backend, executor, plans: [plans.ipv4, plans.ipv6] });
  io.stdout(formatServiceDiffs(groups));
  return groups.length === 0 ? 0 : 1;
}

async function runDemo(commandLine: CommandLine, options: AppOptions): Promise<number> {
  const io = options.io ?? processIO;
  let demo: Record<string, unknown> | undefined;
  try {
    demo = await options.loadDemo?.();
  } catch (error) {
    logger.debug("No kernel demo: {error}", { error });
  }
  const entry = demo?.runDemo;
  if (typeof entry === "function") {
    return await entry({ config: commandLine.config, args: commandLine.args, io });
  }
  io.stderr(
    "kproxy: the kernel demo is not available in this build; printing the plan for scripts/manifests\n",
  );
  const config = { ...commandLine.config };
  if (config.manifests === "") config.manifests = "scripts/manifests";
  io.stdout(stableJson(await planOnce(config, options.source)) + "\n");
  return 0;
}
