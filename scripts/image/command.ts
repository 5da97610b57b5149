/**
 * Runs the build tools the image builder needs (apt, dpkg-deb, tar, gzip,
 * npm, deno) and returns their output.
 *
 * @module
 */

/**
 * Runs `program` with `args` (in `cwd` when given) and returns its stdout.
 *
 * @throws {Error} naming the command and its stderr when it cannot start or exits non-zero
 */
export async function runTool(program: string, args: string[], cwd?: string): Promise<string> {
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command(program, { args, cwd, stdout: "piped", stderr: "piped" })
      .output();
  } catch (error) {
    throw new Error(`Cannot run ${program}: ${error instanceof Error ? error.message : error}`);
  }
  if (!output.success) {
    const stderr = new TextDecoder().decode(output.stderr).trim();
    throw new Error(`Cannot run ${program} ${args.join(" ")}: ${stderr}`);
  }
  return new TextDecoder().decode(output.stdout);
}
