/**
 * The container image's launcher: prints, shell-quoted, the `deno` argument
 * vector that runs the bundle with the exact permissions `deno task launch`
 * computes from the same flags and environment (`scripts/launch.ts`). The
 * image's `/usr/local/bin/kproxy` shell script `exec`s it, so kproxy itself is
 * the container's main process and gets its signals.
 *
 * Bundled to `/opt/kproxy/scripts/launch.js` beside `/opt/kproxy/dist/kproxy.js`,
 * the place `scripts/launch.ts` expects the bundle relative to itself.
 *
 * @module
 */

import { launchArgs } from "../launch.ts";

/** Quotes one argument for a POSIX shell: single quotes, with `'` written as `'\''`. */
export function shellQuote(arg: string): string {
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** The shell-quoted `deno` arguments that run kproxy with `argv`. */
export function launchCommandLine(argv: string[]): string {
  return launchArgs(argv).map(shellQuote).join(" ");
}

if (import.meta.main) {
  try {
    console.log(launchCommandLine(Deno.args));
  } catch (error) {
    console.error(`kproxy launch: ${error instanceof Error ? error.message : error}`);
    Deno.exit(2);
  }
}
