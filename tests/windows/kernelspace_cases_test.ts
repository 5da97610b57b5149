/**
 * The kernelspace mode run for real: the Windows backend renders its
 * PowerShell scripts and runs them in `pwsh` through a real DenoExecutor, the
 * scripts' C# shim calls the HCN stand-in (computenetwork.dll), and each case
 * asserts the HCN state that results: frontend VIPs, ports, protocol, flags,
 * distribution type and endpoint sets. All cases are synced together (pwsh
 * and the shim's compilation cost ~3 s per script), then a second sync with
 * no change must make no HCN call, then a Service is deleted and an endpoint
 * moves, and cleanup removes exactly what kproxy created.
 *
 * @module
 */

import { deepStrictEqual as assertEquals, ok } from "node:assert/strict";
import type { Backend } from "../../lib/core/backend.ts";
import { createWindowsBackend } from "../../backends/windows/applier.ts";
import type { Config } from "../../lib/config/types.ts";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { endpoint, planOf, servicePort, testConfig } from "../golden/ipvs/plans.ts";
import {
  type HcnEndpoint,
  HcnState,
  type HcnStateDocument,
  HcnView,
  hostAddress,
  type PwshTools,
  pwshTools,
} from "./hcn.ts";

const tools = await pwshTools();
const host = hostAddress();

const BRIDGE = "0b0b0b0b-0000-4000-8000-000000000001";
const OVERLAY = "0b0b0b0b-0000-4000-8000-000000000002";
/** HNS endpoints of this node's pods, created by the CNI plugin (not by kproxy). */
const LOCAL = {
  "10.244.1.5": "c0c0c0c0-0000-4000-8000-000000000105",
  "10.244.1.6": "c0c0c0c0-0000-4000-8000-000000000106",
  "fd00:244:1::5": "c0c0c0c0-0000-4000-8000-000000000605",
};
/** A load balancer another program (kube-proxy) created: kproxy deletes it at start, as
 * kube-proxy does. */
const FOREIGN_LB = "0f0e0d0c-0000-4000-8000-000000000001";
/** An endpoint another program created: kproxy must never delete it. */
const FOREIGN_EP = "0f0e0d0c-0000-4000-8000-000000000002";

const KEPT = [FOREIGN_EP, ...Object.values(LOCAL)];

function localEndpoints(network: string): HcnEndpoint[] {
  return Object.entries(LOCAL).map(([ip, id]) => ({
    ID: id.toUpperCase(),
    Name: `pod-${ip}`,
    HostComputeNetwork: network,
    IpConfigurations: [{ IpAddress: ip, PrefixLength: ip.includes(":") ? 64 : 24 }],
    Flags: 0,
    SchemaVersion: { Major: 2, Minor: 0 },
  }));
}

function seed(type: "L2Bridge" | "Overlay"): HcnStateDocument {
  const network = type === "L2Bridge" ? BRIDGE : OVERLAY;
  return {
    networks: [{
      ID: network.toUpperCase(),
      Name: type === "L2Bridge" ? "cbr0" : "vxlan0",
      Type: type,
      Policies: type === "Overlay"
        ? [
          {
            Type: "RemoteSubnetRoute",
            Settings: {
              DestinationPrefix: "10.244.2.0/24",
              IsolationId: 4096,
              ProviderAddress: "192.168.1.12",
              DistributedRouterMacAddress: "00-15-5d-00-00-02",
            },
          },
          {
            Type: "RemoteSubnetRoute",
            Settings: {
              DestinationPrefix: "10.244.3.0/24",
              IsolationId: 4096,
              ProviderAddress: "192.168.1.13",
              DistributedRouterMacAddress: "00-15-5d-00-00-03",
            },
          },
        ]
        : [],
      SchemaVersion: { Major: 2, Minor: 0 },
    }],
    endpoints: [
      ...localEndpoints(network.toUpperCase()),
      {
        ID: FOREIGN_EP.toUpperCase(),
        Name: "someone-else",
        HostComputeNetwork: network.toUpperCase(),
        IpConfigurations: [{ IpAddress: "10.244.7.7" }],
        Flags: 1,
      },
    ],
    loadBalancers: [{
      ID: FOREIGN_LB.toUpperCase(),
      HostComputeEndpoints: [LOCAL["10.244.1.5"]],
      FrontendVIPs: ["10.96.99.99"],
      PortMappings: [{ Protocol: 6, InternalPort: 9090, ExternalPort: 99 }],
      SchemaVersion: { Major: 2, Minor: 0 },
    }],
  };
}

const local = (ip: string) => endpoint(ip, 8080, true);
const remote = (ip: string) => endpoint(ip, 8080, false);

function svc(name: string, options: Partial<ServicePortPlan> & { endpoints?: PlanEndpoint[] }) {
  const endpoints = options.endpoints ?? [local("10.244.1.5"), remote("10.244.2.7")];
  const traffic = { endpoints, whenEmpty: "reject" as const, reason: "all ready endpoints" };
  const { endpoints: _, ...rest } = options;
  return servicePort({
    id: `default/${name}:http/${options.protocol ?? "TCP"}`,
    name,
    internal: traffic,
    external: traffic,
    ...rest,
  });
}

/** One row of the table: its service ports and what HCN must hold for them. */
interface WindowsCase {
  name: string;
  ipv4?: ServicePortPlan[];
  ipv6?: ServicePortPlan[];
  expect(hcn: HcnView): void;
}

const BASE = { internalPort: 8080, flags: 0, distribution: 0, sourceVip: undefined };

const CASES: WindowsCase[] = [
  {
    name: "ClusterIP: one VIP, a local and a remote endpoint",
    ipv4: [svc("clusterip", { clusterIPs: ["10.96.0.10"] })],
    expect(hcn) {
      const lb = hcn.lb("10.96.0.10", 80);
      assertEquals(hcn.shape(lb), { ...BASE, portFlags: 0 });
      assertEquals(hcn.backends(lb), ["10.244.1.5 local", "10.244.2.7 remote"]);
      const ep = hcn.remote("10.244.2.7");
      assertEquals(ep.MacAddress, "02-11-0a-f4-02-07");
      assertEquals(ep.HostComputeNetwork, BRIDGE.toUpperCase());
      assertEquals(ep.Policies, []);
    },
  },
  {
    name: "UDP ClusterIP: protocol 17",
    ipv4: [svc("dns", { clusterIPs: ["10.96.0.18"], protocol: "UDP", port: 53 })],
    expect(hcn) {
      const lb = hcn.lb("10.96.0.18", 53, { protocol: 17 });
      assertEquals(hcn.shape(lb), { ...BASE, portFlags: 0 });
    },
  },
  {
    name: "NodePort: no VIP, node port external, local-routed",
    ipv4: [svc("nodeport", { clusterIPs: ["10.96.0.11"], nodePort: 30080 })],
    expect(hcn) {
      assertEquals(hcn.shape(hcn.lb("", 30080)), { ...BASE, portFlags: 2 | 16 });
      assertEquals(hcn.backends(hcn.lb("", 30080)), ["10.244.1.5 local", "10.244.2.7 remote"]);
      assertEquals(hcn.shape(hcn.lb("10.96.0.11", 80)), { ...BASE, portFlags: 0 });
    },
  },
  {
    name: "LoadBalancer ingress IP: its own load balancer, external-IP flag",
    ipv4: [svc("lb", { clusterIPs: ["10.96.0.12"], loadBalancerIPs: ["203.0.113.10"] })],
    expect(hcn) {
      assertEquals(hcn.shape(hcn.lb("203.0.113.10", 80)), { ...BASE, portFlags: 16 });
      assertEquals(hcn.backends(hcn.lb("203.0.113.10", 80)), [
        "10.244.1.5 local",
        "10.244.2.7 remote",
      ]);
    },
  },
  {
    name: "externalIPs: one load balancer per address",
    ipv4: [svc("extip", {
      clusterIPs: ["10.96.0.13"],
      externalIPs: ["198.51.100.20", "198.51.100.21"],
      endpoints: [remote("10.244.2.8")],
    })],
    expect(hcn) {
      for (const vip of ["198.51.100.20", "198.51.100.21"]) {
        assertEquals(hcn.shape(hcn.lb(vip, 80)), { ...BASE, portFlags: 16 });
        assertEquals(hcn.backends(hcn.lb(vip, 80)), ["10.244.2.8 remote"]);
      }
    },
  },
  {
    name: "externalTrafficPolicy Local: external addresses use local endpoints only, with DSR",
    ipv4: [servicePort({
      id: "default/local:http/TCP",
      name: "local",
      clusterIPs: ["10.96.0.14"],
      nodePort: 30081,
      loadBalancerIPs: ["203.0.113.14"],
      externalLocal: true,
      internal: {
        endpoints: [local("10.244.1.6"), remote("10.244.2.7")],
        whenEmpty: "reject",
        reason: "all ready endpoints",
      },
      external: {
        endpoints: [local("10.244.1.6")],
        whenEmpty: "drop",
        reason: "local endpoints only",
      },
    })],
    expect(hcn) {
      assertEquals(hcn.backends(hcn.lb("10.96.0.14", 80)), [
        "10.244.1.6 local",
        "10.244.2.7 remote",
      ]);
      assertEquals(hcn.backends(hcn.lb("", 30081)), ["10.244.1.6 local"]);
      assertEquals(hcn.backends(hcn.lb("203.0.113.14", 80)), ["10.244.1.6 local"]);
      // DSR keeps the client's address, as upstream, without --enable-dsr.
      assertEquals(hcn.shape(hcn.lb("10.96.0.14", 80)), { ...BASE, portFlags: 0 });
      assertEquals(hcn.shape(hcn.lb("", 30081)), { ...BASE, flags: 1, portFlags: 18 });
      assertEquals(hcn.shape(hcn.lb("203.0.113.14", 80)), { ...BASE, flags: 1, portFlags: 16 });
    },
  },
  {
    name: "session affinity: source-IP distribution",
    ipv4: [svc("sticky", { clusterIPs: ["10.96.0.15"], affinityTimeoutSeconds: 10800 })],
    expect(hcn) {
      assertEquals(hcn.shape(hcn.lb("10.96.0.15", 80)), { ...BASE, portFlags: 0, distribution: 2 });
    },
  },
  {
    name: "terminating endpoints the plan chose are programmed",
    ipv4: [svc("terminating", {
      clusterIPs: ["10.96.0.16"],
      endpoints: [{ ...local("10.244.1.6"), ready: false, serving: true, terminating: true }],
    })],
    expect(hcn) {
      assertEquals(hcn.backends(hcn.lb("10.96.0.16", 80)), ["10.244.1.6 local"]);
    },
  },
  {
    name: "dual-stack: an IPv6 load balancer with the IPv6 flag and IPv6 endpoints",
    ipv4: [svc("dual", { clusterIPs: ["10.96.0.17"] })],
    ipv6: [svc("dual", {
      clusterIPs: ["fd00:96::17"],
      nodePort: 30082,
      endpoints: [local("fd00:244:1::5"), remote("fd00:244:2::7")],
    })],
    expect(hcn) {
      const v6 = hcn.lb("fd00:96::17", 80, { ipv6: true });
      assertEquals(hcn.shape(v6), { ...BASE, portFlags: 0, flags: 2 });
      assertEquals(hcn.backends(v6), ["fd00:244:1::5 local", "fd00:244:2::7 remote"]);
      assertEquals(hcn.shape(hcn.lb("", 30082, { ipv6: true })), {
        ...BASE,
        portFlags: 18,
        flags: 2,
      });
      assertEquals(hcn.remote("fd00:244:2::7").MacAddress, "02-11-07-00-00-00");
      assertEquals(hcn.backends(hcn.lb("10.96.0.17", 80)), [
        "10.244.1.5 local",
        "10.244.2.7 remote",
      ]);
    },
  },
  {
    name: "an endpoint that will move",
    ipv4: [svc("move", { clusterIPs: ["10.96.0.19"], endpoints: [remote("10.244.2.9")] })],
    expect(hcn) {
      assertEquals(hcn.backends(hcn.lb("10.96.0.19", 80)), ["10.244.2.9 remote"]);
    },
  },
];

function tablePlans(cases: WindowsCase[]): Plan[] {
  return [
    planOf(cases.flatMap((c) => c.ipv4 ?? []), "IPv4"),
    planOf(cases.flatMap((c) => c.ipv6 ?? []), "IPv6"),
  ];
}

function bridgeConfig(): Config {
  const config = testConfig({ proxyMode: "kernelspace" });
  config.winkernel.networkName = "cbr0";
  return config;
}

async function view(state: HcnState): Promise<HcnView> {
  const document = await state.read();
  assertEquals(document.openHandles ?? 0, 0, "every handle opened was closed");
  return new HcnView(document);
}

async function run(
  tools: PwshTools,
  seedType: "L2Bridge" | "Overlay",
  fn: (backend: Backend, state: HcnState) => Promise<void>,
  config: Config,
): Promise<void> {
  const state = await HcnState.create(seed(seedType));
  try {
    const backend = createWindowsBackend({
      executor: state.executor(tools),
      config,
      powershell: "pwsh",
    });
    await fn(backend, state);
  } finally {
    await state.remove();
  }
}

Deno.test({
  name: "kernelspace (pwsh): the case table programs HCN as each case expects",
  ignore: typeof tools === "string",
  async fn(t) {
    if (typeof tools === "string") return;
    await run(tools, "L2Bridge", async (backend, state) => {
      const plans = tablePlans(CASES);
      await backend.sync({ plans, changed: new Set(), full: true });
      const hcn = await view(state);
      for (const c of CASES) await t.step(c.name, () => c.expect(hcn));
      hcn.assertKept(KEPT);
      assertEquals(hcn.document.loadBalancers.length, 18, "one per service address, none else");

      await t.step("a second sync with no change makes no HCN call", async () => {
        await state.write(await state.read());
        await backend.sync({ plans, changed: new Set(), full: false });
        assertEquals(await state.calls(), []);
        await backend.sync({ plans, changed: new Set(), full: true });
        assertEquals(await state.changingCalls(), [], "a full resync without change only reads");
      });

      await t.step("a Service deleted and an endpoint moved", async () => {
        const moved = CASES.filter((c) => !c.name.startsWith("externalIPs")).map((c) =>
          c.name.startsWith("an endpoint that will move")
            ? {
              ...c,
              ipv4: [
                svc("move", { clusterIPs: ["10.96.0.19"], endpoints: [remote("10.244.3.9")] }),
              ],
            }
            : c
        );
        const next = tablePlans(moved);
        await state.write(await state.read());
        await backend.sync({
          plans: next,
          changed: new Set(["default/extip:http/TCP", "default/move:http/TCP"]),
          full: false,
        });
        const after = await view(state);
        assertEquals(
          after.document.loadBalancers.filter((lb) =>
            ["198.51.100.20", "198.51.100.21"].includes(lb.FrontendVIPs?.[0] ?? "")
          ),
          [],
        );
        assertEquals(after.backends(after.lb("10.96.0.19", 80)), ["10.244.3.9 remote"]);
        for (const ip of ["10.244.2.8", "10.244.2.9"]) {
          ok(!after.document.endpoints.some((e) => e.IpConfigurations?.[0]?.IpAddress === ip));
        }
        const changes = await state.changingCalls();
        assertEquals(changes.filter((c) => c.startsWith("HcnDeleteLoadBalancer")).length, 4);
        assertEquals(changes.filter((c) => c.startsWith("HcnDeleteEndpoint")).length, 2);
        assertEquals(changes.filter((c) => c.startsWith("HcnCreateEndpoint")).length, 1);
        assertEquals(changes.filter((c) => c.startsWith("HcnCreateLoadBalancer")).length, 1);
        for (const c of moved.filter((c) => !c.name.startsWith("an endpoint"))) c.expect(after);
        after.assertKept(KEPT);
      });

      await t.step("cleanup removes every kproxy object and nothing else", async () => {
        await backend.cleanup();
        const after = await view(state);
        assertEquals(after.document.loadBalancers.map((lb) => lb.ID), []);
        assertEquals(
          after.document.endpoints.map((e) => e.ID).sort(),
          [FOREIGN_EP, ...Object.values(LOCAL)].map((id) => id.toUpperCase()).sort(),
        );
      });
    }, bridgeConfig());
  },
});

Deno.test({
  name: "kernelspace (pwsh): Overlay network with DSR and a source VIP",
  ignore: typeof tools === "string" || host === undefined,
  async fn() {
    if (typeof tools === "string") return;
    const config = testConfig({ proxyMode: "kernelspace" });
    config.winkernel = {
      ...config.winkernel,
      networkName: "vxlan0",
      sourceVip: "10.244.1.2",
      enableDSR: true,
    };
    config.featureGates = { WinDSR: true };
    await run(tools, "Overlay", async (backend, state) => {
      const plans = [
        planOf([
          svc("web", {
            clusterIPs: ["10.96.0.10"],
            nodePort: 30080,
            endpoints: [local("10.244.1.5"), remote("10.244.2.7"), remote("10.244.3.9")],
          }),
          servicePort({
            id: "default/edge:http/TCP",
            name: "edge",
            clusterIPs: ["10.96.0.20"],
            loadBalancerIPs: ["203.0.113.20"],
            externalLocal: true,
            external: {
              endpoints: [local("10.244.1.5")],
              whenEmpty: "drop",
              reason: "local endpoints only",
            },
          }),
        ]),
      ];
      // The node's address is this machine's: the scripts look up its adapter's MAC.
      plans[0] = { ...plans[0]!, nodePortAddresses: [host!.ip] };
      await backend.sync({ plans, changed: new Set(), full: true });
      const hcn = await view(state);
      const pa = (ip: string) => hcn.remote(ip).Policies;
      assertEquals(pa("10.244.2.7"), [{
        Type: "ProviderAddress",
        Settings: { ProviderAddress: "192.168.1.12" },
      }]);
      assertEquals(pa("10.244.3.9"), [{
        Type: "ProviderAddress",
        Settings: { ProviderAddress: "192.168.1.13" },
      }]);
      const dsr = { ...BASE, sourceVip: "10.244.1.2", flags: 1 };
      assertEquals(hcn.shape(hcn.lb("10.96.0.10", 80)), { ...dsr, portFlags: 0 });
      assertEquals(hcn.shape(hcn.lb("", 30080)), { ...dsr, flags: 0, portFlags: 18 });
      assertEquals(hcn.shape(hcn.lb("203.0.113.20", 80)), { ...dsr, portFlags: 16 });
      assertEquals(hcn.backends(hcn.lb("10.96.0.10", 80)), [
        "10.244.1.5 local",
        "10.244.2.7 remote",
        "10.244.3.9 remote",
      ]);
      hcn.assertKept(KEPT);
    }, config);
  },
});
