/**
 * Debian packages for the image, with apt's ordinary clients: the dependency
 * closure of a few root packages (`apt-cache depends --recurse`), downloaded
 * once into a cache directory (`apt-get download`, checked against the
 * archive's SHA-256) and unpacked one directory per package (`dpkg-deb -x`).
 *
 * @module
 */

import { runTool } from "./command.ts";

/** One downloaded package. */
export interface DebianPackage {
  name: string;
  version: string;
  /** The `.deb` file in the cache directory. */
  path: string;
  sha256: string;
}

/** One line of `apt-get download --print-uris`. */
export interface PackageUri {
  url: string;
  file: string;
  size: number;
  sha256: string;
}

/** Parses `apt-cache depends --recurse` output into the sorted names of real packages. */
export function parseDependsClosure(output: string): string[] {
  const names = output.split("\n")
    .filter((line) => /^[a-z0-9]/.test(line))
    .map((line) => line.trim());
  return [...new Set(names)].sort();
}

/** Parses `apt-get download --print-uris` output. */
export function parsePrintUris(output: string): PackageUri[] {
  const uris: PackageUri[] = [];
  for (const line of output.split("\n")) {
    const match = /^'([^']+)' (\S+) (\d+) SHA256:([0-9a-f]{64})$/.exec(line.trim());
    if (match) {
      uris.push({ url: match[1]!, file: match[2]!, size: Number(match[3]), sha256: match[4]! });
    }
  }
  return uris;
}

/** Name and version of a `.deb` file name as apt writes it (`name_1%3a2.0-1_amd64.deb`). */
export function parseDebFileName(file: string): { name: string; version: string } {
  const match = /^([^_]+)_([^_]+)_[^_]+\.deb$/.exec(file);
  if (!match) throw new TypeError(`Cannot parse Debian file name "${file}"`);
  return { name: match[1]!, version: decodeURIComponent(match[2]!) };
}

/** SHA-256 of a file, hex. */
export async function sha256File(path: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", await Deno.readFile(path));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Downloads the dependency closure of `roots` into `cacheDir`, reusing files
 * already there whose SHA-256 matches the archive's.
 *
 * @throws {Error} when apt cannot resolve or download a package (after `apt-get update`?)
 */
export async function downloadClosure(
  roots: readonly string[],
  cacheDir: string,
): Promise<DebianPackage[]> {
  const closure = parseDependsClosure(
    await runTool("apt-cache", [
      "depends",
      "--recurse",
      "--no-recommends",
      "--no-suggests",
      "--no-conflicts",
      "--no-breaks",
      "--no-replaces",
      "--no-enhances",
      ...roots,
    ]),
  );
  const uris = parsePrintUris(await runTool("apt-get", ["download", "--print-uris", ...closure]));
  if (uris.length === 0) {
    throw new Error("Cannot find the image's Debian packages: run 'apt-get update' first");
  }
  await Deno.mkdir(cacheDir, { recursive: true });
  const missing: string[] = [];
  for (const uri of uris) {
    const current = await sha256File(`${cacheDir}/${uri.file}`).catch(() => "");
    if (current !== uri.sha256) missing.push(parseDebFileName(uri.file).name);
  }
  if (missing.length > 0) await runTool("apt-get", ["download", ...missing], cacheDir);
  const packages: DebianPackage[] = [];
  for (const uri of uris) {
    const path = `${cacheDir}/${uri.file}`;
    const sha256 = await sha256File(path);
    if (sha256 !== uri.sha256) {
      throw new Error(
        `Cannot verify ${uri.file}: SHA-256 ${sha256}, the archive says ${uri.sha256}`,
      );
    }
    packages.push({ ...parseDebFileName(uri.file), path, sha256 });
  }
  return packages.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Unpacks each package into `<dir>/<name>`. */
export async function unpackPackages(packages: readonly DebianPackage[], dir: string) {
  for (const pkg of packages) {
    await Deno.mkdir(`${dir}/${pkg.name}`, { recursive: true });
    await runTool("dpkg-deb", ["-x", pkg.path, `${dir}/${pkg.name}`]);
  }
}

/** The control fields of a package, as `dpkg-deb --field` prints them. */
export function controlFields(pkg: DebianPackage): Promise<string> {
  return runTool("dpkg-deb", [
    "--field",
    pkg.path,
    "Package",
    "Source",
    "Version",
    "Architecture",
  ]);
}
