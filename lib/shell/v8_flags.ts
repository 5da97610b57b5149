/**
 * The V8 flags kproxy runs with wherever a kproxy tool starts the runtime:
 * the compiled executable (`deno task compile`), `deno task launch` and the
 * container image's launcher. V8 reads them only as the process starts
 * (`v8.setFlagsFromString` at run time does not resize the young
 * generation), so `deno run main.ts` by hand needs them on its command line:
 * `deno run --v8-flags=--max-semi-space-size=4,--expose-gc,--single-threaded …` or
 * `DENO_V8_FLAGS`.
 *
 * A 4 MiB semi-space: left alone, V8 grows each semi-space to 32 MiB under
 * the lists' and the first sync's allocation rate, and that memory stays
 * resident (docs/BENCHMARKS.md, "Profile": 1k services in iptables mode
 * peaked at 167–180 MiB without it, 123–139 MiB with it).
 *
 * `--expose-gc`: the collections that free list pages and restore inputs
 * (`list_garbage.ts`) are then one mark-compact each; without the flag they
 * go through a `node:vm` context's `gc`, which runs two or more (at 10k
 * Services × 10, ~1 s of the 3.3 s the initial lists take was garbage
 * collection).
 *
 * `--single-threaded`: V8 collects and compiles on the main thread, with no
 * helper threads of its own (their stacks and malloc arenas, and the
 * concurrent marker's work lists). At 1k Services the peak is ~8 MiB lower
 * (nftables 88–92 against 91–103 MiB, iptables 96 against 100–104, lab, real
 * apiserver) for less CPU to the first sync (0.8–1.0 against 1.0–1.1 s); at
 * 10k the first syncs are no slower (nftables median 4.39 against 4.85 s,
 * iptables 15.7 against 17.3–19.9 s) at the same peak (docs/BENCHMARKS.md).
 * kproxy starts no Worker.
 *
 * @module
 */

/** V8 flags of every kproxy process a kproxy tool starts. */
export const V8_FLAGS: readonly string[] = [
  "--max-semi-space-size=4",
  "--expose-gc",
  "--single-threaded",
];

/** {@linkcode V8_FLAGS} as one `deno run`/`deno compile` argument. */
export function v8FlagsArg(): string {
  return `--v8-flags=${V8_FLAGS.join(",")}`;
}
