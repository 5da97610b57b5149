/**
 * `deno task image`: builds kproxy's container image without any registry,
 * from Debian packages (apt) and the Deno runtime (npm), and writes it as one
 * archive for `docker load`, `podman load` and `ctr -n k8s.io images import`.
 *
 * Three layers, bottom first:
 * 1. the programs every Linux mode runs (`LINUX_PROGRAMS` of lib/shell/permissions.ts, from backends/registry.ts)
 *    and `sh`, with the shared libraries they load, from Debian 12 packages;
 * 2. the Deno runtime, `@deno/linux-x64-glibc` at {@linkcode DENO_VERSION};
 * 3. kproxy: `dist/kproxy.js` and its source map (`deno task bundle`), Deno's
 *    analysis of it (`scripts/analysis_cache.ts`), the launcher that computes
 *    its permissions, and `/usr/local/bin/kproxy`.
 *
 * Downloads are cached in `$XDG_CACHE_HOME/kproxy/image` (`~/.cache/…`: outside
 * the work tree, so that CI's fresh clones reuse them) and reused when their
 * checksums match. With `--rootfs DIR` it writes the three trees to `DIR/{os,deno,kproxy}`
 * instead of an archive (the Containerfile copies them).
 *
 * Usage: deno task image [--name REGISTRY/kproxy:TAG] [--output FILE] [--rootfs DIR]
 *   [--deno-binary PATH] [--cache DIR]
 *
 * `--name` names the image in the archive (default `localhost/kproxy:<version>`); push it with
 * `skopeo copy oci-archive:ARCHIVE docker://REGISTRY/kproxy:TAG`.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { join } from "node:path";
import { LINUX_PROGRAMS } from "../../lib/shell/permissions.ts";
import { runTool } from "./command.ts";
import { bundleKproxy } from "../bundle.ts";
import { ANALYSIS_CACHE_FILE, writeAnalysisCache } from "../analysis_cache.ts";
import { downloadClosure, sha256File, unpackPackages } from "./debian.ts";
import { writeImageArchive } from "./oci.ts";
import type { ImageSettings } from "./oci.ts";
import { assembleDebianLayer } from "./rootfs.ts";

/** The Deno runtime in the image: the version CI runs (.ci/run). */
export const DENO_VERSION = "2.9.6";

/** The image's repository; `localhost/` keeps a node from pulling it from a registry. */
export const IMAGE_REPOSITORY = "localhost/kproxy";

/** Debian packages whose dependency closure the image's files come from. */
export const DEBIAN_ROOTS: readonly string[] = [
  "base-files",
  "conntrack",
  // cp and mkdir: the entry script copies Deno's analysis of the bundle into DENO_DIR
  "coreutils",
  "dash",
  "iproute2",
  "ipset",
  "iptables",
  "ipvsadm",
  "libc6",
  "libgcc-s1",
  "netbase",
  "nfacct",
  "nftables",
  "procps",
  // choom, which sets kproxy's OOM score (--oom-score-adj)
  "util-linux",
];

/** Programs Debian provides through update-alternatives, with Debian's default (nft) choice. */
export const ALTERNATIVES: Readonly<Record<string, string>> = {
  "iptables": "iptables-nft",
  "iptables-save": "iptables-nft-save",
  "iptables-restore": "iptables-nft-restore",
  "ip6tables": "ip6tables-nft",
  "ip6tables-save": "ip6tables-nft-save",
  "ip6tables-restore": "ip6tables-nft-restore",
};

/** Files and trees copied beside the programs: iptables' extensions, protocol tables. */
export const DEBIAN_PATHS: readonly string[] = [
  "/usr/lib/x86_64-linux-gnu/xtables",
  "/etc/protocols",
  "/etc/services",
  "/etc/ethertypes",
  "/etc/debian_version",
  "/usr/lib/os-release",
];

/** Programs in the image: every Linux mode's, and the shell the entry script runs in and what it runs. */
export const IMAGE_PROGRAMS: readonly string[] = [...LINUX_PROGRAMS, "sh", "cp", "mkdir"];

/** Where kproxy lives in the image. */
export const KPROXY_DIR = "/opt/kproxy";

/** The image's runtime settings; the Containerfile states the same ones. */
export const IMAGE_SETTINGS: ImageSettings = {
  entrypoint: ["/usr/local/bin/kproxy"],
  env: [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "DENO_DIR=/tmp/deno",
    "DENO_NO_UPDATE_CHECK=1",
    // Deno's default root store empty: the cluster CA is kproxy's only trust anchor.
    "DENO_TLS_CA_STORE=",
  ],
  workingDir: "/",
  labels: {},
};

/** The image's labels; the Containerfile states the same ones. */
export function imageLabels(version: string): Record<string, string> {
  return {
    "org.opencontainers.image.title": "kproxy",
    "org.opencontainers.image.description": "A Kubernetes service proxy (drop-in kube-proxy)",
    "org.opencontainers.image.version": version,
  };
}

/** Files of the OS layer written by the builder, not taken from a package. */
export const OS_FILES: Readonly<Record<string, string>> = {
  "/etc/passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
  "/etc/group": "root:x:0:\nnogroup:x:65534:\n",
  "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n" +
    "protocols: files\nservices: files\n",
};

/** Empty directories the runtime and the DaemonSet mount over. */
export const OS_DIRS: readonly string[] = [
  "/dev",
  "/proc",
  "/sys",
  "/run",
  "/tmp",
  "/root",
  "/etc/kproxy",
  "/var/lib/kproxy",
];

const REPO = new URL("../../", import.meta.url).pathname;

/** A repository path component, as the OCI distribution spec's grammar. */
const REPOSITORY_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
/** A registry host, optionally with a port. */
const REGISTRY_HOST = /^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d{1,5})?$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/**
 * Splits `--name REGISTRY/REPOSITORY:TAG` into the repository and the tag the
 * archive records (`docker load`, `podman load` and `ctr import` register the
 * image under it).
 *
 * @throws {TypeError} naming what is wrong: no tag, a digest, a bad repository or tag
 */
export function parseImageName(name: string): { repository: string; tag: string } {
  const fail = (why: string) => new TypeError(`Cannot parse --name "${name}": ${why}`);
  if (name.includes("@")) throw fail("a digest names pushed content, give REPOSITORY:TAG");
  const colon = name.lastIndexOf(":");
  if (colon < 0 || colon < name.lastIndexOf("/")) throw fail("no tag (REPOSITORY:TAG)");
  const repository = name.slice(0, colon);
  const tag = name.slice(colon + 1);
  if (!TAG.test(tag)) throw fail(`tag "${tag}" is not 1-128 of [A-Za-z0-9_.-]`);
  const components = repository.split("/");
  const host = components.length > 1 && /[.:]|^localhost$/.test(components[0]!)
    ? components.shift()!
    : undefined;
  if (host !== undefined && !REGISTRY_HOST.test(host)) {
    throw fail(`registry "${host}" is not a host[:port]`);
  }
  for (const component of components) {
    if (!REPOSITORY_COMPONENT.test(component)) {
      throw fail(`repository component "${component}" is not lowercase [a-z0-9._-]`);
    }
  }
  return { repository, tag };
}

/** The image's tag: deno.json's version. */
export async function imageTag(): Promise<string> {
  const config = JSON.parse(await Deno.readTextFile(join(REPO, "deno.json")));
  return config.version;
}

function defaultCacheDir(): string {
  const base = Deno.env.get("XDG_CACHE_HOME") ?? join(Deno.env.get("HOME") ?? "/root", ".cache");
  return join(base, "kproxy/image");
}

/** The time every file and the image claim: SOURCE_DATE_EPOCH, else the last commit's. */
async function sourceDateEpoch(): Promise<number> {
  const explicit = Deno.env.get("SOURCE_DATE_EPOCH");
  if (explicit !== undefined) return Number(explicit);
  try {
    return Number((await runTool("git", ["log", "-1", "--format=%ct"], REPO)).trim()) || 0;
  } catch {
    return 0;
  }
}

/** The Deno runtime from npm, cached; returns the path of the `deno` executable. */
async function fetchDeno(cacheDir: string, workDir: string): Promise<string> {
  const tarball = join(cacheDir, `deno-linux-x64-glibc-${DENO_VERSION}.tgz`);
  await Deno.mkdir(cacheDir, { recursive: true });
  try {
    await Deno.stat(tarball);
  } catch {
    await runTool("npm", [
      "pack",
      "--silent",
      `@deno/linux-x64-glibc@${DENO_VERSION}`,
      "--pack-destination",
      cacheDir,
    ]);
  }
  await runTool("tar", ["-xzf", tarball, "-C", workDir, "package/deno"]);
  return join(workDir, "package/deno");
}

async function writeOsFiles(root: string): Promise<void> {
  for (const dir of OS_DIRS) await Deno.mkdir(join(root, dir), { recursive: true });
  await Deno.chmod(join(root, "tmp"), 0o1777);
  await Deno.symlink("../run", join(root, "var/run"));
  await Deno.symlink("../usr/lib/os-release", join(root, "etc/os-release"));
  for (const [path, text] of Object.entries(OS_FILES)) {
    await Deno.writeTextFile(join(root, path), text);
    await Deno.chmod(join(root, path), 0o644);
  }
}

async function installFile(source: string, target: string, mode: number): Promise<void> {
  await Deno.mkdir(join(target, ".."), { recursive: true });
  await Deno.copyFile(source, target);
  await Deno.chmod(target, mode);
}

async function buildKproxyLayer(root: string, deno: string): Promise<void> {
  const dist = join(root, KPROXY_DIR, "dist");
  await bundleKproxy(join(REPO, "dist/kproxy.js"));
  await installFile(join(REPO, "dist/kproxy.js"), join(dist, "kproxy.js"), 0o644);
  await installFile(join(REPO, "dist/kproxy.js.map"), join(dist, "kproxy.js.map"), 0o644);
  await writeAnalysisCache(
    join(REPO, "dist/kproxy.js"),
    join(KPROXY_DIR, "dist/kproxy.js"),
    join(dist, ANALYSIS_CACHE_FILE),
    deno,
  );
  await Deno.chmod(join(dist, ANALYSIS_CACHE_FILE), 0o644);
  await runTool(Deno.execPath(), [
    "bundle",
    "--quiet",
    "--platform",
    "deno",
    "-o",
    join(root, KPROXY_DIR, "scripts/launch.js"),
    "scripts/image/entrypoint.ts",
  ], REPO);
  await Deno.chmod(join(root, KPROXY_DIR, "scripts/launch.js"), 0o644);
  await installFile(
    join(REPO, "scripts/image/kproxy.sh"),
    join(root, "usr/local/bin/kproxy"),
    0o755,
  );
}

/** Options for {@linkcode buildImage}. */
export interface BuildOptions {
  /** The archive to write. @default {"dist/kproxy-image-<version>.tar"} */
  output?: string;
  /** Write the layer trees here instead of an archive. */
  rootfs?: string;
  /** A Deno executable to use instead of the npm package. */
  denoBinary?: string;
  /** Download cache. @default {"$XDG_CACHE_HOME/kproxy/image", else "~/.cache/kproxy/image"} */
  cache?: string;
  /** The image's name, `REGISTRY/REPOSITORY:TAG`. @default {"localhost/kproxy:<version>"} */
  name?: string;
  log?: (line: string) => void;
}

/** What {@linkcode buildImage} made. */
export interface BuildResult {
  /** `localhost/kproxy:<version>`, or the `name` given. */
  reference: string;
  /** The archive written, undefined with `rootfs`. */
  archive?: string;
  /** The manifest digest, undefined with `rootfs`. */
  digest?: string;
  /** Debian packages the image holds files of, `name version`. */
  packages: string[];
}

/** Builds the image (see the module documentation). */
export async function buildImage(options: BuildOptions = {}): Promise<BuildResult> {
  const started = performance.now();
  const log = options.log ?? ((line: string) => {
    console.error(`image: [${((performance.now() - started) / 1000).toFixed(1)} s] ${line}`);
  });
  const version = await imageTag();
  const { repository, tag } = options.name === undefined
    ? { repository: IMAGE_REPOSITORY, tag: version }
    : parseImageName(options.name);
  const reference = `${repository}:${tag}`;
  const cache = options.cache ?? defaultCacheDir();
  const workDir = await Deno.makeTempDir({ prefix: "kproxy-image-" });
  try {
    log("resolving and downloading Debian packages");
    const downloaded = await downloadClosure(DEBIAN_ROOTS, join(cache, "debs"));
    log(`unpacking ${downloaded.length} packages`);
    await unpackPackages(downloaded, join(workDir, "unpacked"));
    const layers = {
      os: join(workDir, "os"),
      deno: join(workDir, "deno"),
      kproxy: join(workDir, "kproxy"),
    };
    const deno = options.denoBinary ?? await fetchDeno(cache, workDir);
    await installFile(deno, join(layers.deno, "usr/local/bin/deno"), 0o755);
    log(`deno ${DENO_VERSION} (sha256 ${await sha256File(deno)})`);
    const os = await assembleDebianLayer({
      unpacked: join(workDir, "unpacked"),
      packages: downloaded,
      out: layers.os,
      programs: IMAGE_PROGRAMS,
      alternatives: ALTERNATIVES,
      paths: DEBIAN_PATHS,
      executables: [deno],
    });
    await writeOsFiles(layers.os);
    log(`${os.paths.length} files from ${os.packages.length} Debian packages`);

    log("bundling kproxy");
    await buildKproxyLayer(layers.kproxy, deno);
    const packages = os.packages.map((pkg) => `${pkg.name} ${pkg.version}`);
    if (options.rootfs !== undefined) {
      for (const [name, dir] of Object.entries(layers)) {
        await Deno.mkdir(join(options.rootfs, name), { recursive: true });
        await runTool("cp", ["-a", `${dir}/.`, join(options.rootfs, name)]);
      }
      log(`layer trees written to ${options.rootfs}/{os,deno,kproxy}`);
      return { reference, packages };
    }
    const archive = options.output ?? join(REPO, `dist/kproxy-image-${version}.tar`);
    await Deno.mkdir(join(archive, ".."), { recursive: true });
    log("writing layers");
    const documents = await writeImageArchive({
      identity: { repository, tag, epoch: await sourceDateEpoch() },
      settings: { ...IMAGE_SETTINGS, labels: imageLabels(version) },
      layers: [
        { root: layers.os, comment: `Debian 12: ${packages.join(", ")}` },
        { root: layers.deno, comment: `Deno ${DENO_VERSION} (npm @deno/linux-x64-glibc)` },
        { root: layers.kproxy, comment: `kproxy ${version}` },
      ],
      output: archive,
      workDir,
    });
    const digest = documents.manifestDescriptor.digest;
    log(`${reference} ${digest} → ${archive} (${(await Deno.stat(archive)).size} bytes)`);
    return { reference, archive, digest, packages };
  } finally {
    await Deno.remove(workDir, { recursive: true });
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      output: { type: "string" },
      rootfs: { type: "string" },
      "deno-binary": { type: "string" },
      cache: { type: "string" },
      name: { type: "string" },
    },
  });
  try {
    await buildImage({
      name: values.name,
      output: values.output,
      rootfs: values.rootfs,
      denoBinary: values["deno-binary"],
      cache: values.cache,
    });
  } catch (error) {
    console.error(`image: ${error instanceof Error ? error.message : error}`);
    Deno.exit(1);
  }
}
