import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";
import { IMAGE_REPOSITORY, IMAGE_SETTINGS, imageTag } from "../../scripts/image/build.ts";

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

Deno.test("DaemonSet mounts the xtables lock and kernel modules", async () => {
  const ds = byKind(await readManifests(), "DaemonSet");
  const pod = ds.spec.template.spec;
  const paths = pod.volumes.filter((v: Doc) => v.hostPath).map((v: Doc) => v.hostPath.path);
  assert.deepEqual(paths.sort(), ["/lib/modules", "/run/xtables.lock"]);
  const mounts = pod.containers[0].volumeMounts.map((m: Doc) => m.mountPath);
  assert.ok(mounts.includes("/run/xtables.lock"));
  assert.ok(mounts.includes("/lib/modules"));
});

Deno.test("ClusterRole grants only list/watch on the watched resources and event writes", async () => {
  const role = byKind(await readManifests(), "ClusterRole");
  const granted = new Map<string, string[]>();
  for (const rule of role.rules) {
    for (const resource of rule.resources) granted.set(resource, [...rule.verbs].sort());
  }
  for (const resource of ["services", "endpointslices", "nodes", "servicecidrs"]) {
    assert.deepEqual(granted.get(resource), ["list", "watch"], resource);
  }
  assert.ok(granted.get("events")?.includes("create"));
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
