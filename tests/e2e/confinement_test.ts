/**
 * The packaged kproxy (the `deno bundle` of main.ts, run under the flags that
 * `lib/shell/permissions.ts` computes) does its job and nothing else: it cannot run
 * a program outside its list, reach a host outside its list, or read a file
 * outside its list.
 */
import assert from "node:assert/strict";
import { parseCommandLine } from "../../lib/config/command_line.ts";
import { denoFlags, permissionInputFor, permissionsFor } from "../../lib/shell/permissions.ts";
import { kernelUnavailableReason } from "../../scripts/netns.ts";
import { PROBES } from "./confinement_probe.ts";
import { bundleKproxy } from "../../scripts/testbed/kproxy.ts";

const root = new URL("../../", import.meta.url).pathname;
const manifests = `${root}scripts/manifests`;

async function buildBundle(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-bundle-" });
  await bundleKproxy(`${dir}/kproxy.js`);
  return `${dir}/kproxy.js`;
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

/**
 * The permission flags `deno task launch -- --print-flags ARGV` prints: the
 * words between `deno run` and the bundle.
 */
async function printedFlags(argv: string[]): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "launch", "--", "--print-flags", ...argv],
    cwd: root,
    env: { NO_COLOR: "1" },
    stdin: "null",
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const words = text.split(" ");
  const bundleAt = words.findIndex((word) => word.endsWith("/dist/kproxy.js"));
  assert.deepEqual(words.slice(0, 2), ["deno", "run"], text);
  assert.ok(bundleAt > 2, text);
  return words.slice(2, bundleAt);
}

/** The entries of the `--allow-net` flag among `flags`. */
function netEntries(flags: string[]): string[] {
  const flag = flags.find((f) => f.startsWith("--allow-net="));
  return flag === undefined ? [] : flag.slice("--allow-net=".length).split(",");
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

    await t.step("every net permission names a port; no unspecified host is bare", async () => {
      const entries = netEntries(await printedFlags(["--manifests", manifests]));
      assert.ok(entries.length > 0);
      for (const entry of entries) {
        assert.match(entry, /^(\[[0-9a-f:.]+\]|[^:\[\]]+):\d{1,5}$/, `"${entry}" names no port`);
      }
    });

    await t.step(
      "cannot connect to 0.0.0.0 (loopback) outside its own listening ports",
      async () => {
        const flags = await printedFlags([
          "--manifests",
          manifests,
          "--hostname-override",
          "node-a",
        ]);
        const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
        const port = (listener.addr as Deno.NetAddr).port;
        let accepted = 0;
        const accepting = (async () => {
          for await (const connection of listener) {
            accepted++;
            connection.close();
          }
        })();
        try {
          const argv = ["plan", "--master", `http://0.0.0.0:${port}`, "--hostname-override", "x"];
          const result = await runBundle(bundle, flags, argv);
          assert.notEqual(result.code, 0);
          assert.match(result.stderr, new RegExp(`Requires net access to "0\\.0\\.0\\.0:${port}"`));
          assert.equal(accepted, 0, "the bundle reached a loopback listener through 0.0.0.0");
        } finally {
          listener.close();
          await accepting;
        }
      },
    );

    await t.step("its Executor refuses commands that name a file or run a program", async () => {
      // Stubs stand in for the programs --allow-run names; each records that it ran.
      const dir = await Deno.makeTempDir({ prefix: "kp-conf-stubs-" });
      try {
        for (const program of ["nft", "ip", "iptables-restore", "iptables-save", "sysctl"]) {
          await Deno.writeTextFile(
            `${dir}/${program}`,
            `#!/bin/sh\necho "${program} $*" >> ${dir}/ran\n`,
            { mode: 0o755 },
          );
        }
        const flags = await printedFlags([
          "--manifests",
          manifests,
          "--hostname-override",
          "node-a",
        ]);
        const out = await new Deno.Command(Deno.execPath(), {
          args: ["run", ...flags, `${root}tests/e2e/confinement_probe.ts`],
          cwd: root,
          env: { NO_COLOR: "1", PATH: `${dir}:${Deno.env.get("PATH")}` },
          stdin: "null",
        }).output();
        const lines = new TextDecoder().decode(out.stdout).trim().split("\n");
        assert.equal(
          lines.length,
          Object.keys(PROBES).length,
          new TextDecoder().decode(out.stderr),
        );
        for (const line of lines) {
          const needed = line.startsWith("ip deletes the ipvs dummy interface");
          assert.match(line, needed ? /: ran$/ : /: refused: Cannot run /);
        }
        const ran = await Deno.readTextFile(`${dir}/ran`).catch(() => "");
        assert.equal(ran, "ip link del kube-ipvs0\n", "a refused command reached its program");
      } finally {
        await Deno.remove(dir, { recursive: true });
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

const netnsSkipReason = await kernelUnavailableReason(["ip"]);
if (netnsSkipReason) console.warn(`confinement listen test ignored: ${netnsSkipReason}`);

Deno.test({
  name: "the printed flags let kproxy listen on healthz and node-range ports, nothing else",
  ignore: netnsSkipReason !== undefined,
  async fn() {
    const flags = await printedFlags(["--manifests", manifests, "--hostname-override", "node-a"]);
    const namespace = `kp-conf-${crypto.randomUUID().slice(0, 8)}`;
    const dir = await Deno.makeTempDir({ prefix: "kp-conf-" });
    const probe = `${dir}/probe.ts`;
    await Deno.writeTextFile(
      probe,
      `for (const [what, port] of [["listen", 10256], ["listen", 30080], ["listen", 32767],
  ["listen", 29999], ["listen", 32768], ["connect", 22], ["connect", 10250]] as const) {
  try {
    if (what === "listen") Deno.listen({ hostname: "0.0.0.0", port }).close();
    else (await Deno.connect({ hostname: "0.0.0.0", port })).close();
    console.log(what, port, "allowed");
  } catch (error) {
    console.log(what, port, error instanceof Deno.errors.NotCapable ? "refused" : "allowed");
  }
}
`,
    );
    try {
      const add = await new Deno.Command("ip", { args: ["netns", "add", namespace] }).output();
      assert.ok(add.success, new TextDecoder().decode(add.stderr));
      const out = await new Deno.Command("ip", {
        args: ["netns", "exec", namespace, Deno.execPath(), "run", ...flags, probe],
        env: { NO_COLOR: "1" },
        stdin: "null",
      }).output();
      assert.deepEqual(new TextDecoder().decode(out.stdout).trim().split("\n"), [
        "listen 10256 allowed",
        "listen 30080 allowed",
        "listen 32767 allowed",
        "listen 29999 refused",
        "listen 32768 refused",
        "connect 22 refused",
        "connect 10250 refused",
      ], new TextDecoder().decode(out.stderr));
    } finally {
      await new Deno.Command("ip", { args: ["netns", "del", namespace], stderr: "null" }).output();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
