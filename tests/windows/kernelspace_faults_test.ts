/**
 * HCN faults with kproxy running in-process (`--proxy-mode=kernelspace`, a
 * hand-driven source, the planner, the runner) and the Windows backend running
 * its real scripts in `pwsh` against the HCN stand-in: an HCN call failing per
 * function and per object, a script killed half-way, HCN holding objects
 * kproxy did not create (one in the way of kproxy's own), and a network that
 * does not exist. Each failure must show in kproxy_sync_failures_total and the
 * logs; kproxy retries and converges. At start it deletes every load balancer,
 * as kube-proxy does; after that, and for endpoints always, it never deletes
 * what it does not own.
 *
 * @module
 */

import { deepStrictEqual as assertEquals, ok, rejects } from "node:assert/strict";
import { createWindowsBackend, HnsSyncError } from "../../backends/windows/applier.ts";
import { remoteEndpointId } from "../../backends/windows/render.ts";
import { nodeObject, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import type { ApiObject } from "../../scripts/testbed/fake_apiserver.ts";
import {
  LogCapture,
  ManualSource,
  sample,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { endpoint, planOf, servicePort, testConfig } from "../golden/ipvs/plans.ts";
import {
  type HcnFault,
  type HcnLoadBalancer,
  HcnState,
  type HcnStateDocument,
  HcnView,
  type PwshTools,
  pwshTools,
} from "./hcn.ts";

const tools = await pwshTools();

const NETWORK = "0b0b0b0b-0000-4000-8000-000000000001";
const POD = "c0c0c0c0-0000-4000-8000-000000000105";
const FOREIGN_LB = "0f0e0d0c-0000-4000-8000-000000000001";
const FOREIGN_EP = "0f0e0d0c-0000-4000-8000-000000000002";
/** A load balancer of kube-proxy on the frontend kproxy wants for web: deleted at start. */
const IN_THE_WAY = "0f0e0d0c-0000-4000-8000-000000000003";
/** A load balancer someone creates on web's frontend once kproxy runs. */
const LATER = "0f0e0d0c-0000-4000-8000-000000000004";
/** A load balancer an earlier kproxy created that nothing wants now. */
const STALE = "6b70726f-0001-0000-0000-00000000dead";
const FAILURES = 'kproxy_sync_failures_total{mode="kernelspace"}';
const SUCCESSES = 'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}';

function seed(options: { networkName?: string; faults?: HcnFault[] } = {}): HcnStateDocument {
  return {
    networks: [{
      ID: NETWORK.toUpperCase(),
      Name: options.networkName ?? "cbr0",
      Type: "L2Bridge",
      SchemaVersion: { Major: 2, Minor: 0 },
    }],
    endpoints: [
      {
        ID: POD.toUpperCase(),
        Name: "pod",
        HostComputeNetwork: NETWORK.toUpperCase(),
        IpConfigurations: [{ IpAddress: "10.244.1.5", PrefixLength: 24 }],
        Flags: 0,
      },
      {
        ID: FOREIGN_EP.toUpperCase(),
        Name: "someone-else",
        HostComputeNetwork: NETWORK.toUpperCase(),
        IpConfigurations: [{ IpAddress: "10.244.7.7" }],
        Flags: 1,
      },
    ],
    loadBalancers: [foreignLb(FOREIGN_LB, "10.96.99.99")],
    faults: options.faults ?? [],
  };
}

function foreignLb(id: string, vip: string): HcnLoadBalancer {
  return {
    ID: id.toUpperCase(),
    HostComputeEndpoints: [POD],
    FrontendVIPs: [vip],
    PortMappings: [{ Protocol: 6, InternalPort: 8080, ExternalPort: 80 }],
    SchemaVersion: { Major: 2, Minor: 0 },
  };
}

/** web: ClusterIP 10.96.0.10 and NodePort 30080; api: ClusterIP 10.96.0.11; both on a local
 * pod (10.244.1.5) and a remote one (10.244.2.7 on node-b). */
function cluster(): ApiObject[] {
  const slices = (service: string) => [
    sliceObject(service, ["10.244.1.5"], { name: `${service}-a`, nodeName: "node-a" }),
    sliceObject(service, ["10.244.2.7"], { name: `${service}-b`, nodeName: "node-b" }),
  ];
  return [
    nodeObject(),
    serviceObject({ name: "web", clusterIP: "10.96.0.10", type: "NodePort", nodePort: 30080 }),
    serviceObject({ name: "api", clusterIP: "10.96.0.11" }),
    ...slices("web"),
    ...slices("api"),
  ];
}

/** True when HCN holds what kproxy wants for `cluster()`. */
function converged(hcn: HcnView): boolean {
  try {
    for (const [vip, port] of [["10.96.0.10", 80], ["", 30080], ["10.96.0.11", 80]] as const) {
      assertEquals(hcn.backends(hcn.lb(vip, port)), ["10.244.1.5 local", "10.244.2.7 remote"]);
    }
    return true;
  } catch {
    return false;
  }
}

interface Run {
  state: HcnState;
  logs: LogCapture;
  metrics(): Promise<string>;
}

/**
 * Starts kproxy on `seed` and the cluster above, runs `body`, stops kproxy and
 * checks that it never deleted a foreign object.
 */
async function withKproxy(
  tools: PwshTools,
  document: HcnStateDocument,
  body: (run: Run) => Promise<void>,
): Promise<void> {
  const logs = await LogCapture.install(2);
  const state = await HcnState.create(document);
  const config = testConfig({ proxyMode: "kernelspace" });
  config.winkernel.networkName = "cbr0";
  const executor = state.executor(tools);
  const backend = createWindowsBackend({ executor, config, powershell: "pwsh" });
  const kproxy = await startKproxy({
    source: ManualSource.listed(cluster()),
    executor,
    backend,
    args: [
      "--proxy-mode=kernelspace",
      "--network-name=cbr0",
      "--iptables-sync-period=3s",
      "--iptables-min-sync-period=100ms",
    ],
  });
  try {
    await body({ state, logs, metrics: () => kproxy.metricsText() });
  } finally {
    await kproxy.stop();
    const calls = await state.calls().catch(() => []);
    for (const id of [FOREIGN_EP, POD, LATER]) {
      ok(
        !calls.some((call) => call.startsWith("HcnDelete") && call.endsWith(id.toUpperCase())),
        `kproxy deleted ${id}, which it does not own`,
      );
    }
    await state.remove();
  }
}

/** Waits until HCN holds the converged state and a sync succeeded after the last failure. */
async function waitConverged(run: Run): Promise<void> {
  let failures = -1;
  let successes = -1;
  await waitFor("kproxy to converge", async () => {
    const text = await run.metrics();
    const hcn = new HcnView(await run.state.read());
    if (!converged(hcn) || sample(text, FAILURES) !== failures) {
      failures = sample(text, FAILURES);
      successes = sample(text, SUCCESSES);
      return false;
    }
    return sample(text, SUCCESSES) > successes;
  }, WAIT_MS);
}

/** pwsh and the shim's compilation take 3 s per script alone, 10 s or more on a busy machine. */
const WAIT_MS = 240_000;

async function waitLog(run: Run, what: string, pattern: RegExp): Promise<string> {
  let line: string | undefined;
  await waitFor(what, () => (line = run.logs.matching(pattern).at(-1)) !== undefined, WAIT_MS);
  return line!;
}

Deno.test({
  ignore: typeof tools === "string",
  sanitizeOps: false,
  sanitizeResources: false,
  name: "kernelspace (pwsh): kproxy reports HCN faults, retries, converges and never deletes " +
    "what it does not own",
  async fn(t) {
    if (typeof tools === "string") return;
    const document = seed({
      networkName: "other",
      faults: [{ function: "HcnEnumerateLoadBalancers", hresult: 0x803b0020 }],
    });
    document.loadBalancers.push(foreignLb(IN_THE_WAY, "10.96.0.10"), foreignLb(STALE, "10.96.5.5"));
    await withKproxy(tools, document, async (run) => {
      await t.step("an HCN function failing, then a network that does not exist", async () => {
        await waitLog(run, "the missing network logged", /Cannot find HNS network cbr0/);
        ok(
          run.logs.matching(/Cannot sync kernelspace rules/).some((l) => l.includes("0x803B0020")),
          "the failed enumeration is logged",
        );
        ok(sample(await run.metrics(), FAILURES) >= 2);
        assertEquals(await run.state.changingCalls(), [], "nothing changed without the network");
      });

      const refused = remoteEndpointId("10.244.2.7");
      await t.step("one object failing, then the script killed half-way", async () => {
        const before = sample(await run.metrics(), FAILURES);
        await run.state.update((d) => {
          d.networks[0]!.Name = "cbr0";
          d.faults = [
            { function: "HcnCreateEndpoint", id: refused, count: 2 },
            { function: "HcnCreateLoadBalancer", after: 1, action: "kill" },
          ];
        });
        await waitFor("the kill", async () => {
          const faults = (await run.state.read()).faults ?? [];
          return !faults.some((fault) => fault.action === "kill") &&
            sample(await run.metrics(), FAILURES) > before;
        }, WAIT_MS);
        const hcn = new HcnView(await run.state.read());
        ok(!hcn.document.loadBalancers.some((lb) => lb.ID === STALE.toUpperCase()), "stale gone");
      });

      await t.step("each refused object is logged with its HRESULT", async () => {
        const line = await waitLog(
          run,
          "the refused endpoint logged on its own",
          new RegExp(`could not take "?${refused}`),
        );
        ok(line.includes("0x80004005"), line);
      });

      await t.step("kube-proxy's load balancers are deleted at start, no endpoint", async () => {
        await waitConverged(run);
        const hcn = new HcnView(await run.state.read());
        hcn.assertKept([FOREIGN_EP, POD]);
        ok(!hcn.document.loadBalancers.some((lb) => lb.ID === FOREIGN_LB.toUpperCase()));
        ok(!hcn.document.loadBalancers.some((lb) => lb.ID === IN_THE_WAY.toUpperCase()));
      });

      await t.step("a load balancer created later in the way fails until removed", async () => {
        await run.state.update((d) => {
          const web = new HcnView(d).lb("10.96.0.10", 80);
          d.loadBalancers = d.loadBalancers.filter((lb) => lb !== web);
          d.loadBalancers.push(foreignLb(LATER, "10.96.0.10"));
        });
        await waitLog(run, "the conflict logged", /0x803B0013/);
        new HcnView(await run.state.read()).assertKept([FOREIGN_EP, LATER, POD]);
        await run.state.update((d) => {
          d.loadBalancers = d.loadBalancers.filter((lb) => lb.ID !== LATER.toUpperCase());
        });
        await waitConverged(run);
        const hcn = new HcnView(await run.state.read());
        hcn.assertKept([FOREIGN_EP, POD]);
        assertEquals(hcn.document.faults, []);
        assertEquals(hcn.document.loadBalancers.length, 3, "kproxy's three, no duplicates");
      });
    });
  },
});

Deno.test({
  ignore: typeof tools === "string",
  name: "kernelspace (pwsh): a remote endpoint HNS refuses and a local one it does not hold " +
    "yet do not take their service down, and join it once HNS has them",
  async fn() {
    if (typeof tools === "string") return;
    const refused = remoteEndpointId("10.244.2.7");
    const document = seed({ faults: [{ function: "HcnCreateEndpoint", id: refused }] });
    const state = await HcnState.create(document);
    const config = testConfig({ proxyMode: "kernelspace" });
    config.winkernel.networkName = "cbr0";
    const backend = createWindowsBackend({
      executor: state.executor(tools),
      config,
      powershell: "pwsh",
    });
    const endpoints = [
      endpoint("10.244.1.5", 8080, true),
      endpoint("10.244.1.6", 8080, true),
      endpoint("10.244.2.7", 8080),
      endpoint("10.244.2.8", 8080),
    ];
    const traffic = { endpoints, whenEmpty: "reject" as const, reason: "all ready endpoints" };
    const plans = [planOf([servicePort({ internal: traffic, external: traffic })])];
    const sync = () => backend.sync({ plans, changed: new Set(), full: true });
    try {
      await rejects(sync(), (error: Error) => {
        ok(error instanceof HnsSyncError, String(error));
        assertEquals(error.errors.map((e) => e.id).sort(), ["10.244.1.6", refused]);
        return true;
      });
      let hcn = new HcnView(await state.read());
      assertEquals(hcn.backends(hcn.lb("10.96.0.10", 80)), [
        "10.244.1.5 local",
        "10.244.2.8 remote",
      ]);
      await state.update((d) =>
        d.endpoints.push({
          ID: "C0C0C0C0-0000-4000-8000-000000000106",
          HostComputeNetwork: NETWORK.toUpperCase(),
          IpConfigurations: [{ IpAddress: "10.244.1.6", PrefixLength: 24 }],
          Flags: 0,
        })
      );
      await sync();
      hcn = new HcnView(await state.read());
      assertEquals(hcn.backends(hcn.lb("10.96.0.10", 80)), [
        "10.244.1.5 local",
        "10.244.1.6 local",
        "10.244.2.7 remote",
        "10.244.2.8 remote",
      ]);
    } finally {
      await state.remove();
    }
  },
});
