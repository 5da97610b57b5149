/**
 * The README's commands work as written: each command below is found
 * verbatim in a README code block and run from the repository root (with
 * this Deno for `deno`). Commands that need a cluster or take minutes are
 * checked elsewhere: the demo by tests/kernel/demo_test.ts, the suite by
 * running it.
 *
 * @module
 */

import assert from "node:assert/strict";

const root = new URL("../../", import.meta.url).pathname;
const readme = await Deno.readTextFile(`${root}README.md`);
const tasks: Record<string, string> = JSON.parse(await Deno.readTextFile(`${root}deno.json`)).tasks;

/** The lines of the README's code blocks, without comments and prompts. */
function readmeCommands(): string[] {
  const commands: string[] = [];
  for (const block of readme.matchAll(/```[a-z]*\n([\s\S]*?)```/g)) {
    for (const line of block[1]!.split("\n")) {
      const command = line.replace(/^\$ /, "").replace(/\s+#.*$/, "").trim();
      if (command !== "") commands.push(command);
    }
  }
  return commands;
}

/** Runs a documented command (plain words, no shell syntax) from the repository root. */
async function run(command: string): Promise<{ code: number; stdout: string; stderr: string }> {
  assert.ok(
    readmeCommands().includes(command),
    `the README does not show this command: ${command}`,
  );
  const [program, ...args] = command.split(/\s+/);
  assert.equal(program, "deno", command);
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: root,
    env: { NO_COLOR: "1", RUST_BACKTRACE: "0" },
    stdin: "null",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

Deno.test("README: the first two commands name the demo and test tasks", () => {
  const [demo, test] = readmeCommands();
  assert.equal(demo, "npx -y deno@2.9.6 task demo");
  assert.equal(test, "npx -y deno@2.9.6 task test");
  assert.match(tasks.demo!, /main\.ts demo$/);
  assert.match(tasks.test!, /^deno test .*tests\/$/);
});

Deno.test("README: deno task plan prints the plan of the shipped manifests", async () => {
  const result = await run("deno task plan");
  assert.equal(result.code, 0, result.stderr);
  assert.ok(JSON.parse(result.stdout).ipv4.services.length > 0);
});

Deno.test("README: explain answers on the shipped manifests", async () => {
  const result = await run(
    "deno run -A main.ts explain 10.96.0.10:80/TCP --manifests scripts/manifests --hostname-override node-a",
  );
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /^10\.96\.0\.10:80\/TCP /);
});

Deno.test("README: a bad flag exits 2 with the documented line", async () => {
  const documented = readme.match(/\$ (deno run -A main\.ts --proxy-mode=ebpf)\n(.*)\n/);
  assert.ok(documented, "the README's bad-flag example is missing");
  const result = await run(documented[1]!);
  assert.equal(result.code, 2);
  assert.equal(result.stderr.trim(), documented[2]);
});

Deno.test("README: deno task launch -- FLAGS runs the bundle under computed flags", async (t) => {
  await t.step("deno task bundle builds dist/kproxy.js", async () => {
    const result = await run("deno task bundle");
    assert.equal(result.code, 0, result.stderr);
    assert.ok((await Deno.stat(`${root}dist/kproxy.js`)).isFile);
  });

  await t.step("--print-flags shows the deno run command", async () => {
    const result = await run(
      "deno task launch -- --print-flags --manifests scripts/manifests --hostname-override node-a",
    );
    assert.equal(result.code, 0, result.stderr);
    assert.match(
      result.stdout,
      /^deno run --allow-run=\S+ --allow-net=\S+ .*dist\/kproxy\.js --manifests scripts\/manifests --hostname-override node-a\n$/,
    );
  });

  await t.step("the launched bundle plans the shipped manifests", async () => {
    const result = await run(
      "deno task launch -- plan --manifests scripts/manifests --hostname-override node-a",
    );
    assert.equal(result.code, 0, result.stderr);
    assert.ok(JSON.parse(result.stdout).ipv4.services.length > 0);
  });
});
