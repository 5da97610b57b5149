/**
 * The files of a manifests directory, confined to it: which names are
 * manifests, what each resolves to, and reading one without following a
 * link out of the directory.
 *
 * @module
 */

/** The names a manifests directory's files must have. */
export const MANIFEST_NAME = /\.(ya?ml|json)$/;

/**
 * The largest manifest file read, in bytes (64 MiB). A 10k-service ×
 * 10-endpoint dump is 19 MB as YAML and 49 MB as `kubectl get -o json` prints
 * it.
 */
export const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;

/** One manifest file of a scan: what the poll compares, or why it is refused. */
export type ManifestEntry =
  | { name: string; path: string; signature: string; problem?: undefined }
  | { name: string; path: string; problem: string; signature?: undefined };

/** Options for {@linkcode scanManifestDir} and {@linkcode readManifest}. */
export interface ManifestDirOptions {
  /** Files above this size are refused. @default {MAX_MANIFEST_BYTES} */
  maxFileBytes?: number;
}

function joinPath(dir: string, name: string): string {
  return dir.endsWith("/") ? `${dir}${name}` : `${dir}/${name}`;
}

/** The path of `real` relative to `root` when it lies inside it. */
function insidePath(root: string, real: string): string | undefined {
  const prefix = root.endsWith("/") ? root : `${root}/`;
  return real.startsWith(prefix) && real.length > prefix.length
    ? real.slice(prefix.length)
    : undefined;
}

function oversized(size: number, max: number): string | undefined {
  return size > max ? `${size} bytes is above the limit of ${max} bytes` : undefined;
}

/**
 * Lists the manifest files of `dir` (not recursive), sorted by name. A name
 * that is a link resolving outside the directory's real path (after `..` and
 * every link, the directory's own included), or that is not a regular file,
 * or is too large, comes back with the reason it is refused. The signature of
 * an accepted file changes whenever its target, inode, size, mtime or ctime
 * does.
 *
 * @throws {Deno.errors.NotFound} and other I/O errors when `dir` cannot be listed.
 */
export async function scanManifestDir(
  dir: string,
  options: ManifestDirOptions = {},
): Promise<ManifestEntry[]> {
  const max = options.maxFileBytes ?? MAX_MANIFEST_BYTES;
  const root = await Deno.realPath(dir);
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if ((entry.isFile || entry.isSymlink) && MANIFEST_NAME.test(entry.name)) names.push(entry.name);
  }
  names.sort();
  const entries: ManifestEntry[] = [];
  for (const name of names) {
    const path = joinPath(dir, name);
    try {
      const real = await Deno.realPath(path);
      if (insidePath(root, real) === undefined) {
        entries.push({ name, path, problem: `it is a link that leaves ${dir}` });
        continue;
      }
      const info = await Deno.stat(path);
      const problem = !info.isFile ? "it is not a regular file" : oversized(info.size, max);
      if (problem !== undefined) {
        entries.push({ name, path, problem });
        continue;
      }
      const times = `${info.mtime?.getTime()}:${info.ctime?.getTime()}`;
      const signature = `${real}\0${info.dev}:${info.ino}:${info.size}:${times}`;
      entries.push({ name, path, signature });
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
      entries.push({ name, path, problem: "it does not exist (a dangling link?)" });
    }
  }
  return entries;
}

/**
 * Reads one manifest of `dir` as UTF-8 text, checking on the open file that it
 * is a regular file inside the directory (its inode is the one found at its
 * real path under `dir`) and not too large: a link re-pointed between the scan
 * and the read is refused, not followed.
 *
 * @throws {Error} with a message fit for a log line (`it is …`), never quoting
 *   the file.
 */
export async function readManifest(
  dir: string,
  name: string,
  options: ManifestDirOptions = {},
): Promise<string> {
  const max = options.maxFileBytes ?? MAX_MANIFEST_BYTES;
  const path = joinPath(dir, name);
  using file = await Deno.open(path, { read: true });
  const info = await file.stat();
  if (!info.isFile) throw new Error("it is not a regular file");
  const tooLarge = oversized(info.size, max);
  if (tooLarge !== undefined) throw new Error(tooLarge);
  const relative = insidePath(await Deno.realPath(dir), await Deno.realPath(path));
  const inside = relative === undefined ? undefined : await Deno.lstat(joinPath(dir, relative));
  if (!inside?.isFile || inside.dev !== info.dev || inside.ino !== info.ino) {
    throw new Error(`it is a link that leaves ${dir}`);
  }
  const bytes = new Uint8Array(info.size + 1);
  let length = 0;
  for (;;) {
    if (length === bytes.length) throw new Error(`it grew above ${info.size} bytes while read`);
    const read = await file.read(bytes.subarray(length));
    if (read === null) break;
    length += read;
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(0, length));
  } catch {
    throw new Error("it is not UTF-8 text");
  }
}
