import assert from "node:assert/strict";
import { type CommandLine, parseCommandLine } from "../../lib/config/command_line.ts";
import { ConfigError, formatDuration, parseDuration } from "../../lib/config/values.ts";
import { defaultConfig, effectiveSyncPeriods } from "../../lib/config/defaults.ts";
import { defaultFeatureGates } from "../../lib/config/gates.ts";
import { helpText } from "../../lib/config/help.ts";
import type { Config, ProxyMode } from "../../lib/config/types.ts";

/** An environment with in-memory files and host name "Node-A". */
function env(files: Record<string, string> = {}) {
  return {
    readTextFile(path: string): string {
      const text = files[path];
      if (text === undefined) throw new Deno.errors.NotFound(`No such file: ${path}`);
      return text;
    },
    hostname: () => "Node-A",
  };
}

function parse(argv: string[], files: Record<string, string> = {}): CommandLine {
  return parseCommandLine(argv, env(files));
}

function get(config: Config, path: string): unknown {
  let value: unknown = config;
  for (const part of path.split(".")) value = (value as Record<string, unknown>)[part];
  return value;
}

function assertConfigError(fn: () => unknown, field: string, pattern?: RegExp): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof ConfigError, `want ConfigError, got ${error}`);
    assert.equal(error.field, field, error.message);
    assert.ok(!error.message.includes("\n"), `message is one line: ${error.message}`);
    assert.ok(error.message.includes(field), `message names ${field}: ${error.message}`);
    if (pattern) assert.match(error.message, pattern);
    return true;
  });
}

const HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

Deno.test("parseCommandLine() gives every field its default", () => {
  const cases: [string, unknown][] = [
    ["configFile", ""],
    ["kubeconfig", ""],
    ["master", ""],
    ["manifests", ""],
    ["hostnameOverride", "node-a"],
    ["proxyMode", "iptables"],
    ["clusterCIDRs", []],
    ["detectLocalMode", "ClusterCIDR"],
    ["bridgeInterface", ""],
    ["interfaceNamePrefix", ""],
    ["nodePortAddresses", []],
    ["masqueradeAll", false],
    ["serviceCounters", true],
    ["bindAddress", "0.0.0.0"],
    ["healthzBindAddress", "0.0.0.0:10256"],
    ["metricsBindAddress", "127.0.0.1:10249"],
    ["iptables.syncPeriodMs", 30_000],
    ["iptables.minSyncPeriodMs", 1_000],
    ["iptables.masqueradeBit", 14],
    ["iptables.localhostNodePorts", false],
    ["iptables.backend", "auto"],
    ["nftables.syncPeriodMs", 30_000],
    ["nftables.minSyncPeriodMs", 1_000],
    ["ipvs.syncPeriodMs", 30_000],
    ["ipvs.minSyncPeriodMs", 0],
    ["ipvs.scheduler", "rr"],
    ["ipvs.strictARP", false],
    ["ipvs.tcpTimeoutMs", 0],
    ["ipvs.tcpFinTimeoutMs", 0],
    ["ipvs.udpTimeoutMs", 0],
    ["winkernel.sourceVip", ""],
    ["winkernel.enableDSR", false],
    ["winkernel.networkName", ""],
    ["winkernel.forwardHealthCheckVip", false],
    ["winkernel.rootHnsEndpointName", "cbr0"],
    ["conntrack.tcpBeLiberal", false],
    ["serviceClusterIPRange", []],
    ["externalIPAllowedCIDRs", []],
    ["featureGates", defaultFeatureGates()],
    ["cleanup", false],
    ["verbosity", 0],
  ];
  const line = parse([]);
  assert.equal(line.command, "run");
  assert.deepEqual(line.args, []);
  assert.deepEqual(line.flagsSet, []);
  assert.deepEqual(line.warnings, []);
  assert.deepEqual(line.config, defaultConfig("Node-A"));
  for (const [path, want] of cases) assert.deepEqual(get(line.config, path), want, path);
});

/** [flag, value, config path, expected]: each runs as `--flag=value` and `--flag value`. */
const FLAG_CASES: [string, string, string, unknown][] = [
  ["kubeconfig", "/etc/kube/proxy.conf", "kubeconfig", "/etc/kube/proxy.conf"],
  ["master", "https://10.0.0.1:6443", "master", "https://10.0.0.1:6443"],
  ["manifests", "scripts/manifests", "manifests", "scripts/manifests"],
  ["hostname-override", " Worker-1 ", "hostnameOverride", "worker-1"],
  ["proxy-mode", "iptables", "proxyMode", "iptables"],
  ["proxy-mode", "ipvs", "proxyMode", "ipvs"],
  ["proxy-mode", "kernelspace", "proxyMode", "kernelspace"],
  ["proxy-mode", "nftables", "proxyMode", "nftables"],
  ["proxy-mode", "", "proxyMode", "iptables"],
  ["cluster-cidr", "10.244.0.0/16", "clusterCIDRs", ["10.244.0.0/16"]],
  ["cluster-cidr", "10.244.0.0/16,fd00:10:244::/56", "clusterCIDRs", [
    "10.244.0.0/16",
    "fd00:10:244::/56",
  ]],
  ["cluster-cidr", "10.244.1.7/16", "clusterCIDRs", ["10.244.0.0/16"]],
  ["cluster-cidr", "", "clusterCIDRs", []],
  ["detect-local-mode", "NodeCIDR", "detectLocalMode", "NodeCIDR"],
  ["detect-local-mode", "ClusterCIDR", "detectLocalMode", "ClusterCIDR"],
  ["detect-local-mode", "", "detectLocalMode", "ClusterCIDR"],
  ["pod-bridge-interface", "cbr0", "bridgeInterface", "cbr0"],
  ["pod-interface-name-prefix", "veth", "interfaceNamePrefix", "veth"],
  ["nodeport-addresses", "primary", "nodePortAddresses", ["primary"]],
  ["nodeport-addresses", "192.168.0.0/16,fd00::/64", "nodePortAddresses", [
    "192.168.0.0/16",
    "fd00::/64",
  ]],
  ["nodeport-addresses", "", "nodePortAddresses", []],
  ["masquerade-all", "true", "masqueradeAll", true],
  ["service-counters", "false", "serviceCounters", false],
  ["bind-address", "192.168.1.10", "bindAddress", "192.168.1.10"],
  ["bind-address", "::", "bindAddress", "::"],
  ["healthz-bind-address", "[::]:10256", "healthzBindAddress", "[::]:10256"],
  ["healthz-bind-address", "", "healthzBindAddress", ""],
  ["metrics-bind-address", "0.0.0.0:10249", "metricsBindAddress", "0.0.0.0:10249"],
  ["iptables-sync-period", "1m", "iptables.syncPeriodMs", 60_000],
  ["iptables-min-sync-period", "0s", "iptables.minSyncPeriodMs", 0],
  ["nftables-sync-period", "1h", "nftables.syncPeriodMs", 3_600_000],
  ["nftables-min-sync-period", "500ms", "nftables.minSyncPeriodMs", 500],
  ["ipvs-sync-period", "1m30s", "ipvs.syncPeriodMs", 90_000],
  ["ipvs-min-sync-period", "2s", "ipvs.minSyncPeriodMs", 2_000],
  ["iptables-masquerade-bit", "0", "iptables.masqueradeBit", 0],
  ["iptables-masquerade-bit", "31", "iptables.masqueradeBit", 31],
  ["iptables-localhost-nodeports", "true", "iptables.localhostNodePorts", true],
  ["iptables-backend", "legacy", "iptables.backend", "legacy"],
  ["iptables-backend", "nft", "iptables.backend", "nft"],
  ["ipvs-scheduler", "wlc", "ipvs.scheduler", "wlc"],
  ["ipvs-scheduler", "mh", "ipvs.scheduler", "mh"],
  ["ipvs-scheduler", "", "ipvs.scheduler", "rr"],
  ["ipvs-strict-arp", "true", "ipvs.strictARP", true],
  ["ipvs-tcp-timeout", "15m", "ipvs.tcpTimeoutMs", 900_000],
  ["ipvs-tcpfin-timeout", "30s", "ipvs.tcpFinTimeoutMs", 30_000],
  ["ipvs-udp-timeout", "5s", "ipvs.udpTimeoutMs", 5_000],
  ["source-vip", "10.0.0.250", "winkernel.sourceVip", "10.0.0.250"],
  ["network-name", "vxlan0", "winkernel.networkName", "vxlan0"],
  ["root-hnsendpoint-name", "vEthernet", "winkernel.rootHnsEndpointName", "vEthernet"],
  ["forward-healthcheck-vip", "true", "winkernel.forwardHealthCheckVip", true],
  ["conntrack-tcp-be-liberal", "true", "conntrack.tcpBeLiberal", true],
  ["feature-gates", "ServiceTopology=true,WinDSR=true", "featureGates", {
    ...defaultFeatureGates(),
    ServiceTopology: true,
    WinDSR: true,
  }],
  ["cleanup", "true", "cleanup", true],
  ["v", "4", "verbosity", 4],
  ["service-cluster-ip-range", "10.96.0.0/12,fd00:10:96::/112", "serviceClusterIPRange", [
    "10.96.0.0/12",
    "fd00:10:96::/112",
  ]],
  ["external-ip-allowed-cidrs", "203.0.113.0/24", "externalIPAllowedCIDRs", ["203.0.113.0/24"]],
  ["service-node-port-range", "30000-30999", "serviceNodePortRange", { first: 30000, last: 30999 }],
  ["config", "/etc/kproxy/config.yaml", "configFile", "/etc/kproxy/config.yaml"],
];

Deno.test("parseCommandLine() parses each flag as --flag=value and --flag value", async (t) => {
  const files = { "/etc/kproxy/config.yaml": HEADER };
  for (const [flag, value, path, want] of FLAG_CASES) {
    await t.step(`--${flag}=${JSON.stringify(value)}`, () => {
      const joined = parse([`--${flag}=${value}`], files);
      assert.deepEqual(get(joined.config, path), want);
      assert.deepEqual(joined.flagsSet, [flag]);
      // Booleans take no separate value, as with pflag: `--cleanup true` is a positional.
      if (value !== "" && typeof want !== "boolean") {
        assert.deepEqual(get(parse([`--${flag}`, value], files).config, path), want);
      }
    });
  }
});

Deno.test("parseCommandLine() accepts -v N, -vN, -v=N and --v N", () => {
  for (const argv of [["-v", "3"], ["-v3"], ["-v=3"], ["--v", "3"], ["--v=3"]]) {
    assert.equal(parse(argv).config.verbosity, 3, argv.join(" "));
  }
});

Deno.test("parseCommandLine() accepts boolean flags bare, =true and =false", async (t) => {
  const booleans: [string, string][] = [
    ["masquerade-all", "masqueradeAll"],
    ["iptables-localhost-nodeports", "iptables.localhostNodePorts"],
    ["ipvs-strict-arp", "ipvs.strictARP"],
    ["conntrack-tcp-be-liberal", "conntrack.tcpBeLiberal"],
    ["cleanup", "cleanup"],
  ];
  for (const [flag, path] of booleans) {
    await t.step(flag, () => {
      assert.equal(get(parse([`--${flag}`]).config, path), true);
      assert.equal(get(parse([`--${flag}=true`]).config, path), true);
      assert.equal(get(parse([`--${flag}=T`]).config, path), true);
      assert.equal(get(parse([`--${flag}=false`]).config, path), false);
      assert.equal(get(parse([`--${flag}`, `--${flag}=false`]).config, path), false);
      assert.equal(get(parse([`--${flag}=0`, `--${flag}`]).config, path), true);
    });
  }
  const dsr = parse(["--enable-dsr", "--feature-gates=WinDSR=true"]);
  assert.equal(dsr.config.winkernel.enableDSR, true);
});

Deno.test("parseCommandLine() merges repeated --feature-gates, the last value winning", () => {
  const { config } = parse([
    "--feature-gates=ServiceTopology=true",
    "--feature-gates",
    "NativeHistograms=true,ServiceTopology=false",
  ]);
  assert.equal(config.featureGates.ServiceTopology, false);
  assert.equal(config.featureGates.NativeHistograms, true);
  assert.equal(config.featureGates.WinOverlay, true);
});

Deno.test("parseCommandLine() picks the subcommand from the first positional argument", async (t) => {
  const cases: [string[], CommandLine["command"], string[]][] = [
    [[], "run", []],
    [["plan"], "plan", []],
    [["plan", "--manifests", "m"], "plan", []],
    [["--manifests", "m", "plan"], "plan", []],
    [["demo"], "demo", []],
    [["diff", "extra"], "diff", ["extra"]],
    [["explain", "10.96.0.10:53", "--from", "10.244.1.5"], "explain", ["10.96.0.10:53"]],
    [["--version"], "version", []],
    [["version"], "version", []],
    [["--help"], "help", []],
    [["-h"], "help", []],
    [["plan", "--help"], "help", []],
  ];
  for (const [argv, command, args] of cases) {
    await t.step(argv.join(" ") || "(none)", () => {
      const line = parse(argv);
      assert.equal(line.command, command);
      assert.deepEqual(line.args, args);
    });
  }
});

Deno.test("parseCommandLine() fills explain's --from and --node", () => {
  const line = parse(["explain", "10.96.0.10:53", "--from=10.244.1.5", "--hostname-override=n1"]);
  assert.deepEqual(line.explain, { from: "10.244.1.5", node: "n1" });
  const other = parse(["explain", "10.96.0.10:53", "--node", "Node-B"]);
  assert.deepEqual(other.explain, { from: "", node: "node-b" });
  assert.equal(parse(["plan"]).explain, undefined);
});

Deno.test("parseCommandLine() reads the KubeProxyConfiguration file", () => {
  const file = HEADER + `
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
hostnameOverride: Worker-7
mode: ipvs
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
detectLocalMode: InterfaceNamePrefix
detectLocal:
  bridgeInterface: cbr0
  interfaceNamePrefix: veth
nodePortAddresses: [192.168.0.0/16]
bindAddress: 192.168.0.7
healthzBindAddress: 192.168.0.7:10256
metricsBindAddress: 0.0.0.0:10249
featureGates:
  ServiceTopology: true
iptables:
  masqueradeAll: true
  masqueradeBit: 0
  localhostNodePorts: true
  syncPeriod: 10s
  minSyncPeriod: 2s
nftables:
  syncPeriod: 20s
  minSyncPeriod: 3s
ipvs:
  scheduler: lc
  strictARP: true
  syncPeriod: 40s
  minSyncPeriod: 4s
  tcpTimeout: 900s
  tcpFinTimeout: 120s
  udpTimeout: 300s
winkernel:
  sourceVip: 10.0.0.250
  enableDSR: false
  networkName: l2bridge
  forwardHealthCheckVip: true
  rootHnsEndpointName: vEthernet
conntrack:
  tcpBeLiberal: true
logging:
  verbosity: 2
`;
  const { config, warnings } = parse(["--config", "/c.yaml"], { "/c.yaml": file });
  const want = defaultConfig("Node-A");
  Object.assign(want, {
    configFile: "/c.yaml",
    kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf",
    hostnameOverride: "worker-7",
    proxyMode: "ipvs",
    clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
    detectLocalMode: "InterfaceNamePrefix",
    bridgeInterface: "cbr0",
    interfaceNamePrefix: "veth",
    nodePortAddresses: ["192.168.0.0/16"],
    masqueradeAll: true,
    bindAddress: "192.168.0.7",
    healthzBindAddress: "192.168.0.7:10256",
    metricsBindAddress: "0.0.0.0:10249",
    featureGates: { ...defaultFeatureGates(), ServiceTopology: true },
    iptables: {
      syncPeriodMs: 10_000,
      minSyncPeriodMs: 2_000,
      masqueradeBit: 0,
      localhostNodePorts: true,
      backend: "auto",
    },
    nftables: { syncPeriodMs: 20_000, minSyncPeriodMs: 3_000, masqueradeBit: 14 },
    ipvs: {
      syncPeriodMs: 40_000,
      minSyncPeriodMs: 4_000,
      scheduler: "lc",
      strictARP: true,
      tcpTimeoutMs: 900_000,
      tcpFinTimeoutMs: 120_000,
      udpTimeoutMs: 300_000,
    },
    winkernel: {
      sourceVip: "10.0.0.250",
      enableDSR: false,
      networkName: "l2bridge",
      forwardHealthCheckVip: true,
      rootHnsEndpointName: "vEthernet",
    },
    conntrack: { ...defaultConfig("Node-A").conntrack, tcpBeLiberal: true },
    verbosity: 2,
  });
  assert.deepEqual(config, want);
  assert.deepEqual(warnings, []);
});

Deno.test("parseCommandLine() treats zero values in the file as defaults, like kubeadm's output", () => {
  // `kubeadm config print init-defaults --component-configs KubeProxyConfiguration`
  const kubeadm = HEADER + `
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: ""
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`;
  const { config, warnings } = parse(["--config=/k.yaml"], { "/k.yaml": kubeadm });
  assert.deepEqual(config, {
    ...defaultConfig("Node-A"),
    configFile: "/k.yaml",
    kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf",
  });
  assert.deepEqual(warnings, []);
});

Deno.test("parseCommandLine() warns about upstream fields and flags kproxy ignores", () => {
  const file = HEADER + "conntrack:\n  maxPerCore: 32768\nenableProfiling: true\n";
  const { warnings, config } = parse(["--config=/c", "--profiling", "--conntrack-min=131072"], {
    "/c": file,
  });
  assert.deepEqual(warnings, [
    "Ignoring enableProfiling in --config: kproxy does not support it",
    "Ignoring --profiling: kproxy does not support it",
    "Applying --conntrack-min although --config is given: kube-proxy ignores it then, kproxy " +
    "lets the command line override the file",
  ]);
  assert.equal(config.conntrack.maxPerCore, 32768);
  assert.equal(config.conntrack.min, 131072);
});

Deno.test("parseCommandLine() reads serviceCounters from the file, and the flag overrides it", () => {
  const file = { "/c": `${HEADER}serviceCounters: false\n` };
  assert.equal(parse(["--config=/c"], file).config.serviceCounters, false);
  assert.equal(
    parse(["--config=/c", "--service-counters=true"], file).config.serviceCounters,
    true,
  );
  assert.throws(
    () => parse(["--config=/c"], { "/c": `${HEADER}serviceCounters: often\n` }),
    /serviceCounters/,
  );
});

Deno.test("parseCommandLine() lets flags on the command line override the file", () => {
  const file = HEADER + `
mode: iptables
clusterCIDR: 10.244.0.0/16
masqueradeAll: true
iptables:
  syncPeriod: 10s
  masqueradeBit: 3
featureGates:
  ServiceTopology: true
  NativeHistograms: true
logging:
  verbosity: 1
`;
  const line = parse([
    "--proxy-mode=nftables",
    "--config",
    "/c",
    "--masquerade-all=false",
    "--iptables-sync-period=5s",
    "--feature-gates=ServiceTopology=false",
    "-v=6",
  ], { "/c": file });
  const { config } = line;
  assert.equal(config.proxyMode, "nftables");
  assert.deepEqual(config.clusterCIDRs, ["10.244.0.0/16"]);
  assert.equal(config.masqueradeAll, false);
  assert.equal(config.iptables.syncPeriodMs, 5_000);
  assert.equal(config.iptables.masqueradeBit, 3);
  assert.equal(config.featureGates.ServiceTopology, false);
  assert.equal(config.featureGates.NativeHistograms, true);
  assert.equal(config.verbosity, 6);
  assert.deepEqual(line.flagsSet, [
    "proxy-mode",
    "config",
    "masquerade-all",
    "iptables-sync-period",
    "feature-gates",
    "v",
  ]);
});

Deno.test("parseCommandLine() reads the deploy and systemd configs shipped in scripts/", () => {
  const read = (path: string) => Deno.readTextFileSync(new URL(`../../${path}`, import.meta.url));
  const systemd = parse(["--config=systemd.yaml"], {
    "systemd.yaml": read("scripts/systemd/config.yaml"),
  });
  assert.equal(systemd.config.proxyMode, "nftables");
  assert.equal(systemd.config.kubeconfig, "/var/lib/kproxy/kubeconfig");
  assert.deepEqual(systemd.config.clusterCIDRs, ["10.244.0.0/16"]);
  const configMap = read("scripts/deploy/configmap.yaml");
  const embedded = /config\.yaml: \|\n((?: {4}.*\n?)+)/.exec(configMap)?.[1];
  assert.ok(embedded, "configmap.yaml embeds config.yaml");
  const dedented = embedded.replace(/^ {4}/gm, "");
  const daemonSet = parse(
    ["--config=/etc/kproxy/config.yaml", "--hostname-override=node-b"],
    { "/etc/kproxy/config.yaml": dedented },
  );
  assert.equal(daemonSet.config.hostnameOverride, "node-b");
  assert.deepEqual(daemonSet.config.nftables, {
    syncPeriodMs: 30_000,
    minSyncPeriodMs: 1_000,
    masqueradeBit: 14,
  });
});

/** [name, argv, file text or undefined, field, message pattern]. */
const ERROR_CASES: [string, string[], string | undefined, string, RegExp?][] = [
  ["unknown flag", ["--bogus"], undefined, "--bogus", /unknown flag/],
  ["unknown flag with value", ["--bogus=1"], undefined, "--bogus", /unknown flag/],
  ["unknown short flag", ["-x"], undefined, "-x", /unknown flag/],
  ["unknown short flag with value", ["-x=1"], undefined, "-x", /unknown flag/],
  ["verbosity without value", ["-v"], undefined, "--v", /--v: a value is required/],
  ["help with a value", ["--help=1"], undefined, "--help", /--help: takes no value/],
  ["short help with a value", ["-h=1"], undefined, "-h", /-h: takes no value/],
  ["missing value", ["--proxy-mode"], undefined, "--proxy-mode", /value is required/],
  ["flag after flag needing value", ["--master", "--cleanup"], undefined, "--master"],
  ["bad duration", ["--iptables-sync-period=3x"], undefined, "--iptables-sync-period", /"3x"/],
  [
    "bad nftables duration",
    ["--nftables-min-sync-period", "1"],
    undefined,
    "--nftables-min-sync-period",
  ],
  ["negative duration", ["--ipvs-sync-period=-1s"], undefined, "--ipvs-sync-period", /negative/],
  [
    "zero sync period",
    ["--proxy-mode=nftables", "--nftables-sync-period=0s"],
    undefined,
    "--nftables-sync-period",
    /greater than 0/,
  ],
  [
    "ipvs min above sync",
    ["--proxy-mode=ipvs", "--ipvs-min-sync-period=1m"],
    undefined,
    "--ipvs-min-sync-period",
    /exceeds/,
  ],
  ["bad ipvs timeout", ["--ipvs-udp-timeout=soon"], undefined, "--ipvs-udp-timeout"],
  ["bad CIDR", ["--cluster-cidr=10.0.0.0/33"], undefined, "--cluster-cidr", /not a CIDR/],
  ["CIDR without prefix", ["--cluster-cidr=10.0.0.0"], undefined, "--cluster-cidr"],
  ["bad IPv6 CIDR", ["--cluster-cidr=fd00::1::/64"], undefined, "--cluster-cidr"],
  [
    "two IPv4 cluster CIDRs",
    ["--cluster-cidr=10.0.0.0/8,11.0.0.0/8"],
    undefined,
    "--cluster-cidr",
    /dual-stack/,
  ],
  [
    "bad service range",
    ["--service-cluster-ip-range=10.96.0.0/12,x"],
    undefined,
    "--service-cluster-ip-range",
  ],
  [
    "bad external IP CIDR",
    ["--external-ip-allowed-cidrs=1.2.3.4"],
    undefined,
    "--external-ip-allowed-cidrs",
  ],
  [
    "backwards node port range",
    ["--service-node-port-range=32767-30000"],
    undefined,
    "--service-node-port-range",
    /FIRST-LAST/,
  ],
  ["bad nodeport address", ["--nodeport-addresses=eth0"], undefined, "--nodeport-addresses"],
  [
    "primary with CIDRs",
    ["--nodeport-addresses=primary,10.0.0.0/8"],
    undefined,
    "--nodeport-addresses",
    /primary/,
  ],
  [
    "unknown mode",
    ["--proxy-mode=userspace"],
    undefined,
    "--proxy-mode",
    /unknown proxy mode "userspace"/,
  ],
  ["unknown detect-local mode", ["--detect-local-mode=Magic"], undefined, "--detect-local-mode"],
  [
    "bridge mode without bridge",
    ["--detect-local-mode=BridgeInterface"],
    undefined,
    "--pod-bridge-interface",
  ],
  [
    "bad bridge interface name",
    ["--pod-bridge-interface=cbr0 -j ACCEPT"],
    undefined,
    "--pod-bridge-interface",
    /^Cannot parse --pod-bridge-interface: "cbr0 -j ACCEPT" is not an interface name/,
  ],
  [
    "interface name prefix too long",
    ["--pod-interface-name-prefix=veth0123456789ab"],
    undefined,
    "--pod-interface-name-prefix",
    /not an interface name/,
  ],
  [
    "interface name prefix read as an option, from file",
    ["--config=/c"],
    HEADER + 'detectLocal:\n  interfaceNamePrefix: "-veth"\n',
    "detectLocal.interfaceNamePrefix",
    /not an interface name/,
  ],
  [
    "prefix mode without prefix",
    ["--detect-local-mode=InterfaceNamePrefix"],
    undefined,
    "--pod-interface-name-prefix",
  ],
  ["bad bind address", ["--bind-address=0.0.0.0:80"], undefined, "--bind-address"],
  [
    "healthz bad port",
    ["--healthz-bind-address=0.0.0.0:99999"],
    undefined,
    "--healthz-bind-address",
  ],
  [
    "metrics IPv6 without brackets",
    ["--metrics-bind-address=:::10249"],
    undefined,
    "--metrics-bind-address",
  ],
  [
    "metrics hostname",
    ["--metrics-bind-address=localhost:10249"],
    undefined,
    "--metrics-bind-address",
  ],
  [
    "masquerade bit too big",
    ["--iptables-masquerade-bit=32"],
    undefined,
    "--iptables-masquerade-bit",
    /0\.\.31/,
  ],
  [
    "masquerade bit negative",
    ["--iptables-masquerade-bit=-1"],
    undefined,
    "--iptables-masquerade-bit",
  ],
  [
    "masquerade bit not a number",
    ["--iptables-masquerade-bit=x"],
    undefined,
    "--iptables-masquerade-bit",
  ],
  ["unknown scheduler", ["--ipvs-scheduler=fifo"], undefined, "--ipvs-scheduler", /fifo/],
  ["unknown iptables backend", ["--iptables-backend=ebpf"], undefined, "--iptables-backend"],
  ["negative verbosity", ["--v=-1"], undefined, "--v", /0 or more/],
  ["verbosity not a number", ["-v", "loud"], undefined, "--v"],
  ["bad boolean", ["--masquerade-all=maybe"], undefined, "--masquerade-all", /boolean/],
  ["gate without value", ["--feature-gates=WinDSR"], undefined, "--feature-gates"],
  ["gate with bad value", ["--feature-gates=WinDSR=yes"], undefined, "--feature-gates"],
  ["stray argument", ["apply"], undefined, "command", /"apply"/],
  ["explain without DEST", ["explain"], undefined, "DEST"],
  ["explain with bad --from", ["explain", "1.2.3.4:80", "--from=me"], undefined, "--from"],
  ["--from outside explain", ["plan", "--from=10.0.0.1"], undefined, "--from", /explain/],
  ["--node outside explain", ["--node=n1"], undefined, "--node", /explain/],
  ["missing config file", ["--config=/nope"], undefined, "--config", /Cannot read/],
  ["YAML syntax error", ["--config=/c"], "mode: [\n", "--config"],
  ["YAML syntax error at its line", ["--config=/c"], "mode: ok\nx: [\n", "--config", /line 3/],
  [
    "duplicate key",
    ["--config=/c"],
    HEADER + "mode: nftables\nmode: iptables\n",
    "--config",
    /duplicate/,
  ],
  ["not a map", ["--config=/c"], "- a\n- b\n", "--config"],
  [
    "wrong apiVersion",
    ["--config=/c"],
    "apiVersion: v1\nkind: KubeProxyConfiguration\n",
    "apiVersion",
  ],
  ["missing kind", ["--config=/c"], "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n", "kind"],
  [
    "wrong kind",
    ["--config=/c"],
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: ConfigMap\n",
    "kind",
    /KubeProxyConfiguration/,
  ],
  [
    "gate not boolean in file",
    ["--config=/c"],
    HEADER + "featureGates:\n  WinDSR: yes please\n",
    "featureGates.WinDSR",
  ],
  [
    "bad duration in file",
    ["--config=/c"],
    HEADER + "nftables:\n  syncPeriod: 3x\n",
    "nftables.syncPeriod",
    /"3x"/,
  ],
  [
    "duration as number in file",
    ["--config=/c"],
    HEADER + "ipvs:\n  syncPeriod: 30\n",
    "ipvs.syncPeriod",
    /want a string/,
  ],
  ["bad mode in file", ["--config=/c"], HEADER + "mode: userspace\n", "mode"],
  ["bad CIDR in file", ["--config=/c"], HEADER + "clusterCIDR: 10.0.0.0/99\n", "clusterCIDR"],
  [
    "bad nodePortAddresses in file",
    ["--config=/c"],
    HEADER + "nodePortAddresses: [foo]\n",
    "nodePortAddresses",
  ],
  [
    "masqueradeBit out of range in file",
    ["--config=/c"],
    HEADER + "iptables:\n  masqueradeBit: 40\n",
    "iptables.masqueradeBit",
  ],
  [
    "masqueradeBit not integer in file",
    ["--config=/c"],
    HEADER + "iptables:\n  masqueradeBit: 1.5\n",
    "iptables.masqueradeBit",
  ],
  [
    "bad scheduler in file",
    ["--config=/c"],
    HEADER + "ipvs:\n  scheduler: fifo\n",
    "ipvs.scheduler",
  ],
  [
    "bad healthz in file",
    ["--config=/c"],
    HEADER + "healthzBindAddress: nowhere\n",
    "healthzBindAddress",
  ],
  [
    "bool as string in file",
    ["--config=/c"],
    HEADER + 'iptables:\n  masqueradeAll: "yes"\n',
    "iptables.masqueradeAll",
  ],
  ["section not a map", ["--config=/c"], HEADER + "iptables: fast\n", "iptables", /want a map/],
  [
    "negative verbosity in file",
    ["--config=/c"],
    HEADER + "logging:\n  verbosity: -2\n",
    "logging.verbosity",
  ],
  [
    "bridge mode without bridge, from file",
    ["--config=/c"],
    HEADER + "detectLocalMode: BridgeInterface\n",
    "--pod-bridge-interface",
  ],
  [
    "file value named in cross-field error",
    ["--config=/c"],
    HEADER + "mode: ipvs\nipvs:\n  minSyncPeriod: 1m\n",
    "ipvs.minSyncPeriod",
    /exceeds/,
  ],
];

Deno.test("parseCommandLine() throws a one-line ConfigError naming the field", async (t) => {
  for (const [name, argv, file, field, pattern] of ERROR_CASES) {
    await t.step(name, () => {
      const files: Record<string, string> = file === undefined ? {} : { "/c": file };
      assertConfigError(() => parse(argv, files), field, pattern);
    });
  }
});

Deno.test("parseCommandLine() falls back to the host name and rejects an empty one", () => {
  assert.equal(parse(["--hostname-override= "]).config.hostnameOverride, "node-a");
  const noName = { readTextFile: () => "", hostname: () => " " };
  assertConfigError(() => parseCommandLine([], noName), "--hostname-override", /empty/);
});

Deno.test("ConfigError has the spec's message shape", () => {
  assertConfigError(
    () => parse(["--iptables-sync-period=3x"]),
    "--iptables-sync-period",
    /^Cannot parse --iptables-sync-period: "3x" is not a duration/,
  );
});

Deno.test("helpText() documents every flag with its default", () => {
  const text = helpText();
  const flags = [
    "config",
    "kubeconfig",
    "master",
    "hostname-override",
    "proxy-mode",
    "cluster-cidr",
    "detect-local-mode",
    "pod-bridge-interface",
    "pod-interface-name-prefix",
    "nodeport-addresses",
    "masquerade-all",
    "bind-address",
    "healthz-bind-address",
    "metrics-bind-address",
    "iptables-sync-period",
    "iptables-min-sync-period",
    "nftables-sync-period",
    "nftables-min-sync-period",
    "ipvs-sync-period",
    "ipvs-min-sync-period",
    "iptables-masquerade-bit",
    "iptables-localhost-nodeports",
    "iptables-backend",
    "ipvs-scheduler",
    "ipvs-strict-arp",
    "ipvs-tcp-timeout",
    "ipvs-tcpfin-timeout",
    "ipvs-udp-timeout",
    "source-vip",
    "enable-dsr",
    "network-name",
    "conntrack-tcp-be-liberal",
    "feature-gates",
    "cleanup",
    "v",
    "manifests",
    "service-cluster-ip-range",
    "external-ip-allowed-cidrs",
    "version",
    "help",
    "from",
    "node",
  ];
  for (const flag of flags) {
    assert.match(text, new RegExp(`--${flag}\\b(?!-)`), `--${flag} documented`);
  }
  assert.match(text, /-v, --v/);
  assert.match(text, /-h, --help/);
  const flat = text.replace(/\s+/g, " ");
  const defaults = [
    "(default 30s)",
    "(default 1s)",
    "(default 14)",
    "(default iptables)",
    "(default 0.0.0.0:10256)",
    "(default 127.0.0.1:10249)",
    "(default [])",
    "(default false)",
  ];
  for (const expected of defaults) assert.ok(flat.includes(expected), expected);
  for (const gate of ["AllAlpha (ALPHA", "ServiceTopology (ALPHA", "ContextualLogging"]) {
    assert.ok(text.includes(gate), gate);
  }
  for (const line of text.split("\n")) assert.ok(line.length <= 100, `line too long: ${line}`);
});

Deno.test("effectiveSyncPeriods() returns the selected mode's periods", () => {
  const config = defaultConfig("n");
  config.iptables.syncPeriodMs = 10_000;
  config.iptables.minSyncPeriodMs = 100;
  config.nftables.syncPeriodMs = 20_000;
  config.nftables.minSyncPeriodMs = 200;
  config.ipvs.syncPeriodMs = 40_000;
  config.ipvs.minSyncPeriodMs = 400;
  const cases: [ProxyMode, number, number][] = [
    ["nftables", 20_000, 200],
    ["iptables", 10_000, 100],
    ["ipvs", 40_000, 400],
    ["kernelspace", 10_000, 100],
  ];
  for (const [proxyMode, syncPeriodMs, minSyncPeriodMs] of cases) {
    assert.deepEqual(effectiveSyncPeriods({ ...config, proxyMode }), {
      syncPeriodMs,
      minSyncPeriodMs,
    }, proxyMode);
  }
});

Deno.test("parseDuration() reads Go durations", () => {
  const cases: [string, number | undefined][] = [
    ["0", 0],
    ["0s", 0],
    ["30s", 30_000],
    ["1m30s", 90_000],
    ["500ms", 500],
    ["1h", 3_600_000],
    ["2h22m", 8_520_000],
    ["1.5s", 1_500],
    ["1.1s", 1_100],
    [".5s", 500],
    ["1500us", 1.5],
    ["1500µs", 1.5],
    ["2000000ns", 2],
    ["+5s", 5_000],
    ["-5s", -5_000],
    ["", undefined],
    ["5", undefined],
    ["s", undefined],
    ["3x", undefined],
    ["1d", undefined],
    ["5 s", undefined],
    ["1m30", undefined],
    [".s", undefined],
  ];
  for (const [text, want] of cases) assert.equal(parseDuration(text), want, JSON.stringify(text));
});

Deno.test("formatDuration() prints durations like Go", () => {
  const cases: [number, string][] = [
    [0, "0s"],
    [500, "500ms"],
    [1_000, "1s"],
    [30_000, "30s"],
    [90_000, "1m30s"],
    [3_600_000, "1h0m0s"],
    [1_500, "1.5s"],
  ];
  for (const [ms, want] of cases) assert.equal(formatDuration(ms), want);
});
