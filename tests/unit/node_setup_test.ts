/**
 * kube-proxy 1.36's node set-up at start: conntrack sysctls
 * (pkg/proxy/conntrack/sysctls.go) and the OOM score (server.go Run).
 */
import assert from "node:assert/strict";
import { conntrackSysctls } from "../../lib/core/conntrack_sysctls.ts";
import { countCpuList, ONLINE_CPUS_FILE, setUpNode } from "../../lib/shell/node_setup.ts";
import { parseCommandLine } from "../../lib/config/command_line.ts";
import { FakeExecutor, type RecordedCommand } from "../support/fake_executor.ts";

const DEFAULTS = {
  maxPerCore: 32768,
  min: 131072,
  tcpEstablishedTimeoutMs: 86_400_000,
  tcpCloseWaitTimeoutMs: 3_600_000,
  tcpBeLiberal: false,
  udpTimeoutMs: 0,
  udpStreamTimeoutMs: 0,
};

Deno.test("conntrackSysctls() sets what kube-proxy sets, in its order", async (t) => {
  const cases: [string, Partial<typeof DEFAULTS>, number, [string, string, string][]][] = [
    ["defaults on 2 CPUs: the minimum wins", {}, 2, [
      ["net.netfilter.nf_conntrack_max", "131072", "set"],
      ["net.netfilter.nf_conntrack_buckets", "32768", "raise"],
      ["net.netfilter.nf_conntrack_tcp_timeout_established", "86400", "set"],
      ["net.netfilter.nf_conntrack_tcp_timeout_close_wait", "3600", "set"],
    ]],
    ["defaults on 8 CPUs: per core", {}, 8, [
      ["net.netfilter.nf_conntrack_max", "262144", "set"],
      ["net.netfilter.nf_conntrack_buckets", "65536", "raise"],
      ["net.netfilter.nf_conntrack_tcp_timeout_established", "86400", "set"],
      ["net.netfilter.nf_conntrack_tcp_timeout_close_wait", "3600", "set"],
    ]],
    ["capped at 1M on 64 CPUs", {}, 64, [
      ["net.netfilter.nf_conntrack_max", "1048576", "set"],
      ["net.netfilter.nf_conntrack_buckets", "262144", "raise"],
      ["net.netfilter.nf_conntrack_tcp_timeout_established", "86400", "set"],
      ["net.netfilter.nf_conntrack_tcp_timeout_close_wait", "3600", "set"],
    ]],
    [
      "maxPerCore 0 leaves the limit, and zero timeouts leave theirs",
      {
        maxPerCore: 0,
        tcpEstablishedTimeoutMs: 0,
        tcpCloseWaitTimeoutMs: 0,
      },
      2,
      [],
    ],
    [
      "liberal TCP and UDP timeouts, whole seconds",
      {
        maxPerCore: 0,
        tcpEstablishedTimeoutMs: 0,
        tcpCloseWaitTimeoutMs: 1_500,
        tcpBeLiberal: true,
        udpTimeoutMs: 30_000,
        udpStreamTimeoutMs: 120_000,
      },
      2,
      [
        ["net.netfilter.nf_conntrack_tcp_timeout_close_wait", "1", "set"],
        ["net.netfilter.nf_conntrack_tcp_be_liberal", "1", "set"],
        ["net.netfilter.nf_conntrack_udp_timeout", "30", "set"],
        ["net.netfilter.nf_conntrack_udp_timeout_stream", "120", "set"],
      ],
    ],
  ];
  for (const [name, conntrack, cpus, want] of cases) {
    await t.step(name, () => {
      const got = conntrackSysctls({ ...DEFAULTS, ...conntrack }, cpus);
      assert.deepEqual(got.map((s) => [s.key, s.value, s.only]), want);
    });
  }
});

/** A kernel of sysctls behind `sysctl -n` / `sysctl -w`; keys in `readOnly` refuse writes as procps does (exit 0, stderr). */
function kernel(values: Record<string, string>, readOnly: string[] = []) {
  return new FakeExecutor((command: RecordedCommand) => {
    if (command.program === "choom") return { code: 0, stdout: "", stderr: "" };
    const [flag, arg = ""] = command.args;
    if (flag === "-n") return { code: 0, stdout: `${values[arg] ?? ""}\n`, stderr: "" };
    const [key = "", value = ""] = arg.split("=");
    if (readOnly.includes(key)) {
      return { code: 0, stdout: "", stderr: `sysctl: setting key "${key}": Invalid argument\n` };
    }
    values[key] = value;
    return { code: 0, stdout: `${key} = ${value}\n`, stderr: "" };
  });
}

function config(argv: string[] = []) {
  return parseCommandLine(argv, { readTextFile: () => "", hostname: () => "node-a" }).config;
}

const writes = (executor: FakeExecutor) =>
  executor.calls.filter((c) => c.program === "sysctl" && c.args[0] === "-w").map((c) => c.args[1]);

Deno.test("setUpNode() writes only the sysctls that differ, and raises buckets only", async () => {
  const values = {
    "net.netfilter.nf_conntrack_max": "131072",
    "net.netfilter.nf_conntrack_buckets": "65536",
    "net.netfilter.nf_conntrack_tcp_timeout_established": "432000",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait": "60",
  };
  const executor = kernel(values);
  await setUpNode({ config: config(), executor, cpus: 2, pid: 42 });
  assert.deepEqual(writes(executor), [
    "net.netfilter.nf_conntrack_tcp_timeout_established=86400",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait=3600",
  ]);
});

Deno.test("setUpNode() fails as kube-proxy does when a conntrack sysctl cannot be set", async () => {
  const executor = kernel({ "net.netfilter.nf_conntrack_max": "262144" }, [
    "net.netfilter.nf_conntrack_max",
  ]);
  await assert.rejects(
    setUpNode({ config: config(), executor, cpus: 2, pid: 42 }),
    /Cannot set conntrack parameters from the configuration: .*nf_conntrack_max.*Invalid argument/,
  );
});

Deno.test("setUpNode() applies the flags: --conntrack-max-per-core=0 and zero timeouts touch nothing", async () => {
  const executor = kernel({});
  await setUpNode({
    config: config([
      "--conntrack-max-per-core=0",
      "--conntrack-tcp-timeout-established=0s",
      "--conntrack-tcp-timeout-close-wait=0s",
    ]),
    executor,
    cpus: 2,
    pid: 42,
  });
  assert.deepEqual(writes(executor), []);
});

Deno.test("setUpNode() sets the OOM score with choom on its own pid; a failure is only logged", async (t) => {
  await t.step("the default, -999", async () => {
    const executor = kernel({});
    await setUpNode({ config: config(["--conntrack-max-per-core=0"]), executor, cpus: 2, pid: 42 });
    const choom = executor.calls.filter((c) => c.program === "choom");
    assert.deepEqual(choom.map((c) => c.args), [["-n", "-999", "-p", "42"]]);
  });
  await t.step("--oom-score-adj", async () => {
    const executor = kernel({});
    await setUpNode({
      config: config(["--conntrack-max-per-core=0", "--oom-score-adj=-500"]),
      executor,
      cpus: 2,
      pid: 7,
    });
    assert.deepEqual(executor.calls.find((c) => c.program === "choom")?.args, [
      "-n",
      "-500",
      "-p",
      "7",
    ]);
  });
  await t.step("choom refused", async () => {
    const executor = new FakeExecutor((c) =>
      c.program === "choom"
        ? {
          code: 1,
          stdout: "",
          stderr: "choom: failed to set score adjust value: Permission denied",
        }
        : { code: 0, stdout: "0\n", stderr: "" }
    );
    await setUpNode({
      config: config([
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0s",
        "--conntrack-tcp-timeout-close-wait=0s",
      ]),
      executor,
      cpus: 2,
      pid: 42,
    });
    assert.equal(executor.calls.filter((c) => c.program === "choom").length, 1);
  });
});

Deno.test("main() stops with status 1 when the node cannot be set up, before proxying", async () => {
  const { main } = await import("../../lib/commands/app.ts");
  const { RecordingBackend } = await import("../support/recording_backend.ts");
  const stderr: string[] = [];
  let seen: number | undefined;
  const code = await main(["--proxy-mode=nftables", "--conntrack-min=1000"], {
    backend: new RecordingBackend({ mode: "nftables" }),
    setUpNode: (config) => {
      seen = config.conntrack.min;
      return Promise.reject(
        new Error("Cannot set conntrack parameters from the configuration: no"),
      );
    },
    handleSignals: false,
    setupLogging: false,
    env: { readTextFile: () => "", hostname: () => "node-a" },
    io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
  });
  assert.equal(code, 1);
  assert.equal(seen, 1000);
  assert.match(stderr.join(""), /Cannot set conntrack parameters/);
});

/** Servers on loopback ports of the kernel's choosing: a test takes no node's port. */
const LOOPBACK_SERVERS = [
  "--healthz-bind-address=127.0.0.1:0",
  "--metrics-bind-address=127.0.0.1:0",
];

Deno.test("main() lists while the node is set up; the first sync waits for the set-up", async () => {
  const { main } = await import("../../lib/commands/app.ts");
  const { RecordingBackend } = await import("../support/recording_backend.ts");
  const backend = new RecordingBackend({ mode: "nftables" });
  const controller = new AbortController();
  let finishSetUp = () => {};
  const setUp = new Promise<void>((resolve) => (finishSetUp = resolve));
  let listed = () => {};
  const listing = new Promise<void>((resolve) => (listed = resolve));
  const source = {
    start(listener: (event: { type: "synced" }) => void, signal: AbortSignal) {
      listener({ type: "synced" });
      listed();
      return new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
    },
  };
  const exitCode = main(
    ["--proxy-mode=nftables", "--hostname-override=node-a", ...LOOPBACK_SERVERS],
    {
      backend,
      source,
      setUpNode: () => setUp,
      serviceHealthHostname: "127.0.0.1",
      signal: controller.signal,
      handleSignals: false,
      setupLogging: false,
      env: {
        readTextFile: () => "",
        hostname: () => "node-a",
      },
      io: { stdout: () => {}, stderr: () => {} },
    } as Parameters<typeof main>[1],
  );
  try {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      listing,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("the lists waited for the node set-up")), 5000);
      }),
    ]).finally(() => clearTimeout(timer));
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(backend.applied.length, 0, "no sync before the node is set up");
    finishSetUp();
    const deadline = Date.now() + 5000;
    while (backend.applied.length === 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    assert.equal(backend.applied.length, 1, "the first sync once the node is set up");
  } finally {
    finishSetUp();
    controller.abort();
  }
  assert.equal(await exitCode, 0);
});

Deno.test("main() stops with status 1 when the node set-up fails while the lists run", async () => {
  const { main } = await import("../../lib/commands/app.ts");
  const { RecordingBackend } = await import("../support/recording_backend.ts");
  const backend = new RecordingBackend({ mode: "nftables" });
  const stderr: string[] = [];
  let failSetUp: (error: Error) => void = () => {};
  const setUp = new Promise<void>((_, reject) => (failSetUp = reject));
  const source = {
    start(listener: (event: { type: "synced" }) => void, signal: AbortSignal) {
      listener({ type: "synced" });
      setTimeout(
        () => failSetUp(new Error("Cannot set conntrack parameters from the configuration: no")),
        20,
      );
      return new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
    },
  };
  const code = await main(
    ["--proxy-mode=nftables", "--hostname-override=node-a", ...LOOPBACK_SERVERS],
    {
      backend,
      source,
      setUpNode: () => setUp,
      serviceHealthHostname: "127.0.0.1",
      handleSignals: false,
      setupLogging: false,
      env: {
        readTextFile: () => "",
        hostname: () => "node-a",
      },
      io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
    } as Parameters<typeof main>[1],
  );
  assert.equal(code, 1);
  assert.match(stderr.join(""), /Cannot set conntrack parameters/);
  assert.equal(backend.applied.length, 0, "nothing programmed on a node that could not be set up");
});

Deno.test("main() --init-only sets the node up and exits 0 without proxying", async () => {
  const { main } = await import("../../lib/commands/app.ts");
  let calls = 0;
  const code = await main(["--init-only", "--master=http://127.0.0.1:1"], {
    setUpNode: () => (calls++, Promise.resolve()),
    handleSignals: false,
    setupLogging: false,
    env: { readTextFile: () => "", hostname: () => "node-a" },
    io: { stdout: () => {}, stderr: () => {} },
  });
  assert.equal(code, 0);
  assert.equal(calls, 1);
});

Deno.test("countCpuList() counts a kernel CPU list, as cadvisor counts the host's CPUs", () => {
  const cases: [string, number | undefined][] = [
    ["0\n", 1],
    ["0-3\n", 4],
    ["0-3,6,8-9", 7],
    ["", undefined],
    ["0-", undefined],
    ["3-1", undefined],
    ["a", undefined],
  ];
  for (const [list, want] of cases) assert.equal(countCpuList(list), want, JSON.stringify(list));
});

Deno.test("the host's online CPU list is where node_setup reads it, and counts them all", {
  ignore: Deno.build.os !== "linux",
}, async () => {
  // Deno refuses /sys to a process without every permission: read it as root would.
  const output = await new Deno.Command("cat", { args: [ONLINE_CPUS_FILE] }).output();
  const count = countCpuList(new TextDecoder().decode(output.stdout));
  assert.ok(count !== undefined && count >= navigator.hardwareConcurrency, `${count}`);
});
