/**
 * What kproxy's memory floor is made of: resident memory of fresh Deno
 * processes that each load a little more of kproxy (nothing; the logger;
 * Node's http/https; the app; the floor of `floor.ts`; that floor after one
 * HTTPS request), by kind of mapping (`/proc/<pid>/smaps`: anonymous, which
 * holds V8's heap; glibc's `[heap]`; the resident part of the deno binary).
 *
 * ```sh
 * deno run --allow-all scripts/bench/modules.ts
 * ```
 *
 * @module
 */

import { testCertificates } from "../testbed/tls.ts";
import { residentByKind } from "./smaps.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/** One step: what the process imports, and whether it then makes an HTTPS request. */
const STEPS: { name: string; imports: string[]; https?: boolean }[] = [
  { name: "deno, nothing imported", imports: [] },
  { name: "node:util", imports: ["node:util"] },
  { name: "node:http + node:https", imports: ["node:http", "node:https"] },
  { name: "lib/config/flags.ts", imports: [`${ROOT}lib/config/flags.ts`] },
  { name: "lib/commands/app.ts", imports: [`${ROOT}lib/commands/app.ts`] },
  {
    name: "floor: app + kube source + backends",
    imports: [
      `${ROOT}lib/commands/app.ts`,
      `${ROOT}lib/shell/source/kube.ts`,
      `${ROOT}backends/registry.ts`,
    ],
  },
  {
    name: "floor + one HTTPS GET through kproxy's transport",
    imports: [
      `${ROOT}lib/commands/app.ts`,
      `${ROOT}lib/shell/source/kube.ts`,
      `${ROOT}backends/registry.ts`,
    ],
    https: true,
  },
];

/** Resident MiB of a process by kind of mapping, plus the total. */
async function residentOf(pid: number): Promise<Record<string, number>> {
  const text = await Deno.readTextFile(`/proc/${pid}/smaps`);
  return residentByKind(text, await Deno.readLink(`/proc/${pid}/exe`));
}

function program(step: (typeof STEPS)[number], url: string): string {
  const lines = step.imports.map((specifier) => `await import(${JSON.stringify(specifier)});`);
  if (step.https) {
    lines.push(
      `const { ApiTransport } = await import(${
        JSON.stringify(`${ROOT}lib/shell/source/transport.ts`)
      });`,
      "const transport = new ApiTransport();",
      `const response = await transport.get({ url: ${JSON.stringify(url)}, headers: {},` +
        " signal: AbortSignal.timeout(10000), tls: { ca: Deno.env.get('KP_CA') } });",
      "await response.text();",
    );
  }
  lines.push(
    'console.log("ready");',
    "for await (const _ of Deno.stdin.readable) { /* wait */ }",
  );
  return lines.join("\n");
}

if (import.meta.main) {
  const tls = await testCertificates();
  if (tls === undefined) throw new Error("Cannot make test certificates: openssl is missing");
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: tls.cert, key: tls.key, onListen: () => {} },
    () => new Response("{}"),
  );
  const url = `https://127.0.0.1:${server.addr.port}/api/v1/nodes`;
  const dir = await Deno.makeTempDir({ dir: ROOT, prefix: ".modules-" });
  try {
    console.log("MiB resident: total  anonymous  malloc  binary  other  step");
    for (const step of STEPS) {
      const file = `${dir}/step.ts`;
      await Deno.writeTextFile(file, program(step, url));
      const child = new Deno.Command(Deno.execPath(), {
        args: ["run", "--allow-all", file],
        cwd: ROOT,
        env: { KP_CA: tls.ca, RUST_BACKTRACE: "0", NO_COLOR: "1" },
        stdin: "piped",
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
      const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
      await reader.read();
      await new Promise((resolve) => setTimeout(resolve, 500));
      const kinds = await residentOf(child.pid);
      await child.stdin.close();
      await reader.cancel();
      await child.status;
      console.log(
        [kinds.total, kinds.anonymous, kinds.malloc, kinds.binary, kinds.other]
          .map((value) => (value ?? 0).toFixed(1).padStart(7)).join(" ") + `  ${step.name}`,
      );
    }
  } finally {
    await server.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
}
