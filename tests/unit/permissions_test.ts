import assert from "node:assert/strict";
import {
  denoFlags,
  hostPortOfURL,
  LINUX_PROGRAMS,
  MODE_PROGRAMS,
  permissionInputFor,
  permissionsFor,
} from "../../lib/shell/permissions.ts";

Deno.test("permissionsFor() lists only the selected mode's programs", () => {
  const cases = [
    { mode: "nftables" as const, has: "nft", lacks: "iptables-restore" },
    { mode: "iptables" as const, has: "iptables-restore", lacks: "nft" },
    { mode: "ipvs" as const, has: "ipvsadm", lacks: "nft" },
    { mode: "kernelspace" as const, has: "powershell.exe", lacks: "nft" },
  ];
  for (const { mode, has, lacks } of cases) {
    const set = permissionsFor({
      mode,
      apiservers: [],
      listen: [],
      read: [],
    });
    assert.ok(set.run.includes(has), `${mode} runs ${has}`);
    assert.ok(!set.run.includes(lacks), `${mode} does not run ${lacks}`);
    assert.deepEqual(set.run, [...new Set(MODE_PROGRAMS[mode])].sort());
  }
});

Deno.test("permissionsFor() with allModes allows every Linux mode's programs", () => {
  const set = permissionsFor({
    mode: "nftables",
    apiservers: [],
    listen: [],
    read: [],
    allModes: true,
  });
  assert.deepEqual(set.run, [...LINUX_PROGRAMS]);
  assert.ok(!set.run.includes("powershell.exe"));
  assert.ok(!set.run.includes("sh"));
});

Deno.test("permissionsFor() names exact hosts, ports and files", () => {
  const set = permissionsFor({
    mode: "nftables",
    apiservers: ["10.0.0.1:6443"],
    listen: ["0.0.0.0:10256", "127.0.0.1:10249"],
    healthCheckNodePorts: { host: "0.0.0.0", ports: { first: 30000, last: 30002 } },
    read: ["/etc/kproxy/config.yaml", "", "/etc/kproxy/config.yaml"],
  });
  assert.deepEqual(set.net, [
    "0.0.0.0:10256",
    "0.0.0.0:30000",
    "0.0.0.0:30001",
    "0.0.0.0:30002",
    "10.0.0.1:6443",
    "127.0.0.1:10249",
  ]);
  assert.deepEqual(set.read, ["/etc/kproxy/config.yaml"]);
  assert.deepEqual(set.sys, ["hostname", "networkInterfaces"], "no node:os, so no cpus");
});

Deno.test("permissionsFor() grants no host without a port", () => {
  const input = { mode: "nftables" as const, apiservers: [], read: [] };
  for (const entry of ["0.0.0.0", "::", "[::]", "10.0.0.1", "api.example", ":10256"]) {
    assert.throws(
      () => permissionsFor({ ...input, listen: [entry] }),
      /Cannot grant network access to .*: it names no single port/,
      entry,
    );
  }
  const ipv6 = permissionsFor({
    ...input,
    listen: [],
    healthCheckNodePorts: { host: "::", ports: { first: 30000, last: 30000 } },
  });
  assert.deepEqual(ipv6.net, ["[::]:30000"]);
});

Deno.test("permissionsFor() refuses a node port range too wide for one flag", () => {
  assert.throws(
    () =>
      permissionsFor({
        mode: "nftables",
        apiservers: [],
        listen: [],
        read: [],
        healthCheckNodePorts: { host: "0.0.0.0", ports: { first: 20000, last: 40000 } },
      }),
    /Cannot grant health-check node ports 20000-40000: 20001 ports/,
  );
});

Deno.test("permissionInputFor() grants the node port range for health checks, nothing bare", async () => {
  const { defaultConfig } = await import("../../lib/config/defaults.ts");
  const config = { ...defaultConfig("node-a"), manifests: "/srv/manifests" };
  const set = permissionsFor(
    permissionInputFor(config, { readTextFile: () => "", getEnv: () => undefined }),
  );
  assert.equal(set.net.filter((entry) => /^0\.0\.0\.0:3\d{4}$/.test(entry)).length, 2768);
  assert.ok(set.net.includes("0.0.0.0:10256"));
  assert.ok(!set.net.includes("0.0.0.0"));
});

Deno.test("denoFlags() renders one flag per kind and omits empty kinds", () => {
  const flags = denoFlags({ run: ["nft"], net: [], read: ["/a", "/b"], env: ["HOME"], sys: [] });
  assert.deepEqual(flags, [
    "--allow-run=nft",
    "--allow-read=/a,/b",
    "--allow-env=HOME",
    "--ignore-env",
    "--no-prompt",
  ]);
});

Deno.test("hostPortOfURL() fills the scheme's default port", () => {
  assert.equal(hostPortOfURL("https://10.0.0.1:6443"), "10.0.0.1:6443");
  assert.equal(hostPortOfURL("https://api.example"), "api.example:443");
  assert.equal(hostPortOfURL("http://127.0.0.1"), "127.0.0.1:80");
  assert.equal(hostPortOfURL("https://[fd00::1]:6443"), "[fd00::1]:6443");
});

Deno.test("permissionInputFor() finds the apiserver and the files a kubeconfig names", async (t) => {
  const { defaultConfig } = await import("../../lib/config/defaults.ts");
  const kubeconfig = `
apiVersion: v1
kind: Config
current-context: main
contexts:
  - name: other
    context: { cluster: other, user: other }
  - name: main
    context: { cluster: main, user: admin }
clusters:
  - name: other
    cluster: { server: "https://198.51.100.9:6443" }
  - name: main
    cluster: { server: "https://api.cluster.test:6443", certificate-authority: ca.crt }
users:
  - name: admin
    user: { client-certificate: /pki/admin.crt, client-key: /pki/admin.key }
`;
  const env = (vars: Record<string, string> = {}) => ({
    readTextFile: (path: string) => {
      assert.equal(path, "/etc/kproxy/kubeconfig");
      return kubeconfig;
    },
    getEnv: (name: string) => vars[name],
  });
  const base = defaultConfig("node-a");

  await t.step("kubeconfig: its current cluster and files", () => {
    const input = permissionInputFor({ ...base, kubeconfig: "/etc/kproxy/kubeconfig" }, env());
    assert.deepEqual(input.apiservers, ["api.cluster.test:6443"]);
    assert.deepEqual(input.read.filter((p) => p !== "").sort(), [
      "/etc/kproxy/ca.crt",
      "/etc/kproxy/kubeconfig",
      "/pki/admin.crt",
      "/pki/admin.key",
    ]);
  });

  await t.step("--master wins over the kubeconfig's server", () => {
    const input = permissionInputFor(
      { ...base, kubeconfig: "/etc/kproxy/kubeconfig", master: "https://10.0.0.1:443" },
      env(),
    );
    assert.deepEqual(input.apiservers, ["10.0.0.1:443"]);
  });

  await t.step("in-cluster: the service variables and the service account", () => {
    const input = permissionInputFor(
      base,
      env({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }),
    );
    assert.deepEqual(input.apiservers, ["10.96.0.1:443"]);
    assert.ok(input.read.includes("/var/run/secrets/kubernetes.io/serviceaccount"));
  });

  await t.step("manifests only: no apiserver at all", () => {
    const input = permissionInputFor({ ...base, manifests: "/srv/manifests" }, env());
    assert.deepEqual(input.apiservers, []);
    assert.ok(input.read.includes("/srv/manifests"));
  });

  await t.step("nowhere to find an apiserver is an error", () => {
    assert.throws(() => permissionInputFor(base, env()), /Cannot find the apiserver/);
  });
});
