import assert from "node:assert/strict";
import {
  type BesideResults,
  type BesideRow,
  changedAddress,
  cpuSeconds,
  kernelListing,
  lastSyncTimestamp,
  mentionsAddress,
  mergeBeside,
  proxyFlags,
} from "../../scripts/bench/beside.ts";
import {
  besideSection,
  besideTable,
  besideTargets,
  kubeProxyCell,
  loadTable,
  ratio,
} from "../../scripts/bench/beside_report.ts";
import { serviceToCreate, sliceToWrite } from "../../scripts/bench/real_apiserver.ts";
import { parseBenchArgs } from "../../scripts/bench/main.ts";

Deno.test("lastSyncTimestamp() reads the IPv4 or unlabelled sample, when positive", () => {
  const cases: { name: string; text: string; want: number | undefined }[] = [
    {
      name: "kube-proxy 1.36: labelled by family, in scientific notation",
      text: [
        "# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time …",
        "# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge",
        'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1.7643e+09',
        'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7642915123e+09',
      ].join("\n"),
      want: 1764291512.3,
    },
    {
      name: "unlabelled",
      text: "kubeproxy_sync_proxy_rules_last_timestamp_seconds 1764291512.25\n",
      want: 1764291512.25,
    },
    {
      name: "not synced yet: zero",
      text: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 0\n',
      want: undefined,
    },
    {
      name: "only IPv6 synced",
      text: 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"} 1764291512\n',
      want: undefined,
    },
    {
      name: "another metric with the name as prefix",
      text: "kubeproxy_sync_proxy_rules_last_timestamp_seconds_total 5\n",
      want: undefined,
    },
    { name: "nothing", text: "", want: undefined },
  ];
  for (const { name, text, want } of cases) {
    assert.equal(lastSyncTimestamp(text), want, name);
  }
});

Deno.test("cpuSeconds() sums utime + stime and the children's, past a name with spaces", () => {
  // Fields 14–17: utime 250, stime 50, cutime 30, cstime 20 ticks.
  const stat = "4242 (deno main (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 8";
  assert.deepEqual(cpuSeconds(stat, 100), { own: 3, children: 0.5 });
  assert.deepEqual(cpuSeconds(stat, 1000), { own: 0.3, children: 0.05 });
});

Deno.test("mentionsAddress() matches the whole address only", () => {
  const cases: [string, string, boolean][] = [
    ["add element ip kproxy eps { 10.250.0.1 . tcp . 8080 }", "10.250.0.1", true],
    [
      "add rule ip kube-proxy endpoint-X ip saddr 10.250.0.1 jump mark-for-masquerade",
      "10.250.0.1",
      true,
    ],
    ["dnat to 10.250.0.1:8080", "10.250.0.1", true],
    ["dnat to 10.250.0.12:8080", "10.250.0.1", false],
    ["dnat to 110.250.0.1:8080", "10.250.0.1", false],
    ["dnat to 10.250.0.1.5", "10.250.0.1", false],
    ["dnat to 10x250x0x1", "10.250.0.1", false],
  ];
  for (const [line, address, want] of cases) {
    assert.equal(mentionsAddress(line, address), want, line);
  }
});

Deno.test("kernelListing() lists where each proxy writes its endpoints", () => {
  assert.deepEqual(kernelListing("kproxy", "nftables"), [
    "nft",
    "list",
    "map",
    "ip",
    "kproxy",
    "service-endpoints",
  ]);
  assert.deepEqual(kernelListing("kube-proxy", "nftables"), [
    "nft",
    "list",
    "table",
    "ip",
    "kube-proxy",
  ]);
  assert.deepEqual(kernelListing("kube-proxy", "iptables"), ["iptables-save", "-t", "nat"]);
  assert.deepEqual(kernelListing("kproxy", "iptables"), ["iptables-save", "-t", "nat"]);
});

Deno.test("changedAddress() gives distinct addresses in 10.250.0.0/16", () => {
  assert.equal(changedAddress(1), "10.250.0.1");
  assert.equal(changedAddress(258), "10.250.1.2");
  assert.equal(new Set([...Array(600).keys()].map(changedAddress)).size, 600);
});

Deno.test("proxyFlags() gives both proxies kube-proxy's flags, conntrack left alone", () => {
  const flags = proxyFlags("nftables", "/tmp/k");
  for (
    const flag of [
      "--proxy-mode=nftables",
      "--kubeconfig=/tmp/k",
      "--hostname-override=node-a",
      "--cluster-cidr=10.244.0.0/16",
      "--conntrack-max-per-core=0",
      "--conntrack-tcp-timeout-established=0",
      "--conntrack-tcp-timeout-close-wait=0",
      "--metrics-bind-address=192.168.241.2:10249",
      "--healthz-bind-address=127.0.0.1:10256",
    ]
  ) {
    assert.ok(flags.includes(flag), flag);
  }
  // kube-proxy 1.36 has no --nftables-*-sync-period flags: it would exit with "unknown flag".
  assert.ok(!flags.some((flag) => flag.includes("sync-period")));
});

Deno.test("serviceToCreate() and sliceToWrite() leave out what the apiserver sets", () => {
  const service = serviceToCreate(7);
  const metadata = service.metadata as Record<string, unknown>;
  const spec = service.spec as Record<string, unknown>;
  assert.equal(service.kind, "Service");
  for (const field of ["uid", "creationTimestamp", "managedFields"]) {
    assert.ok(!(field in metadata), field);
  }
  for (const field of ["clusterIP", "clusterIPs", "selector"]) assert.ok(!(field in spec), field);
  assert.equal(spec.type, "ClusterIP");
  const slice = sliceToWrite(7, 10);
  const sliceMetadata = slice.metadata as Record<string, unknown>;
  assert.equal(slice.kind, "EndpointSlice");
  assert.equal((slice.endpoints as unknown[]).length, 10);
  for (const field of ["uid", "creationTimestamp", "managedFields", "generation"]) {
    assert.ok(!(field in sliceMetadata), field);
  }
  assert.equal(
    (sliceMetadata.labels as Record<string, string>)["kubernetes.io/service-name"],
    metadata.name,
  );
});

/** A row whose runs are its medians unless given. */
function row(overrides: Partial<BesideRow> & Pick<BesideRow, "proxy">): BesideRow {
  const firstSyncMs = "firstSyncMs" in overrides ? overrides.firstSyncMs : 1000;
  const changeMs = "changeMs" in overrides ? overrides.changeMs : 50;
  const peakMiB = overrides.peakMiB ?? 100;
  return {
    mode: "nftables",
    services: 1000,
    runs: 3,
    timeoutS: 300,
    firstSyncMs,
    firstSyncRunsMs: [firstSyncMs ?? null],
    changeMs,
    changeRunsMs: [changeMs ?? null],
    peakMiB,
    peakRunsMiB: [peakMiB],
    rssMiB: 90,
    cpuS: 1.5,
    childCpuS: 0.5,
    ...overrides,
  };
}

function beside(rows: BesideRow[]): BesideResults {
  return {
    date: "2026-11-28T01:00:00.000Z",
    rows,
    loads: [{ services: 1000, created: 1000, concurrency: 32, ms: 4000 }],
    loadAverages: { "1000": 3.25 },
    versions: { "kube-proxy": "Kubernetes v1.36.2" },
  };
}

Deno.test("ratio() is kproxy / kube-proxy, or – without both", () => {
  const cases: [number | undefined, number | undefined, string][] = [
    [50, 200, "0.25×"],
    [300, 200, "1.5×"],
    [3000, 200, "15×"],
    [undefined, 200, "–"],
    [50, undefined, "–"],
    [50, 0, "–"],
  ];
  for (const [kproxy, kubeProxy, want] of cases) assert.equal(ratio(kproxy, kubeProxy), want);
});

Deno.test("besideTable() puts both proxies and their ratio on one line per measure", () => {
  const table = besideTable(beside([
    row({ proxy: "kproxy", firstSyncMs: 600, changeMs: 20, peakMiB: 130, rssMiB: 120 }),
    row({ proxy: "kube-proxy", firstSyncMs: 1200, changeMs: 160, peakMiB: 104, rssMiB: 80 }),
    row({
      proxy: "kproxy",
      mode: "iptables",
      services: 10000,
      runs: 1,
      firstSyncMs: 10_600,
      changeMs: 353,
    }),
    row({
      proxy: "kube-proxy",
      mode: "iptables",
      services: 10000,
      runs: 1,
      firstSyncMs: undefined,
      changeMs: undefined,
      cpuS: undefined,
      peakMiB: 300,
    }),
  ]));
  const lines = table.split("\n");
  assert.equal(lines[0], "| cluster | measure | kproxy | kube-proxy 1.36 | kproxy / kube-proxy |");
  assert.ok(
    lines.includes("| 1k, nftables (3 runs) | start → first sync | 600 ms | 1.20 s | 0.50× |"),
  );
  assert.ok(
    lines.includes("| 1k, nftables (3 runs) | one change → kernel | 20.0 ms | 160 ms | 0.13× |"),
  );
  assert.ok(
    lines.includes("| 1k, nftables (3 runs) | peak RSS (VmHWM) | 130 MiB | 104 MiB | 1.3× |"),
  );
  assert.ok(
    lines.includes("| 1k, nftables (3 runs) | steady RSS (VmRSS) | 120 MiB | 80 MiB | 1.5× |"),
  );
  assert.ok(
    lines.includes(
      "| 1k, nftables (3 runs) | CPU to first sync | 2.00 s (1.50 + children 0.50) | " +
        "2.00 s (1.50 + children 0.50) | 1.0× |",
    ),
  );
  assert.ok(
    lines.includes(
      "| 10k, iptables (1 run) | start → first sync | 10.60 s | no sync within 300 s | – |",
    ),
  );
  assert.ok(lines.includes("| 10k, iptables (1 run) | one change → kernel | 353 ms | – | – |"));
  assert.ok(
    lines.includes(
      "| 10k, iptables (1 run) | peak RSS (VmHWM) | 100 MiB | 300 MiB (at the time-out) | 0.33× |",
    ),
  );
  // 1k before 10k.
  assert.ok(lines.findIndex((l) => l.includes("1k,")) < lines.findIndex((l) => l.includes("10k,")));
});

Deno.test("besideTargets() judges each of issue 34's targets from the run, saying what is missing", () => {
  const table = besideTargets(beside([
    row({ proxy: "kproxy", firstSyncMs: 600, changeMs: 20, peakMiB: 80, rssMiB: 80 }),
    row({ proxy: "kube-proxy", firstSyncMs: 1200, changeMs: 160, peakMiB: 100, rssMiB: 100 }),
    row({ proxy: "kproxy", mode: "iptables", firstSyncMs: 900, changeMs: 90, peakMiB: 95 }),
    row({ proxy: "kube-proxy", mode: "iptables", firstSyncMs: 5000, changeMs: 150, peakMiB: 100 }),
    row({
      proxy: "kproxy",
      mode: "iptables",
      services: 10000,
      runs: 1,
      firstSyncMs: 10_600,
      changeMs: 353,
      peakMiB: 200,
    }),
    row({
      proxy: "kube-proxy",
      mode: "iptables",
      services: 10000,
      runs: 1,
      firstSyncMs: undefined,
      changeMs: undefined,
      cpuS: undefined,
      peakMiB: 400,
    }),
  ]));
  const lines = table.split("\n");
  assert.equal(lines[0], "| target | goal | kproxy / kube-proxy | verdict |");
  const expected = [
    "| iptables, 1k: peak RSS | ≤ 0.9× | 0.95× | **missed** |",
    "| iptables, 10k: peak RSS | ≤ 0.6× | 0.50× (kube-proxy's at its time-out) | met |",
    "| nftables, 1k: peak RSS | ≤ 0.85× | 0.80× | met |",
    "| nftables, 1k: start → first sync | ≤ 0.7× | 0.50× | met |",
    "| nftables, 10k: peak RSS | ≤ 0.5× | not measured | – |",
    "| nftables, 10k: start → first sync | ≤ 0.3× | not measured | – |",
    "| nftables, 1k: one change | ≤ 0.2× | 0.13× | met |",
    "| nftables, 10k: one change | ≤ 0.2× | not measured | – |",
    "| iptables, 1k: one change | ≤ 0.5× | 0.60× | **missed** |",
    "| iptables, 10k: one change | ≤ 0.5× | – (kube-proxy did not sync within 300 s) | – |",
  ];
  for (const line of expected) assert.ok(lines.includes(line), `${line}\n${table}`);
});

Deno.test("loadTable() gives the time and rate of each load", () => {
  assert.match(loadTable(beside([])), /\| 1k \| 1000 \| 32 \| 4.00 s \| 500 \|/);
});

Deno.test("kubeProxyCell() reads kube-proxy's figure for another section, – when not measured", () => {
  const run = beside([row({ proxy: "kube-proxy", firstSyncMs: 790, changeMs: 153, peakMiB: 105 })]);
  assert.equal(
    kubeProxyCell(run, { mode: "nftables", services: 1000, measure: "firstSync" }),
    "790 ms",
  );
  assert.equal(
    kubeProxyCell(run, { mode: "nftables", services: 1000, measure: "peak" }),
    "105 MiB",
  );
  assert.equal(kubeProxyCell(run, { mode: "iptables", services: 1000, measure: "peak" }), "–");
  assert.equal(
    kubeProxyCell(undefined, { mode: "nftables", services: 1000, measure: "peak" }),
    "–",
  );
});

Deno.test("besideSection() states the date, machine and load, or why it was skipped", () => {
  const text = besideSection(
    beside([row({ proxy: "kproxy" }), row({ proxy: "kube-proxy" })]),
    "2 CPUs (test CPU)",
  ).join("\n");
  assert.match(text, /## Beside kube-proxy on a real kube-apiserver/);
  assert.match(text, /Measured 2026-11-28T01:00:00.000Z on 2 CPUs \(test CPU\)/);
  assert.match(text, /3.3 at 1k/);
  assert.match(text, /kube-proxy: Kubernetes v1.36.2/);
  assert.match(text, /no\s+IPVS/);
  assert.match(text, /the machine was shared/, "load 3.3 is another job's");
  const idle = besideSection(
    { ...beside([row({ proxy: "kproxy" })]), loadAverages: { "1000": 0.1, "10000": 1.2 } },
    "m",
  ).join("\n");
  assert.match(idle, /the machine was otherwise idle/);
  assert.doesNotMatch(idle, /shared/);
  const failed = besideSection(
    { ...beside([row({ proxy: "kproxy" })]), failures: ["kube-proxy nftables 1000 run 1: exited"] },
    "m",
  ).join("\n");
  assert.match(failed, /Runs that failed:\n\n- kube-proxy nftables 1000 run 1: exited/);
  const skipped = besideSection({ ...beside([]), skipped: "missing /tmp/x: build it" }, "m")
    .join("\n");
  assert.match(skipped, /Skipped in the latest run: missing \/tmp\/x: build it/);
});

Deno.test("mergeBeside() replaces what was re-measured and keeps the rest", () => {
  const base = beside([
    row({ proxy: "kproxy", services: 1000, peakMiB: 1 }),
    row({ proxy: "kproxy", services: 10000, peakMiB: 2 }),
  ]);
  const fresh = {
    ...beside([row({ proxy: "kproxy", services: 1000, peakMiB: 3 })]),
    date: "2026-11-29T00:00:00.000Z",
    loadAverages: { "1000": 1 },
  };
  const merged = mergeBeside(base, fresh);
  assert.deepEqual(merged.rows.map((r) => [r.services, r.peakMiB]), [[10000, 2], [1000, 3]]);
  assert.equal(merged.date, "2026-11-29T00:00:00.000Z");
  assert.deepEqual(merged.loadAverages, { "1000": 1 });
  assert.equal(mergeBeside(undefined, fresh), fresh);
  const skipped = mergeBeside(base, { ...beside([]), skipped: "no binary" });
  assert.equal(skipped.rows.length, 2);
  assert.equal(skipped.skipped, "no binary");
});

Deno.test("parseBenchArgs() reads the beside section's runs and time-out", () => {
  const options = parseBenchArgs(["--only=beside", "--beside-runs=2", "--beside-timeout=90"]);
  assert.deepEqual(options.sections, ["beside"]);
  assert.equal(options.besideRuns, 2);
  assert.equal(options.besideTimeoutS, 90);
  assert.equal(parseBenchArgs([]).besideRuns, 3);
  assert.throws(() => parseBenchArgs(["--beside-runs=0"]), /Cannot parse --beside-runs 0/);
  assert.throws(() => parseBenchArgs(["--beside-timeout=x"]), /Cannot parse --beside-timeout x/);
});

Deno.test("besideTargets() says when a time target is met only against kube-proxy's slow runs", () => {
  const table = besideTargets(beside([
    row({
      proxy: "kproxy",
      services: 10000,
      firstSyncMs: 5000,
      firstSyncRunsMs: [4900, 5000, 5100],
      changeMs: 40,
      changeRunsMs: [40, 40, 40],
    }),
    row({
      proxy: "kube-proxy",
      services: 10000,
      firstSyncMs: 30_000,
      firstSyncRunsMs: [12_000, 30_000, 57_000],
      changeMs: 6000,
      changeRunsMs: [5000, 6000, 7000],
    }),
  ]));
  const lines = table.split("\n");
  const expected = [
    "| nftables, 10k: start → first sync | ≤ 0.3× | 0.17× (0.42× against kube-proxy's fastest run) " +
    "| met by the median only |",
    "| nftables, 10k: one change | ≤ 0.2× | 0.01× | met |",
  ];
  for (const line of expected) assert.ok(lines.includes(line), `${line}\n${table}`);
});
