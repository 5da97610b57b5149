/**
 * Runs `nft` inside a throwaway network namespace, so checking or loading a
 * script never touches the host's ruleset. Used by the nftables golden tests
 * and the benchmark.
 *
 * @module
 */

/** Why real `nft` cannot be used here, or undefined when it can. */
export async function nftUnavailable(): Promise<string | undefined> {
  if (Deno.build.os !== "linux") return "not Linux";
  for (const [program, flag] of [["nft", "--version"], ["ip", "-V"]] as const) {
    try {
      const { success } = await new Deno.Command(program, { args: [flag], stdout: "null", stderr: "null" })
        .output();
      if (!success) return `"${program} --version" failed`;
    } catch {
      return `"${program}" is not installed`;
    }
  }
  if (Deno.uid() !== 0) return "not root (network namespaces need CAP_SYS_ADMIN)";
  return undefined;
}

/** A network namespace in which `nft` runs. */
export interface NftNamespace {
  readonly name: string;
  /** Runs `nft <args>` with `stdin` in the namespace; throws with stderr on failure. */
  nft(args: string[], stdin?: string): Promise<{ stdout: string; ms: number }>;
}

async function run(program: string, args: string[], stdin?: string): Promise<{ stdout: string; ms: number }> {
  const started = performance.now();
  const child = new Deno.Command(program, {
    args,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(stdin));
    await writer.close();
  }
  const output = await child.output();
  const ms = performance.now() - started;
  if (!output.success) {
    const stderr = new TextDecoder().decode(output.stderr);
    throw new Error(`Cannot run "${program} ${args.join(" ")}": exit status ${output.code}: ${stderr.slice(0, 4000)}`);
  }
  return { stdout: new TextDecoder().decode(output.stdout), ms };
}

/** Creates a namespace `kp-nftc-<random>`, runs `fn` in it and always deletes it. */
export async function withNftNamespace<T>(fn: (ns: NftNamespace) => Promise<T>): Promise<T> {
  const name = `kp-nftc-${crypto.randomUUID().slice(0, 8)}`;
  await run("ip", ["netns", "add", name]);
  try {
    return await fn({
      name,
      nft: (args, stdin) => run("ip", ["netns", "exec", name, "nft", ...args], stdin),
    });
  } finally {
    await run("ip", ["netns", "del", name]);
  }
}
