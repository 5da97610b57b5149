import assert from "node:assert/strict";
import {
  DENO_VERSION,
  IMAGE_PROGRAMS,
  IMAGE_REPOSITORY,
  IMAGE_SETTINGS,
  imageLabels,
  imageTag,
  parseImageName,
} from "../../scripts/image/build.ts";
import {
  parseDebFileName,
  parseDependsClosure,
  parsePrintUris,
} from "../../scripts/image/debian.ts";
import { isElf, readElfNeeds } from "../../scripts/image/elf.ts";
import { shellQuote } from "../../scripts/image/entrypoint.ts";
import {
  imageDocuments,
  MEDIA_TYPES,
  sha256Digest,
  writeImageArchive,
} from "../../scripts/image/oci.ts";
import { canonicalPath } from "../../scripts/image/rootfs.ts";
import { LINUX_PROGRAMS } from "../../lib/shell/permissions.ts";

const REPO = new URL("../../", import.meta.url).pathname;

Deno.test("readElfNeeds() reads the interpreter and DT_NEEDED sonames of the Deno runtime", {
  ignore: Deno.build.os !== "linux",
}, async () => {
  const bytes = await Deno.readFile(Deno.execPath());
  assert.ok(isElf(bytes));
  const needs = readElfNeeds(bytes);
  assert.match(needs.interpreter ?? "", /^\/lib64\/ld-linux-x86-64\.so\.2$|ld-linux/);
  assert.ok(needs.needed.includes("libc.so.6"), needs.needed.join(" "));
});

Deno.test("readElfNeeds() refuses bytes that are not an ELF file", () => {
  assert.equal(isElf(new TextEncoder().encode("#!/bin/sh\n")), false);
  assert.throws(() => readElfNeeds(new TextEncoder().encode("#!/bin/sh\n")), /not a 64-bit/);
});

Deno.test("parseDependsClosure() keeps real package names, once, sorted", () => {
  const output = [
    "nftables",
    "  Depends: libnftables1",
    "  Depends: <debconf-2.0>",
    "libnftables1",
    "  Depends: libc6",
    "<debconf-2.0>",
    "libc6",
    "nftables",
  ].join("\n");
  assert.deepEqual(parseDependsClosure(output), ["libc6", "libnftables1", "nftables"]);
});

Deno.test("parsePrintUris() and parseDebFileName() read apt-get download --print-uris", () => {
  const sha = "a".repeat(64);
  const output = `'http://deb.example/pool/main/p/procps/procps_2%3a4.0.2-3_amd64.deb' ` +
    `procps_2%3a4.0.2-3_amd64.deb 709616 SHA256:${sha}\n`;
  const [uri] = parsePrintUris(output);
  assert.equal(uri?.file, "procps_2%3a4.0.2-3_amd64.deb");
  assert.equal(uri?.size, 709616);
  assert.equal(uri?.sha256, sha);
  assert.deepEqual(parseDebFileName(uri!.file), { name: "procps", version: "2:4.0.2-3" });
  assert.throws(() => parseDebFileName("procps.deb"), /Cannot parse Debian file name/);
});

Deno.test("canonicalPath() places /bin, /sbin, /lib and /lib64 under merged /usr", () => {
  assert.equal(canonicalPath("/sbin/sysctl"), "/usr/sbin/sysctl");
  assert.equal(canonicalPath("/bin/sh"), "/usr/bin/sh");
  assert.equal(canonicalPath("/lib64/ld-linux-x86-64.so.2"), "/usr/lib64/ld-linux-x86-64.so.2");
  assert.equal(
    canonicalPath("/lib/x86_64-linux-gnu/libc.so.6"),
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
  );
  assert.equal(canonicalPath("/usr/sbin/nft"), "/usr/sbin/nft");
  assert.equal(canonicalPath("/library/x"), "/library/x");
});

Deno.test("shellQuote() arguments survive a POSIX shell's eval unchanged", {
  ignore: Deno.build.os === "windows",
}, async () => {
  const args = ["plain", "two words", "it's", 'say "hi"', "$HOME `id` $(id)", "a\nb", "", "*"];
  // As kproxy.sh does: the quoted line comes from a command substitution, then eval.
  const script = `line=$1; eval "set -- $line"; for a in "$@"; do printf '%s\\0' "$a"; done`;
  const output = await new Deno.Command("sh", {
    args: ["-c", script, "sh", args.map(shellQuote).join(" ")],
    stdout: "piped",
  }).output();
  const printed = new TextDecoder().decode(output.stdout).split("\0").slice(0, -1);
  assert.deepEqual(printed, args);
});

Deno.test("the image launcher grants the in-cluster apiserver and service account, nothing more", {
  ignore: Deno.build.os !== "linux",
}, async () => {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-launcher-" });
  try {
    await Deno.writeTextFile(
      `${dir}/config.yaml`,
      "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" +
        "mode: nftables\nmetricsBindAddress: 127.0.0.1:10249\n",
    );
    const output = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-read",
        "--allow-env",
        "--allow-sys=hostname",
        "scripts/image/entrypoint.ts",
        `--config=${dir}/config.yaml`,
        "--hostname-override=node-a",
      ],
      cwd: REPO,
      clearEnv: true,
      env: { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(output.success, new TextDecoder().decode(output.stderr));
    const line = new TextDecoder().decode(output.stdout).trim();
    const args = [...line.matchAll(/'([^']*)'/g)].map((match) => match[1]!);
    assert.equal(args[0], "run");
    const net = args.find((arg) => arg.startsWith("--allow-net="))!.split("=")[1]!.split(",");
    assert.ok(net.includes("10.96.0.1:443"), net.join(","));
    const read = args.find((arg) => arg.startsWith("--allow-read="))!.split("=")[1]!.split(",");
    assert.deepEqual(
      read.sort(),
      [
        `${dir}/config.yaml`,
        "/var/run/secrets/kubernetes.io/serviceaccount",
      ].sort(),
    );
    assert.ok(!args.includes("--allow-all") && !args.includes("-A"));
    assert.ok(args.at(-3)!.endsWith("/dist/kproxy.js"), args.join(" "));
    assert.deepEqual(args.slice(-2), [`--config=${dir}/config.yaml`, "--hostname-override=node-a"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("imageDocuments() links config, manifest, index and Docker manifest by digest", async () => {
  const layers = [{
    mediaType: MEDIA_TYPES.layerGzip,
    digest: `sha256:${"1".repeat(64)}`,
    size: 10,
    diffId: `sha256:${"2".repeat(64)}`,
    comment: "os",
  }];
  const docs = await imageDocuments(
    { repository: "localhost/kproxy", tag: "0.1.0", epoch: 0 },
    IMAGE_SETTINGS,
    layers,
  );
  const encoder = new TextEncoder();
  assert.equal(docs.configDescriptor.digest, await sha256Digest(encoder.encode(docs.config)));
  assert.equal(docs.manifestDescriptor.digest, await sha256Digest(encoder.encode(docs.manifest)));
  const config = JSON.parse(docs.config);
  assert.equal(config.created, "1970-01-01T00:00:00Z");
  assert.deepEqual(config.rootfs.diff_ids, [layers[0]!.diffId]);
  const manifest = JSON.parse(docs.manifest);
  assert.equal(manifest.config.digest, docs.configDescriptor.digest);
  assert.deepEqual(manifest.layers, [{
    mediaType: MEDIA_TYPES.layerGzip,
    digest: layers[0]!.digest,
    size: 10,
  }]);
  const [entry] = JSON.parse(docs.index).manifests;
  assert.equal(entry.digest, docs.manifestDescriptor.digest);
  assert.equal(entry.annotations["io.containerd.image.name"], "localhost/kproxy:0.1.0");
  assert.equal(entry.annotations["org.opencontainers.image.ref.name"], "0.1.0");
  const [docker] = JSON.parse(docs.dockerManifest);
  assert.equal(
    docker.Config,
    `blobs/sha256/${docs.configDescriptor.digest.slice("sha256:".length)}`,
  );
  assert.deepEqual(docker.Layers, [`blobs/sha256/${"1".repeat(64)}`]);
  assert.deepEqual(docker.RepoTags, ["localhost/kproxy:0.1.0"]);
});

Deno.test("the image carries every program a Linux mode may run", () => {
  for (const program of LINUX_PROGRAMS) assert.ok(IMAGE_PROGRAMS.includes(program), program);
});

Deno.test("the image's Deno is the version CI runs", async () => {
  const ci = await Deno.readTextFile(`${REPO}.ci/run`);
  assert.match(ci, new RegExp(`^DENO_VERSION=${DENO_VERSION.replaceAll(".", "\\.")}$`, "m"));
});

Deno.test("the Containerfile states the settings deno task image writes", async () => {
  const text = await Deno.readTextFile(`${REPO}scripts/image/Containerfile`);
  const final = text.slice(text.lastIndexOf("FROM scratch"));
  const env = [...final.matchAll(/^ENV (\S+)$/gm)].map((match) => match[1]);
  assert.deepEqual(env, IMAGE_SETTINGS.env);
  const entrypoint = /^ENTRYPOINT (.+)$/m.exec(final)?.[1];
  assert.deepEqual(JSON.parse(entrypoint ?? "null"), IMAGE_SETTINGS.entrypoint);
  assert.match(final, new RegExp(`^WORKDIR ${IMAGE_SETTINGS.workingDir}$`, "m"));
  const labels = Object.fromEntries(
    [...final.matchAll(/^LABEL (\S+)="(.*)"$/gm)].map((match) => [match[1], match[2]]),
  );
  const tag = await imageTag();
  assert.deepEqual(labels, imageLabels(tag));
  assert.match(text, new RegExp(`^ARG DENO_VERSION=${DENO_VERSION.replaceAll(".", "\\.")}$`, "m"));
  assert.ok(text.includes(`-t ${IMAGE_REPOSITORY}:${tag} `));
});

Deno.test("writeImageArchive() writes the same bytes for the same trees, whatever their mtimes", {
  ignore: Deno.build.os !== "linux",
}, async () => {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-oci-" });
  try {
    await Deno.mkdir(`${dir}/root/usr/bin`, { recursive: true });
    await Deno.writeTextFile(`${dir}/root/usr/bin/b`, "b");
    await Deno.writeTextFile(`${dir}/root/usr/bin/a`, "a");
    await Deno.symlink("usr/bin", `${dir}/root/bin`);
    const digests: string[] = [];
    for (const run of [1, 2]) {
      await Deno.utime(`${dir}/root/usr/bin/a`, run * 1000, run * 1000);
      await Deno.mkdir(`${dir}/work${run}`);
      const output = `${dir}/image${run}.tar`;
      await writeImageArchive({
        identity: { repository: "localhost/kproxy", tag: "0.1.0", epoch: 1_700_000_000 },
        settings: IMAGE_SETTINGS,
        layers: [{ root: `${dir}/root`, comment: "test" }],
        output,
        workDir: `${dir}/work${run}`,
      });
      digests.push(await sha256Digest(await Deno.readFile(output)));
    }
    assert.equal(digests[0], digests[1]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("parseImageName() reads --name REGISTRY/REPOSITORY:TAG, naming what is wrong", async (t) => {
  const ok: [string, { repository: string; tag: string }][] = [
    ["registry.example.com/kproxy:0.1.0", {
      repository: "registry.example.com/kproxy",
      tag: "0.1.0",
    }],
    ["registry.example.com:5000/infra/kproxy:v1", {
      repository: "registry.example.com:5000/infra/kproxy",
      tag: "v1",
    }],
    ["localhost/kproxy:0.1.0", { repository: "localhost/kproxy", tag: "0.1.0" }],
  ];
  for (const [name, want] of ok) {
    await t.step(name, () => assert.deepEqual(parseImageName(name), want));
  }
  const bad: [string, RegExp][] = [
    ["registry.example.com/kproxy", /no tag/],
    ["registry.example.com:5000/kproxy", /no tag/],
    ["registry.example.com/KProxy:1", /repository/],
    ["registry.example.com/kproxy:", /tag/],
    ["registry.example.com/kproxy@sha256:abc", /digest/],
  ];
  for (const [name, error] of bad) {
    await t.step(`refuses ${name}`, () => {
      assert.throws(() => parseImageName(name), (e: Error) => {
        assert.match(e.message, /^Cannot parse --name "/);
        assert.match(e.message, error);
        return true;
      });
    });
  }
});
