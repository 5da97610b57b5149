/**
 * Assembles the image's operating-system layer from unpacked Debian packages,
 * distroless-style: only the programs kproxy runs, the files they name (their
 * symlink targets, ELF interpreter and every shared library in their
 * `DT_NEEDED` closure), a few data trees, each used package's copyright file
 * and a `/var/lib/dpkg/status.d/<package>` record so image scanners see the
 * package versions. The tree uses the merged-`/usr` layout of Debian 12.
 *
 * @module
 */

import { dirname, join, normalize } from "node:path";
import { isElf, readElfNeeds } from "./elf.ts";
import { controlFields, type DebianPackage } from "./debian.ts";

/** Directories the dynamic loader searches, in the image's merged-`/usr` layout. */
export const LIBRARY_DIRS: readonly string[] = [
  "/usr/lib/x86_64-linux-gnu",
  "/usr/lib",
  "/usr/lib64",
];

/** Directories searched for the programs kproxy runs, in the image's PATH order. */
export const PROGRAM_DIRS: readonly string[] = ["/usr/sbin", "/usr/bin"];

/** Top-level names that are symlinks into `/usr` (Debian 12's merged `/usr`). */
export const MERGED_DIRS: Readonly<Record<string, string>> = {
  "/bin": "/usr/bin",
  "/sbin": "/usr/sbin",
  "/lib": "/usr/lib",
  "/lib64": "/usr/lib64",
};

/** Maps a path of an unpacked package to its place under merged `/usr`. */
export function canonicalPath(path: string): string {
  const clean = normalize(path);
  for (const [from, to] of Object.entries(MERGED_DIRS)) {
    if (clean === from || clean.startsWith(`${from}/`)) return to + clean.slice(from.length);
  }
  return clean;
}

/** One path some package ships. */
interface Shipped {
  pkg: string;
  /** Where it is in the unpacked tree. */
  source: string;
  info: Deno.FileInfo;
}

/** Options for {@linkcode assembleDebianLayer}. */
export interface DebianLayerOptions {
  /** Directory holding one unpacked tree per package, named after it. */
  unpacked: string;
  packages: readonly DebianPackage[];
  /** The layer's root directory (created). */
  out: string;
  /** Program names that must resolve through PATH in the image. */
  programs: readonly string[];
  /** Programs Debian provides through update-alternatives: name → the program it points to. */
  alternatives: Readonly<Record<string, string>>;
  /** More paths (files or whole directories) to copy with their closure. */
  paths: readonly string[];
  /** Executables outside the packages (the Deno runtime) whose shared libraries to copy. */
  executables: readonly string[];
}

/** What went into the layer. */
export interface DebianLayer {
  /** Packages at least one copied file came from, sorted. */
  packages: DebianPackage[];
  /** Paths copied, sorted. */
  paths: string[];
}

/**
 * Copies the programs and paths the options name, and everything they load,
 * from the unpacked packages into `out`.
 *
 * @throws {Error} when a program, path or shared library is in no package
 */
export async function assembleDebianLayer(options: DebianLayerOptions): Promise<DebianLayer> {
  const index = await indexPackages(options.unpacked, options.packages);
  const copier = new Copier(index, options.out);
  for (const [link, target] of Object.entries(MERGED_DIRS)) {
    await Deno.mkdir(join(options.out, target), { recursive: true });
    await Deno.symlink(target.slice(1), join(options.out, link));
  }
  for (const program of options.programs) {
    const found = PROGRAM_DIRS.map((dir) => `${dir}/${program}`).find((path) => index.has(path));
    if (found) {
      await copier.copy(found, `program ${program}`);
      continue;
    }
    const alternative = options.alternatives[program];
    if (alternative === undefined) {
      throw new Error(`Cannot find program "${program}" in the image's Debian packages`);
    }
    await copier.copy(`/usr/sbin/${alternative}`, `program ${program}`);
    await Deno.symlink(alternative, join(options.out, "usr/sbin", program));
  }
  for (const path of options.paths) await copier.copy(path, "the image");
  for (const path of options.executables) {
    await copier.copyLinked(path, await Deno.readFile(path));
  }
  const used = options.packages.filter((pkg) => copier.packages.has(pkg.name));
  for (const pkg of used) {
    const copyright = `/usr/share/doc/${pkg.name}/copyright`;
    if (index.get(copyright)?.pkg === pkg.name) await copier.copy(copyright, pkg.name);
    const status = join(options.out, "var/lib/dpkg/status.d");
    await Deno.mkdir(status, { recursive: true });
    await Deno.writeTextFile(join(status, pkg.name), await controlFields(pkg));
  }
  return { packages: used, paths: [...copier.paths].sort() };
}

async function indexPackages(
  unpacked: string,
  packages: readonly DebianPackage[],
): Promise<Map<string, Shipped>> {
  const index = new Map<string, Shipped>();
  async function walk(pkg: string, root: string, relative: string): Promise<void> {
    for await (const entry of Deno.readDir(join(root, relative))) {
      const path = `${relative}/${entry.name}`;
      const source = join(root, path);
      const info = await Deno.lstat(source);
      const canonical = canonicalPath(path);
      if (!index.has(canonical)) index.set(canonical, { pkg, source, info });
      if (info.isDirectory) await walk(pkg, root, path);
    }
  }
  for (const pkg of packages) await walk(pkg.name, join(unpacked, pkg.name), "");
  return index;
}

/** Copies paths with their closure, each once. */
class Copier {
  readonly paths = new Set<string>();
  readonly packages = new Set<string>();
  readonly #index: Map<string, Shipped>;
  readonly #out: string;

  constructor(index: Map<string, Shipped>, out: string) {
    this.#index = index;
    this.#out = out;
  }

  async copy(path: string, neededBy: string): Promise<void> {
    const canonical = canonicalPath(path);
    if (this.paths.has(canonical)) return;
    const shipped = this.#index.get(canonical);
    if (!shipped) {
      throw new Error(`Cannot find ${canonical} (for ${neededBy}) in the image's Debian packages`);
    }
    this.paths.add(canonical);
    this.packages.add(shipped.pkg);
    const target = join(this.#out, canonical);
    await Deno.mkdir(dirname(target), { recursive: true });
    if (shipped.info.isSymlink) {
      const link = await Deno.readLink(shipped.source);
      await Deno.symlink(link, target);
      const resolved = link.startsWith("/") ? link : join(dirname(canonical), link);
      await this.copy(resolved, canonical);
    } else if (shipped.info.isDirectory) {
      await Deno.mkdir(target, { recursive: true });
      const children = [...this.#index.keys()].filter((key) => dirname(key) === canonical);
      for (const child of children.sort()) await this.copy(child, canonical);
    } else {
      await Deno.copyFile(shipped.source, target);
      await Deno.chmod(target, (shipped.info.mode ?? 0o644) & 0o7777);
      await this.copyLinked(canonical, await Deno.readFile(shipped.source));
    }
  }

  /** Copies the interpreter and shared libraries an ELF file loads; nothing for other files. */
  async copyLinked(path: string, bytes: Uint8Array): Promise<void> {
    if (!isElf(bytes)) return;
    const { interpreter, needed } = readElfNeeds(bytes);
    if (interpreter) await this.copy(interpreter, path);
    for (const soname of needed) {
      const library = LIBRARY_DIRS.map((dir) => `${dir}/${soname}`)
        .find((candidate) => this.#index.has(candidate));
      if (!library) {
        throw new Error(`Cannot find ${soname} (for ${path}) in the image's Debian packages`);
      }
      await this.copy(library, path);
    }
  }
}
