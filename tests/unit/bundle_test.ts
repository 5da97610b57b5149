/**
 * kproxy's start-up reaches no `node:` module: a bundle hoists every static
 * import of one to its top, and the first one evaluated starts Deno's Node
 * compatibility layer for the life of the process (~5 MiB of the 1k peak;
 * docs/ARCHITECTURE.md, "No Node at start-up").
 */
import assert from "node:assert/strict";
import { bundleKproxy } from "../../scripts/bundle.ts";

/** A static import of a `node:` module in minified or plain output (not `import("node:…")`). */
const STATIC_NODE_IMPORT = /\bimport\s*(?:[{*\w$][^;()"']*from\s*)?["']node:[\w/]+["']/g;

Deno.test("the static node: import pattern finds minified and plain imports, not dynamic ones", () => {
  const text =
    'import{inspect as o}from"node:util";import"node:os";import * as p from "node:path";' +
    'var t=await import("node:https");';
  assert.deepEqual(text.match(STATIC_NODE_IMPORT), [
    'import{inspect as o}from"node:util"',
    'import"node:os"',
    'import * as p from "node:path"',
  ]);
});

Deno.test("the bundle imports no node: module at its top and needs no createRequire", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-bundle-" });
  try {
    await bundleKproxy(`${dir}/kproxy.js`);
    const bundle = await Deno.readTextFile(`${dir}/kproxy.js`);
    assert.deepEqual(bundle.match(STATIC_NODE_IMPORT), null, "static node: imports");
    assert.doesNotMatch(bundle, /createRequire|__require\(/, "CommonJS needs node:module");
    assert.match(bundle, /import\("node:https"\)/, "node:https stays, imported when first needed");
    assert.match(bundle, /\/\/# sourceMappingURL=kproxy\.js\.map\s*$/);
    const map = JSON.parse(await Deno.readTextFile(`${dir}/kproxy.js.map`));
    assert.ok(map.sources.some((source: string) => source.endsWith("lib/commands/app.ts")));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
