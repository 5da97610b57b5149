import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";
import { IMAGE_REPOSITORY, IMAGE_SETTINGS, imageTag } from "../../scripts/image/build.ts";
import { parseCommandLine } from "../../lib/config/command_line.ts";
import { permissionInputFor } from "../../lib/shell/permissions.ts";
import { SERVICE_ACCOUNT_DIR } from "../../lib/shell/source/kubeconfig.ts";

const DEPLOY = new URL("../../scripts/deploy/", import.meta.url);
const SYSTEMD = new URL("../../scripts/systemd/", import.meta.url);

type Doc = Record<string, any>;

async function readManifests(): Promise<Doc[]> {
  const docs: Doc[] = [];
  for await (const entry of Deno.readDir(DEPLOY)) {
    if (!entry.name.endsWith(".yaml")) continue;
    const text = await Deno.readTextFile(new URL(entry.name, DEPLOY));
    for (const doc of parseAllDocuments(text)) {
      assert.equal(doc.errors.length, 0, `${entry.name}: ${doc.errors.join("; ")}`);
      docs.push(doc.toJS());
    }
  }
  return docs;
}

function byKind(docs: Doc[], kind: string): Doc {
  const found = docs.find((doc) => doc.kind === kind);
  assert.ok(found, `no ${kind} in scripts/deploy`);
  return found;
}

Deno.test("DaemonSet runs on the host network with only NET_ADMIN and NET_RAW", async () => {
  const ds = byKind(await readManifests(), "DaemonSet");
  const pod = ds.spec.template.spec;
  assert.equal(pod.hostNetwork, true);
  assert.equal(pod.priorityClassName, "system-node-critical");
  assert.ok(pod.tolerations.some((t: Doc) => t.operator === "Exists"));
  const [container] = pod.containers;
  assert.deepEqual(container.securityContext.capabilities.drop, ["ALL"]);
  assert.deepEqual([...container.securityContext.capabilities.add].sort(), [
    "NET_ADMIN",
    "NET_RAW",
  ]);
  assert.equal(container.securityContext.privileged, false);
});

Deno.test("DaemonSet runs the image deno task image builds, with its entry point", async () => {
  const ds = byKind(await readManifests(), "DaemonSet");
  const [container] = ds.spec.template.spec.containers;
  assert.equal(container.image, `${IMAGE_REPOSITORY}:${await imageTag()}`);
  assert.equal(container.imagePullPolicy, "IfNotPresent");
  assert.equal(container.command[0], IMAGE_SETTINGS.entrypoint[0]);
  assert.equal(container.securityContext.readOnlyRootFilesystem, true);
  assert.equal(container.securityContext.allowPrivilegeEscalation, false);
});

Deno.test("DaemonSet probes liveness on /livez and readiness on /healthz", async () => {
  const ds = byKind(await readManifests(), "DaemonSet");
  const [container] = ds.spec.template.spec.containers;
  assert.equal(container.livenessProbe.httpGet.path, "/livez");
  assert.equal(container.readinessProbe.httpGet.path, "/healthz");
  assert.equal(container.livenessProbe.httpGet.port, 10256);
});

Deno.test("DaemonSet mounts the xtables lock and no host directory a node may lack", async () => {
  const ds = byKind(await readManifests(), "DaemonSet");
  const pod = ds.spec.template.spec;
  const hostPaths = pod.volumes.filter((v: Doc) => v.hostPath).map((v: Doc) => v.hostPath);
  // kube-proxy mounts /lib/modules for the modprobe in its image; kproxy's image has none and
  // kproxy reads nothing there, and a `Directory` hostPath keeps the pod in ContainerCreating
  // on a host without /lib/modules.
  assert.deepEqual(hostPaths, [{ path: "/run/xtables.lock", type: "FileOrCreate" }]);
  const mounts = pod.containers[0].volumeMounts.map((m: Doc) => m.mountPath);
  assert.ok(mounts.includes("/run/xtables.lock"));
});

Deno.test("DaemonSet resolves names with the node's resolver, not through a Service it programs", async () => {
  const pod = byKind(await readManifests(), "DaemonSet").spec.template.spec;
  // kubeadm's kube-proxy DaemonSet sets none: ClusterFirst, which on the host network is the
  // node's own resolv.conf.
  assert.ok(
    pod.dnsPolicy === undefined || pod.dnsPolicy === "ClusterFirst" || pod.dnsPolicy === "Default",
    `dnsPolicy ${pod.dnsPolicy}`,
  );
});

/** The kproxy Config the DaemonSet's command line and ConfigMap give, files read from the ConfigMap. */
function shippedConfig(docs: Doc[]) {
  const ds = byKind(docs, "DaemonSet");
  const pod = ds.spec.template.spec;
  const [container] = pod.containers;
  const cm = byKind(docs, "ConfigMap");
  const configVolume = pod.volumes.find((v: Doc) => v.configMap?.name === cm.metadata.name);
  assert.ok(configVolume, "no volume of kproxy's ConfigMap");
  const mount = container.volumeMounts.find((m: Doc) => m.name === configVolume.name);
  const files = new Map<string, string>(
    Object.entries(cm.data as Record<string, string>).map(([key, text]) => [
      `${mount.mountPath}/${key}`,
      text,
    ]),
  );
  const readTextFile = (path: string) => {
    const text = files.get(path);
    if (text === undefined) throw new Deno.errors.NotFound(path);
    return text;
  };
  const argv = container.command.slice(1).map((arg: string) =>
    arg.replace("$(NODE_NAME)", "node-a")
  );
  const { config } = parseCommandLine(argv, { readTextFile, hostname: () => "node-a" });
  return { config, readTextFile, files };
}

Deno.test("DaemonSet reaches the apiserver through its ConfigMap's kubeconfig, never a Service IP", async () => {
  const docs = await readManifests();
  const { config, readTextFile } = shippedConfig(docs);
  assert.match(config.kubeconfig, /kubeconfig\.conf$/);
  const kubeconfig = parseAllDocuments(readTextFile(config.kubeconfig))[0]!.toJS();
  const cluster = kubeconfig.clusters[0].cluster;
  assert.equal(cluster.server, "https://CONTROL_PLANE_ENDPOINT:6443");
  assert.equal(cluster["certificate-authority"], `${SERVICE_ACCOUNT_DIR}/ca.crt`);
  assert.equal(kubeconfig.users[0].user.tokenFile, `${SERVICE_ACCOUNT_DIR}/token`);
  // What the image's launcher grants: the kubeconfig's server and files, not the
  // kubernetes Service's cluster IP the kubelet puts in the environment.
  const env: Record<string, string> = {
    KUBERNETES_SERVICE_HOST: "10.96.0.1",
    KUBERNETES_SERVICE_PORT: "443",
  };
  assert.throws(
    () => permissionInputFor(config, { readTextFile, getEnv: (name) => env[name] }),
    /server is still the placeholder https:\/\/CONTROL_PLANE_ENDPOINT:6443/,
  );
  const filled = (path: string) =>
    readTextFile(path).replace("CONTROL_PLANE_ENDPOINT", "api.cluster.example");
  const input = permissionInputFor(config, {
    readTextFile: filled,
    getEnv: (name) => env[name],
  });
  assert.deepEqual(input.apiservers, ["api.cluster.example:6443"]);
  for (
    const file of [
      config.kubeconfig,
      `${SERVICE_ACCOUNT_DIR}/ca.crt`,
      `${SERVICE_ACCOUNT_DIR}/token`,
    ]
  ) {
    assert.ok(input.read.includes(file), `${file} is not granted: ${input.read}`);
  }
});

Deno.test("deploy README says how to fill the endpoint or reuse kubeadm's kube-proxy kubeconfig", async () => {
  for (const file of [new URL("README.md", DEPLOY), new URL("../../README.md", DEPLOY)]) {
    const text = await Deno.readTextFile(file);
    assert.match(text, /CONTROL_PLANE_ENDPOINT/, file.pathname);
    assert.match(text, /kubeconfig\.conf/, file.pathname);
    assert.match(text, /configMap:\s*\n\s*name: kube-proxy/, file.pathname);
  }
});

Deno.test("ClusterRole grants only list/watch on the watched resources and the one event create", async () => {
  const role = byKind(await readManifests(), "ClusterRole");
  const granted = new Map<string, string[]>();
  for (const rule of role.rules) {
    for (const resource of rule.resources) granted.set(resource, [...rule.verbs].sort());
  }
  for (const resource of ["services", "endpointslices", "nodes", "servicecidrs"]) {
    assert.deepEqual(granted.get(resource), ["list", "watch"], resource);
  }
  // The one event kproxy writes: Starting, created through events.k8s.io/v1.
  const events = role.rules.filter((rule: Doc) => rule.resources.includes("events"));
  assert.deepEqual(events, [
    { apiGroups: ["events.k8s.io"], resources: ["events"], verbs: ["create"] },
  ]);
  assert.deepEqual([...granted.keys()].sort(), [
    "endpointslices",
    "events",
    "nodes",
    "servicecidrs",
    "services",
  ]);
});

Deno.test("ConfigMap holds a KubeProxyConfiguration", async () => {
  const docs = await readManifests();
  const cm = byKind(docs, "ConfigMap");
  const config = parseAllDocuments(cm.data["config.yaml"])[0]!.toJS();
  assert.equal(config.apiVersion, "kubeproxy.config.k8s.io/v1alpha1");
  assert.equal(config.kind, "KubeProxyConfiguration");
  const ds = byKind(docs, "DaemonSet");
  assert.equal(
    ds.spec.template.spec.serviceAccountName,
    byKind(docs, "ServiceAccount").metadata.name,
  );
  const binding = byKind(docs, "ClusterRoleBinding");
  assert.equal(binding.roleRef.name, byKind(docs, "ClusterRole").metadata.name);
});

Deno.test("systemd unit is hardened", async () => {
  const unit = await Deno.readTextFile(new URL("kproxy.service", SYSTEMD));
  const has = (line: string) => assert.ok(unit.split("\n").includes(line), line);
  has("CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW");
  has("NoNewPrivileges=yes");
  has("ProtectSystem=strict");
  has("ProtectHome=yes");
  has("Restart=always");
  has("After=network-online.target");
  has("Wants=network-online.target");
  has("ProtectKernelTunables=yes");
  has("ReadWritePaths=/proc/sys/net -/run/xtables.lock");
  has("RestrictAddressFamilies=AF_INET AF_INET6 AF_NETLINK AF_UNIX");
  has("SystemCallFilter=@system-service");
  has("SystemCallFilter=~@privileged @resources");
  has("RestrictNamespaces=yes");
  has("UMask=0077");
  has("OOMScoreAdjust=-999");
  assert.doesNotMatch(unit, /^MemoryDenyWriteExecute=yes$/m, "V8 needs W+X memory");
});

/** The overall exposure `systemd-analyze security` gives a unit file, or why it cannot. */
async function exposureOf(path: string): Promise<number | string> {
  const out = await new Deno.Command("systemd-analyze", {
    args: ["security", "--offline=yes", "--no-pager", path],
    env: { SYSTEMD_COLORS: "0" },
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  const match = /Overall exposure level for \S+: (\d+\.\d+)/.exec(text);
  return match ? Number(match[1]) : `systemd-analyze security --offline=yes: ${text.trim()}`;
}

const securitySkipReason = await (async () => {
  try {
    const probe = await exposureOf(new URL("kproxy.service", SYSTEMD).pathname);
    return typeof probe === "string" ? probe : undefined;
  } catch {
    return "systemd-analyze is not installed";
  }
})();
if (securitySkipReason) console.log(`skipping the systemd exposure test: ${securitySkipReason}`);

Deno.test({
  name: "systemd unit's exposure in systemd-analyze security is at most 3.0",
  ignore: securitySkipReason !== undefined,
  async fn() {
    const exposure = await exposureOf(new URL("kproxy.service", SYSTEMD).pathname);
    assert.equal(typeof exposure, "number", String(exposure));
    assert.ok((exposure as number) <= 3.0, `exposure ${exposure} > 3.0`);
  },
});

const analyze = await (async () => {
  try {
    const { success } = await new Deno.Command("systemd-analyze", {
      args: ["--version"],
      stdout: "null",
    })
      .output();
    return success;
  } catch {
    return false;
  }
})();

Deno.test({
  name: "systemd unit passes systemd-analyze verify",
  ignore: !analyze,
  async fn() {
    // verify insists that ExecStart exists: check a copy whose binary is /bin/true.
    const dir = await Deno.makeTempDir({ prefix: "kproxy-unit-" });
    try {
      const unit = await Deno.readTextFile(new URL("kproxy.service", SYSTEMD));
      const path = `${dir}/kproxy.service`;
      await Deno.writeTextFile(path, unit.replace("/usr/local/bin/kproxy", "/bin/true"));
      const out = await new Deno.Command("systemd-analyze", { args: ["verify", path] }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.ok(out.success, stderr);
      assert.equal(stderr.trim(), "");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
if (!analyze) console.log("skipping systemd-analyze verify: systemd-analyze is not installed");
