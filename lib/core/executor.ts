/**
 * The Executor seam: how kproxy asks for a program to be run. The core and
 * the backends' renderers only describe commands; the shell runs them
 * (`DenoExecutor` in `lib/shell/exec.ts`).
 *
 * @module
 */

/** One program invocation. */
export interface Command {
  /** Program name, resolved through PATH; must be in the allow-list. */
  program: string;
  args: string[];
  /**
   * Written to the program's stdin, then stdin is closed. A large script can
   * come as chunks, written in order, so it never needs to be one string.
   */
  stdin?: string | Iterable<string>;
  /** Kill the program after this many milliseconds. @default {60000} */
  timeoutMs?: number;
  /**
   * Receives stdout one line at a time (without its newline) while the program
   * runs, so a large listing is never held whole; the result's stdout is then "".
   */
  onStdoutLine?: (line: string) => void;
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
