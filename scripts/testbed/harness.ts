/**
 * Shared parts of the fault tests and the soak: API objects for the netns
 * topology, a hand-driven Source, an Executor that injects faults, an
 * in-process kproxy runner, log capture and a normalised view of an nftables
 * table for comparisons.
 *
 * @module
 */

import assert from "node:assert/strict";
import { renderFull } from "../../backends/nftables/render.ts";
import type { Backend } from "../../lib/core/backend.ts";
import { main, type RunningApp } from "../../lib/commands/app.ts";
import type { Config } from "../../lib/config/types.ts";
import type { NodePlans } from "../../lib/core/plan.ts";
import { ANY_ARGUMENTS, KPROXY_COMMAND_POLICY } from "../../lib/shell/command_policy.ts";
import { DenoExecutor } from "../../lib/shell/exec.ts";
import type { Command, CommandResult, Executor } from "../../lib/core/executor.ts";
import { setupLogging } from "../../lib/shell/log.ts";
import type { Source, SourceEvent, SourceListener } from "../../lib/core/source.ts";
import {
  HostExecutor,
  kernelUnavailableReason,
  NetnsExecutor,
  type Pod,
  type Reply,
  Topology,
} from "../netns.ts";

export { ADDRESSES, HostExecutor, NetnsExecutor, type Pod, Topology } from "../netns.ts";

/** A raw API object. */
export type ApiObject = Record<string, any>;

/**
 * Why kernel fault tests cannot run here (printed, so a skip is never silent),
 * or undefined when they can.
 */
export async function faultsSkipReason(
  programs: readonly string[] = ["nft"],
): Promise<string | undefined> {
  const reason = await kernelUnavailableReason(["ip", "python3", ...programs]);
  if (reason !== undefined) console.warn(`fault tests ignored: ${reason}`);
  return reason;
}

/** A topology with the faults prefix `kp-f-<tag><random4>-`: local pods only. */
export function createFaultTopology(
  tag: string,
  options: { localPods?: number; remotePods?: number } = {},
): Promise<Topology> {
  return Topology.create({
    prefix: `kp-f-${tag}${Topology.randomTag()}-`,
    localPods: options.localPods ?? 3,
    remotePods: options.remotePods ?? 0,
    exitOnSigint: true,
  });
}

// ---------------------------------------------------------------------------
// API objects

/** The Node object of the topology's proxy node. */
export function nodeObject(): ApiObject {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "node-a", labels: { "kubernetes.io/hostname": "node-a" } },
    spec: { podCIDR: "10.244.1.0/24", podCIDRs: ["10.244.1.0/24"] },
    status: { addresses: [{ type: "InternalIP", address: "10.201.0.1" }] },
  };
}

/** Options for {@linkcode serviceObject}. */
export interface ServiceSpec {
  name: string;
  clusterIP: string;
  port?: number;
  targetPort?: number;
  type?: "ClusterIP" | "NodePort";
  nodePort?: number;
  externalIPs?: string[];
  /** @default {"TCP"} */
  protocol?: "TCP" | "UDP";
}

/** An IPv4 single-port Service (TCP unless said) in namespace `default`. */
export function serviceObject(spec: ServiceSpec): ApiObject {
  const port: ApiObject = {
    name: "http",
    port: spec.port ?? 80,
    targetPort: spec.targetPort ?? 8080,
    protocol: spec.protocol ?? "TCP",
  };
  if (spec.nodePort !== undefined) port.nodePort = spec.nodePort;
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: spec.name, namespace: "default" },
    spec: {
      type: spec.type ?? "ClusterIP",
      clusterIP: spec.clusterIP,
      clusterIPs: [spec.clusterIP],
      ipFamilies: ["IPv4"],
      ports: [port],
      ...(spec.externalIPs ? { externalIPs: spec.externalIPs } : {}),
    },
  };
}

/** An IPv4 EndpointSlice of `service` (port "http", TCP unless said) with ready endpoints at
 * `addresses`. */
export function sliceObject(
  service: string,
  addresses: string[],
  options: { name?: string; port?: number; nodeName?: string; protocol?: "TCP" | "UDP" } = {},
): ApiObject {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: options.name ?? `${service}-1`,
      namespace: "default",
      labels: { "kubernetes.io/service-name": service },
    },
    addressType: "IPv4",
    ports: [{ name: "http", port: options.port ?? 8080, protocol: options.protocol ?? "TCP" }],
    endpoints: addresses.map((address) => ({
      addresses: [address],
      conditions: { ready: true, serving: true, terminating: false },
      nodeName: options.nodeName ?? "node-a",
    })),
  };
}

/** A YAML-free manifest file body: JSON documents separated by `---`. */
export function manifestText(objects: ApiObject[]): string {
  return objects.map((object) => JSON.stringify(object)).join("\n---\n") + "\n";
}

// ---------------------------------------------------------------------------
// A hand-driven source

/**
 * A Source driven by the test: `emit` sends events (replayed to a listener
 * that starts later); `start` resolves when the signal aborts.
 */
export class ManualSource implements Source {
  readonly #history: SourceEvent[] = [];
  #listener?: SourceListener;

  /** Upserts every object, then reports the initial list complete. */
  static listed(objects: ApiObject[]): ManualSource {
    const source = new ManualSource();
    for (const object of objects) source.upsert(object);
    source.emit({ type: "synced" });
    return source;
  }

  /** Sends one event now, or when the listener starts. */
  emit(event: SourceEvent): void {
    this.#history.push(event);
    this.#listener?.(event);
  }

  /** Sends an upsert of `object` (its kind read from the object). */
  upsert(object: ApiObject): void {
    this.emit({ type: "upsert", kind: object.kind, object });
  }

  /** Sends a delete of `object`. */
  delete(object: ApiObject): void {
    this.emit({ type: "delete", kind: object.kind, object });
  }

  start(listener: SourceListener, signal: AbortSignal): Promise<void> {
    this.#listener = listener;
    for (const event of this.#history) listener(event);
    return new Promise((resolve) => {
      if (signal.aborted) resolve();
      signal.addEventListener("abort", () => {
        this.#listener = undefined;
        resolve();
      });
    });
  }
}

// ---------------------------------------------------------------------------
// Fault injection in the executor

/** How an injected fault behaves. */
export type FaultKind = "exit" | "hang" | "missing";

/** A program that does not exist, run to get the real "not found" path. */
const MISSING_PROGRAM = "kp-f-no-such-program";

/** Options for {@linkcode FaultyExecutor}. */
export interface FaultyExecutorOptions {
  /** Namespace every real command runs in. */
  namespace: string;
  /**
   * The longest any command may run: shorter than the backends' own timeouts
   * (iptables asks for 300 s), so a hang is killed quickly. @default {3000}
   */
  timeoutMs?: number;
}

/**
 * Runs commands in a namespace through the real {@linkcode DenoExecutor}
 * and, while armed, turns the next matching `nft -f` / `iptables-restore`
 * loads into faults: a non-zero exit, a hang (the executor's timeout must
 * kill it) or a missing binary.
 */
export class FaultyExecutor implements Executor {
  readonly #namespace: string;
  readonly #timeoutMs: number;
  readonly #real = new DenoExecutor({
    allowedPrograms: ["ip", "sleep", MISSING_PROGRAM],
    // kproxy's own policy, and the test's stand-ins for a hung and a missing program.
    policy: { ...KPROXY_COMMAND_POLICY, sleep: ANY_ARGUMENTS, [MISSING_PROGRAM]: ANY_ARGUMENTS },
  });
  #fault?: { kind: FaultKind; remaining: number; program?: string };
  /** Loads attempted (faulted or not), in order. */
  readonly loads: { program: string; fault?: FaultKind; at: number }[] = [];

  constructor(options: FaultyExecutorOptions) {
    this.#namespace = options.namespace;
    this.#timeoutMs = options.timeoutMs ?? 3000;
  }

  /**
   * Fails the next `count` loads (of `program` only, when given) with `kind`;
   * `count` Infinity fails them until {@linkcode disarm}.
   */
  arm(kind: FaultKind, options: { count?: number; program?: string } = {}): void {
    this.#fault = { kind, remaining: options.count ?? Infinity, program: options.program };
  }

  /** Stops injecting faults. */
  disarm(): void {
    this.#fault = undefined;
  }

  /** Loads that were faulted. */
  get faulted(): number {
    return this.loads.filter((load) => load.fault !== undefined).length;
  }

  run(command: Command): Promise<CommandResult> {
    const timed = {
      ...command,
      timeoutMs: Math.min(command.timeoutMs ?? Infinity, this.#timeoutMs),
    };
    if (isLoad(command)) {
      const armed = this.#fault;
      const fault = armed && armed.remaining > 0 &&
          (armed.program === undefined || armed.program === command.program)
        ? armed.kind
        : undefined;
      if (fault && armed) armed.remaining--;
      this.loads.push({ program: command.program, fault, at: Date.now() });
      if (fault === "exit") {
        return Promise.resolve({ code: 1, stdout: "", stderr: "injected failure\n" });
      }
      if (fault === "hang") {
        return this.#real.run({ program: "sleep", args: ["600"], timeoutMs: timed.timeoutMs });
      }
      if (fault === "missing") return this.#real.run({ ...timed, program: MISSING_PROGRAM });
    }
    return this.#real.run({
      ...timed,
      program: "ip",
      args: ["netns", "exec", this.#namespace, command.program, ...command.args],
    });
  }
}

function isLoad(command: Command): boolean {
  if (command.program === "nft") return command.args.includes("-f");
  return /-restore$/.test(command.program);
}

// ---------------------------------------------------------------------------
// kproxy in-process

/** A kproxy started with {@linkcode startKproxy}. */
export interface RunningKproxy {
  app: RunningApp;
  /** Resolves with main()'s exit status. */
  exited: Promise<number>;
  /** Aborts the run and waits for it; returns the exit status. */
  stop(): Promise<number>;
  /** GETs a path of the health server; returns the status code. */
  healthz(): Promise<number>;
  /** The metrics exposition text. */
  metricsText(): Promise<string>;
}

/** Options for {@linkcode startKproxy}. */
export interface StartOptions {
  source: Source;
  executor: Executor;
  /** Extra flags after the defaults (later flags win). */
  args?: string[];
  /** The backend to use instead of the one the flags select. */
  backend?: Backend;
}

/**
 * Runs `main()` in nftables mode for node-a with a 1 s sync period,
 * health and metrics on 127.0.0.1 ephemeral ports, and the given source and
 * executor. Logging is left to the caller.
 */
export async function startKproxy(options: StartOptions): Promise<RunningKproxy> {
  const controller = new AbortController();
  const started = Promise.withResolvers<RunningApp>();
  const stderr: string[] = [];
  const exited = main([
    "--proxy-mode=nftables",
    "--hostname-override=node-a",
    "--cluster-cidr=10.244.0.0/16",
    "--nftables-sync-period=1s",
    "--nftables-min-sync-period=100ms",
    "--healthz-bind-address=127.0.0.1:0",
    "--metrics-bind-address=127.0.0.1:0",
    ...(options.args ?? []),
  ], {
    source: options.source,
    executor: options.executor,
    backend: options.backend,
    signal: controller.signal,
    handleSignals: false,
    setupLogging: false,
    serviceHealthHostname: "127.0.0.1",
    io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
    onStarted: (app) => started.resolve(app),
  });
  exited.then((code) => started.reject(new Error(`kproxy exited ${code}: ${stderr.join("")}`)));
  const app = await started.promise;
  return {
    app,
    exited,
    async stop() {
      controller.abort();
      return await exited;
    },
    async healthz() {
      const response = await fetch(`http://127.0.0.1:${app.healthServer!.addr.port}/healthz`);
      await response.body?.cancel();
      return response.status;
    },
    async metricsText() {
      const response = await fetch(`http://127.0.0.1:${app.metricsServer!.addr.port}/metrics`);
      return await response.text();
    },
  };
}

/** The value of one sample in a metrics exposition, 0 when absent. */
export function sample(text: string, series: string): number {
  for (const line of text.split("\n")) {
    if (line.startsWith(series + " ")) return Number(line.slice(series.length + 1));
  }
  return 0;
}

/** Polls `condition` every 50 ms until it holds; throws naming `what` after `timeoutMs`. */
export async function waitFor(
  what: string,
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<number> {
  const start = Date.now();
  while (!(await condition())) {
    if (Date.now() - start > timeoutMs) throw new Error(`Timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return Date.now() - start;
}

/** Log lines captured through `setupLogging`'s sink. */
export class LogCapture {
  readonly lines: string[] = [];

  /** Routes kproxy's logs (at `verbosity`) into {@linkcode lines}. */
  static async install(verbosity = 2): Promise<LogCapture> {
    const capture = new LogCapture();
    await setupLogging({ verbosity, sink: (line) => capture.lines.push(line) });
    return capture;
  }

  /** Lines matching `pattern`. */
  matching(pattern: RegExp): string[] {
    return this.lines.filter((line) => pattern.test(line));
  }
}

// ---------------------------------------------------------------------------
// Traffic and kernel state

/** Sends `count` TCP requests from the client to `ip:port`; returns the pods that answered. */
export async function answeringPods(
  topology: Topology,
  ip: string,
  port: number,
  count = 4,
): Promise<{ pods: string[]; failures: Reply[] }> {
  const replies = await topology.requests(
    topology.client,
    Array.from({ length: count }, () => ({ protocol: "TCP" as const, ip, port, timeoutMs: 1000 })),
  );
  return {
    pods: [...new Set(replies.flatMap((r) => r.ok ? [r.pod] : []))].sort(),
    failures: replies.filter((r) => !r.ok),
  };
}

/** Asserts every request to `ip:port` is answered, each by one of `pods`. */
export async function assertServedBy(
  topology: Topology,
  ip: string,
  port: number,
  pods: Pod[] | string[],
  count = 4,
): Promise<void> {
  const allowed = pods.map((pod) => typeof pod === "string" ? pod : pod.name);
  const { pods: answered, failures } = await answeringPods(topology, ip, port, count);
  assert.deepEqual(failures, [], `requests to ${ip}:${port} failed`);
  for (const pod of answered) {
    assert.ok(allowed.includes(pod), `${ip}:${port} answered by ${pod}, not ${allowed}`);
  }
}

/** Runs `nft` in `ns`; returns stdout, or undefined when it exits non-zero. */
export async function nftIn(
  ns: string,
  args: string[],
  stdin?: string,
): Promise<string | undefined> {
  const result = await new NetnsExecutor({ namespace: ns, inner: new HostExecutor() }).run({
    program: "nft",
    args,
    stdin,
    timeoutMs: 60_000,
  });
  return result.code === 0 ? result.stdout : undefined;
}

/** A canonical form of one nftables table for equality checks. */
export interface CanonicalTable {
  chains: Record<string, { base?: string; rules: string[] }>;
  sets: Record<string, { spec: string; elements: string[] }>;
}

/**
 * Lists `family table` in `ns` as JSON and canonicalises it: no handles,
 * counters or canary generation (in the `canary` set or chain); set and map elements sorted; rules kept in
 * order per chain. Undefined when the table does not exist.
 */
export async function canonicalTable(
  ns: string,
  family = "ip",
  table = "kproxy",
): Promise<CanonicalTable | undefined> {
  const text = await nftIn(ns, ["-j", "list", "table", family, table]);
  if (text === undefined) return undefined;
  const canonical: CanonicalTable = { chains: {}, sets: {} };
  for (const item of JSON.parse(text).nftables as ApiObject[]) {
    if (item.chain) {
      const { name, hook, prio, type, policy } = item.chain;
      canonical.chains[name] = {
        base: hook === undefined ? undefined : `${type} ${hook} ${prio} ${policy}`,
        rules: [],
      };
    } else if (item.set || item.map) {
      const set = item.set ?? item.map;
      const spec = JSON.stringify([item.set ? "set" : "map", set.type, set.map, set.flags]);
      const elements = set.name === "canary"
        ? ["generation N"]
        : ((set.elem ?? []) as unknown[]).map((element) => JSON.stringify(element)).sort();
      canonical.sets[set.name] = { spec, elements };
    }
  }
  for (const item of JSON.parse(text).nftables as ApiObject[]) {
    if (!item.rule) continue;
    const { chain, expr, comment } = item.rule;
    const rule = JSON.stringify(
      { expr, comment },
      (key, value) => key === "counter" ? {} : value,
    ).replace(/kproxy generation \d+/, "kproxy generation N");
    canonical.chains[chain]?.rules.push(rule);
  }
  return canonical;
}

/** Number of rules in `family table`'s `chain` in `ns`, undefined when it is missing. */
export async function ruleCount(
  ns: string,
  chain: string,
  family = "ip",
  table = "kproxy",
): Promise<number | undefined> {
  const text = await nftIn(ns, ["-j", "list", "chain", family, table, chain]);
  if (text === undefined) return undefined;
  return (JSON.parse(text).nftables as ApiObject[]).filter((item) => item.rule).length;
}

/** Creates an empty network namespace `name` for scratch loads; delete it with {@linkcode deleteNamespace}. */
export async function createNamespace(name: string): Promise<void> {
  const result = await new HostExecutor().run({ program: "ip", args: ["netns", "add", name] });
  if (result.code !== 0) throw new Error(`Cannot create namespace ${name}: ${result.stderr}`);
}

/** Deletes a namespace made by {@linkcode createNamespace}; ignores a missing one. */
export async function deleteNamespace(name: string): Promise<void> {
  await new HostExecutor().run({ program: "ip", args: ["netns", "del", name] });
}

/** Options for {@linkcode TrafficLoop.start}. */
export interface TrafficLoopOptions {
  topology: Topology;
  /** `ip:port` targets, each sent one TCP request per round. */
  targets: { ip: string; port: number }[];
  /** Pause between rounds. @default {100} */
  pauseMs?: number;
}

/** TCP requests from the client namespace in a loop until stopped; records every failure. */
export class TrafficLoop {
  /** Requests sent. */
  sent = 0;
  /** Failed requests with their target and time. */
  readonly failures: { target: string; reply: Reply; at: number }[] = [];
  readonly #done: Promise<void>;
  #stopped = false;

  private constructor(options: TrafficLoopOptions) {
    this.#done = this.#loop(options);
  }

  /** Starts the loop. */
  static start(options: TrafficLoopOptions): TrafficLoop {
    return new TrafficLoop(options);
  }

  /** Stops after the current round; resolves when it has. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#done;
  }

  async #loop(options: TrafficLoopOptions): Promise<void> {
    const { topology, targets } = options;
    while (!this.#stopped) {
      const replies = await topology.requests(
        topology.client,
        targets.map(({ ip, port }) => ({ protocol: "TCP" as const, ip, port, timeoutMs: 1000 })),
      );
      replies.forEach((reply, i) => {
        this.sent++;
        if (!reply.ok) {
          const { ip, port } = targets[i]!;
          this.failures.push({ target: `${ip}:${port}`, reply, at: Date.now() });
        }
      });
      await new Promise((resolve) => setTimeout(resolve, options.pauseMs ?? 100));
    }
  }
}

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

/** Options for {@linkcode KproxyProcess}. */
export interface KproxyProcessOptions {
  namespace: string;
  /** Flags after `--proxy-mode=nftables --hostname-override=node-a --cluster-cidr=… -v=2`. */
  args: string[];
  /** PATH of the process. @default the test's PATH */
  path?: string;
  /** Its descriptor limit (RLIMIT_NOFILE), set with `prlimit`. @default the test's own */
  maxOpenFiles?: number;
}

/** `deno run --allow-all main.ts` in a namespace, with its stderr lines collected. */
export class KproxyProcess {
  readonly lines: string[] = [];
  readonly child: Deno.ChildProcess;
  readonly #reading: Promise<void>;

  constructor(options: KproxyProcessOptions) {
    this.child = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        options.namespace,
        ...(options.maxOpenFiles === undefined
          ? []
          : ["prlimit", `--nofile=${options.maxOpenFiles}`]),
        Deno.execPath(),
        "run",
        "--allow-all",
        MAIN,
        "--proxy-mode=nftables",
        "--hostname-override=node-a",
        "--cluster-cidr=10.244.0.0/16",
        "-v=2",
        ...options.args,
      ],
      env: { RUST_BACKTRACE: "0", ...(options.path ? { PATH: options.path } : {}) },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    this.#reading = this.#read();
  }

  async #read(): Promise<void> {
    let rest = "";
    for await (const chunk of this.child.stderr.pipeThrough(new TextDecoderStream())) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop() ?? "";
      this.lines.push(...parts);
    }
    if (rest !== "") this.lines.push(rest);
  }

  /** Waits for a log line matching `pattern`. */
  async waitForLine(pattern: RegExp, timeoutMs = 60_000): Promise<void> {
    await waitFor(`a log line ${pattern}`, () => this.lines.some((l) => pattern.test(l)), timeoutMs)
      .catch((error) => {
        throw new Error(`${error.message}\n${this.lines.slice(-20).join("\n")}`);
      });
  }

  /** True until the process exits. */
  async running(): Promise<boolean> {
    return await Promise.race([
      this.child.status.then(() => false),
      new Promise<boolean>((resolve) => setTimeout(() => resolve(true), 0)),
    ]);
  }

  /** Sends `signal` and returns the exit status. */
  async kill(signal: Deno.Signal): Promise<Deno.CommandStatus> {
    try {
      this.child.kill(signal);
    } catch {
      // Already exited.
    }
    const status = await this.child.status;
    await this.#reading;
    return status;
  }
}

/** Options for {@linkcode httpStatus}. */
export interface HttpStatusOptions {
  /** curl's `--max-time`: the whole request, connection included. @default {2} */
  maxTimeSeconds?: number;
}

/** The HTTP status of GET `url` from namespace `ns` (with curl), 0 when no answer came in time. */
export async function httpStatus(
  ns: string,
  url: string,
  options: HttpStatusOptions = {},
): Promise<number> {
  const maxTime = options.maxTimeSeconds ?? 2;
  const result = await new NetnsExecutor({ namespace: ns }).run({
    program: "curl",
    args: ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", String(maxTime), url],
    timeoutMs: maxTime * 1000 + 3_000,
  });
  return Number(result.stdout.trim() || "0");
}

const FLOOD = `
import json, os, select, socket, sys, time
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kinds, reopen_per_second = sys.argv[4].split(","), int(sys.argv[5])
requests = {
    "idle": b"",
    "half": b"GET /healthz HTTP/1.1\\r\\nHost: kproxy\\r\\nX-Slow: ",
    "keepalive": b"GET /healthz HTTP/1.1\\r\\nHost: kproxy\\r\\n\\r\\n",
}
stats = {"opened": 0, "connectFailures": 0, "closedByServer": 0, "answered": 0, "mostOpen": 0}
sockets = {}
def open_one(slot):
    kind = kinds[slot % len(kinds)]
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(1)
    try:
        s.connect((host, port))
        if requests[kind]:
            s.sendall(requests[kind])
        s.setblocking(False)
    except OSError:
        stats["connectFailures"] += 1
        s.close()
        return
    stats["opened"] += 1
    sockets[slot] = s
def poll():
    for slot, s in list(sockets.items()):
        try:
            data = s.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if data:
            stats["answered"] += 1
            continue
        stats["closedByServer"] += 1
        s.close()
        del sockets[slot]
for slot in range(count):
    open_one(slot)
stats["mostOpen"] = len(sockets)
os.write(1, b"ready\\n")
while not select.select([0], [], [], 0.2)[0]:
    poll()
    budget = max(1, reopen_per_second // 5)
    for slot in range(count):
        if budget == 0:
            break
        if slot not in sockets:
            open_one(slot)
            budget -= 1
    stats["mostOpen"] = max(stats["mostOpen"], len(sockets))
poll()
os.write(1, (json.dumps(stats) + "\\n").encode())
`;

/** Options for {@linkcode ConnectionFlood.start}. */
export interface ConnectionFloodOptions {
  /** Namespace the connections come from. */
  namespace: string;
  host: string;
  port: number;
  /** Connections held open at once (closed ones are opened again). */
  connections: number;
  /**
   * What each connection sends, in turn: nothing, half a request header, or a
   * whole keep-alive request whose answer it reads and then keeps quiet.
   * @default {["idle", "half", "keepalive"]}
   */
  kinds?: ("idle" | "half" | "keepalive")[];
  /** How fast closed connections are opened again. @default {200} */
  reopenPerSecond?: number;
}

/** What a {@linkcode ConnectionFlood} saw. */
export interface ConnectionFloodStats {
  opened: number;
  connectFailures: number;
  closedByServer: number;
  /** Reads that returned data (answers to keep-alive requests, error pages). */
  answered: number;
  /** The most connections it held open at once. */
  mostOpen: number;
}

/**
 * A client that opens many TCP connections from a namespace and holds them
 * open without finishing a request (a python3 program, so it is not bound by
 * the test's event loop).
 */
export class ConnectionFlood {
  readonly #child: Deno.ChildProcess;
  readonly #lines: ReadableStreamDefaultReader<string>;
  #buffer = "";
  /** Resolves once every connection was tried once. */
  readonly ready: Promise<void>;

  private constructor(options: ConnectionFloodOptions) {
    this.#child = new Deno.Command("ip", {
      args: [
        "netns",
        "exec",
        options.namespace,
        "python3",
        "-c",
        FLOOD,
        options.host,
        String(options.port),
        String(options.connections),
        (options.kinds ?? ["idle", "half", "keepalive"]).join(","),
        String(options.reopenPerSecond ?? 200),
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    this.#lines = this.#child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    this.ready = this.#line().then((line) => {
      if (line.trim() !== "ready") throw new Error(`Cannot start the connection flood: ${line}`);
    });
  }

  /** Starts the flood; await {@linkcode ready} before relying on it. */
  static start(options: ConnectionFloodOptions): ConnectionFlood {
    return new ConnectionFlood(options);
  }

  /** Closes every connection and returns what the flood saw. */
  async stop(): Promise<ConnectionFloodStats> {
    await this.#child.stdin.close();
    const stats = JSON.parse(await this.#line()) as ConnectionFloodStats;
    await this.#child.status;
    return stats;
  }

  /** Kills the flood if it still runs (for `finally` blocks). */
  async kill(): Promise<void> {
    try {
      this.#child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
    await this.#child.status;
    await this.#lines.cancel().catch(() => undefined);
  }

  async #line(): Promise<string> {
    while (!this.#buffer.includes("\n")) {
      const { value, done } = await this.#lines.read();
      if (done) throw new Error(`The connection flood ended early: ${this.#buffer}`);
      this.#buffer += value;
    }
    const end = this.#buffer.indexOf("\n");
    const line = this.#buffer.slice(0, end);
    this.#buffer = this.#buffer.slice(end + 1);
    return line;
  }
}

/** Options for {@linkcode diffTables}. */
export interface DiffOptions {
  /** Sets whose extra elements are tolerated (missing ones are still differences). */
  tolerateExtraIn?: readonly string[];
}

/**
 * Human-readable differences between two canonical tables (empty when
 * equal): chains and sets leaked or missing, rules and elements extra or
 * missing.
 */
export function diffTables(
  actual: CanonicalTable | undefined,
  expected: CanonicalTable | undefined,
  options: DiffOptions = {},
): string[] {
  if (actual === undefined || expected === undefined) {
    return actual === expected ? [] : [`table ${actual ? "unexpected" : "missing"}`];
  }
  const differences: string[] = [];
  const show = (items: string[]) => JSON.stringify(items).slice(0, 400);
  for (const name of new Set([...Object.keys(actual.chains), ...Object.keys(expected.chains)])) {
    const a = actual.chains[name];
    const e = expected.chains[name];
    if (e === undefined) differences.push(`leaked chain ${name}`);
    else if (a === undefined) differences.push(`missing chain ${name}`);
    else if (JSON.stringify(a) !== JSON.stringify(e)) {
      differences.push(`chain ${name} differs: ${show(a.rules)} vs ${show(e.rules)}`);
    }
  }
  for (const name of new Set([...Object.keys(actual.sets), ...Object.keys(expected.sets)])) {
    const a = actual.sets[name];
    const e = expected.sets[name];
    if (e === undefined) differences.push(`leaked set ${name}`);
    else if (a === undefined) differences.push(`missing set ${name}`);
    else if (a.spec !== e.spec) differences.push(`set ${name} differs: ${a.spec} vs ${e.spec}`);
    else {
      const extra = a.elements.filter((element) => !e.elements.includes(element));
      const missing = e.elements.filter((element) => !a.elements.includes(element));
      if (extra.length > 0 && !options.tolerateExtraIn?.includes(name)) {
        differences.push(`leaked elements in ${name}: ${show(extra)}`);
      }
      if (missing.length > 0) differences.push(`missing elements in ${name}: ${show(missing)}`);
    }
  }
  return differences;
}

/** Elements of set `name` in `actual` that `expected` lacks. */
export function extraElements(
  actual: CanonicalTable | undefined,
  expected: CanonicalTable | undefined,
  name: string,
): string[] {
  const wanted = new Set(expected?.sets[name]?.elements ?? []);
  return (actual?.sets[name]?.elements ?? []).filter((element) => !wanted.has(element));
}

/**
 * Loads a fresh full render of `plans` into the empty namespace `scratch`
 * (flushing it first) with the options kproxy's nftables backend derives from
 * `config`; throws when `nft` refuses it.
 */
export async function loadFreshRender(
  scratch: string,
  plans: NodePlans,
  config: Config,
): Promise<void> {
  const script = [plans.ipv4, plans.ipv6].map((plan) =>
    renderFull(plan, {
      table: "kproxy",
      masqueradeMark: 1 << config.iptables.masqueradeBit,
      dropInvalid: !config.conntrack.tcpBeLiberal,
    }).toString()
  ).join("");
  await nftIn(scratch, ["flush", "ruleset"]);
  if (await nftIn(scratch, ["-f", "-"], script) === undefined) {
    throw new Error(`Cannot load a fresh render into ${scratch}`);
  }
}
