/**
 * kproxy creates no table it does not use: after any start and any
 * `--cleanup`, the node's tables (nftables, iptables-nft and legacy) are the
 * ones it had before plus kproxy's own. Runs main.ts in a network namespace
 * under the permission flags `lib/shell/permissions.ts` computes, as the packaged
 * kproxy runs.
 */
import assert from "node:assert/strict";
import { parseCommandLine } from "../../lib/config/command_line.ts";
import { denoFlags, permissionInputFor, permissionsFor } from "../../lib/shell/permissions.ts";
import { manifestText, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import { netnsSkipReason } from "../support/netns_check.ts";

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

const SKIP = await netnsSkipReason([
  "nft",
  "iptables-nft-restore",
  "iptables-legacy-restore",
  "ip6tables-legacy-restore",
]);

async function run(ns: string, args: string[], stdin?: string): Promise<string> {
  const child = new Deno.Command("ip", {
    args: ["netns", "exec", ns, ...args],
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
  const text = new TextDecoder().decode(output.stdout);
  if (!output.success) {
    throw new Error(`Cannot run ${args.join(" ")}: ${new TextDecoder().decode(output.stderr)}`);
  }
  return text;
}

/** Every table of the namespace: nft's listing (iptables-nft tables included) and the legacy ones. */
async function nodeTables(ns: string): Promise<string[]> {
  const nft = (await run(ns, ["nft", "list", "tables"])).split("\n").filter((line) => line);
  const legacy = async (family: string, file: string) =>
    (await run(ns, ["cat", file])).split("\n").filter((name) => name)
      .map((name) => `legacy ${family} ${name}`);
  return [
    ...nft,
    ...await legacy("ip", "/proc/net/ip_tables_names"),
    ...await legacy("ip6", "/proc/net/ip6_tables_names"),
  ].sort();
}

/** The flags main.ts runs under when packaged for `argv` (lib/shell/permissions.ts). */
function packagedFlags(argv: string[]): string[] {
  const { config } = parseCommandLine(argv, {
    readTextFile: (path) => Deno.readTextFileSync(path),
    hostname: () => "node-a",
  });
  return denoFlags(permissionsFor(permissionInputFor(config, {
    readTextFile: (path) => Deno.readTextFileSync(path),
    getEnv: () => undefined,
  })));
}

function kproxyArgs(mode: string, dir: string, extra: string[] = []): string[] {
  return [
    `--proxy-mode=${mode}`,
    "--conntrack-max-per-core=0",
    ...["--manifests", dir, "--hostname-override=node-a", ...extra],
  ];
}

/** Runs `kproxy --cleanup` to the end; returns its stderr. */
async function cleanup(ns: string, argv: string[]): Promise<void> {
  const args = [...argv, "--cleanup"];
  const output = await new Deno.Command("ip", {
    args: ["netns", "exec", ns, Deno.execPath(), "run", ...packagedFlags(args), MAIN, ...args],
    env: { RUST_BACKTRACE: "0" },
    stdin: "null",
  }).output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
}

/** Starts kproxy, waits until it has programmed and removed what other modes left, stops it. */
async function startAndStop(ns: string, argv: string[]): Promise<string> {
  const args = [...argv, "-v=4"];
  const child = new Deno.Command("ip", {
    args: ["netns", "exec", ns, Deno.execPath(), "run", ...packagedFlags(args), MAIN, ...args],
    env: { RUST_BACKTRACE: "0" },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let log = "";
  const reading = (async () => {
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) log += chunk;
  })();
  const deadline = Date.now() + 30_000;
  try {
    while (!/Leftovers of the .* modes checked/.test(log)) {
      if (Date.now() > deadline) throw new Error(`kproxy did not take over:\n${log}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await reading;
  }
  return log;
}

const OBJECTS = manifestText([
  serviceObject({ name: "web", clusterIP: "10.96.0.10" }),
  sliceObject("web", ["10.244.1.10"]),
]);

/** Tables other software made: an nft table, an iptables-nft rule and a legacy raw table. */
const FOREIGN_SETUP: string[][] = [
  ["nft", "add", "table", "inet", "foreign"],
  ["iptables-nft", "-t", "filter", "-A", "INPUT", "-s", "192.0.2.1", "-j", "DROP"],
  ["iptables-legacy", "-t", "raw", "-N", "FOREIGN"],
];

Deno.test({
  name: "kproxy starts and cleans up without creating a table it does not use",
  ignore: SKIP !== undefined,
  async fn(t) {
    const dir = await Deno.makeTempDir({ prefix: "kp-tables-" });
    await Deno.writeTextFile(`${dir}/objects.yaml`, OBJECTS);
    const namespaces: string[] = [];
    const fresh = async (foreign: boolean) => {
      const ns = `kp-tbl-${crypto.randomUUID().slice(0, 8)}`;
      await new Deno.Command("ip", { args: ["netns", "add", ns] }).output();
      namespaces.push(ns);
      await run(ns, ["ip", "link", "set", "lo", "up"]);
      if (foreign) { for (const command of FOREIGN_SETUP) await run(ns, command); }
      return ns;
    };
    try {
      for (const foreign of [false, true]) {
        const where = foreign ? "a node with other tables" : "an empty node";
        await t.step(`--cleanup on ${where}`, async () => {
          const ns = await fresh(foreign);
          const before = await nodeTables(ns);
          for (const mode of ["nftables", "iptables", "ipvs"]) {
            await cleanup(ns, kproxyArgs(mode, dir));
            assert.deepEqual(await nodeTables(ns), before, `after --cleanup in ${mode} mode`);
          }
          if (foreign) {
            assert.match(
              await run(ns, ["iptables-nft-save"]),
              /^-A INPUT -s 192\.0\.2\.1\/32 -j DROP$/m,
            );
            assert.match(await run(ns, ["iptables-legacy-save", "-t", "raw"]), /^:FOREIGN /m);
          }
        });
        await t.step(`start in nftables mode on ${where}`, async () => {
          const ns = await fresh(foreign);
          const before = await nodeTables(ns);
          await startAndStop(ns, kproxyArgs("nftables", dir));
          const own = ["table ip kproxy", "table ip kproxy-guard", "table ip6 kproxy"];
          assert.deepEqual(await nodeTables(ns), [...before, ...own].sort());
          await cleanup(ns, kproxyArgs("nftables", dir));
          assert.deepEqual(await nodeTables(ns), before, "after --cleanup");
        });
        await t.step(`start in iptables mode (nft binaries) on ${where}`, async () => {
          const ns = await fresh(foreign);
          const before = await nodeTables(ns);
          await startAndStop(ns, kproxyArgs("iptables", dir, ["--iptables-backend=nft"]));
          const own = ["ip", "ip6"].flatMap((family) =>
            ["filter", "mangle", "nat"].map((table) => `table ${family} ${table}`)
          );
          assert.deepEqual(await nodeTables(ns), [...new Set([...before, ...own])].sort());
        });
      }
    } finally {
      for (const ns of namespaces) {
        await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
      }
      await Deno.remove(dir, { recursive: true });
    }
  },
});
