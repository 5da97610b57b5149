/**
 * Whether an optional tool of the host runs, for tests that need it.
 *
 * `new Deno.Command(missing).output().then(ok, fail)` is not enough in Deno
 * 2.9.6: the failed spawn also rejects a promise the caller never sees, and
 * the test module dies of it ("Uncaught (in promise) NotFound"). Awaiting
 * inside `try` catches both.
 *
 * @module
 */

/** True when `program args…` can be started and exits 0. */
export async function programRuns(program: string, args: readonly string[] = ["--version"]) {
  try {
    const output = await new Deno.Command(program, {
      args: [...args],
      stdout: "null",
      stderr: "null",
    }).output();
    return output.success;
  } catch {
    return false;
  }
}
