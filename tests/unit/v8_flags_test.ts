import assert from "node:assert/strict";
import { launchArgs } from "../../scripts/launch.ts";
import { compileArgs } from "../../scripts/compile.ts";
import { V8_FLAGS, v8FlagsArg } from "../../lib/shell/v8_flags.ts";

Deno.test("launchArgs() runs the bundle with kproxy's V8 flags, as the compiled executable", () => {
  const args = launchArgs(["--manifests", "/nonexistent", "--hostname-override", "node-a"]);
  const bundle = args.findIndex((arg) => arg.endsWith("/dist/kproxy.js"));
  assert.ok(bundle > 0, args.join(" "));
  assert.ok(args.slice(0, bundle).includes(v8FlagsArg()), args.join(" "));
});

Deno.test("launchArgs() runs the bundle without V8's code cache", () => {
  // An image's DENO_DIR is new at every container start: with the cache, each
  // start compiles and writes it (kproxy --version: 55 against 39 MiB; 1k
  // Services: a 99 MiB peak against 81). Without it no start pays that, and
  // no writable file holds code kproxy would run.
  const args = launchArgs(["--manifests", "/nonexistent", "--hostname-override", "node-a"]);
  const bundle = args.findIndex((arg) => arg.endsWith("/dist/kproxy.js"));
  assert.ok(args.slice(0, bundle).includes("--no-code-cache"), args.join(" "));
});

Deno.test("compileArgs() bakes the same V8 flags into the executable", () => {
  assert.deepEqual(V8_FLAGS, ["--max-semi-space-size=4", "--expose-gc", "--single-threaded"]);
  const args = compileArgs("x86_64-unknown-linux-gnu", {
    apiservers: ["10.0.0.1:6443"],
    nodePorts: { first: 30000, last: 32767 },
  });
  assert.ok(
    args.includes("--v8-flags=--max-semi-space-size=4,--expose-gc,--single-threaded"),
    args.join(" "),
  );
});
