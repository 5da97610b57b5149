/**
 * Data-path benchmark: TCP connect latency through kproxy's rules to the
 * first and the last of N services, nftables vs iptables. A client namespace
 * connects to ClusterIPs; the node namespace holds the rules (loaded by the
 * real backends); the first and last services lead to an echo pod, every
 * other service to ten addresses nobody serves. All namespaces are
 * `kp-b-dp*` and deleted afterwards.
 *
 * @module
 */

import type { Backend } from "../../lib/core/backend.ts";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import type { Plan, PlanEndpoint } from "../../lib/core/plan.ts";
import { NetnsExecutor, Topology } from "../netns.ts";
import { benchPlan } from "./plan.ts";
import { PatientExecutor } from "./harness.ts";

/** Connect latency to one service. */
export interface DatapathRow {
  mode: "nftables" | "iptables";
  services: number;
  /** "first" or "last" in the rendered order. */
  target: "first" | "last";
  clusterIP: string;
  connects: number;
  medianUs: number;
  p90Us: number;
  failures: number;
}

const CONNECT_CLIENT = `
import json, socket, sys, time
targets = json.loads(sys.argv[1])
rounds = int(sys.argv[2])
out = {t["name"]: {"us": [], "failures": 0} for t in targets}
for i in range(rounds + 20):
    for t in targets:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00")
        s.settimeout(2)
        start = time.perf_counter_ns()
        try:
            s.connect((t["ip"], t["port"]))
            elapsed = (time.perf_counter_ns() - start) / 1000
            if i >= 20:
                out[t["name"]]["us"].append(elapsed)
        except OSError:
            out[t["name"]]["failures"] += 1
        finally:
            s.close()
print(json.dumps(out))
`;

function podEndpoint(ip: string): PlanEndpoint {
  return {
    ip,
    port: 8080,
    nodeName: "node-a",
    zone: "",
    isLocal: true,
    ready: true,
    serving: true,
    terminating: false,
  };
}

/** The bench plan with its first and last services pointing at `podIP`. */
function datapathPlan(services: number, podIP: string): Plan {
  const plan = benchPlan(services, 10);
  for (const index of [0, services - 1]) {
    const service = plan.services[index]!;
    const traffic = { ...service.internal, endpoints: [podEndpoint(podIP)] };
    plan.services[index] = { ...service, internal: traffic, external: traffic };
  }
  return plan;
}

function quantileOf(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * q))]!;
}

/**
 * Loads the plan with each mode in turn (removing the previous mode's rules)
 * and measures `rounds` connects to the first and the last service,
 * interleaved.
 */
export async function benchDatapath(options: {
  services: number;
  rounds?: number;
  /** @default {["nftables", "iptables"]} */
  modes?: readonly ("nftables" | "iptables")[];
}): Promise<DatapathRow[]> {
  const rounds = options.rounds ?? 300;
  const topology = await Topology.create({
    prefix: `kp-b-dp${Topology.randomTag()}-`,
    localPods: 1,
    remotePods: 0,
    serverLifetimeSeconds: 1800,
  });
  try {
    const pod = topology.localPods[0]!;
    const plan = datapathPlan(options.services, pod.ipv4);
    const targets = {
      first: plan.services[0]!.clusterIPs[0]!,
      last: plan.services[options.services - 1]!.clusterIPs[0]!,
    };
    const executor = new PatientExecutor(topology.node);
    const backends: Array<["nftables" | "iptables", () => Promise<Backend>]> = [
      ["nftables", () =>
        Promise.resolve(
          createNftablesBackend({ executor, config: defaultConfig("node-a"), families: ["IPv4"] }),
        )],
      ["iptables", () => {
        const config = defaultConfig("node-a");
        config.iptables.backend = "nft";
        return Promise.resolve(createIptablesBackend({ executor, config, families: ["IPv4"] }));
      }],
    ];
    const rows: DatapathRow[] = [];
    const measured = backends.filter(([mode]) =>
      (options.modes ?? ["nftables", "iptables"]).includes(mode)
    );
    for (const [index, [mode, create]] of measured.entries()) {
      const backend = await create();
      await backend.sync({ plans: [plan], changed: new Set(), full: true });
      try {
        const result = await new NetnsExecutor({ namespace: topology.client }).run({
          program: "python3",
          args: [
            "-c",
            CONNECT_CLIENT,
            JSON.stringify(
              Object.entries(targets).map(([name, ip]) => ({ name, ip, port: 80 })),
            ),
            String(rounds),
          ],
          timeoutMs: 300_000,
        });
        if (result.code !== 0) throw new Error(`Cannot run the connect client: ${result.stderr}`);
        const measured = JSON.parse(result.stdout) as Record<
          string,
          { us: number[]; failures: number }
        >;
        for (const target of ["first", "last"] as const) {
          const { us, failures } = measured[target]!;
          rows.push({
            mode,
            services: options.services,
            target,
            clusterIP: targets[target],
            connects: us.length,
            medianUs: quantileOf(us, 0.5),
            p90Us: quantileOf(us, 0.9),
            failures,
          });
        }
      } finally {
        // The last mode's rules go with the namespace: removing 110k iptables chains one
        // restore at a time takes iptables-nft-restore over 10 minutes at 10k services.
        if (index < measured.length - 1) await backend.cleanup();
      }
    }
    return rows;
  } finally {
    await topology.destroy();
  }
}
