/**
 * Golden files of the iptables renderer, one per service kind and partial
 * sync, each also loaded by the real iptables-restore (nft and legacy) with
 * `--test` inside a throwaway network namespace.
 *
 * Update the golden files with:
 * `deno test --allow-all --ignore-env tests/golden/iptables_golden_test.ts -- --update`
 */

import assert from "node:assert/strict";
import {
  type IptablesRenderOptions,
  renderFull,
  renderFullInChunks,
  renderPartial,
} from "../../backends/iptables/render.ts";
import type { Plan } from "../../lib/plan.ts";
import { GOLDEN_CASES, PARTIAL_CASES } from "./iptables/fixtures.ts";

const GOLDEN_DIR = new URL("./iptables/", import.meta.url);
const UPDATE = Deno.args.includes("--update");
const VARIANTS = ["nft", "legacy"] as const;

interface Rendered {
  name: string;
  family: Plan["family"];
  /** Full script to load first (for partial scripts), then the script under test. */
  setup?: string;
  script: string;
}

function renderAll(): Rendered[] {
  const rendered: Rendered[] = [];
  for (const [name, plan] of Object.entries(GOLDEN_CASES)) {
    rendered.push({ name, family: plan.family, script: renderFull(plan).toString() });
  }
  const localhost: IptablesRenderOptions = { localhostNodePorts: true };
  rendered.push({
    name: "nodeport_localhost",
    family: "IPv4",
    script: renderFull(GOLDEN_CASES.nodeport!, localhost).toString(),
  });
  rendered.push({
    name: "masquerade_bit_0",
    family: "IPv4",
    script: renderFull(GOLDEN_CASES.nodeport!, { masqueradeBit: 0 }).toString(),
  });
  for (const [name, change] of Object.entries(PARTIAL_CASES)) {
    rendered.push({
      name,
      family: change.next.family,
      setup: renderFull(change.previous).toString(),
      script: renderPartial(change).toString(),
    });
  }
  return rendered;
}

const RENDERED = renderAll();

Deno.test("renderFull()/renderPartial() match the golden files", async (t) => {
  for (const { name, script } of RENDERED) {
    await t.step(name, async () => {
      const file = new URL(`${name}.txt`, GOLDEN_DIR);
      if (UPDATE) await Deno.writeTextFile(file, script);
      assert.equal(script, await Deno.readTextFile(file));
    });
  }
});

function onPath(program: string): boolean {
  for (const dir of (Deno.env.get("PATH") ?? "/usr/sbin:/usr/bin:/sbin:/bin").split(":")) {
    try {
      if (Deno.statSync(`${dir}/${program}`).isFile) return true;
    } catch {
      // Not in this directory.
    }
  }
  return ["/usr/sbin", "/sbin"].some((dir) => {
    try {
      return Deno.statSync(`${dir}/${program}`).isFile;
    } catch {
      return false;
    }
  });
}

function kernelSkipReason(): string | undefined {
  if (Deno.build.os !== "linux") return "not Linux";
  if (Deno.uid() !== 0) return "not root: cannot create network namespaces";
  const missing = ["ip", ...VARIANTS.flatMap((v) => [`iptables-${v}-restore`, `ip6tables-${v}-restore`])]
    .filter((program) => !onPath(program));
  return missing.length > 0 ? `missing programs: ${missing.join(", ")}` : undefined;
}

const SKIP = kernelSkipReason();
if (SKIP) console.log(`Skipping iptables-restore --test validation: ${SKIP}`);

async function run(args: string[], stdin?: string): Promise<{ code: number; stderr: string }> {
  const child = new Deno.Command(args[0]!, {
    args: args.slice(1),
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(stdin));
    await writer.close();
  }
  const output = await child.output();
  return { code: output.code, stderr: new TextDecoder().decode(output.stderr) };
}

Deno.test({
  name: "every rendered script passes iptables-restore --test (nft and legacy) in a netns",
  ignore: SKIP !== undefined,
  fn: async (t) => {
    const namespace = `kp-ipt-${crypto.randomUUID().slice(0, 8)}`;
    const created = await run(["ip", "netns", "add", namespace]);
    assert.equal(created.code, 0, created.stderr);
    try {
      for (const variant of VARIANTS) {
        for (const { name, family, setup, script } of RENDERED) {
          await t.step(`${variant}: ${name}`, async () => {
            const restore = `${family === "IPv4" ? "iptables" : "ip6tables"}-${variant}-restore`;
            const exec = ["ip", "netns", "exec", namespace, restore];
            if (setup) {
              const loaded = await run([...exec, "--noflush"], setup);
              assert.equal(loaded.code, 0, `loading ${name} setup: ${loaded.stderr}`);
            }
            const tested = await run([...exec, "--test", "--noflush"], script);
            assert.equal(tested.code, 0, `${restore} --test ${name}: ${tested.stderr}`);
          });
        }
      }
      for (const variant of VARIANTS) {
        await t.step(`${variant}: full sync in chunks applies in order`, async () => {
          const plan = GOLDEN_CASES.etp_local!;
          const scripts = renderFullInChunks(plan, { maxChainsPerChunk: 2 });
          const exec = ["ip", "netns", "exec", namespace, `iptables-${variant}-restore`, "--noflush"];
          for (const [i, script] of scripts.entries()) {
            const applied = await run(exec, script.toString());
            assert.equal(applied.code, 0, `chunk ${i}: ${applied.stderr}`);
          }
        });
      }
    } finally {
      await run(["ip", "netns", "del", namespace]);
    }
  },
});
