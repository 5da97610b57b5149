/**
 * An Executor for tests: records every command and answers from a queue of
 * replies, then from a handler.
 *
 * @module
 */

import type { Command, CommandResult, Executor } from "../../lib/core/executor.ts";

/** A command as a {@linkcode FakeExecutor} records it: stdin joined into one string. */
export type RecordedCommand = Command & { stdin?: string };

/** Answers a command in a {@linkcode FakeExecutor}. */
export type FakeHandler = (command: RecordedCommand) => CommandResult | Promise<CommandResult>;

/** A reply in a {@linkcode FakeExecutor} queue: a result, or an error to throw. */
export type FakeReply = Partial<CommandResult> | Error;

/**
 * An Executor for tests: records every command in `calls` and answers from a
 * queue of replies first, then from the handler, else with exit 0 and no output.
 * A command with `onStdoutLine` gets the answer's stdout line by line.
 */
export class FakeExecutor implements Executor {
  /** Every command run, in order (copies). */
  readonly calls: RecordedCommand[] = [];
  readonly #queue: FakeReply[] = [];
  #handler?: FakeHandler;

  constructor(handler?: FakeHandler) {
    this.#handler = handler;
  }

  /** Queues replies for the next commands, in order. */
  reply(...replies: FakeReply[]): this {
    this.#queue.push(...replies);
    return this;
  }

  /** Replaces the handler used once the queue is empty. */
  setHandler(handler: FakeHandler | undefined): this {
    this.#handler = handler;
    return this;
  }

  /** Records the command and answers it. */
  async run(command: Command): Promise<CommandResult> {
    const recorded: RecordedCommand = {
      ...command,
      args: [...command.args],
      stdin: command.stdin === undefined ? undefined : stdinText(command.stdin),
    };
    if (recorded.stdin === undefined) delete recorded.stdin;
    this.calls.push(recorded);
    const queued = this.#queue.shift();
    if (queued instanceof Error) throw queued;
    const result: CommandResult = queued !== undefined
      ? { code: 0, stdout: "", stderr: "", ...queued }
      : this.#handler
      ? await this.#handler(recorded)
      : { code: 0, stdout: "", stderr: "" };
    if (command.onStdoutLine === undefined) return result;
    const lines = result.stdout.split("\n");
    if (lines.at(-1) === "") lines.pop();
    for (const line of lines) command.onStdoutLine(line);
    return { ...result, stdout: "" };
  }
}

/** A command's stdin as one string. */
function stdinText(stdin: string | Iterable<string>): string {
  return typeof stdin === "string" ? stdin : [...stdin].join("");
}
