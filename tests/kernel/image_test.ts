import assert from "node:assert/strict";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { buildImage, IMAGE_SETTINGS } from "../../scripts/image/build.ts";
import {
  analysedModules,
  ANALYSIS_CACHE_FILE,
  ANALYSIS_MARK,
  analysisMark,
} from "../../scripts/analysis_cache.ts";
import { SERVICE_ACCOUNT_DIR } from "../../lib/shell/source/kubeconfig.ts";
import { testCertificates } from "../../scripts/testbed/tls.ts";
import { kernelSkipReason, Topology } from "./netns.ts";
import { programRuns } from "../support/programs.ts";

const REPO = new URL("../../", import.meta.url).pathname;
const WEB = { ip: "10.96.0.10", port: 80 };

/**
 * The OCI runtime the test uses: runc, else crun (same command line). Debian 12's crun refuses
 * hosts with hybrid cgroups ("cgroups in hybrid mode not supported"); runc runs on them.
 */
async function ociRuntime(): Promise<string | undefined> {
  for (const runtime of ["runc", "crun"]) {
    if (await programRuns(runtime)) return runtime;
  }
  return undefined;
}

const runtime = await ociRuntime();
const skipReason = await kernelSkipReason([
  "nft",
  "skopeo",
  "umoci",
  "apt-get",
  "dpkg-deb",
  "npm",
  "tar",
  "gzip",
  "openssl",
]) ?? (runtime ? undefined : "neither runc nor crun is installed");
if (skipReason !== undefined) console.warn(`image test ignored: ${skipReason}`);

async function output(program: string, args: string[]): Promise<string> {
  const result = await new Deno.Command(program, { args, stdout: "piped", stderr: "piped" })
    .output();
  const stderr = new TextDecoder().decode(result.stderr);
  assert.ok(result.success, `${program} ${args.join(" ")}: ${stderr}`);
  return new TextDecoder().decode(result.stdout);
}

type Doc = Record<string, any>;

const hasContainerd = (await Promise.all(["containerd", "ctr"].map((p) => programRuns(p))))
  .every(Boolean);
if (!hasContainerd) {
  console.warn("image test: ctr import step ignored: containerd is not installed");
}

const hasPodman = await programRuns("podman");
if (!hasPodman) console.warn("image test: podman load step ignored: podman is not installed");

/** Loads the archive with `podman load` into a store under `dir`; returns `podman images` names. */
async function podmanLoad(archive: string, dir: string): Promise<string[]> {
  const podman = (...args: string[]) =>
    output("podman", [
      `--root=${dir}/root`,
      `--runroot=${dir}/run`,
      `--tmpdir=${dir}/tmp`,
      "--storage-driver=vfs",
      "--events-backend=none",
      ...args,
    ]);
  await podman("load", "--quiet", "--input", archive);
  return (await podman("images", "--format", "{{.Repository}}:{{.Tag}}")).split("\n")
    .filter((line) => line !== "");
}

/**
 * Imports the archive with `ctr -n k8s.io images import` into a containerd of its own (state,
 * sockets and content under `dir`, no CRI plugin) and returns the image names it then lists.
 */
async function ctrImport(archive: string, dir: string): Promise<string[]> {
  const socket = join(dir, "containerd.sock");
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(
    join(dir, "config.toml"),
    [
      "version = 2",
      `root = "${dir}/root"`,
      `state = "${dir}/state"`,
      `disabled_plugins = ["io.containerd.grpc.v1.cri"]`,
      `[grpc]\naddress = "${socket}"`,
      `[ttrpc]\naddress = "${dir}/ttrpc.sock"`,
      `[plugins."io.containerd.internal.v1.opt"]\npath = "${dir}/opt"`,
    ].join("\n") + "\n",
  );
  const daemon = new Deno.Command("containerd", {
    args: ["--config", join(dir, "config.toml")],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    const ctr = (...args: string[]) =>
      output("ctr", ["--address", socket, "-n", "k8s.io", ...args]);
    const deadline = Date.now() + 20_000;
    while (!(await ctr("version").then(() => true, () => false))) {
      if (Date.now() > deadline) throw new Error("containerd did not start in 20 s");
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await ctr("images", "import", archive);
    return (await ctr("images", "ls", "-q")).split("\n").filter((line) => line !== "");
  } finally {
    daemon.kill("SIGTERM");
    await daemon.status;
  }
}

/** The DaemonSet's kproxy container, where it mounts the ConfigMap, and the ConfigMap's files. */
async function deployment(): Promise<
  { container: Doc; configDir: string; configFiles: Record<string, string> }
> {
  const read = async (file: string) =>
    parseAllDocuments(await Deno.readTextFile(join(REPO, "scripts/deploy", file)))
      .map((doc) => doc.toJS() as Doc);
  const [daemonSet] = await read("daemonset.yaml");
  const [configMap] = await read("configmap.yaml");
  const pod = daemonSet!.spec.template.spec;
  const container = pod.containers[0];
  const volume = pod.volumes.find((v: Doc) => v.configMap?.name === configMap!.metadata.name);
  const mount = container.volumeMounts.find((m: Doc) => m.name === volume.name);
  return { container, configDir: mount.mountPath, configFiles: configMap!.data };
}

/**
 * Writes a service-account volume as the kubelet does: the files are links through `..data` to a
 * timestamped directory, swapped atomically when the token rotates.
 */
async function writeServiceAccount(dir: string, files: Record<string, string>): Promise<void> {
  const version = "..2026_01_01_00_00_00.000000001";
  await Deno.mkdir(join(dir, version), { recursive: true });
  for (const [name, text] of Object.entries(files)) {
    await Deno.writeTextFile(join(dir, version, name), text);
    await Deno.symlink(join("..data", name), join(dir, name));
  }
  await Deno.symlink(version, join(dir, "..data"));
}

/** Kubernetes' `$(VAR)` expansion of a container's command. */
function expand(arg: string, env: Record<string, string>): string {
  return arg.replace(/\$\(([A-Z_]+)\)/g, (whole, name) => env[name] ?? whole);
}

interface SpecOptions {
  args: string[];
  env: string[];
  capabilities: string[];
  readonlyRoot: boolean;
  netns: string;
  mounts: { source: string; destination: string; readonly: boolean }[];
}

/**
 * A runtime spec as containerd gives a non-privileged Kubernetes container
 * on the host network: new mount, PID, IPC and UTS namespaces, the node's
 * network namespace, only the listed capabilities, /proc/sys read-only.
 */
function runtimeSpec(options: SpecOptions): Doc {
  const capabilities = options.capabilities.map((cap) => `CAP_${cap}`);
  return {
    ociVersion: "1.0.2",
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: options.args,
      env: options.env,
      cwd: "/",
      capabilities: {
        bounding: capabilities,
        effective: capabilities,
        permitted: capabilities,
      },
      noNewPrivileges: true,
    },
    root: { path: "rootfs", readonly: options.readonlyRoot },
    hostname: "kproxy",
    mounts: [
      { destination: "/proc", type: "proc", source: "proc" },
      {
        destination: "/dev",
        type: "tmpfs",
        source: "tmpfs",
        options: ["nosuid", "strictatime", "mode=755", "size=65536k"],
      },
      {
        destination: "/sys",
        type: "sysfs",
        source: "sysfs",
        options: ["nosuid", "noexec", "nodev", "ro"],
      },
      ...options.mounts.map((mount) => ({
        destination: mount.destination,
        type: "bind",
        source: mount.source,
        options: ["rbind", mount.readonly ? "ro" : "rw"],
      })),
    ],
    linux: {
      namespaces: [
        { type: "pid" },
        { type: "ipc" },
        { type: "uts" },
        { type: "mount" },
        { type: "network", path: `/run/netns/${options.netns}` },
      ],
      maskedPaths: ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
      readonlyPaths: ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    },
  };
}

/**
 * Starts the fake apiserver over HTTPS inside `ns`, serving scripts/manifests, and writes the
 * service-account directory a pod would get for it (token, CA, namespace) into `saDir`.
 */
async function startApiServer(
  options: { ns: string; work: string; saDir: string },
): Promise<{ port: number; process: Deno.ChildProcess }> {
  const tls = await testCertificates();
  if (!tls) throw new Error("Cannot make test certificates with openssl");
  await writeServiceAccount(options.saDir, {
    token: "image-test-token\n",
    "ca.crt": tls.ca,
    namespace: "kube-system",
  });
  await Deno.writeTextFile(join(options.work, "server.pem"), tls.cert);
  await Deno.writeTextFile(join(options.work, "server.key"), tls.key);
  const process = new Deno.Command("ip", {
    args: [
      "netns",
      "exec",
      options.ns,
      Deno.execPath(),
      "run",
      "--allow-read",
      "--allow-net=127.0.0.1",
      "--allow-env",
      "--ignore-env",
      join(REPO, "tests/support/serve_fake_apiserver.ts"),
      `--manifests=${join(REPO, "scripts/manifests")}`,
      `--cert=${join(options.work, "server.pem")}`,
      `--key=${join(options.work, "server.key")}`,
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = process.stdout.getReader();
  const { value } = await reader.read();
  reader.releaseLock();
  process.stdout.cancel().catch(() => undefined);
  const port = Number(new TextDecoder().decode(value ?? new Uint8Array()).trim());
  if (!(port > 0)) throw new Error("Cannot start the fake apiserver in the node namespace");
  return { port, process };
}

/** GETs a URL from inside a network namespace; returns the HTTP status (0 when unreachable). */
async function httpStatus(ns: string, url: string): Promise<number> {
  const script = "import sys, urllib.request, urllib.error\n" +
    "try:\n  print(urllib.request.urlopen(sys.argv[1], timeout=2).status)\n" +
    "except urllib.error.HTTPError as e:\n  print(e.code)\nexcept Exception:\n  print(0)\n";
  const text = await output("ip", ["netns", "exec", ns, "python3", "-c", script, url]);
  return Number(text.trim());
}

Deno.test({
  name: "deno task image: the archive loads with ctr and podman, and the DaemonSet's container, " +
    "through its kubeconfig, programs rules real traffic takes",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const work = await Deno.makeTempDir({ prefix: "kproxy-image-test-" });
    const archive = join(work, "kproxy.tar");
    const built = await buildImage({ output: archive, log: () => {} });

    await t.step("skopeo reads the archive as an OCI archive and as a Docker archive", async () => {
      const oci = JSON.parse(await output("skopeo", ["inspect", `oci-archive:${archive}`]));
      const docker = JSON.parse(await output("skopeo", ["inspect", `docker-archive:${archive}`]));
      assert.equal(oci.Digest, built.digest);
      assert.deepEqual(docker.Layers.length, oci.Layers.length);
      assert.equal(oci.Layers.length, 3);
      assert.deepEqual(oci.Env, IMAGE_SETTINGS.env);
      const config = JSON.parse(
        await output("skopeo", ["inspect", "--config", `docker-archive:${archive}`]),
      );
      assert.deepEqual(config.config.Entrypoint, IMAGE_SETTINGS.entrypoint);
      const manifest = JSON.parse(await output("tar", ["-xOf", archive, "manifest.json"]));
      assert.deepEqual(manifest[0].RepoTags, [built.reference]);
    });

    await t.step({
      name: "ctr -n k8s.io images import loads it under the DaemonSet's image name",
      ignore: !hasContainerd,
      fn: async () => {
        const { container } = await deployment();
        assert.equal(container.image, built.reference);
        assert.deepEqual(await ctrImport(archive, join(work, "containerd")), [built.reference]);
      },
    });

    await t.step({
      name: "podman load loads it under the same name",
      ignore: !hasPodman,
      fn: async () => {
        assert.deepEqual(await podmanLoad(archive, join(work, "podman")), [built.reference]);
      },
    });

    const layout = join(work, "layout");
    const bundle = join(work, "bundle");
    await Deno.mkdir(layout);
    await output("tar", ["-xf", archive, "-C", layout]);
    await output("umoci", [
      "unpack",
      "--image",
      `${layout}:${built.reference.split(":")[1]}`,
      bundle,
    ]);
    const rootfs = join(bundle, "rootfs");

    await t.step("umoci unpacks a root filesystem holding every mode's programs", async () => {
      for (
        const program of ["nft", "iptables-legacy-restore", "ip6tables-nft", "ipvsadm", "sysctl"]
      ) {
        const path = join(rootfs, "usr/sbin", program);
        assert.ok((await Deno.stat(path)).isFile, path);
      }
      assert.ok((await Deno.stat(join(rootfs, "usr/local/bin/deno"))).isFile);
      assert.ok((await Deno.stat(join(rootfs, "opt/kproxy/dist/kproxy.js"))).isFile);
    });

    const topology = await Topology.create({
      prefix: `kp-i-${Topology.randomTag()}-`,
      localPods: 1,
      remotePods: 1,
      exitOnSigint: true,
    });
    const id = `kproxy-image-test-${Topology.randomTag()}`;
    const state = join(work, "runtime-state");
    let container: Deno.ChildProcess | undefined;
    let apiserver: Deno.ChildProcess | undefined;
    try {
      const saDir = join(work, "serviceaccount");
      const started = await startApiServer({ ns: topology.node, work, saDir });
      apiserver = started.process;
      const { container: spec, configDir, configFiles } = await deployment();
      // The ConfigMap as the operator applies it: the control plane's endpoint (here the fake
      // on the node namespace's loopback) written over the placeholder.
      const endpoint = `127.0.0.1:${started.port}`;
      await Deno.mkdir(join(work, "config"));
      for (const [name, text] of Object.entries(configFiles)) {
        await Deno.writeTextFile(
          join(work, "config", name),
          text.replace("CONTROL_PLANE_ENDPOINT:6443", endpoint),
        );
      }
      await Deno.writeTextFile(join(work, "xtables.lock"), "");
      const tmp = spec.volumeMounts.find((mount: Doc) => mount.mountPath === "/tmp");
      assert.ok(tmp, "the DaemonSet gives the container a writable /tmp (DENO_DIR)");
      await Deno.mkdir(join(work, "tmp"));
      await Deno.chmod(join(work, "tmp"), 0o1777);
      // In the pod: the node name from the downward API, the service account, and the
      // kubelet's in-cluster variables naming the kubernetes Service, which nothing serves
      // on a node whose proxy has not started: kproxy must not need them.
      const serviceHost = { ip: "10.96.0.1", port: 443 };
      const env = {
        NODE_NAME: "node-a",
        KUBERNETES_SERVICE_HOST: serviceHost.ip,
        KUBERNETES_SERVICE_PORT: String(serviceHost.port),
      };
      const args = spec.command.map((arg: string) => expand(arg, env));
      const security = spec.securityContext;
      await Deno.writeTextFile(
        join(bundle, "config.json"),
        JSON.stringify(runtimeSpec({
          args,
          env: [...IMAGE_SETTINGS.env, ...Object.entries(env).map(([k, v]) => `${k}=${v}`)],
          capabilities: security.capabilities.add,
          readonlyRoot: security.readOnlyRootFilesystem,
          netns: topology.node,
          mounts: [
            { source: join(work, "config"), destination: configDir, readonly: true },
            { source: saDir, destination: SERVICE_ACCOUNT_DIR, readonly: true },
            {
              source: join(work, "xtables.lock"),
              destination: "/run/xtables.lock",
              readonly: false,
            },
            { source: join(work, "tmp"), destination: "/tmp", readonly: false },
          ],
        })),
      );
      container = new Deno.Command(runtime!, {
        args: ["--root", state, "run", "--bundle", bundle, id],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const logs = Promise.all([
        new Response(container.stdout).text(),
        new Response(container.stderr).text(),
      ]).then((parts) => parts.join(""));
      let exited = false;
      container.status.then(() => exited = true);

      await t.step("traffic to the web cluster IP reaches its endpoints", async () => {
        const deadline = Date.now() + 60_000;
        let reply = await topology.tcpRequest(topology.client, WEB.ip, WEB.port);
        while (!reply.ok && !exited && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 500));
          reply = await topology.tcpRequest(topology.client, WEB.ip, WEB.port);
        }
        if (exited) assert.fail(`the container exited: ${await logs}`);
        assert.ok(reply.ok, `no answer from ${WEB.ip}:${WEB.port}: ${JSON.stringify(reply)}`);
        assert.match(reply.pod, /^pod-[ab]1$/);
      });

      await t.step(
        "the start found Deno's analysis of the bundle, made when the image was built",
        () => {
          const bundleUrl = "file:///opt/kproxy/dist/kproxy.js";
          const shipped = analysedModules(join(rootfs, "opt/kproxy/dist", ANALYSIS_CACHE_FILE));
          assert.deepEqual(shipped.map((module) => module.url), [bundleUrl]);
          // The database the launcher copied (one Deno made would be unmarked), its row as
          // shipped (a start under another Deno would have replaced it), none other for the bundle.
          const used = join(work, "tmp/deno", ANALYSIS_CACHE_FILE);
          assert.equal(analysisMark(used), ANALYSIS_MARK);
          assert.deepEqual(
            analysedModules(used).filter((module) => module.url.endsWith("/kproxy.js")),
            shipped,
          );
        },
      );

      await t.step("/healthz and /livez answer 200 on the address the probes use", async () => {
        assert.equal(await httpStatus(topology.node, "http://127.0.0.1:10256/healthz"), 200);
        assert.equal(await httpStatus(topology.node, "http://127.0.0.1:10256/livez"), 200);
      });

      await t.step(
        "kproxy is the container's process, with exact permissions and two capabilities",
        async () => {
          const { pid } = JSON.parse(await output(runtime!, ["--root", state, "state", id]));
          // Deno refuses to read another process's /proc files itself: cat them.
          const proc = (file: string) => output("cat", [`/proc/${pid}/${file}`]);
          const cmdline = (await proc("cmdline")).split("\0");
          assert.equal(cmdline[0], "/usr/local/bin/deno");
          assert.ok(cmdline.includes("/opt/kproxy/dist/kproxy.js"), cmdline.join(" "));
          const allowed = (flag: string) =>
            cmdline.find((arg) => arg.startsWith(`--allow-${flag}=`))?.split("=")[1]?.split(",");
          assert.ok(allowed("run")?.includes("conntrack"), cmdline.join(" "));
          assert.ok(allowed("net")?.includes(endpoint), cmdline.join(" "));
          assert.ok(
            !allowed("net")?.includes(`${serviceHost.ip}:${serviceHost.port}`),
            cmdline.join(" "),
          );
          for (const file of ["token", "ca.crt"]) {
            assert.ok(
              allowed("read")?.includes(`${SERVICE_ACCOUNT_DIR}/${file}`),
              cmdline.join(" "),
            );
          }
          assert.ok(!cmdline.includes("--allow-all") && !cmdline.includes("-A"));
          const status = await proc("status");
          // CAP_NET_ADMIN is bit 12, CAP_NET_RAW bit 13.
          assert.match(status, /^CapEff:\s+0000000000003000$/m);
          assert.match(status, /^CapBnd:\s+0000000000003000$/m);
          const mounts = await proc("mountinfo");
          const root = mounts.split("\n").find((line) => line.split(" ")[4] === "/");
          assert.match(root ?? "", / ro[, ]/, `root mount: ${root}`);
        },
      );

      await output(runtime!, ["--root", state, "kill", id, "TERM"]);
      const status = await container.status;
      const text = await logs;
      await t.step("SIGTERM stops it cleanly", () => {
        assert.equal(status.code, 0, text);
      });
    } finally {
      if (container) {
        await new Deno.Command(runtime!, { args: ["--root", state, "delete", "--force", id] })
          .output();
        await container.status;
      }
      if (apiserver) {
        await apiserver.stdin.close().catch(() => undefined);
        await apiserver.status;
      }
      await topology.destroy();
      await Deno.remove(work, { recursive: true });
    }
  },
});
