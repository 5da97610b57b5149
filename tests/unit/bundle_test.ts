/**
 * kproxy's start-up reaches no `node:` module: a bundle hoists every static
 * import of one to its top, and the first one evaluated starts Deno's Node
 * compatibility layer for the life of the process (~5 MiB of the 1k peak;
 * docs/ARCHITECTURE.md, "No Node at start-up").
 */
import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url).pathname;

Deno.test("the bundle imports no node: module at its top and needs no createRequire", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-bundle-" });
  try {
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "bundle",
        "--platform",
        "deno",
        "--external",
        "@kubernetes/client-node",
        "-o",
        `${dir}/kproxy.js`,
        "main.ts",
      ],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(output.success, new TextDecoder().decode(output.stderr));
    const bundle = await Deno.readTextFile(`${dir}/kproxy.js`);
    const staticNode = bundle.split("\n").filter((line) => /^import .*["']node:/.test(line));
    assert.deepEqual(staticNode, [], "static node: imports");
    assert.doesNotMatch(bundle, /createRequire|__require\(/, "CommonJS needs node:module");
    assert.match(bundle, /import\("node:https"\)/, "node:https stays, imported when first needed");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
