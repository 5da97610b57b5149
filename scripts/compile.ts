/**
 * `deno task compile`: builds kproxy executables for Linux x86_64, Linux
 * aarch64 and Windows x86_64 with their permissions baked in.
 *
 * A compiled executable cannot take new permission flags at run time, so the
 * apiservers it may reach are named at build time (`--apiserver=host:port`,
 * repeatable); every other permission is the fixed narrow set of
 * `lib/shell/permissions.ts`. `deno compile` needs the target's runtime (denort): it
 * is used from the Deno cache when present, and this script says so clearly
 * when it is not (an offline machine cannot download it).
 *
 * Usage: deno task compile [--apiserver=HOST:PORT ...] [--service-node-port-range=FIRST-LAST]
 * [--target=TRIPLE ...]
 *
 * @module
 */

import { parseArgs } from "node:util";
import { toPortRange } from "../lib/config/values.ts";
import type { PortRange } from "../lib/config/types.ts";
import {
  denoFlags,
  HEALTH_CHECK_NODE_PORT_HOST,
  permissionsFor,
} from "../lib/shell/permissions.ts";
import { SERVICE_ACCOUNT_DIR } from "../lib/shell/source/kubeconfig.ts";
import { v8FlagsArg } from "../lib/shell/v8_flags.ts";

/** Build targets and where their configuration lives on the node. */
export const TARGETS = {
  "x86_64-unknown-linux-gnu": { windows: false },
  "aarch64-unknown-linux-gnu": { windows: false },
  "x86_64-pc-windows-msvc": { windows: true },
} as const;

type Target = keyof typeof TARGETS;

/**
 * V8 flags baked into the executable: {@linkcode lib/shell/v8_flags.ts}. A
 * 4 MB young generation (V8 grows it to 32 MB per semi-space under the first
 * sync's allocation rate) cuts the peak RSS at 10k services by ~30 MB, at
 * no measured cost in start-up.
 */
export { V8_FLAGS } from "../lib/shell/v8_flags.ts";

/** What a build bakes in besides the target. */
export interface CompileOptions {
  /** `host:port` of each apiserver the executable may reach. */
  apiservers: string[];
  /** The cluster's --service-node-port-range: where health-check node ports may listen. */
  nodePorts: PortRange;
}

/** The `deno compile` arguments for one target. */
export function compileArgs(target: Target, options: CompileOptions): string[] {
  const { apiservers, nodePorts } = options;
  const windows = TARGETS[target].windows;
  const permissions = permissionsFor({
    mode: windows ? "kernelspace" : "nftables",
    allModes: !windows,
    apiservers,
    listen: ["0.0.0.0:10256", "127.0.0.1:10249"],
    healthCheckNodePorts: { host: HEALTH_CHECK_NODE_PORT_HOST, ports: nodePorts },
    read: windows
      ? ["C:\\etc\\kproxy", "C:\\var\\lib\\kproxy"]
      : ["/etc/kproxy", "/var/lib/kproxy", SERVICE_ACCOUNT_DIR],
  });
  const output = `dist/kproxy-${target}${windows ? ".exe" : ""}`;
  return [
    "compile",
    ...denoFlags(permissions),
    v8FlagsArg(),
    "--target",
    target,
    "--output",
    output,
    "main.ts",
  ];
}

function denoDir(): string {
  const explicit = Deno.env.get("DENO_DIR");
  if (explicit) return explicit;
  const cache = Deno.env.get("XDG_CACHE_HOME") ?? `${Deno.env.get("HOME") ?? "/root"}/.cache`;
  return `${cache}/deno`;
}

/** Path where `deno compile` looks for the cached runtime of a target. */
export function cachedRuntimePath(target: Target): string {
  return `${denoDir()}/dl/release/v${Deno.version.deno}/denort-${target}.zip`;
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      apiserver: { type: "string", multiple: true, default: [] },
      "service-node-port-range": { type: "string", default: "30000-32767" },
      target: { type: "string", multiple: true, default: Object.keys(TARGETS) },
    },
  });
  let nodePorts: PortRange;
  try {
    nodePorts = toPortRange(
      values["service-node-port-range"] as string,
      "--service-node-port-range",
    );
  } catch (error) {
    console.error(`compile: ${error instanceof Error ? error.message : error}`);
    Deno.exit(2);
  }
  let built = 0;
  for (const target of values.target as Target[]) {
    if (!(target in TARGETS)) {
      console.error(
        `compile: unknown --target "${target}" (one of ${Object.keys(TARGETS).join(", ")})`,
      );
      Deno.exit(2);
    }
    const runtime = cachedRuntimePath(target);
    if (!exists(runtime)) {
      console.error(
        `compile: ${target}: no cached Deno runtime at ${runtime}; deno compile would download it, ` +
          "which this machine cannot. Copy denort-" + target + ".zip there, or use " +
          "'deno task bundle' (dist/kproxy.js) with scripts/launch.ts.",
      );
      continue;
    }
    const args = compileArgs(target, { apiservers: values.apiserver as string[], nodePorts });
    console.error(`compile: deno ${args.join(" ")}`);
    // `deno` as the task's `--allow-run=deno` names it: installed from npm, the
    // PATH's `deno` is a link to Deno.execPath(), which that permission does not cover.
    const { code } = await new Deno.Command("deno", { args }).spawn().status;
    if (code !== 0) Deno.exit(code);
    built++;
  }
  if (built === 0) {
    console.error("compile: no executable built (no cached runtime for any target)");
    Deno.exit(1);
  }
}
