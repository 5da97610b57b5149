/**
 * The packaged kproxy (the `deno bundle` of main.ts, run under the flags that
 * `lib/permissions.ts` computes) does its job and nothing else: it cannot run
 * a program outside its list, reach a host outside its list, or read a file
 * outside its list.
 */
import assert from "node:assert/strict";
import { parseCommandLine } from "../../lib/config.ts";
import { denoFlags, permissionInputFor, permissionsFor } from "../../lib/permissions.ts";

const root = new URL("../../", import.meta.url).pathname;
const manifests = `${root}scripts/manifests`;

async function buildBundle(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-bundle-" });
  const output = `${dir}/kproxy.js`;
  const { success, stderr } = await new Deno.Command(Deno.execPath(), {
    args: [
      "bundle",
      "--quiet",
      "--platform",
      "deno",
      // As `deno task bundle`: client-node is loaded only for exec-plugin users.
      "--external",
      "@kubernetes/client-node",
      "-o",
      output,
      `${root}main.ts`,
    ],
    cwd: root,
    stdout: "null",
  }).output();
  assert.ok(success, new TextDecoder().decode(stderr));
  return output;
}

function flagsFor(argv: string[], overrides: { run?: string[]; net?: string[] } = {}): string[] {
  const { config } = parseCommandLine(argv, {
    readTextFile: (path) => Deno.readTextFileSync(path),
    hostname: () => "node-a",
  });
  const permissions = permissionsFor(
    permissionInputFor(config, {
      readTextFile: (path) => Deno.readTextFileSync(path),
      getEnv: () => undefined,
    }),
  );
  return denoFlags({ ...permissions, ...overrides });
}

async function runBundle(bundle: string, flags: string[], argv: string[]) {
  const env = { NO_COLOR: "1" };
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", ...flags, bundle, ...argv],
    cwd: root,
    env,
    stdin: "null",
    signal: AbortSignal.timeout(30_000),
  }).output();
  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

Deno.test("packaged kproxy works and stays inside its permissions", async (t) => {
  const bundle = await buildBundle();
  try {
    const planArgs = ["plan", "--manifests", manifests, "--hostname-override", "node-a"];

    await t.step("--version prints version, Deno version and target", async () => {
      const result = await runBundle(bundle, flagsFor(planArgs), ["--version"]);
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, /^kproxy \d+\.\d+\.\d+ \(deno 2\.9\.6, [\w-]+\)/);
    });

    await t.step("plan on the shipped manifests works under the computed flags", async () => {
      const result = await runBundle(bundle, flagsFor(planArgs), planArgs);
      assert.equal(result.code, 0, result.stderr);
      const plans = JSON.parse(result.stdout);
      assert.ok(plans.ipv4.services.length > 0);
    });

    await t.step("cannot run a program outside its list", async () => {
      const argv = ["--cleanup", "--proxy-mode=nftables", "--manifests", manifests];
      const flags = flagsFor(argv, { run: ["iptables"] });
      const result = await runBundle(bundle, flags, argv);
      assert.notEqual(result.code, 0);
      assert.match(result.stderr, /Requires run access to "nft"/);
    });

    await t.step("cannot connect to a host outside its list", async () => {
      const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const port = (listener.addr as Deno.NetAddr).port;
      try {
        const argv = ["plan", "--master", `http://127.0.0.1:${port}`, "--hostname-override", "x"];
        const flags = flagsFor(argv, { net: ["127.0.0.1:10249"] });
        const result = await runBundle(bundle, flags, argv);
        assert.notEqual(result.code, 0);
        assert.match(result.stderr, new RegExp(`Requires net access to "127\\.0\\.0\\.1:${port}"`));
      } finally {
        listener.close();
      }
    });

    await t.step("cannot read a file outside its list", async () => {
      const dir = await Deno.makeTempDir({ prefix: "kproxy-secret-" });
      try {
        const secret = `${dir}/config.yaml`;
        await Deno.writeTextFile(secret, "kind: KubeProxyConfiguration\n");
        const result = await runBundle(bundle, flagsFor(planArgs), [
          ...planArgs,
          "--config",
          secret,
        ]);
        assert.equal(result.code, 2);
        assert.match(result.stderr, /Requires read access to/);
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    });
  } finally {
    await Deno.remove(bundle.slice(0, bundle.lastIndexOf("/")), { recursive: true });
  }
});
