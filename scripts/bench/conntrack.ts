/**
 * The cost of one conntrack reconcile (`lib/conntrack_reconciler.ts`) on a
 * busy node: a bench namespace gets `entries` conntrack entries (inserted in
 * bulk with `conntrack -R`), most of them not Service traffic, and a Plan of
 * `services` UDP Services with 10 serving endpoints each; the reconciler
 * then runs as kproxy runs it after a sync, in-process, its `conntrack`
 * commands in the namespace. Measured: the whole reconcile (listing, parsing,
 * deleting), the listing alone, and kproxy's RSS and heap around it.
 *
 * ```sh
 * deno run --allow-all scripts/bench/conntrack.ts   # prints one row per scenario
 * ```
 *
 * @module
 */

import { ConntrackReconciler } from "../../lib/shell/conntrack_reconciler.ts";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { HostExecutor, NetnsExecutor } from "../netns.ts";
import { median, withNamespace } from "./harness.ts";

/** One measured scenario. */
export interface ConntrackRow {
  scenario: string;
  entries: number;
  /** UDP entries among them (what `conntrack -L -p udp` prints). */
  udpEntries: number;
  services: number;
  stalePairs: number;
  deleted: number;
  /** The first reconcile (the one that deletes): list + parse + delete, as after a sync. */
  reconcileMs: number;
  /** Median of the later reconciles, when nothing is stale any more. */
  repeatMs: number;
  /** Median of the runs: `conntrack -L -f ipv4 -p udp` read line by line, nothing else. */
  listMs: number;
  /** Median time of a bare netlink dump (python3, no printing) of every IPv4 entry, and of
   * the UDP ones only with the kernel filtering (CTA_FILTER): the floor of any listing. */
  netlinkAllMs: number;
  netlinkUdpMs: number;
  runs: number;
  /** kproxy's RSS before the first reconcile, and the highest seen while it ran, in MiB. */
  rssBeforeMiB: number;
  rssPeakMiB: number;
  /** JS heap used after the runs (after GC when exposed) minus before, in MiB. */
  heapGrowthMiB: number;
}

/** Options for {@linkcode benchConntrack}. */
export interface ConntrackBenchOptions {
  /** @default {100_000} */
  entries?: number;
  /** @default {10_000} */
  services?: number;
  /** @default {5} */
  runs?: number;
}

const ENDPOINTS_PER_SERVICE = 10;
const CONNTRACK_TIMEOUT_S = 3600;

function ip(base: number, index: number): string {
  const value = base + index;
  return `${value >>> 24}.${(value >>> 16) & 255}.${(value >>> 8) & 255}.${value & 255}`;
}

const CLUSTER_BASE = (10 << 24) | (96 << 16); // 10.96.0.0
const POD_BASE = (10 << 24) | (244 << 16); // 10.244.0.0
const CLIENT_BASE = (10 << 24) | (201 << 16); // 10.201.0.0
const EXTERNAL_BASE = (192 << 24) | (168 << 16); // 192.168.0.0

function endpointOf(service: number, index: number): PlanEndpoint {
  return {
    ip: ip(POD_BASE, service * ENDPOINTS_PER_SERVICE + index),
    port: 5353,
    nodeName: "node-b",
    zone: "",
    isLocal: false,
    ready: true,
    serving: true,
    terminating: false,
  };
}

/** `services` UDP Services (port 53 on 10.96.x.y) with 10 serving endpoints each. */
export function udpPlan(services: number): Plan {
  const ports: ServicePortPlan[] = [];
  for (let i = 0; i < services; i++) {
    const name = `dns-${String(i).padStart(6, "0")}`;
    const endpoints = Array.from({ length: ENDPOINTS_PER_SERVICE }, (_, j) => endpointOf(i, j));
    const traffic = { endpoints, whenEmpty: "reject" as const, reason: "bench" };
    ports.push({
      id: `bench/${name}:dns/UDP`,
      namespace: "bench",
      name,
      portName: "dns",
      protocol: "UDP",
      port: 53,
      clusterIPs: [ip(CLUSTER_BASE, i + 1)],
      nodePort: 0,
      externalIPs: [],
      loadBalancerIPs: [],
      sourceRanges: [],
      allowFromLoadBalancerIPs: false,
      healthCheckNodePort: 0,
      affinityTimeoutSeconds: 0,
      internal: traffic,
      external: traffic,
      externalLocal: false,
      localReadyEndpoints: 0,
      servingEndpoints: endpoints,
    });
  }
  return {
    family: "IPv4",
    nodeName: "node-a",
    nodePortAddresses: ["10.201.0.1"],
    serviceCIDRs: ["10.96.0.0/16"],
    localTraffic: { mode: "None" },
    clusterIPMasquerade: "non-local",
    services: ports,
  };
}

/**
 * `conntrack -R` lines that create the node's entries: 1 in 10 a UDP flow to a
 * Service (its endpoint a serving one, or, for the first `stale` services, a
 * gone one), 4 in 10 UDP to other addresses, half TCP.
 */
function* insertLines(entries: number, services: number, stale: number): Generator<string> {
  for (let i = 0; i < entries; i++) {
    const client = ip(CLIENT_BASE, 2 + (i >> 14));
    const sport = 1024 + (i & 16383);
    const timeout = `-t ${CONNTRACK_TIMEOUT_S}`;
    if (i % 10 === 0) {
      const service = (i / 10) % services;
      const vip = ip(CLUSTER_BASE, service + 1);
      const target = service < stale
        ? ip(POD_BASE, 200_000 + service) // an endpoint that is gone
        : endpointOf(service, i % ENDPOINTS_PER_SERVICE).ip;
      yield `-I ${timeout} -u ASSURED -s ${client} -d ${vip} -r ${target} -q ${client} -p udp ` +
        `--sport ${sport} --dport 53 --reply-port-src 5353 --reply-port-dst ${sport}\n`;
    } else if (i % 10 < 5) {
      const server = ip(EXTERNAL_BASE, i % 4096);
      yield `-I ${timeout} -s ${client} -d ${server} -p udp --sport ${sport} --dport 443\n`;
    } else {
      const server = ip(EXTERNAL_BASE, i % 4096);
      yield `-I ${timeout} -s ${client} -d ${server} -p tcp --sport ${sport} --dport 443 ` +
        `--state ESTABLISHED\n`;
    }
  }
}

/**
 * A bare ctnetlink dump of the IPv4 table that only counts the messages: "all",
 * or "udp" with the kernel filtering on the protocol (CTA_FILTER, Linux 5.8+),
 * which conntrack-tools 1.4.7 never asks for. Prints the milliseconds it took.
 */
const NETLINK_DUMP = `
import socket, struct, sys, time
def nla(kind, payload):
    size = 4 + len(payload)
    return struct.pack("HH", size, kind) + payload + bytes((4 - size % 4) % 4)
NESTED = 1 << 15
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
s.bind((0, 0))
body = struct.pack("BBH", socket.AF_INET, 0, 0)
if sys.argv[1] == "udp":
    proto = nla(2 | NESTED, nla(1, struct.pack("B", socket.IPPROTO_UDP)))
    body += nla(1 | NESTED, proto)
    body += nla(25 | NESTED, nla(1, struct.pack("I", 1 << 3)) + nla(2, struct.pack("I", 0)))
start = time.perf_counter()
s.send(struct.pack("IHHII", 16 + len(body), (1 << 8) | 1, 0x301, 1, 0) + body)
done = False
while not done:
    data = s.recv(1 << 20)
    offset = 0
    while offset < len(data):
        size, kind = struct.unpack_from("IH", data, offset)
        if kind in (2, 3):
            done = True
            break
        offset += (size + 3) & ~3
print((time.perf_counter() - start) * 1000)
`;

async function netlinkDumpMs(node: NetnsExecutor, filter: "all" | "udp"): Promise<number> {
  const result = await node.run({ program: "python3", args: ["-c", NETLINK_DUMP, filter] });
  if (result.code !== 0) throw new Error(`Cannot dump conntrack over netlink: ${result.stderr}`);
  return Number(result.stdout.trim());
}

function mib(bytes: number): number {
  return Math.round(bytes / 1024 / 1024 * 10) / 10;
}

function collectGarbage(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

/** Medians of `runs` timings of `fn`. */
async function medianOf(runs: number, fn: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let run = 0; run < runs; run++) {
    const start = performance.now();
    await fn();
    times.push(performance.now() - start);
  }
  return median(times);
}

function scenarioName(stale: number): string {
  if (stale === 0) return "nothing stale";
  const s = stale === 1 ? "" : "s";
  return `${stale} endpoint${s} gone (${stale} stale pair${s})`;
}

/** One scenario in a fresh namespace: `stale` Services each have a flow to a gone endpoint. */
async function measure(plan: Plan, options: Required<ConntrackBenchOptions> & { stale: number }) {
  return await withNamespace("ct", async (namespace): Promise<ConntrackRow> => {
    const node = new NetnsExecutor({ namespace, inner: new HostExecutor() });
    const loaded = await node.run({
      program: "conntrack",
      args: ["-R", "-"],
      stdin: insertLines(options.entries, options.services, options.stale),
      timeoutMs: 600_000,
    });
    if (loaded.code !== 0) throw new Error(`Cannot insert conntrack entries: ${loaded.stderr}`);
    const count = await node.run({ program: "conntrack", args: ["-C"] });
    let udpEntries = 0;
    const listMs = await medianOf(options.runs, async () => {
      udpEntries = 0;
      await node.run({
        program: "conntrack",
        args: ["-L", "-f", "ipv4", "-p", "udp"],
        onStdoutLine: () => udpEntries++,
      });
    });
    const netlinkAll: number[] = [];
    const netlinkUdp: number[] = [];
    for (let run = 0; run < options.runs; run++) {
      netlinkAll.push(await netlinkDumpMs(node, "all"));
      netlinkUdp.push(await netlinkDumpMs(node, "udp"));
    }

    collectGarbage();
    const rssBefore = Deno.memoryUsage().rss;
    const heapBefore = Deno.memoryUsage().heapUsed;
    let rssPeak = rssBefore;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, Deno.memoryUsage().rss);
    }, 5);
    const reconciler = new ConntrackReconciler({ executor: node });
    const times: number[] = [];
    let first = { stalePairs: 0, deleted: 0 };
    try {
      for (let run = 0; run < options.runs; run++) {
        const start = performance.now();
        const result = await reconciler.reconcile(plan);
        times.push(performance.now() - start);
        if (result.error) throw new Error(result.error);
        if (run === 0) first = result;
      }
    } finally {
      clearInterval(sampler);
    }
    collectGarbage();
    return {
      scenario: scenarioName(options.stale),
      entries: Number(count.stdout.trim()),
      udpEntries,
      services: options.services,
      stalePairs: first.stalePairs,
      deleted: first.deleted,
      reconcileMs: times[0]!,
      repeatMs: median(times.slice(1)),
      listMs,
      netlinkAllMs: median(netlinkAll),
      netlinkUdpMs: median(netlinkUdp),
      runs: options.runs,
      rssBeforeMiB: mib(rssBefore),
      rssPeakMiB: mib(rssPeak),
      heapGrowthMiB: mib(Deno.memoryUsage().heapUsed - heapBefore),
    };
  });
}

/** Measures the reconcile with nothing stale, then after 1 and after 10 endpoints went away. */
export async function benchConntrack(options: ConntrackBenchOptions = {}): Promise<ConntrackRow[]> {
  const resolved = {
    entries: options.entries ?? 100_000,
    services: options.services ?? 10_000,
    runs: options.runs ?? 5,
  };
  const plan = udpPlan(resolved.services);
  const rows: ConntrackRow[] = [];
  for (const stale of [0, 1, 10]) rows.push(await measure(plan, { ...resolved, stale }));
  return rows;
}

if (import.meta.main) {
  for (const row of await benchConntrack()) console.log(JSON.stringify(row));
}
