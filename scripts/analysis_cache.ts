/**
 * Deno's module analysis of kproxy's bundle, made once where the bundle is
 * built instead of at every start.
 *
 * Before `deno run` evaluates a module it parses it to find its imports and
 * keeps the result in `$DENO_DIR/dep_analysis_cache_v2` (SQLite), keyed by the
 * module's URL and a hash of its text. A start that finds no row parses the
 * whole bundle: at 1k Services that start peaks 11–14 MiB higher (lab, real
 * apiserver: 89 against 77 MiB in nftables mode). A container's `DENO_DIR` is
 * new at every start, and Deno opens no cache in a read-only directory, so
 * the image carries this database and its launcher copies it into `DENO_DIR`
 * (`scripts/image/kproxy.sh`); the bench does the same for every run.
 *
 * The row is written by a `deno run` of the bundle (`kproxy --version`) and
 * then keyed by the URL the bundle will have where it is installed; the hash
 * covers the text only, so the row matches there.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";

/** The file Deno keeps module analyses in, under `DENO_DIR`. */
export const ANALYSIS_CACHE_FILE = "dep_analysis_cache_v2";

/** The `user_version` of a database {@linkcode writeAnalysisCache} wrote ("kprx"; Deno leaves it). */
export const ANALYSIS_MARK = 0x6b707278;

/**
 * Writes `output`: the analysis cache of `bundle` as `deno` (the runtime that
 * will run it: the hash includes Deno's version) makes it, its row keyed by
 * `installedPath` (absolute). Runs `deno run` on the bundle once.
 */
export async function writeAnalysisCache(
  bundle: string,
  installedPath: string,
  output: string,
  deno: string = Deno.execPath(),
): Promise<void> {
  const denoDir = await Deno.makeTempDir({ prefix: "kproxy-analysis-" });
  try {
    await runVersion(bundle, denoDir, deno);
    const written = `${denoDir}/${ANALYSIS_CACHE_FILE}`;
    const database = new DatabaseSync(written);
    try {
      const moved = database.prepare(
        "UPDATE moduleinfocache SET specifier = ? WHERE specifier = ?",
      ).run(fileUrl(installedPath), fileUrl(bundle));
      if (moved.changes !== 1) {
        throw new Error(`Deno left no analysis of ${bundle} in ${denoDir}`);
      }
      database.exec(`PRAGMA user_version = ${ANALYSIS_MARK}`);
      // Everything into the database file itself, so that it is the whole cache.
      database.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    } finally {
      database.close();
    }
    await Deno.copyFile(written, output);
  } finally {
    await Deno.remove(denoDir, { recursive: true });
  }
}

/**
 * Runs `kproxy --version` from `bundle` with `denoDir` as Deno's cache (and
 * the working directory, so that no `deno.json` applies): Deno analyses the
 * bundle unless `denoDir` holds its analysis.
 */
export async function runVersion(
  bundle: string,
  denoDir: string,
  deno: string = Deno.execPath(),
): Promise<void> {
  const { success, stderr } = await new Deno.Command(deno, {
    args: ["run", "--no-config", "--no-prompt", "--no-code-cache", bundle, "--version"],
    cwd: denoDir,
    env: { DENO_DIR: denoDir },
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!success) {
    throw new Error(`Cannot run ${bundle} --version: ${new TextDecoder().decode(stderr).trim()}`);
  }
}

/** One module an analysis cache holds: its URL and the hash of the text analysed. */
export interface AnalysedModule {
  url: string;
  sourceHash: string;
}

/** The modules an analysis cache holds, by URL. */
export function analysedModules(cache: string): AnalysedModule[] {
  const database = new DatabaseSync(cache, { readOnly: true });
  try {
    return database.prepare(
      "SELECT specifier, CAST(source_hash AS TEXT) AS hash FROM moduleinfocache ORDER BY specifier",
    ).all().map((row) => ({ url: String(row.specifier), sourceHash: String(row.hash) }));
  } finally {
    database.close();
  }
}

/** The `user_version` of a database: {@linkcode ANALYSIS_MARK} for one kproxy's build wrote. */
export function analysisMark(cache: string): number {
  const database = new DatabaseSync(cache, { readOnly: true });
  try {
    return Number(database.prepare("PRAGMA user_version").get()?.user_version);
  } finally {
    database.close();
  }
}

function fileUrl(path: string): string {
  return new URL(`file://${path}`).href;
}
