/**
 * Runs the bundled kproxy (`dist/kproxy.js`, from `deno task bundle`) with the
 * narrowest permissions its configuration allows: it parses the same flags,
 * finds the apiserver and the files it must read, and starts
 * `deno run --allow-run=… --allow-net=host:port,… dist/kproxy.js ARGS`.
 *
 * Usage: `deno task launch -- [kproxy flags]` (or `deno run --allow-read --allow-env
 * --allow-sys=hostname --allow-run=deno scripts/launch.ts [kproxy flags]`). Add `--print-flags` to
 * print the computed command instead of running it.
 *
 * @module
 */

import { parseCommandLine } from "../lib/config/command_line.ts";
import { ConfigError } from "../lib/config/values.ts";
import { denoFlags, permissionInputFor, permissionsFor } from "../lib/shell/permissions.ts";
import { v8FlagsArg } from "../lib/shell/v8_flags.ts";
import { ROOT_STORE_VARIABLE } from "../lib/shell/source/transport.ts";

const bundle = new URL("../dist/kproxy.js", import.meta.url).pathname;

/**
 * Computes the `deno run` argument vector that runs the bundle (`dist/kproxy.js`
 * beside this script, or `bundlePath`) with exact permissions and kproxy's V8 flags.
 */
export function launchArgs(argv: string[], bundlePath: string = bundle): string[] {
  const { config } = parseCommandLine(argv, {
    readTextFile: (path) => Deno.readTextFileSync(path),
    hostname: () => Deno.hostname(),
  });
  const input = permissionInputFor(config, {
    readTextFile: (path) => Deno.readTextFileSync(path),
    getEnv: (name) => Deno.env.get(name),
  });
  // No V8 code cache: an image's DENO_DIR is new at every start, so each start
  // would compile and write it (a 1k peak of 99 MiB against 81), and no
  // writable file then holds code kproxy runs.
  return [
    "run",
    ...denoFlags(permissionsFor(input)),
    "--no-code-cache",
    v8FlagsArg(),
    bundlePath,
    ...argv,
  ];
}

/**
 * Environment variables a launcher adds for kproxy: `DENO_TLS_CA_STORE` set
 * and empty, so Deno's default root store is empty and the cluster's CA is the
 * only trust anchor of kproxy's own TLS client (`lib/shell/source/transport.ts`),
 * unless the operator named the stores. The image and the systemd unit set the same.
 */
export function launchEnvironment(
  getEnv: (name: string) => string | undefined = (name) => Deno.env.get(name),
): Record<string, string> {
  return getEnv(ROOT_STORE_VARIABLE) === undefined ? { [ROOT_STORE_VARIABLE]: "" } : {};
}

/**
 * The kproxy arguments of a launch command line: `deno task launch -- FLAGS`
 * passes the `--` on, so a leading one is dropped.
 */
export function kproxyArgv(args: readonly string[]): string[] {
  return args[0] === "--" ? args.slice(1) : [...args];
}

if (import.meta.main) {
  const given = kproxyArgv(Deno.args);
  const printOnly = given.includes("--print-flags");
  const argv = given.filter((arg) => arg !== "--print-flags");
  let args: string[];
  try {
    args = launchArgs(argv);
  } catch (error) {
    const message = error instanceof ConfigError || error instanceof Error ? error.message : error;
    console.error(`kproxy launch: ${message}`);
    Deno.exit(2);
  }
  if (printOnly) {
    console.log(["deno", ...args].join(" "));
    Deno.exit(0);
  }
  // `--allow-run=deno` names the deno found in PATH, which may be a link to this executable.
  const deno = Deno.permissions.querySync({ name: "run", command: Deno.execPath() }).state ===
      "granted"
    ? Deno.execPath()
    : "deno";
  const child = new Deno.Command(deno, { args, env: launchEnvironment(), stdin: "inherit" })
    .spawn();
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => child.kill(signal));
  }
  Deno.exit((await child.status).code);
}
