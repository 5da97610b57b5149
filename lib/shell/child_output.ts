/**
 * Reads a child process's stdout and stderr through BYOB readers, into
 * buffers kproxy owns. Deno 2.9.6's `ChildProcess.output()`, a default
 * reader and `new Response(stream)` each allocate fresh native buffers per
 * read (64 KiB and up); freed, they stay resident in glibc's heap: 1000
 * commands left ~150 MiB behind, 7000 ~250 MiB (a kproxy runs one command per
 * sync). Read this way, 1000 commands leave ~23 MiB
 * (`tests/support/command_memory.ts`).
 *
 * @module
 */

/** Bytes a whole-output read starts with; it doubles as the output grows. */
const INITIAL_BYTES = 4 * 1024;

/** Bytes of one read of {@linkcode readLines}, reused for every read. */
const LINE_READ_BYTES = 64 * 1024;

/**
 * Everything `stream` yields until it ends, in one buffer that grows by
 * doubling.
 *
 * @example Usage
 * ```ts ignore
 * const child = new Deno.Command("nft", { args: ["list", "ruleset"], stdout: "piped" }).spawn();
 * const bytes = await readAllBytes(child.stdout);
 * ```
 */
export async function readAllBytes(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  const reader = stream.getReader({ mode: "byob" });
  let buffer = new ArrayBuffer(INITIAL_BYTES);
  let length = 0;
  try {
    while (true) {
      if (length === buffer.byteLength) buffer = grown(buffer, length);
      const { done, value } = await reader.read(
        new Uint8Array(buffer, length, buffer.byteLength - length),
      );
      // A read transfers the buffer: the view it returns holds it now.
      if (value !== undefined) buffer = value.buffer as ArrayBuffer;
      if (done) break;
      length += value.byteLength;
    }
  } finally {
    reader.releaseLock();
  }
  return new Uint8Array(buffer, 0, length);
}

/**
 * Hands each line of `stream` (UTF-8, split on "\n", the last one also
 * without a newline) to `onLine` as it arrives, reading into one reused
 * buffer: the output is never held whole.
 *
 * @example Usage
 * ```ts ignore
 * await readLines(child.stdout, (line) => console.log(line));
 * ```
 */
export async function readLines(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  const reader = stream.getReader({ mode: "byob" });
  const decoder = new TextDecoder();
  let buffer = new ArrayBuffer(LINE_READ_BYTES);
  let rest = "";
  try {
    while (true) {
      const { done, value } = await reader.read(new Uint8Array(buffer));
      if (value !== undefined) buffer = value.buffer as ArrayBuffer;
      if (done) break;
      const lines = (rest + decoder.decode(value, { stream: true })).split("\n");
      rest = lines.pop()!;
      for (const line of lines) onLine(line);
    }
  } finally {
    reader.releaseLock();
  }
  rest += decoder.decode();
  if (rest !== "") onLine(rest);
}

function grown(buffer: ArrayBuffer, used: number): ArrayBuffer {
  const larger = new ArrayBuffer(buffer.byteLength * 2);
  new Uint8Array(larger).set(new Uint8Array(buffer, 0, used));
  return larger;
}
