/**
 * kproxy under test: in process (`startKproxy`, fed by a hand-driven
 * `ManualSource`, running through a `FaultyExecutor` that injects faults) or
 * as a process of its own (`KproxyProcess`), with its logs captured.
 *
 * @module
 */

import type { Backend } from "../../lib/core/backend.ts";
import { main, type RunningApp } from "../../lib/commands/app.ts";
import { ANY_ARGUMENTS, KPROXY_COMMAND_POLICY } from "../../lib/shell/command_policy.ts";
import { DenoExecutor, missingProgramError } from "../../lib/shell/exec.ts";
import type { Command, CommandResult, Executor } from "../../lib/core/executor.ts";
import { setupLogging } from "../../lib/shell/log.ts";
import type { Source, SourceEvent, SourceListener } from "../../lib/core/source.ts";
import { kernelUnavailableReason, onHostPath, Topology } from "../netns.ts";
import type { ApiObject } from "./fake_apiserver.ts";

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
  /**
   * Loads attempted (faulted or not), in order; `guardOnly` when the input
   * edits only kproxy's nftables load guard (its set-up runs while the first
   * lists do, `Backend.warmUp`), not a table of Service rules.
   */
  readonly loads: { program: string; fault?: FaultKind; at: number; guardOnly: boolean }[] = [];

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
      this.loads.push({
        program: command.program,
        fault,
        at: Date.now(),
        guardOnly: editsOnlyTheGuard(command),
      });
      if (fault === "exit") {
        return Promise.resolve({ code: 1, stdout: "", stderr: "injected failure\n" });
      }
      if (fault === "hang") {
        return this.#real.run({ program: "sleep", args: ["600"], timeoutMs: timed.timeoutMs });
      }
      if (fault === "missing") return this.#real.run({ ...timed, program: MISSING_PROGRAM });
    }
    // A program the host lacks fails as it would on a node, not as `ip netns exec`'s exit 1.
    if (!onHostPath(command.program)) throw missingProgramError(command);
    return this.#real.run({
      ...timed,
      program: "ip",
      args: ["netns", "exec", this.#namespace, command.program, ...command.args],
    });
  }
}

/** Whether `command` is an `nft` input whose every line is about `kproxy-guard`. */
function editsOnlyTheGuard(command: Command): boolean {
  if (command.program !== "nft" || typeof command.stdin !== "string") return false;
  return command.stdin.split("\n").every((line) => line === "" || / kproxy-guard\b/.test(line));
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
    // This kproxy runs in the test's namespace and programs the node's through the executor:
    // "all local IPs" (the iptables and ipvs default) would be the test host's addresses.
    "--nodeport-addresses=primary",
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

/** Polls `condition` every `everyMs` until it holds; throws naming `what` after `timeoutMs`. */
export async function waitFor(
  what: string,
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  everyMs = 50,
): Promise<number> {
  const start = Date.now();
  while (!(await condition())) {
    if (Date.now() - start > timeoutMs) throw new Error(`Timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
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
        // A network namespace cannot set the host's nf_conntrack_max (kind sets this too).
        "--conntrack-max-per-core=0",
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

export { bundleKproxy } from "../bundle.ts";
