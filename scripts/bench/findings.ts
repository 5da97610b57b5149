/**
 * Profile findings written into `docs/BENCHMARKS.md` under "Profile and next
 * steps": what the hot paths cost at 30k services and what to change. Edit by
 * hand after profiling (`deno run --cpu-prof`); the numbers come from runs.
 *
 * @module
 */

/** Markdown paragraphs, one per finding. */
export const PROFILE_NOTES: readonly string[] = [];
