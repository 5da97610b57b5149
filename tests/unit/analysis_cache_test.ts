import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { bundleKproxy } from "../../scripts/bundle.ts";
import {
  analysedModules,
  ANALYSIS_CACHE_FILE,
  ANALYSIS_MARK,
  analysisMark,
  runVersion,
  writeAnalysisCache,
} from "../../scripts/analysis_cache.ts";

/** Drops the source map's URL from every row's analysis; returns the first row's. */
function withoutSourceMapUrl(cache: string): string {
  const database = new DatabaseSync(cache);
  try {
    const info = JSON.parse(moduleInfo(cache));
    assert.ok("sourceMapUrl" in info);
    delete info.sourceMapUrl;
    database.prepare("UPDATE moduleinfocache SET module_info = ?").run(JSON.stringify(info));
    return JSON.stringify(info);
  } finally {
    database.close();
  }
}

function moduleInfo(cache: string): string {
  const database = new DatabaseSync(cache, { readOnly: true });
  try {
    const row = database.prepare("SELECT module_info FROM moduleinfocache LIMIT 1").get();
    return String(row?.module_info);
  } finally {
    database.close();
  }
}

Deno.test("a start finds the analysis made where the bundle was built, under its installed path", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-analysis-test-" });
  try {
    await bundleKproxy(`${dir}/built.js`);
    await Deno.mkdir(`${dir}/opt/dist`, { recursive: true });
    await Deno.copyFile(`${dir}/built.js`, `${dir}/opt/dist/kproxy.js`);
    const shipped = `${dir}/shipped-${ANALYSIS_CACHE_FILE}`;
    await writeAnalysisCache(`${dir}/built.js`, `${dir}/opt/dist/kproxy.js`, shipped);
    assert.equal(analysisMark(shipped), ANALYSIS_MARK);
    const rows = analysedModules(shipped);
    assert.deepEqual(rows.map((row) => row.url), [`file://${dir}/opt/dist/kproxy.js`]);

    // Found: a start that used the row leaves it as it was, even a row marked here (an
    // analysis of its own would have written the source map's URL back).
    await Deno.mkdir(`${dir}/deno`);
    const used = `${dir}/deno/${ANALYSIS_CACHE_FILE}`;
    await Deno.copyFile(shipped, used);
    const unmapped = withoutSourceMapUrl(used);
    await runVersion(`${dir}/opt/dist/kproxy.js`, `${dir}/deno`);
    assert.deepEqual(analysedModules(used), rows);
    assert.equal(moduleInfo(used), unmapped);

    // Not found (another path): the start analyses the bundle and adds its row.
    await Deno.mkdir(`${dir}/other`);
    await Deno.copyFile(shipped, `${dir}/other/${ANALYSIS_CACHE_FILE}`);
    await runVersion(`${dir}/built.js`, `${dir}/other`);
    assert.deepEqual(
      analysedModules(`${dir}/other/${ANALYSIS_CACHE_FILE}`).map((row) => row.url),
      [`file://${dir}/built.js`, `file://${dir}/opt/dist/kproxy.js`],
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
