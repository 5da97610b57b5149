/**
 * The Executor: the only way kproxy runs programs. It runs allow-listed
 * programs with an argument vector (never a shell line) that their argument
 * policy allows (lib/shell/command_policy.ts), passes scripts on stdin and returns
 * exit status and output.
 *
 * @module
 */

import type { Command, CommandResult, Executor } from "../core/executor.ts";
import { type CommandPolicy, commandRefusal, KPROXY_COMMAND_POLICY } from "./command_policy.ts";
import { childEnvironment } from "./child_env.ts";
import { readAllBytes, readLines } from "./child_output.ts";

/** Thrown when a command exits non-zero, times out or cannot start. */
export class CommandError extends Error {
  constructor(
    readonly command: Command,
    readonly result: CommandResult | undefined,
    message: string,
  ) {
    super(message);
    this.name = "CommandError";
  }
}

/** True when `error` says a command could not start because its program is not installed. */
export function isMissingProgram(error: unknown): boolean {
  if (!(error instanceof CommandError)) return false;
  if (error.result === undefined) return error.message.endsWith(`: ${NOT_FOUND}`);
  return error.command.program === "ip" && error.command.args[0] === "netns" &&
    NETNS_EXEC_MISSING.test(error.result.stderr);
}

/** The error of a command whose program is not installed, as {@linkcode isMissingProgram} knows it. */
export function missingProgramError(command: Command): CommandError {
  return new CommandError(command, undefined, `Cannot run "${command.program}": ${NOT_FOUND}`);
}

const NOT_FOUND = "program not found in PATH";

/** How `ip netns exec` says it found no such program (iproute2's `cmd_exec`). */
const NETNS_EXEC_MISSING = /^exec of "[^"]+" failed: No such file or directory$/m;

/** Default time a program may run before it is killed. */
const DEFAULT_TIMEOUT_MS = 60_000;

/** Options for {@linkcode DenoExecutor}. */
export interface DenoExecutorOptions {
  /** Programs that may be run; anything else is refused without spawning. */
  allowedPrograms: readonly string[];
  /**
   * How each program may be called (lib/shell/command_policy.ts); a command it
   * refuses, or a program it does not name, is refused without spawning.
   * @default {KPROXY_COMMAND_POLICY}
   */
  policy?: CommandPolicy;
}

/** Formats a command for messages: program and arguments, no stdin. */
function describeCommand(command: Command): string {
  return [command.program, ...command.args].join(" ");
}

/**
 * Runs allow-listed programs with `Deno.Command` (an argv, never a shell).
 * A non-zero exit is returned as a result; refusal, a missing binary and a
 * timeout throw {@linkcode CommandError}.
 *
 * @example Usage
 * ```ts ignore
 * const executor = new DenoExecutor({ allowedPrograms: ["nft"] });
 * const result = await executor.run({ program: "nft", args: ["-f", "-"], stdin: script });
 * ```
 */
export class DenoExecutor implements Executor {
  readonly #allowed: ReadonlySet<string>;
  readonly #policy: CommandPolicy;

  constructor(options: DenoExecutorOptions) {
    this.#allowed = new Set(options.allowedPrograms);
    this.#policy = options.policy ?? KPROXY_COMMAND_POLICY;
  }

  /** Runs one command; see the class documentation for what throws. */
  async run(command: Command): Promise<CommandResult> {
    if (!this.#allowed.has(command.program)) {
      throw new CommandError(
        command,
        undefined,
        `Cannot run "${command.program}": not in the allowed programs`,
      );
    }
    const checked = withReusableStdin(command);
    const refused = commandRefusal(checked, this.#policy);
    if (refused !== undefined) {
      throw new CommandError(
        command,
        undefined,
        `Cannot run "${describeCommand(command)}": ${refused}`,
      );
    }
    return await spawnCommand(checked);
  }
}

/** The command with a one-shot stdin iterator collected, so the policy can read it first. */
function withReusableStdin(command: Command): Command {
  const { stdin } = command;
  if (stdin === undefined || typeof stdin === "string") return command;
  const oneShot = (stdin[Symbol.iterator]() as unknown) === stdin;
  return oneShot ? { ...command, stdin: [...stdin] } : command;
}

let programEnvironment: Record<string, string> | undefined;

/**
 * What {@linkcode childEnvironment} adds for every program, decided once. A
 * `GLIBC_TUNABLES` kproxy may not read counts as the operator's.
 */
function environmentOfPrograms(): Record<string, string> {
  if (programEnvironment === undefined) {
    let operatorTunables: string | undefined;
    try {
      operatorTunables = Deno.env.get("GLIBC_TUNABLES");
    } catch {
      operatorTunables = "";
    }
    programEnvironment = childEnvironment(operatorTunables);
  }
  return programEnvironment;
}

/**
 * Spawns a command with `Deno.Command` without any allow-list: the part of
 * {@linkcode DenoExecutor} that test and demo set-up reuses. A missing binary
 * or a timeout throws {@linkcode CommandError}; a non-zero exit is a result.
 */
export async function spawnCommand(command: Command): Promise<CommandResult> {
  const timeoutMs = command.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(command.program, {
      args: command.args,
      env: environmentOfPrograms(),
      stdin: command.stdin === undefined ? "null" : "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) throw missingProgramError(command);
    const reason = error instanceof Error ? error.message : String(error);
    throw new CommandError(command, undefined, `Cannot run "${command.program}": ${reason}`);
  }
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
  }, timeoutMs);
  try {
    // Read the output while writing stdin: a program that answers as it
    // reads would otherwise block on a full pipe.
    const finished = command.onStdoutLine
      ? outputByLines(child, command.onStdoutLine)
      : wholeOutput(child);
    finished.catch(() => {}); // awaited below; no unhandled rejection while stdin is written
    if (command.stdin !== undefined) {
      await writeAll(child.stdin, command.stdin);
    }
    const output = await finished;
    const result: CommandResult = {
      code: output.code,
      stdout: new TextDecoder().decode(output.stdout),
      stderr: new TextDecoder().decode(output.stderr),
    };
    if (timedOut) {
      throw new CommandError(
        command,
        result,
        `Cannot run "${describeCommand(command)}": killed after ${timeoutMs} ms timeout`,
      );
    }
    return result;
  } finally {
    clearTimeout(timer);
  }
}

/** Waits for `child`, its stdout and stderr read whole. */
async function wholeOutput(
  child: Deno.ChildProcess,
): Promise<{ code: number; stdout: Uint8Array; stderr: Uint8Array }> {
  const [status, stdout, stderr] = await Promise.all([
    child.status,
    readAllBytes(child.stdout),
    readAllBytes(child.stderr),
  ]);
  return { code: status.code, stdout, stderr };
}

/** Waits for `child`, handing its stdout to `onLine` line by line; stdout comes back empty. */
async function outputByLines(
  child: Deno.ChildProcess,
  onLine: (line: string) => void,
): Promise<{ code: number; stdout: Uint8Array; stderr: Uint8Array }> {
  const stderr = readAllBytes(child.stderr);
  stderr.catch(() => {}); // awaited below
  try {
    await readLines(child.stdout, onLine);
  } catch (error) {
    try {
      child.kill("SIGKILL");
    } catch {
      // Already exited.
    }
    throw error;
  }
  const [status, errors] = await Promise.all([child.status, stderr]);
  return { code: status.code, stdout: new Uint8Array(), stderr: errors };
}

/** UTF-16 code units encoded and written at a time: a large script is never copied whole. */
export const STDIN_CHUNK = 1 << 16;

/**
 * The pieces of a command's stdin in the order, and at the boundaries, at
 * which {@linkcode spawnCommand} writes them: each given piece, cut every
 * {@linkcode STDIN_CHUNK} code units (never inside a surrogate pair). A
 * writer that dies stops at one of these boundaries or inside one piece.
 */
export function* stdinWrites(stdin: string | Iterable<string>): Generator<string> {
  for (const text of typeof stdin === "string" ? [stdin] : stdin) {
    for (let start = 0; start < text.length;) {
      let end = Math.min(start + STDIN_CHUNK, text.length);
      // Keep a surrogate pair in one write.
      if (end < text.length && /[\uD800-\uDBFF]/.test(text[end - 1]!)) end++;
      yield text.slice(start, end);
      start = end;
    }
  }
}

async function writeAll(
  stream: WritableStream<Uint8Array>,
  stdin: string | Iterable<string>,
): Promise<void> {
  const writer = stream.getWriter();
  const encoder = new TextEncoder();
  try {
    for (const piece of stdinWrites(stdin)) await writer.write(encoder.encode(piece));
    await writer.close();
  } catch {
    // The program closed stdin early (it exited); its exit status tells why.
  } finally {
    writer.releaseLock();
  }
}

/**
 * Runs a command and throws {@linkcode CommandError} when it exits non-zero,
 * with the program's stderr in the message.
 *
 * @returns the result of a successful (exit 0) run
 */
export async function runChecked(executor: Executor, command: Command): Promise<CommandResult> {
  const result = await executor.run(command);
  if (result.code !== 0) {
    const detail = result.stderr.trim() || result.stdout.trim() || "no output";
    throw new CommandError(
      command,
      result,
      `Cannot run "${describeCommand(command)}": exit status ${result.code}: ${detail}`,
    );
  }
  return result;
}
