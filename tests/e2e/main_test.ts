import assert from "node:assert/strict";
import { RecordingBackend } from "../support/recording_backend.ts";
import { main, type RunningApp } from "../../lib/commands/app.ts";

/** Inherited environment, minus Rust backtraces (the test environment sets RUST_BACKTRACE=1). */
const QUIET_ENV = { RUST_BACKTRACE: "0" };

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

const MANIFESTS = `
apiVersion: v1
kind: Node
metadata:
  name: node-a
spec:
  podCIDRs: ["10.244.0.0/24"]
status:
  addresses: [{type: InternalIP, address: 192.168.1.10}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.244.0.5]
  conditions: {ready: true}
  nodeName: node-a
`;

async function withManifests<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "kp-shell-" });
  try {
    await Deno.writeTextFile(`${dir}/web.yaml`, MANIFESTS);
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Runs main.ts as `deno task plan` does: read-only permissions, no root needed. */
async function kproxy(
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-read", "--allow-env", "--ignore-env", MAIN, ...args],
    env: QUIET_ENV,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  return {
    code: output.code,
    stdout: decoder.decode(output.stdout),
    stderr: decoder.decode(output.stderr),
  };
}

Deno.test("main.ts --help prints usage and exits 0", async () => {
  const result = await kproxy("--help");
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /^Usage:$/m);
  assert.match(result.stdout, /--proxy-mode/);
});

Deno.test("main.ts --version prints the version from deno.json", async () => {
  const { version } = JSON.parse(
    await Deno.readTextFile(new URL("../../deno.json", import.meta.url)),
  );
  const result = await kproxy("--version");
  assert.equal(result.code, 0, result.stderr);
  assert.equal(
    result.stdout,
    `kproxy ${version} (deno ${Deno.version.deno}, ${Deno.build.target})\n`,
  );
});

Deno.test("main.ts exits 2 naming the bad flag or field", async (t) => {
  const cases: [string[], RegExp][] = [
    [["--no-such-flag"], /^kproxy: .*--no-such-flag/],
    [["--iptables-sync-period=soon"], /^kproxy: .*--iptables-sync-period/],
    [["--cluster-cidr=10.0.0.0/33"], /^kproxy: .*--cluster-cidr/],
    [["--proxy-mode=userspace"], /^kproxy: .*--proxy-mode/],
    [["--pod-bridge-interface=cbr0 -j ACCEPT"], /^kproxy: .*--pod-bridge-interface.*interface/],
  ];
  for (const [args, message] of cases) {
    await t.step(args.join(" "), async () => {
      const result = await kproxy(...args);
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
      assert.equal(result.stdout, "");
    });
  }
});

Deno.test("main() refuses a --manifests directory that does not exist, programming nothing", async (t) => {
  const missing = `${await Deno.makeTempDir({ prefix: "kp-missing-" })}/gone`;
  try {
    for (const command of [["plan"], ["explain", "10.96.0.10:80"], []]) {
      await t.step(command.join(" ") || "run", async () => {
        const backend = new RecordingBackend({ mode: "nftables" });
        const stderr: string[] = [];
        const code = await main([...command, "--manifests", missing, "--hostname-override", "n"], {
          backend,
          setupLogging: false,
          handleSignals: false,
          signal: AbortSignal.timeout(10_000),
          io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
        });
        assert.equal(code, 2, stderr.join(""));
        assert.match(stderr.join(""), /^kproxy: Cannot read --manifests .*gone.*: /);
        assert.equal(backend.requests.length, 0, "no ruleset programmed");
      });
    }
  } finally {
    await Deno.remove(missing.slice(0, -"/gone".length), { recursive: true });
  }
});

Deno.test("main.ts plan prints both families' plans as sorted JSON", async () => {
  await withManifests(async (dir) => {
    const result = await kproxy("plan", "--manifests", dir, "--hostname-override", "node-a");
    assert.equal(result.code, 0, result.stderr);
    const plans = JSON.parse(result.stdout);
    assert.deepEqual(Object.keys(plans), ["ipv4", "ipv6"]);
    assert.equal(plans.ipv4.nodeName, "node-a");
    assert.deepEqual(plans.ipv4.services.map((s: { id: string }) => s.id), [
      "default/web:http/TCP",
    ]);
    assert.deepEqual(plans.ipv6.services, []);
    const keys = Object.keys(plans.ipv4.services[0]);
    assert.deepEqual(keys, [...keys].sort());
  });
});

Deno.test("main.ts plan against the bundled manifests", {
  ignore: !existsSync(new URL("../../scripts/manifests", import.meta.url)),
}, async () => {
  const dir = new URL("../../scripts/manifests", import.meta.url).pathname;
  const result = await kproxy("plan", "--manifests", dir, "--hostname-override", "node-a");
  assert.equal(result.code, 0, result.stderr);
  assert.ok(JSON.parse(result.stdout).ipv4.services.length > 0);
});

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`Condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function existsSync(url: URL): boolean {
  try {
    Deno.statSync(url);
    return true;
  } catch {
    return false;
  }
}

Deno.test("main() runs the proxy in-process: syncs, serves health and metrics, stops on abort", async () => {
  await withManifests(async (dir) => {
    const backend = new RecordingBackend({ mode: "nftables" });
    const controller = new AbortController();
    const stderr: string[] = [];
    let app: RunningApp | undefined;
    let onStarted = () => {};
    const started = new Promise<void>((resolve) => (onStarted = resolve));
    const exitCode = main([
      "--manifests",
      dir,
      "--hostname-override",
      "node-a",
      "--healthz-bind-address=127.0.0.1:0",
      "--metrics-bind-address=127.0.0.1:0",
    ], {
      backend,
      signal: controller.signal,
      handleSignals: false,
      setupLogging: false,
      serviceHealthHostname: "127.0.0.1",
      io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
      onStarted: (running) => {
        app = running;
        onStarted();
      },
    });
    await started;
    try {
      await waitFor(() => backend.applied.length > 0, 5_000);
      assert.equal(backend.requests[0]?.full, true);
      assert.deepEqual([...backend.requests[0]!.changed], ["default/web:http/TCP"]);
      assert.equal(backend.syncsBeforeWarmUp, 0, "warmed up while the first lists ran");
      assert.ok(app?.proxier.lastSynced);

      const healthPort = app!.healthServer!.addr.port;
      const healthz = await fetch(`http://127.0.0.1:${healthPort}/healthz`);
      assert.equal(healthz.status, 200);
      assert.equal((await healthz.json()).nodeEligible, true);

      const metricsPort = app!.metricsServer!.addr.port;
      const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      assert.match(
        metrics,
        /^kubeproxy_sync_full_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} 1$/m,
      );

      await Deno.writeTextFile(
        `${dir}/web.yaml`,
        MANIFESTS.replace("- addresses: [10.244.0.5]", "- addresses: [10.244.0.6]"),
      );
      await waitFor(() => backend.applied.length >= 2, 10_000);
      const partial = backend.requests[1]!;
      assert.equal(partial.full, false);
      assert.deepEqual([...partial.changed], ["default/web:http/TCP"]);
      assert.deepEqual(
        partial.plans[0]?.services[0]?.internal.endpoints.map((e) => e.ip),
        ["10.244.0.6"],
      );
    } finally {
      controller.abort();
    }
    assert.equal(await exitCode, 0, stderr.join(""));
    assert.equal(backend.cleanups, 0);
  });
});

Deno.test("main() at -v=0 prints concise start-up lines and nothing else on a healthy start", async () => {
  await withManifests(async (dir) => {
    const backend = new RecordingBackend({ mode: "nftables" });
    const controller = new AbortController();
    const lines: string[] = [];
    let app: RunningApp | undefined;
    let onStarted = () => {};
    const started = new Promise<void>((resolve) => (onStarted = resolve));
    const exitCode = main([
      "--manifests",
      dir,
      "--hostname-override",
      "node-a",
      "--healthz-bind-address=127.0.0.1:0",
      "--metrics-bind-address=127.0.0.1:0",
      "-v=0",
    ], {
      backend,
      signal: controller.signal,
      handleSignals: false,
      logSink: (line) => lines.push(line),
      serviceHealthHostname: "127.0.0.1",
      io: { stdout: () => {}, stderr: (text) => lines.push(text) },
      onStarted: (running) => {
        app = running;
        onStarted();
      },
    });
    await started;
    await waitFor(() => lines.some((line) => /Programmed the initial/.test(line)), 5_000);
    controller.abort();
    assert.equal(await exitCode, 0, lines.join("\n"));
    const health = `127.0.0.1:${app!.healthServer!.addr.port}`;
    const metrics = `127.0.0.1:${app!.metricsServer!.addr.port}`;
    const expected = [
      /^I\d{4} [\d:.]+ main\] "Starting kproxy" version=\d+\.\d+\.\d+\S* mode=nftables node=node-a families=IPv4,IPv6$/,
      new RegExp(`^I.* main\\] "Serving health checks on ${health} \\(/healthz, /livez\\)"$`),
      new RegExp(`^I.* main\\] "Serving metrics on ${metrics} \\(/metrics, /statusz\\)"$`),
      /^I.* main\] "Node node-a IPs" nodeIPs=\["192\.168\.1\.10"\] families=IPv4$/,
      /^I.* main\] "Programmed the initial nftables rules: 1 service ports" durationMs=\d+ servicePorts=IPv4:1,IPv6:0$/,
      /^I.* main\] "Stopping; the installed rules stay in place"$/,
    ];
    assert.equal(lines.length, expected.length, lines.join("\n"));
    expected.forEach((pattern, i) => assert.match(lines[i]!, pattern));
  });
});

Deno.test("main() --cleanup cleans up the selected backend and exits 0", async () => {
  const backend = new RecordingBackend({ mode: "iptables" });
  const code = await main(["--cleanup", "--proxy-mode=iptables", "--hostname-override=node-a"], {
    backend,
    setupLogging: false,
    io: { stdout: () => {}, stderr: () => {} },
  });
  assert.equal(code, 0);
  assert.equal(backend.cleanups, 1);
});

function canRunKernelTests(tools: string[]): string | undefined {
  if (Deno.build.os !== "linux" || Deno.uid() !== 0) return "needs root on Linux";
  for (const tool of ["ip", ...tools]) {
    const found = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].some((dir) =>
      existsSync(new URL(`file://${dir}/${tool}`))
    );
    if (!found) return `${tool} is not installed`;
  }
  return undefined;
}

async function inNamespace(ns: string, ...args: string[]): Promise<string> {
  const output = await new Deno.Command("ip", { args: ["netns", "exec", ns, ...args] }).output();
  if (!output.success) {
    throw new Error(
      `Cannot run ${args.join(" ")} in ${ns}: ${new TextDecoder().decode(output.stderr)}`,
    );
  }
  return new TextDecoder().decode(output.stdout);
}

/** How to read one mode's rules in a namespace and what shows the demo service is there. */
const KERNEL_MODES: { mode: string; tools: string[]; dump: string[]; programmed: RegExp }[] = [
  {
    mode: "iptables",
    tools: ["iptables-save", "iptables-restore"],
    dump: ["iptables-save"],
    programmed: /-d 10\.96\.0\.10\/32 .*--dport 80/,
  },
  {
    mode: "nftables",
    tools: ["nft"],
    dump: ["nft", "list", "ruleset"],
    programmed: /10\.96\.0\.10 \. tcp \. 80/,
  },
];

type KernelMode = (typeof KERNEL_MODES)[number];

/** Flags that run main.ts in `mode` on the manifests in `dir`, servers on ephemeral ports. */
function nodeFlags(mode: string, dir: string): string[] {
  return [
    `--proxy-mode=${mode}`,
    "--conntrack-max-per-core=0",
    ...["--manifests", dir, "--hostname-override=node-a"],
    "--healthz-bind-address=127.0.0.1:0",
    "--metrics-bind-address=127.0.0.1:0",
  ];
}

/** `main.ts ARGS` inside network namespace `ns`, output piped. */
function kproxyIn(ns: string, ...args: string[]): Deno.Command {
  return new Deno.Command("ip", {
    args: ["netns", "exec", ns, Deno.execPath(), "run", "-A", MAIN, ...args],
    env: QUIET_ENV,
    stdout: "piped",
    stderr: "piped",
  });
}

/** Polls `ns`'s rules until `mode` shows the demo service; throws after 15 s. */
async function waitProgrammed(ns: string, mode: KernelMode): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!mode.programmed.test(await inNamespace(ns, ...mode.dump))) {
    if (Date.now() > deadline) throw new Error(`${mode.mode} mode did not program`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

for (const kernelMode of KERNEL_MODES) {
  const { mode, tools, dump, programmed } = kernelMode;
  const skip = canRunKernelTests(tools);
  if (skip) console.log(`Skipping the ${mode} kernel e2e test of main.ts: ${skip}`);
  Deno.test({
    name:
      `main.ts runs in ${mode} mode, leaves its rules on SIGTERM and removes them with --cleanup`,
    ignore: skip !== undefined,
    async fn() {
      const ns = `kp-shell-${crypto.randomUUID().slice(0, 8)}`;
      await new Deno.Command("ip", { args: ["netns", "add", ns] }).output();
      try {
        await inNamespace(ns, "ip", "link", "set", "lo", "up");
        await withManifests(async (dir) => {
          const flags = nodeFlags(mode, dir);
          const child = kproxyIn(ns, ...flags).spawn();
          const output = child.output();
          try {
            await waitProgrammed(ns, kernelMode);
          } catch (error) {
            child.kill("SIGKILL");
            const { stderr } = await output;
            throw new Error(`${error}: ${new TextDecoder().decode(stderr)}`);
          }
          child.kill("SIGTERM");
          const { code, stderr } = await output;
          assert.equal(code, 0, new TextDecoder().decode(stderr));
          assert.match(await inNamespace(ns, ...dump), programmed);

          const cleanup = await kproxyIn(ns, "--cleanup", ...flags).output();
          assert.equal(cleanup.code, 0, new TextDecoder().decode(cleanup.stderr));
          assert.doesNotMatch(await inNamespace(ns, ...dump), /10\.96\.0\.10/);
        });
      } finally {
        await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
      }
    },
  });
}

const switchSkip = canRunKernelTests(["nft", "iptables-save", "iptables-restore"]);
if (switchSkip) console.log(`Skipping the mode-switch test of main.ts: ${switchSkip}`);
Deno.test({
  name: "main.ts removes the rules another mode left behind when it starts",
  ignore: switchSkip !== undefined,
  async fn() {
    const ns = `kp-shell-${crypto.randomUUID().slice(0, 8)}`;
    await new Deno.Command("ip", { args: ["netns", "add", ns] }).output();
    try {
      await inNamespace(ns, "ip", "link", "set", "lo", "up");
      await withManifests(async (dir) => {
        const runUntilProgrammed = async (mode: KernelMode) => {
          const child = kproxyIn(ns, ...nodeFlags(mode.mode, dir)).spawn();
          const output = child.output();
          try {
            await waitProgrammed(ns, mode);
          } finally {
            child.kill("SIGTERM");
            await output;
          }
        };
        const [iptables, nftables] = KERNEL_MODES;
        await runUntilProgrammed(iptables!);
        assert.match(await inNamespace(ns, "iptables-save"), /KUBE-SERVICES/);
        await runUntilProgrammed(nftables!);
        assert.doesNotMatch(await inNamespace(ns, "iptables-save"), /KUBE-SERVICES|10\.96\.0\.10/);
        await runUntilProgrammed(iptables!);
        assert.doesNotMatch(await inNamespace(ns, "nft", "list", "ruleset"), /kproxy/);
      });
    } finally {
      await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
    }
  },
});

const TAMPER: Record<string, string[]> = {
  nftables: [
    "nft",
    "delete",
    "element",
    "ip",
    "kproxy",
    "service-ips",
    "{ 10.96.0.10 . tcp . 80 }",
  ],
  iptables: ["iptables", "-t", "nat", "-F", "KUBE-SERVICES"],
};

for (const mode of KERNEL_MODES) {
  const skip = canRunKernelTests(mode.tools);
  if (skip) console.log(`Skipping the ${mode.mode} diff test of main.ts: ${skip}`);
  Deno.test({
    name: `main.ts diff shows a ${mode.mode} change made behind kproxy's back, per service`,
    ignore: skip !== undefined,
    async fn() {
      const ns = `kp-shell-${crypto.randomUUID().slice(0, 8)}`;
      await new Deno.Command("ip", { args: ["netns", "add", ns] }).output();
      try {
        await inNamespace(ns, "ip", "link", "set", "lo", "up");
        await withManifests(async (dir) => {
          const flags = nodeFlags(mode.mode, dir);
          const child = kproxyIn(ns, ...flags).spawn();
          const output = child.output();
          try {
            await waitProgrammed(ns, mode);
          } finally {
            child.kill("SIGTERM");
            await output;
          }
          const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
          const inSync = await kproxyIn(ns, "diff", ...flags).output();
          assert.equal(inSync.code, 0, decode(inSync.stdout) + decode(inSync.stderr));
          assert.match(decode(inSync.stdout), /^in sync/);

          await inNamespace(ns, ...TAMPER[mode.mode]!);
          const drifted = await kproxyIn(ns, "diff", ...flags).output();
          const text = decode(drifted.stdout);
          assert.equal(drifted.code, 1, text + decode(drifted.stderr));
          assert.match(text, /^service default\/web:/m);
          assert.match(text, /\+ .*10\.96\.0\.10/);
          const namespaces = decode(
            (await new Deno.Command("ip", { args: ["netns", "list"] })
              .output()).stdout,
          );
          assert.doesNotMatch(namespaces, /kproxy-diff-/, "the scratch namespace is deleted");
        });
      } finally {
        await new Deno.Command("ip", { args: ["netns", "del", ns] }).output();
      }
    },
  });
}
