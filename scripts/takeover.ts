/**
 * A live switch between kube-proxy and kproxy, shared by the takeover kernel
 * tests and the takeover bench: kube-proxy's ruleset loaded as its first sync
 * would write it, the leftovers kube-proxy may have left, a paced client that
 * opens a connection every few milliseconds and reports every failure and
 * the longest gap between two answers, and the takeover and hand-back flows
 * on one scenario of Services.
 *
 * @module
 */

import { isIptablesModeChain } from "../backends/iptables/chains.ts";
import { splitSave } from "../backends/iptables/save.ts";
import { isIpvsModeChain } from "../backends/ipvs/iptables.ts";
import { parseTableList } from "../backends/nftables/render.ts";
import { runChecked } from "../lib/shell/exec.ts";
import type { Executor } from "../lib/core/executor.ts";
import type { Plan } from "../lib/core/plan.ts";
import {
  KUBE_PROXY_NFACCT,
  renderKubeProxyIptables,
  renderKubeProxyNftables,
} from "./kube_proxy_rules.ts";
import { main } from "../lib/commands/app.ts";
import { endpointOf, familyPlan, servicePort } from "./testbed/plans.ts";
import { nodeObject, serviceObject, sliceObject } from "./testbed/objects.ts";
import type { ApiObject } from "./testbed/fake_apiserver.ts";
import { ManualSource, startKproxy, waitFor } from "./testbed/kproxy.ts";
import { ADDRESSES, NetnsExecutor, type Pod, type Topology } from "./netns.ts";

/** The kube-proxy a switch starts from (takeover) or goes to (hand-back). */
export type KubeProxyMode = "nftables" | "iptables-nft" | "iptables-legacy";

/** Every {@linkcode KubeProxyMode}. */
export const KUBE_PROXY_MODES: readonly KubeProxyMode[] = [
  "nftables",
  "iptables-nft",
  "iptables-legacy",
];

/**
 * Loads kube-proxy's ruleset for the IPv4 `plan` through `executor` (a
 * namespace's), in one load as kube-proxy's first sync writes it; the
 * iptables modes first create the nfacct counters kube-proxy's rules name.
 */
export async function loadKubeProxyRules(
  executor: Executor,
  options: { mode: KubeProxyMode; plan: Plan },
): Promise<void> {
  if (options.mode === "nftables") {
    await runChecked(executor, {
      program: "nft",
      args: ["-f", "-"],
      stdin: renderKubeProxyNftables(options.plan),
    });
    return;
  }
  for (const counter of KUBE_PROXY_NFACCT) {
    const added = await executor.run({ program: "nfacct", args: ["add", counter] });
    if (added.code !== 0 && !/exists/i.test(added.stderr)) {
      throw new Error(`Cannot add nfacct counter ${counter}: ${added.stderr.trim()}`);
    }
  }
  await runChecked(executor, {
    program: options.mode === "iptables-nft" ? "iptables-nft-restore" : "iptables-legacy-restore",
    args: ["-w", "5", "--noflush"],
    stdin: renderKubeProxyIptables(options.plan),
  });
}

/**
 * What of a kube-proxy is left in a namespace: its nftables tables and the
 * iptables chains of its iptables and ipvs modes (kubelet's are not its), as
 * `nft ip kube-proxy` or `iptables-nft IPv4 nat KUBE-SERVICES`.
 */
export async function kubeProxyLeftovers(executor: Executor): Promise<string[]> {
  const tables = await runChecked(executor, { program: "nft", args: ["list", "tables"] });
  const left = parseTableList(tables.stdout).filter((entry) => / kube-proxy$/.test(entry))
    .map((entry) => `nft ${entry}`);
  for (const variant of ["nft", "legacy"]) {
    for (const [family, program] of [["IPv4", "iptables"], ["IPv6", "ip6tables"]]) {
      const save = await runChecked(executor, { program: `${program}-${variant}-save`, args: [] });
      for (const [table, text] of splitSave(save.stdout)) {
        for (const match of text.matchAll(/^:(\S+) /gm)) {
          const chain = match[1]!;
          if (isIptablesModeChain(table, chain) || isIpvsModeChain(table, chain)) {
            left.push(`iptables-${variant} ${family} ${table} ${chain}`);
          }
        }
      }
    }
  }
  return left;
}

/** Options for {@linkcode PacedClient.start}. */
export interface PacedClientOptions {
  /** Namespace the client runs in. */
  namespace: string;
  /** Each connection goes to the next target, round robin. */
  targets: { ip: string; port: number }[];
  /** Time between two connection attempts. @default {15} */
  intervalMs?: number;
  durationMs: number;
  /** How long one connection may take. @default {1000} */
  timeoutMs?: number;
}

/** One failed connection of a {@linkcode PacedClient}. */
export interface PacedFailure {
  /** Milliseconds after the client started. */
  atMs: number;
  target: string;
  error: string;
}

/** What a {@linkcode PacedClient} saw. */
export interface PacedResult {
  attempts: number;
  failures: PacedFailure[];
  /** Per target (`ip:port`), the longest time between two answered connections. */
  longestGapMs: Record<string, number>;
}

const PACED_CLIENT = `
import json, socket, sys, time
spec = json.loads(sys.argv[1])
targets = [(t["ip"], t["port"]) for t in spec["targets"]]
interval = spec["intervalMs"] / 1000.0
timeout = spec["timeoutMs"] / 1000.0
start = time.monotonic()
end = start + spec["durationMs"] / 1000.0
attempts = 0
failures = []
last_ok = {}
gaps = {}
next_at = start
i = 0
while time.monotonic() < end:
    ip, port = targets[i % len(targets)]
    name = "%s:%d" % (ip, port)
    i += 1
    attempts += 1
    at = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((ip, port))
        data = s.recv(256)
        if not data:
            raise OSError("empty answer")
        now = time.monotonic()
        if name in last_ok:
            gaps[name] = max(gaps.get(name, 0), now - last_ok[name])
        last_ok[name] = now
    except OSError as e:
        failures.append({"atMs": round((at - start) * 1000, 1), "target": name, "error": str(e) or type(e).__name__})
    finally:
        s.close()
    next_at += interval
    pause = next_at - time.monotonic()
    if pause > 0:
        time.sleep(pause)
    else:
        next_at = time.monotonic()
print(json.dumps({
    "attempts": attempts,
    "failures": failures,
    "longestGapMs": {k: round(v * 1000, 1) for k, v in gaps.items()},
}))
`;

/**
 * A python client in a namespace that opens a TCP connection every
 * `intervalMs` for `durationMs`, round robin over its targets, and reads the
 * echo pod's answer. Start it, do the switch, then await {@linkcode result}.
 */
export class PacedClient {
  readonly #output: Promise<{ code: number; stdout: string; stderr: string }>;
  readonly #startedAt = performance.now();

  private constructor(options: PacedClientOptions) {
    const spec = {
      targets: options.targets,
      intervalMs: options.intervalMs ?? 15,
      durationMs: options.durationMs,
      timeoutMs: options.timeoutMs ?? 1000,
    };
    this.#output = new NetnsExecutor({ namespace: options.namespace }).run({
      program: "python3",
      args: ["-c", PACED_CLIENT, JSON.stringify(spec)],
      timeoutMs: options.durationMs + 30_000,
    });
  }

  /** Starts the client. */
  static start(options: PacedClientOptions): PacedClient {
    return new PacedClient(options);
  }

  /** Milliseconds since the client was started. */
  get elapsedMs(): number {
    return performance.now() - this.#startedAt;
  }

  /** Waits for the client to finish and returns what it saw. */
  async result(): Promise<PacedResult> {
    const { code, stdout, stderr } = await this.#output;
    if (code !== 0) throw new Error(`The paced client failed: ${stderr.trim()}`);
    return JSON.parse(stdout);
  }
}

// ---------------------------------------------------------------------------
// The switch scenario shared by tests/kernel/takeover_test.ts and the bench.

/** The ClusterIP and NodePort the paced client goes through. */
export const SCENARIO_TARGETS = Object.freeze({
  clusterIP: { ip: "10.96.0.10", port: 80 },
  nodePort: { ip: ADDRESSES.nodeV4, port: 30080 },
});

/** Addresses of the scenario's other Services. */
export const SCENARIO_ADDRESSES = Object.freeze({
  /** A Service deleted through kproxy's input after the switch. */
  gone: "10.96.0.11",
  /** A Service kube-proxy served that kproxy refuses (bad protocol). */
  refused: "10.96.0.12",
  /** The load-balancer IP kube-proxy firewalled with source ranges that no longer exist. */
  loadBalancer: "192.0.2.50",
});

/**
 * kproxy's input: web (ClusterIP and NodePort, two local pods), gone, a
 * Service it refuses, and lb (the third pod) without source ranges.
 */
export function scenarioObjects(topology: Topology): ApiObject[] {
  const [a1, a2, a3] = topology.localPods;
  const { clusterIP, nodePort } = SCENARIO_TARGETS;
  const refused = serviceObject({ name: "refused", clusterIP: SCENARIO_ADDRESSES.refused });
  refused.spec.ports[0].protocol = "ICMP";
  const lb = serviceObject({
    name: "lb",
    clusterIP: "10.96.0.13",
    type: "NodePort",
    nodePort: 30081,
  });
  lb.spec.type = "LoadBalancer";
  lb.status = { loadBalancer: { ingress: [{ ip: SCENARIO_ADDRESSES.loadBalancer }] } };
  return [
    nodeObject(),
    serviceObject({
      name: "web",
      clusterIP: clusterIP.ip,
      type: "NodePort",
      nodePort: nodePort.port,
    }),
    sliceObject("web", [a1!.ipv4, a2!.ipv4]),
    serviceObject({ name: "gone", clusterIP: SCENARIO_ADDRESSES.gone }),
    sliceObject("gone", [a1!.ipv4]),
    refused,
    sliceObject("refused", [a1!.ipv4]),
    lb,
    sliceObject("lb", [a3!.ipv4]),
  ];
}

/**
 * kube-proxy's view of the same Services: it still serves `refused`, and
 * `lb` only from the client's second address. `webPods` defaults to kproxy's.
 */
export function scenarioKubeProxyPlan(topology: Topology, webPods?: Pod[]): Plan {
  const [a1, a2, a3] = topology.localPods;
  const { clusterIP, nodePort } = SCENARIO_TARGETS;
  return familyPlan("IPv4", [
    servicePort({
      name: "web",
      clusterIP: clusterIP.ip,
      nodePort: nodePort.port,
      endpoints: (webPods ?? [a1!, a2!]).map((pod) => endpointOf(pod)),
    }),
    servicePort({ name: "gone", clusterIP: SCENARIO_ADDRESSES.gone, endpoints: [endpointOf(a1!)] }),
    servicePort({
      name: "refused",
      clusterIP: SCENARIO_ADDRESSES.refused,
      endpoints: [endpointOf(a1!)],
    }),
    servicePort({
      name: "lb",
      clusterIP: "10.96.0.13",
      nodePort: 30081,
      loadBalancerIPs: [SCENARIO_ADDRESSES.loadBalancer],
      sourceRanges: [`${ADDRESSES.clientV4Other}/32`],
      endpoints: [endpointOf(a3!)],
    }),
  ]);
}

/** Timing of a switch: how long the paced client runs and when the switch starts. */
export interface SwitchTiming {
  /** @default {5000} */
  durationMs?: number;
  /** @default {1500} */
  switchAtMs?: number;
}

/** Options for {@linkcode takeOver}. */
export interface TakeOverOptions extends SwitchTiming {
  topology: Topology;
  from: KubeProxyMode;
  /** kproxy's flags beyond the harness's (nftables mode). @default {[]} */
  kproxyArgs?: string[];
  /**
   * The iptables variant kproxy runs with in iptables mode: there its fixed
   * chains carry kube-proxy's names, so only kube-proxy's per-service chains
   * count as left over. @default none (nftables mode)
   */
  kproxyVariant?: "nft" | "legacy";
  /** Runs once kube-proxy's rules are loaded, before the client starts (checks of the old state). */
  before?: () => Promise<void>;
  /** Runs while kproxy still runs, after the client finished (checks of the new state). */
  afterwards?: (source: ManualSource) => Promise<void>;
}

/**
 * A takeover: kube-proxy's ruleset for the scenario is in the node
 * namespace; the paced client runs; kproxy (in-process, nftables mode unless `kproxyArgs` say)
 * starts with the scenario's objects at `switchAtMs` and runs until kube-proxy's
 * leftovers are gone and the client is done.
 */
export async function takeOver(options: TakeOverOptions): Promise<PacedResult> {
  const { topology } = options;
  const node = new NetnsExecutor({ namespace: topology.node });
  await loadKubeProxyRules(node, { mode: options.from, plan: scenarioKubeProxyPlan(topology) });
  await options.before?.();
  const client = PacedClient.start({
    namespace: topology.client,
    targets: [SCENARIO_TARGETS.clusterIP, SCENARIO_TARGETS.nodePort],
    durationMs: options.durationMs ?? 5_000,
  });
  await sleep(options.switchAtMs ?? 1_500);
  const source = ManualSource.listed(scenarioObjects(topology));
  const kproxy = await startKproxy({ source, executor: node, args: options.kproxyArgs });
  const theirs = new Set(
    [...renderKubeProxyIptables(scenarioKubeProxyPlan(topology)).matchAll(/^:(KUBE-\S+) /gm)]
      .map((match) => match[1]!),
  );
  const left = async () =>
    (await kubeProxyLeftovers(node)).filter((entry) => {
      const [tool, , , chain] = entry.split(" ");
      return tool !== `iptables-${options.kproxyVariant}` || theirs.has(chain!) &&
          /^KUBE-(SVC|SVL|EXT|FW|SEP)-/.test(chain!);
    });
  try {
    await waitFor("kube-proxy's rules removed", async () => (await left()).length === 0, 15_000);
    const result = await client.result();
    await options.afterwards?.(source);
    return result;
  } finally {
    await kproxy.stop();
  }
}

/** Options for {@linkcode handBack}. */
export interface HandBackScenarioOptions extends SwitchTiming {
  topology: Topology;
  to: KubeProxyMode;
  /** The pods kube-proxy sends web to. @default kproxy's */
  webPods?: Pod[];
}

/**
 * A hand-back as scripts/deploy/README.md documents it: kproxy runs; at
 * `switchAtMs` it stops (SIGTERM: its rules stay), kube-proxy's first sync
 * loads its ruleset, and `kproxy hand-back` removes kproxy's rules.
 */
export async function handBackScenario(options: HandBackScenarioOptions): Promise<PacedResult> {
  const { topology } = options;
  const node = new NetnsExecutor({ namespace: topology.node });
  const kproxy = await startKproxy({
    source: ManualSource.listed(scenarioObjects(topology)),
    executor: node,
  });
  try {
    await waitFor("kproxy's first sync", () => kproxy.app.proxier.lastSynced !== undefined);
  } catch (error) {
    await kproxy.stop();
    throw error;
  }
  const client = PacedClient.start({
    namespace: topology.client,
    targets: [SCENARIO_TARGETS.clusterIP, SCENARIO_TARGETS.nodePort],
    durationMs: options.durationMs ?? 5_000,
  });
  await sleep(options.switchAtMs ?? 1_500);
  const stopped = await kproxy.stop();
  if (stopped !== 0) throw new Error(`kproxy exited with ${stopped} on SIGTERM`);
  await loadKubeProxyRules(node, {
    mode: options.to,
    plan: scenarioKubeProxyPlan(topology, options.webPods),
  });
  const stderr: string[] = [];
  const code = await main(["hand-back", "--hostname-override=node-a"], {
    executor: node,
    setupLogging: false,
    io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
  });
  if (code !== 0) throw new Error(`kproxy hand-back exited with ${code}: ${stderr.join("")}`);
  return await client.result();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
