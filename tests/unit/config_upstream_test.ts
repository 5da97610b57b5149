/**
 * kube-proxy 1.36's meaning of its configuration (cmd/kube-proxy/app/options.go,
 * server_linux.go platformApplyDefaults, pkg/proxy/apis/config/v1alpha1/conversion.go),
 * setting by setting.
 */
import assert from "node:assert/strict";
import { parseCommandLine } from "../../lib/config/command_line.ts";
import { effectiveSyncPeriods } from "../../lib/config/defaults.ts";
import { helpText } from "../../lib/config/help.ts";
import { ConfigError } from "../../lib/config/values.ts";

const HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

function parse(argv: string[], file?: string) {
  const files: Record<string, string> = file === undefined ? {} : { "/cfg.yaml": file };
  return parseCommandLine(file === undefined ? argv : ["--config=/cfg.yaml", ...argv], {
    readTextFile: (path) => files[path]!,
    hostname: () => "node-a",
  });
}

Deno.test("proxy mode: empty means iptables on Linux, as kube-proxy's platformApplyDefaults", async (t) => {
  const cases: [string, string[], string | undefined, string][] = [
    ["no flag, no file", [], undefined, "iptables"],
    ["--proxy-mode=''", ["--proxy-mode="], undefined, "iptables"],
    ["mode: '' (kubeadm)", [], `${HEADER}mode: ""\n`, "iptables"],
    ["mode: nftables", [], `${HEADER}mode: nftables\n`, "nftables"],
    ["--proxy-mode=ipvs", ["--proxy-mode=ipvs"], undefined, "ipvs"],
  ];
  for (const [name, argv, file, want] of cases) {
    await t.step(name, () => assert.equal(parse(argv, file).config.proxyMode, want));
  }
});

Deno.test("nodePortAddresses: only the nftables mode defaults to primary", async (t) => {
  const cases: [string, string[], string | undefined, string[]][] = [
    ["iptables (default mode)", [], undefined, []],
    ["ipvs", ["--proxy-mode=ipvs"], undefined, []],
    ["nftables", ["--proxy-mode=nftables"], undefined, ["primary"]],
    ["nftables, empty in the file", [], `${HEADER}mode: nftables\nnodePortAddresses: []\n`, [
      "primary",
    ]],
    ["iptables, CIDRs", ["--nodeport-addresses=10.0.0.0/8"], undefined, ["10.0.0.0/8"]],
    ["nftables, CIDRs", ["--proxy-mode=nftables", "--nodeport-addresses=10.0.0.0/8"], undefined, [
      "10.0.0.0/8",
    ]],
  ];
  for (const [name, argv, file, want] of cases) {
    await t.step(name, () => assert.deepEqual(parse(argv, file).config.nodePortAddresses, want));
  }
});

Deno.test("--help says what an empty --nodeport-addresses means in each mode", () => {
  const flat = helpText().replace(/\s+/g, " ");
  const help = flat.slice(flat.indexOf("--nodeport-addresses"), flat.indexOf("--masquerade-all"));
  assert.match(
    help,
    /Empty: all local IPs in the iptables and ipvs modes, 'primary' in the nftables/,
  );
  assert.match(help, /\(default \[\]\)/);
});

Deno.test("sync periods: --iptables-*-sync-period reach every mode but ipvs, as in options.go", async (t) => {
  const cases: [string, string[], string | undefined, [number, number]][] = [
    [
      "nftables",
      ["--proxy-mode=nftables", "--iptables-sync-period=10s", "--iptables-min-sync-period=2s"],
      undefined,
      [10_000, 2_000],
    ],
    ["iptables", ["--iptables-sync-period=10s", "--iptables-min-sync-period=2s"], undefined, [
      10_000,
      2_000,
    ]],
    ["ipvs ignores them", ["--proxy-mode=ipvs", "--iptables-sync-period=10s"], undefined, [
      30_000,
      0,
    ]],
    [
      "ipvs",
      ["--proxy-mode=ipvs", "--ipvs-sync-period=10s", "--ipvs-min-sync-period=2s"],
      undefined,
      [10_000, 2_000],
    ],
    ["nftables ignores --ipvs-*", ["--proxy-mode=nftables", "--ipvs-sync-period=10s"], undefined, [
      30_000,
      1_000,
    ]],
    [
      "file, mode ''",
      [],
      `${HEADER}mode: ""\niptables:\n  syncPeriod: 10s\n  minSyncPeriod: 2s\n`,
      [10_000, 2_000],
    ],
    [
      "file, nftables section",
      [],
      `${HEADER}mode: nftables\nnftables:\n  syncPeriod: 10s\n  minSyncPeriod: 2s\n`,
      [10_000, 2_000],
    ],
    ["file, ipvs: minSyncPeriod has no default", [], `${HEADER}mode: ipvs\n`, [30_000, 0]],
  ];
  for (const [name, argv, file, [sync, min]] of cases) {
    await t.step(name, () => {
      const periods = effectiveSyncPeriods(parse(argv, file).config);
      assert.deepEqual(periods, { syncPeriodMs: sync, minSyncPeriodMs: min });
    });
  }
});

Deno.test("sync periods: a top-level syncPeriod is not a v1alpha1 field: logged and ignored", () => {
  const line = parse([], `${HEADER}syncPeriod: 5s\nminSyncPeriod: 5s\n`);
  assert.deepEqual(effectiveSyncPeriods(line.config), {
    syncPeriodMs: 30_000,
    minSyncPeriodMs: 1_000,
  });
  assert.ok(line.warnings.some((w) => w.includes("syncPeriod")), line.warnings.join("\n"));
});

Deno.test("sync periods: the mode's minSyncPeriod may not exceed its syncPeriod", () => {
  assert.throws(
    () =>
      parse([
        "--proxy-mode=nftables",
        "--iptables-sync-period=1s",
        "--iptables-min-sync-period=2s",
      ]),
    (error: unknown) =>
      error instanceof ConfigError && /--iptables-min-sync-period/.test(error.message),
  );
});

Deno.test("masqueradeAll: the file's mode picks the section, as conversion.go", async (t) => {
  const cases: [string, string, boolean][] = [
    ["iptables section, mode ''", `mode: ""\niptables:\n  masqueradeAll: true\n`, true],
    ["nftables section, mode ''", `mode: ""\nnftables:\n  masqueradeAll: true\n`, false],
    ["nftables section, mode nftables", `mode: nftables\nnftables:\n  masqueradeAll: true\n`, true],
    [
      "iptables section, mode nftables",
      `mode: nftables\niptables:\n  masqueradeAll: true\n`,
      false,
    ],
    ["iptables section, mode ipvs", `mode: ipvs\niptables:\n  masqueradeAll: true\n`, true],
  ];
  for (const [name, body, want] of cases) {
    await t.step(name, () => assert.equal(parse([], HEADER + body).config.masqueradeAll, want));
  }
});

Deno.test("an unknown field in the file is logged and ignored, as kube-proxy's lenient decoding", () => {
  const line = parse([], `${HEADER}noSuchField: 1\niptables:\n  alsoNot: true\n`);
  assert.ok(line.warnings.some((w) => w.includes("noSuchField")), line.warnings.join("\n"));
  assert.ok(line.warnings.some((w) => w.includes("iptables.alsoNot")), line.warnings.join("\n"));
});

Deno.test("--detect-local-mode='' means ClusterCIDR, as platformApplyDefaults", () => {
  assert.equal(parse(["--detect-local-mode="]).config.detectLocalMode, "ClusterCIDR");
});

Deno.test("flags kube-proxy 1.36 has are accepted; ones it no longer has are refused", async (t) => {
  for (
    const flag of [
      "--log-flush-frequency=5s",
      "--logging-format=text",
      "--log-text-split-stream",
      "--log-json-split-stream=false",
      "--log-text-info-buffer-size=0",
      "--log-json-info-buffer-size=0",
      "--vmodule=proxier=4",
      "--windows-service=false",
      "--boot-id-file=/proc/sys/kernel/random/boot_id",
      "--machine-id-file=/etc/machine-id",
    ]
  ) {
    await t.step(flag, () => {
      const line = parse([flag]);
      assert.ok(line.warnings.some((w) => w.includes(flag.split("=")[0]!)), line.warnings.join());
    });
  }
  await t.step("--proxy-port-range (removed from kube-proxy)", () => {
    assert.throws(() => parse(["--proxy-port-range=30000-31000"]), ConfigError);
  });
});

Deno.test("--healthz-port and --metrics-port: 0 disables, another port changes nothing (AppendPortIfNeeded); ignored with --config", async (t) => {
  await t.step("ports", () => {
    const { config } = parse(["--healthz-port=12345", "--metrics-port=0"]);
    assert.equal(config.healthzBindAddress, "0.0.0.0:10256");
    assert.equal(config.metricsBindAddress, "");
  });
  await t.step("with the address flag", () => {
    const { config } = parse(["--metrics-bind-address=[::1]:9999", "--metrics-port=10249"]);
    assert.equal(config.metricsBindAddress, "[::1]:9999");
  });
  await t.step("with --config", () => {
    const { config } = parse(["--healthz-port=0"], HEADER);
    assert.equal(config.healthzBindAddress, "0.0.0.0:10256");
  });
});

Deno.test("--healthz-bind-address and --metrics-bind-address take an IP without a port", () => {
  const { config } = parse(["--healthz-bind-address=127.0.0.1", "--metrics-bind-address=::1"]);
  assert.equal(config.healthzBindAddress, "127.0.0.1:10256");
  assert.equal(config.metricsBindAddress, "[::1]:10249");
});

Deno.test("--write-config-to is refused: kproxy writes no file", () => {
  assert.throws(
    () => parse(["--write-config-to=/tmp/x.yaml"]),
    (error: unknown) => error instanceof ConfigError && /writes no file/.test(error.message),
  );
});

Deno.test("--init-only is a command: set the node up and exit", () => {
  assert.equal(parse(["--init-only"]).command, "init-only");
});

Deno.test("a flag kube-proxy would ignore beside --config is applied, with a warning saying so", () => {
  const line = parse(["--proxy-mode=nftables", "--hostname-override=n", "-v=2"], HEADER);
  assert.equal(line.config.proxyMode, "nftables");
  assert.ok(
    line.warnings.some((w) => /--proxy-mode.*kube-proxy ignores it/.test(w)),
    line.warnings.join("\n"),
  );
  assert.ok(!line.warnings.some((w) => /--hostname-override|--v\b/.test(w)), line.warnings.join());
});

Deno.test("nftables.masqueradeBit is the nftables mode's; --iptables-masquerade-bit is not", () => {
  const file = parse([], `${HEADER}mode: nftables\nnftables:\n  masqueradeBit: 5\n`).config;
  assert.equal(file.nftables.masqueradeBit, 5);
  const flag = parse(["--proxy-mode=nftables", "--iptables-masquerade-bit=3"]).config;
  assert.equal(flag.nftables.masqueradeBit, 14);
  assert.equal(flag.iptables.masqueradeBit, 3);
});

Deno.test("--bind-address reaches the planner as the node IP override", async () => {
  const { plannerOptionsFrom } = await import("../../lib/commands/app.ts");
  const options = plannerOptionsFrom(parse(["--bind-address=10.0.0.5"]).config, []);
  assert.equal(options.bindAddress, "10.0.0.5");
});
