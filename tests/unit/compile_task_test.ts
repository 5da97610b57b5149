/**
 * `deno task compile` runs `deno compile` under the task's own permissions
 * (`--allow-run=deno`), wherever Deno is installed: from npm, `deno` on the
 * PATH is a link to the executable `Deno.execPath()` names.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url).pathname;

Deno.test("deno task compile gets as far as deno compile under the task's permissions", async () => {
  const denoDir = await Deno.makeTempDir({ prefix: "kproxy-compile-task-" });
  try {
    // A cached runtime that is not one: `deno compile` itself must be what fails.
    const release = `${denoDir}/dl/release/v${Deno.version.deno}`;
    await Deno.mkdir(release, { recursive: true });
    await Deno.writeTextFile(`${release}/denort-x86_64-unknown-linux-gnu.zip`, "not a zip");
    const task: string = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`)).tasks.compile;
    const [program, ...args] = task.split(" ");
    assert.equal(program, "deno");
    const { stderr } = await new Deno.Command("deno", {
      args: [...args, "--target=x86_64-unknown-linux-gnu"],
      cwd: ROOT,
      env: { DENO_DIR: denoDir },
      stdout: "null",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(stderr);
    assert.match(text, /compile: deno compile/);
    assert.doesNotMatch(text, /NotCapable|Requires run access/, text);
  } finally {
    await Deno.remove(denoDir, { recursive: true });
  }
});
