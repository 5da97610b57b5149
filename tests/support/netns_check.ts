/**
 * Validates rendered scripts with the real tools (`nft`, `iptables-restore`,
 * `ip6tables-restore`, nft and legacy variants) inside one throwaway network
 * namespace, so the host's own ruleset is never read or changed.
 *
 * @module
 */

import { spawnCommand } from "../../lib/shell/exec.ts";

/** The programs a {@linkcode NetnsChecker} can run, by what they validate. */
export type CheckTool =
  | "nft"
  | "iptables-nft-restore"
  | "ip6tables-nft-restore"
  | "iptables-legacy-restore"
  | "ip6tables-legacy-restore";

/** The outcome of running one tool on one script. */
export interface ToolResult {
  ok: boolean;
  code: number;
  stderr: string;
}

async function run(program: string, args: string[], stdin = ""): Promise<ToolResult> {
  const { code, stderr } = await spawnCommand({ program, args, stdin });
  return { ok: code === 0, code, stderr };
}

async function hasProgram(program: string): Promise<boolean> {
  for (const dir of ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]) {
    try {
      await Deno.stat(`${dir}/${program}`);
      return true;
    } catch {
      // try the next directory
    }
  }
  return false;
}

/**
 * Why the real tools cannot be used here, or undefined when they can. Prints
 * the reason, so a skipped test is never silent.
 *
 * @param tools The programs the caller needs besides `ip`.
 */
export async function netnsSkipReason(tools: readonly CheckTool[]): Promise<string | undefined> {
  let reason: string | undefined;
  if (Deno.build.os !== "linux") reason = "not Linux";
  else if (Deno.uid() !== 0) reason = "not root";
  else {
    for (const program of ["ip", ...tools]) {
      if (!(await hasProgram(program))) {
        reason = `${program} is not installed`;
        break;
      }
    }
  }
  if (reason !== undefined) console.warn(`real-tool checks ignored: ${reason}`);
  return reason;
}

/**
 * One throwaway network namespace in which scripts are checked (`nft -c`,
 * `iptables-restore --test`) or applied. Create with
 * {@linkcode NetnsChecker.create}, always {@linkcode NetnsChecker.destroy} in
 * `finally`.
 *
 * @example Usage
 * ```ts ignore
 * const checker = await NetnsChecker.create("kp-fz");
 * try {
 *   const result = await checker.check("nft", "add table ip t\n");
 * } finally {
 *   await checker.destroy();
 * }
 * ```
 */
export class NetnsChecker {
  /** The namespace name, `<prefix>-<random>`. */
  readonly name: string;

  private constructor(name: string) {
    this.name = name;
  }

  /** Creates a fresh namespace named `<prefix>-<8 random hex digits>`. */
  static async create(prefix: string): Promise<NetnsChecker> {
    const tag = crypto.getRandomValues(new Uint32Array(1))[0]!.toString(16).padStart(8, "0");
    const name = `${prefix}-${tag}`;
    const result = await run("ip", ["netns", "add", name]);
    if (!result.ok) {
      throw new Error(`Cannot create network namespace "${name}": ${result.stderr.trim()}`);
    }
    return new NetnsChecker(name);
  }

  /** Validates a script without applying it: `nft -c -f -` or `<restore> --test --noflush`. */
  check(tool: CheckTool, script: string): Promise<ToolResult> {
    return this.#exec(tool, tool === "nft" ? ["-c", "-f", "-"] : ["--test", "--noflush"], script);
  }

  /** Applies a script inside the namespace: `nft -f -` or `<restore> --noflush`. */
  apply(tool: CheckTool, script: string): Promise<ToolResult> {
    return this.#exec(tool, tool === "nft" ? ["-f", "-"] : ["--noflush"], script);
  }

  /** Empties the namespace's nftables and iptables (both variants) rulesets. */
  async reset(): Promise<void> {
    await this.#exec("nft", ["flush", "ruleset"]);
    for (const tool of ["iptables", "ip6tables"]) {
      for (const variant of ["nft", "legacy"]) {
        const restore = `${tool}-${variant}-restore` as CheckTool;
        if (!(await hasProgram(restore))) continue;
        const tables = ["*nat", "*filter", "*mangle"].map((t) => `${t}\nCOMMIT\n`).join("");
        await this.#exec(restore, [], tables);
      }
    }
  }

  /** Runs `program args` inside the namespace. */
  #exec(program: string, args: string[], stdin = ""): Promise<ToolResult> {
    return run("ip", ["netns", "exec", this.name, program, ...args], stdin);
  }

  /** Deletes the namespace. */
  async destroy(): Promise<void> {
    const result = await run("ip", ["netns", "del", this.name]);
    if (!result.ok) {
      console.warn(`Cannot delete network namespace "${this.name}": ${result.stderr.trim()}`);
    }
  }
}
