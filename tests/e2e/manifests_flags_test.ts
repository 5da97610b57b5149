/**
 * The manifests source under the exact permission flags that
 * `deno task launch -- --print-flags` prints for a manifests run: Deno's
 * `--allow-read=DIR` follows links, so kproxy itself must keep to the
 * directory, and `Deno.watchFs` must work within it.
 */

import assert from "node:assert/strict";
import { launchArgs } from "../../scripts/launch.ts";

const root = new URL("../../", import.meta.url).pathname;
const SECRET = "kproxy-test-secret";

const SERVICE = `apiVersion: v1
kind: Service
metadata: { namespace: default, name: web }
spec:
  clusterIP: 10.96.0.10
  ports: [{ name: http, port: 80, targetPort: 8080 }]
`;

/** The permission flags launch computes for `argv` (what `--print-flags` prints before the bundle). */
function launchFlags(argv: string[]): string[] {
  const args = launchArgs(argv);
  const bundle = args.findIndex((arg) => arg.endsWith("/dist/kproxy.js"));
  assert.ok(bundle > 0, args.join(" "));
  return args.slice(1, bundle);
}

async function withDirs(body: (dir: string, outside: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kp-flags-manifests-" });
  const outside = await Deno.makeTempDir({ prefix: "kp-flags-outside-" });
  try {
    await body(dir, outside);
  } finally {
    await Deno.remove(dir, { recursive: true });
    await Deno.remove(outside, { recursive: true });
  }
}

Deno.test("kproxy plan under launch's flags refuses links out of --manifests and echoes no file", async () => {
  await withDirs(async (dir, outside) => {
    await Deno.writeTextFile(`${dir}/a.yaml`, SERVICE);
    await Deno.writeTextFile(`${dir}/broken.yaml`, `token: ${SECRET}\n- root\n`);
    await Deno.writeTextFile(`${outside}/svc.yaml`, SERVICE.replace("name: web", "name: stolen"));
    await Deno.writeTextFile(`${outside}/shadow`, `root:$6$${SECRET}:20228:0:99999:7:::\n- x\n`);
    await Deno.symlink(`${outside}/svc.yaml`, `${dir}/stolen.yaml`);
    await Deno.symlink(`${outside}/shadow`, `${dir}/shadow.yaml`);
    const argv = ["plan", "--manifests", dir, "--hostname-override", "node-a"];
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["run", ...launchFlags(argv), `${root}main.ts`, ...argv],
      cwd: root,
      env: { NO_COLOR: "1" },
      stdin: "null",
      signal: AbortSignal.timeout(60_000),
    }).output();
    const stdout = new TextDecoder().decode(output.stdout);
    const stderr = new TextDecoder().decode(output.stderr);
    assert.equal(output.code, 0, stderr);
    assert.match(stdout, /default\/web/);
    assert.doesNotMatch(stdout, /stolen/);
    assert.doesNotMatch(stdout + stderr, new RegExp(SECRET));
    assert.match(stderr, /Refusing manifest .*stolen\.yaml/);
    assert.match(stderr, /Refusing manifest .*shadow\.yaml/);
    assert.match(stderr, /Skipping manifest .*broken\.yaml:2:1: /);
  });
});

Deno.test("the manifests source sees a change through Deno.watchFs under launch's flags", async () => {
  await withDirs(async (dir) => {
    await Deno.writeTextFile(`${dir}/a.yaml`, SERVICE);
    const argv = ["--manifests", dir, "--hostname-override", "node-a"];
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", ...launchFlags(argv), `${root}tests/support/file_source_probe.ts`, dir],
      cwd: root,
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const stderr = new Response(child.stderr).text();
    let seen = "";
    const waitFor = async (want: string) => {
      const deadline = AbortSignal.timeout(20_000);
      while (!seen.includes(want)) {
        const chunk = await Promise.race([
          lines.read(),
          new Promise<never>((_, reject) =>
            deadline.addEventListener("abort", () => reject(new Error(`no "${want}" in: ${seen}`)))
          ),
        ]);
        if (chunk.done) throw new Error(`probe ended before "${want}": ${seen}`);
        seen += chunk.value;
      }
    };
    try {
      await waitFor("synced");
      await Deno.writeTextFile(`${dir}/b.yaml`, SERVICE.replace("name: web", "name: api"));
      await waitFor("upsert Service default/api");
    } finally {
      child.kill();
      await child.status;
      await lines.cancel();
      const errors = await stderr;
      assert.doesNotMatch(errors, /Cannot watch|Stopped watching|NotCapable/, errors);
    }
  });
});
