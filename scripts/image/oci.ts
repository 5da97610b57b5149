/**
 * Writes an image as one archive that `docker load`, `podman load` and
 * `ctr images import` all accept: an OCI image layout (`oci-layout`,
 * `index.json`, `blobs/sha256/…`) that also carries Docker's `manifest.json`,
 * as `docker save` has written since Docker 25. Layers are gzip-compressed
 * tars with sorted entries, one fixed mtime and numeric root ownership, so the
 * same inputs give the same bytes.
 *
 * @module
 */

import { join } from "node:path";
import { runTool } from "./command.ts";

/** A blob reference in a manifest. */
export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

/** One written layer. */
export interface Layer extends Descriptor {
  /** Digest of the uncompressed tar (the config's `rootfs.diff_ids`). */
  diffId: string;
  /** What the layer holds, for the config's history. */
  comment: string;
}

/** The runtime settings of the image (the config's `config` object). */
export interface ImageSettings {
  entrypoint: string[];
  /** Default arguments to the entrypoint (the config's `Cmd`); none when absent. */
  cmd?: string[];
  env: string[];
  workingDir: string;
  labels: Record<string, string>;
}

/** Everything that names the image. */
export interface ImageIdentity {
  /** Repository, e.g. `localhost/kproxy`. */
  repository: string;
  tag: string;
  /** Seconds since the epoch written as every mtime and as the creation time. */
  epoch: number;
}

/** The JSON documents of an image, ready to write. */
export interface ImageDocuments {
  config: string;
  manifest: string;
  index: string;
  /** Docker's `manifest.json`. */
  dockerManifest: string;
  ociLayout: string;
  /** The manifest's descriptor (its digest is the image's). */
  manifestDescriptor: Descriptor;
  configDescriptor: Descriptor;
}

export const MEDIA_TYPES = {
  index: "application/vnd.oci.image.index.v1+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  config: "application/vnd.oci.image.config.v1+json",
  layerGzip: "application/vnd.oci.image.layer.v1.tar+gzip",
} as const;

/** `sha256:<hex>` of some bytes. */
export async function sha256Digest(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return "sha256:" +
    Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function blobPath(digest: string): string {
  return `blobs/sha256/${digest.slice("sha256:".length)}`;
}

/**
 * Builds the config, manifest, index and Docker manifest of an image. Pure
 * apart from hashing.
 */
export async function imageDocuments(
  identity: ImageIdentity,
  settings: ImageSettings,
  layers: readonly Layer[],
): Promise<ImageDocuments> {
  const created = new Date(identity.epoch * 1000).toISOString().replace(".000Z", "Z");
  const config = JSON.stringify({
    created,
    architecture: "amd64",
    os: "linux",
    config: {
      Entrypoint: settings.entrypoint,
      Cmd: settings.cmd,
      Env: settings.env,
      WorkingDir: settings.workingDir,
      Labels: settings.labels,
    },
    rootfs: { type: "layers", diff_ids: layers.map((layer) => layer.diffId) },
    history: layers.map((layer) => ({ created, created_by: layer.comment })),
  });
  const encoder = new TextEncoder();
  const configDescriptor: Descriptor = {
    mediaType: MEDIA_TYPES.config,
    digest: await sha256Digest(encoder.encode(config)),
    size: encoder.encode(config).length,
  };
  const manifest = JSON.stringify({
    schemaVersion: 2,
    mediaType: MEDIA_TYPES.manifest,
    config: configDescriptor,
    layers: layers.map(({ mediaType, digest, size }) => ({ mediaType, digest, size })),
  });
  const manifestDescriptor: Descriptor = {
    mediaType: MEDIA_TYPES.manifest,
    digest: await sha256Digest(encoder.encode(manifest)),
    size: encoder.encode(manifest).length,
  };
  const reference = `${identity.repository}:${identity.tag}`;
  const index = JSON.stringify({
    schemaVersion: 2,
    mediaType: MEDIA_TYPES.index,
    manifests: [{
      ...manifestDescriptor,
      platform: { architecture: "amd64", os: "linux" },
      annotations: {
        "io.containerd.image.name": reference,
        "org.opencontainers.image.ref.name": identity.tag,
      },
    }],
  });
  const dockerManifest = JSON.stringify([{
    Config: blobPath(configDescriptor.digest),
    RepoTags: [reference],
    Layers: layers.map((layer) => blobPath(layer.digest)),
  }]);
  return {
    config,
    manifest,
    index,
    dockerManifest,
    ociLayout: JSON.stringify({ imageLayoutVersion: "1.0.0" }),
    manifestDescriptor,
    configDescriptor,
  };
}

/** GNU tar's arguments for a reproducible archive of `root`'s entries. */
export function tarArgs(options: { root: string; output: string; epoch: number }): string[] {
  return [
    "--create",
    `--file=${options.output}`,
    `--directory=${options.root}`,
    "--sort=name",
    "--format=posix",
    "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
    `--mtime=@${options.epoch}`,
    "--owner=0",
    "--group=0",
    "--numeric-owner",
    "--mode=go-w",
  ];
}

async function reproducibleTar(root: string, output: string, epoch: number): Promise<void> {
  const entries: string[] = [];
  for await (const entry of Deno.readDir(root)) entries.push(entry.name);
  await runTool("tar", [...tarArgs({ root, output, epoch }), ...entries.sort()]);
}

/** Options for {@linkcode writeImageArchive}. */
export interface ImageArchiveOptions {
  identity: ImageIdentity;
  settings: ImageSettings;
  /** One directory tree per layer, bottom first, with what it holds. */
  layers: readonly { root: string; comment: string }[];
  /** The archive to write. */
  output: string;
  /** Scratch space. */
  workDir: string;
}

/** Writes the image archive and returns its documents. */
export async function writeImageArchive(options: ImageArchiveOptions): Promise<ImageDocuments> {
  const layout = join(options.workDir, "layout");
  await Deno.mkdir(join(layout, "blobs/sha256"), { recursive: true });
  const layers: Layer[] = [];
  for (const [i, { root, comment }] of options.layers.entries()) {
    const tar = join(options.workDir, `layer-${i}.tar`);
    await reproducibleTar(root, tar, options.identity.epoch);
    const diffId = await sha256Digest(await Deno.readFile(tar));
    await runTool("gzip", ["-n", "-6", tar]);
    const compressed = await Deno.readFile(`${tar}.gz`);
    const digest = await sha256Digest(compressed);
    await Deno.rename(`${tar}.gz`, join(layout, blobPath(digest)));
    layers.push({
      mediaType: MEDIA_TYPES.layerGzip,
      digest,
      size: compressed.length,
      diffId,
      comment,
    });
  }
  const documents = await imageDocuments(options.identity, options.settings, layers);
  const write = (path: string, text: string) => Deno.writeTextFile(join(layout, path), text);
  await write(blobPath(documents.configDescriptor.digest), documents.config);
  await write(blobPath(documents.manifestDescriptor.digest), documents.manifest);
  await write("index.json", documents.index);
  await write("manifest.json", documents.dockerManifest);
  await write("oci-layout", documents.ociLayout);
  await reproducibleTar(layout, options.output, options.identity.epoch);
  return documents;
}
