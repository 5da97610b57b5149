/**
 * The Executor: the only way kproxy runs programs. It runs allow-listed
 * programs with an argument vector (never a shell line), passes scripts on
 * stdin and returns exit status and output. `FakeExecutor` records calls for
 * tests and answers from a script of replies.
 *
 * @module
 */

/** One program invocation. */
export interface Command {
  /** Program name, resolved through PATH; must be in the allow-list. */
  program: string;
  args: string[];
  /** Written to the program's stdin, then stdin is closed. */
  stdin?: string;
  /** Kill the program after this many milliseconds. @default {60000} */
  timeoutMs?: number;
}

/** What a finished program reported. */
export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs commands. */
export interface Executor {
  run(command: Command): Promise<CommandResult>;
}

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
