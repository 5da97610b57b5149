import assert from "node:assert/strict";
import {
  createBackend,
  isProxyMode,
  modeOf,
  programsOf,
  PROXY_MODES,
} from "../../backends/registry.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { LINUX_PROGRAMS, MODE_PROGRAMS, permissionsFor } from "../../lib/shell/permissions.ts";
import { KPROXY_COMMAND_POLICY } from "../../lib/shell/command_policy.ts";
import { FakeExecutor } from "../support/fake_executor.ts";

const ROOT = new URL("../../", import.meta.url);

async function sourceFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(new URL(dir, ROOT))) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) files.push(...await sourceFiles(path));
    else if (entry.name.endsWith(".ts")) files.push(path);
  }
  return files;
}

Deno.test("registry: PROXY_MODES is the only list of mode names in lib/, backends/ and main.ts", async () => {
  const name = `"(?:${PROXY_MODES.join("|")})"`;
  // Two mode names side by side in an array literal, or a ProxyMode written out.
  const list = new RegExp(`\\[\\s*${name}\\s*,\\s*${name}|type ProxyMode =`);
  const found: string[] = [];
  for (const path of [...await sourceFiles("lib"), ...await sourceFiles("backends"), "main.ts"]) {
    if (path === "backends/registry.ts") continue;
    const text = await Deno.readTextFile(new URL(path, ROOT));
    if (list.test(text)) found.push(path);
  }
  assert.deepEqual(found, []);
});

Deno.test("registry: every entry is complete and consistent", async () => {
  for (const mode of PROXY_MODES) {
    const entry = modeOf(mode);
    assert.ok(entry.programs.length > 0, `${mode} runs programs`);
    for (const removed of entry.takeover.removes) {
      assert.ok(isProxyMode(removed), `${mode} removes the known mode ${removed}`);
      assert.notEqual(removed, mode, `${mode} does not remove itself`);
      assert.equal(modeOf(removed).platform, entry.platform, `${mode} removes ${removed}`);
    }
    assert.equal(programsOf(mode).includes("conntrack"), entry.reconcilesConntrack, mode);
    const config = { ...defaultConfig("node-a"), proxyMode: mode };
    config.winkernel = { ...config.winkernel, networkName: "cbr0" };
    const backend = await createBackend(mode, { executor: new FakeExecutor(), config });
    assert.equal(backend.mode, mode);
    assert.equal(Boolean(backend.inspect), mode === "nftables" || mode === "iptables", mode);
    if (entry.platform === "linux") {
      for (const program of programsOf(mode)) {
        assert.ok(Object.hasOwn(KPROXY_COMMAND_POLICY, program), `${program} has a command policy`);
      }
    }
  }
  assert.equal(isProxyMode("userspace"), false);
  assert.equal(isProxyMode("toString"), false);
});

Deno.test("registry: permissions and the Executor's programs derive from the entries", () => {
  for (const mode of PROXY_MODES) {
    assert.deepEqual(MODE_PROGRAMS[mode], programsOf(mode));
    const run = permissionsFor({ mode, apiservers: [], listen: [], read: [] }).run;
    assert.deepEqual(run, [...new Set(programsOf(mode))].sort());
  }
  const linux = PROXY_MODES.filter((mode) => modeOf(mode).platform === "linux");
  assert.deepEqual(LINUX_PROGRAMS, [...new Set(linux.flatMap(programsOf))].sort());
  for (const program of ["nft", "iptables-restore", "ip6tables-save", "ipvsadm", "sysctl"]) {
    assert.ok(LINUX_PROGRAMS.includes(program), program);
  }
  assert.deepEqual(programsOf("kernelspace"), ["powershell.exe", "pwsh"]);
});

Deno.test("registry: each Linux mode removes the other two and keeps what it uses itself", () => {
  for (const mode of ["nftables", "iptables", "ipvs"] as const) {
    const others = ["nftables", "iptables", "ipvs"].filter((other) => other !== mode);
    assert.deepEqual([...modeOf(mode).takeover.removes].sort(), others.sort());
  }
  assert.deepEqual(modeOf("nftables").takeover.replacesTables, ["kube-proxy"]);
  assert.equal(modeOf("ipvs").takeover.usesChain?.("nat", "KUBE-SERVICES"), true);
  assert.equal(modeOf("ipvs").takeover.usesChain?.("filter", "KUBE-SERVICES"), false);
  assert.equal(modeOf("iptables").takeover.usesChain?.("nat", "KUBE-SVC-XPGD46QRK7WJZT7O"), true);
  assert.deepEqual(modeOf("kernelspace").takeover.removes, []);
});
