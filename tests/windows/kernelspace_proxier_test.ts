/**
 * The kernelspace mode as an operator runs it: `main()` in-process with the flags a Windows node
 * passes (`--proxy-mode=kernelspace`, `--network-name`, `--source-vip`, `--enable-dsr` and the
 * WinDSR gate), the backend created by the mode registry from that configuration, the planner
 * and the proxier syncing both IP families, and the backend's real scripts run in `pwsh` against
 * the HCN stand-in. Each node (Overlay dual-stack, L2Bridge single-stack, a node kube-proxy ran
 * on before) must converge with no failed sync and hold what upstream's winkernel proxier would
 * ask HNS for (docs/WINDOWS.md, "Cases beside upstream").
 *
 * @module
 */

import { deepStrictEqual as assertEquals, ok } from "node:assert/strict";
import type { ApiObject } from "../../scripts/testbed/fake_apiserver.ts";
import { ManualSource, sample, startKproxy, waitFor } from "../../scripts/testbed/kproxy.ts";
import {
  type HcnEndpoint,
  type HcnLoadBalancer,
  type HcnNetwork,
  HcnState,
  type HcnStateDocument,
  HcnView,
  hostAddress,
  pwshTools,
} from "./hcn.ts";

const tools = await pwshTools();
const host = hostAddress();

const NETWORK = "0b0b0b0b-0000-4000-8000-0000000000aa";
/** The node's InternalIP (`node()` below), upstream's `nodeIP`: an address of this machine, whose
 * adapter's MAC the Overlay scripts look up as the host's. */
const NODE_IP = host?.ip ?? "10.201.0.1";
const SOURCE_VIP = "10.244.1.2";
/** The root namespace's HNS endpoint (the host vNIC), named as --root-hnsendpoint-name. */
const ROOT = "c0c0c0c0-0000-4000-8000-000000000001";
/** HNS endpoints of this node's pods, created by the CNI plugin. */
const PODS: Record<string, string> = {
  "10.244.1.5": "c0c0c0c0-0000-4000-8000-000000000105",
  "10.244.1.6": "c0c0c0c0-0000-4000-8000-000000000106",
  "fd00:244:1::5": "c0c0c0c0-0000-4000-8000-000000000605",
};
const FAILURES = 'kproxy_sync_failures_total{mode="kernelspace"}';
const SUCCESSES = 'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}';
/** pwsh and the shim's compilation take 3 s per script alone, 10 s or more on a busy machine. */
const WAIT_MS = 240_000;

function network(type: "L2Bridge" | "Overlay"): HcnNetwork {
  const route = (prefix: string, pa: string) => ({
    Type: "RemoteSubnetRoute",
    Settings: {
      DestinationPrefix: prefix,
      IsolationId: 4096,
      ProviderAddress: pa,
      DistributedRouterMacAddress: "00-15-5d-00-00-02",
    },
  });
  return {
    ID: NETWORK.toUpperCase(),
    Name: type === "Overlay" ? "vxlan0" : "cbr0",
    Type: type,
    Policies: type === "Overlay" ? [route("10.244.2.0/24", "192.168.1.12")] : [],
    SchemaVersion: { Major: 2, Minor: 0 },
  };
}

function seed(type: "L2Bridge" | "Overlay"): HcnStateDocument {
  return {
    networks: [network(type)],
    endpoints: Object.entries(PODS).map(([ip, id]): HcnEndpoint => ({
      ID: id.toUpperCase(),
      Name: `pod-${ip}`,
      HostComputeNetwork: NETWORK.toUpperCase(),
      IpConfigurations: [{ IpAddress: ip, PrefixLength: ip.includes(":") ? 64 : 24 }],
      Flags: 0,
      SchemaVersion: { Major: 2, Minor: 0 },
    })),
    loadBalancers: [],
  };
}

function addRootEndpoint(document: HcnStateDocument): void {
  document.endpoints.push({
    ID: ROOT.toUpperCase(),
    Name: "cbr0",
    HostComputeNetwork: NETWORK.toUpperCase(),
    IpConfigurations: [{ IpAddress: "10.244.1.2", PrefixLength: 24 }],
    Flags: 0,
    SchemaVersion: { Major: 2, Minor: 0 },
  });
}

function node(): ApiObject {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "node-a", labels: { "kubernetes.io/hostname": "node-a" } },
    spec: { podCIDRs: ["10.244.1.0/24", "fd00:244:1::/64"] },
    status: { addresses: [{ type: "InternalIP", address: NODE_IP }] },
  };
}

interface ServiceShape {
  name: string;
  clusterIPs: string[];
  port?: number;
  type?: "ClusterIP" | "NodePort" | "LoadBalancer";
  nodePort?: number;
  externalIPs?: string[];
  ingress?: string[];
  local?: boolean;
  annotations?: Record<string, string>;
}

function service(shape: ServiceShape): ApiObject {
  const families = shape.clusterIPs.map((ip) => ip.includes(":") ? "IPv6" : "IPv4");
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: shape.name, namespace: "default", annotations: shape.annotations ?? {} },
    spec: {
      type: shape.type ?? "ClusterIP",
      clusterIP: shape.clusterIPs[0],
      clusterIPs: shape.clusterIPs,
      ipFamilies: families,
      ipFamilyPolicy: families.length > 1 ? "RequireDualStack" : "SingleStack",
      ports: [{
        name: "http",
        port: shape.port ?? 80,
        targetPort: 8080,
        protocol: "TCP",
        ...(shape.nodePort ? { nodePort: shape.nodePort } : {}),
      }],
      ...(shape.externalIPs ? { externalIPs: shape.externalIPs } : {}),
      ...(shape.local ? { externalTrafficPolicy: "Local", healthCheckNodePort: 32000 } : {}),
    },
    ...(shape.ingress
      ? { status: { loadBalancer: { ingress: shape.ingress.map((ip) => ({ ip })) } } }
      : {}),
  };
}

/** A slice of `name` with ready endpoints, each `[ip, nodeName]` ("" for none). */
function slice(name: string, suffix: string, endpoints: [string, string][]): ApiObject {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: `${name}-${suffix}`,
      namespace: "default",
      labels: { "kubernetes.io/service-name": name },
    },
    addressType: endpoints[0]![0].includes(":") ? "IPv6" : "IPv4",
    ports: [{ name: "http", port: 8080, protocol: "TCP" }],
    endpoints: endpoints.map(([ip, nodeName]) => ({
      addresses: [ip],
      conditions: { ready: true, serving: true, terminating: false },
      ...(nodeName ? { nodeName } : {}),
    })),
  };
}

/**
 * web: NodePort, dual-stack; a local and a remote pod (IPv4), a local pod (IPv6).
 * apiserver: ClusterIP on a remote node's own address (the provider address of its subnet).
 * outside: ClusterIP on an address outside every pod subnet and node.
 * edge: LoadBalancer with externalTrafficPolicy Local, an external IP and an ingress IP.
 */
function cluster(dualStack: boolean): ApiObject[] {
  return [
    node(),
    service({
      name: "web",
      clusterIPs: dualStack ? ["10.96.0.10", "fd00:96::10"] : ["10.96.0.10"],
      type: "NodePort",
      nodePort: 30080,
    }),
    slice("web", "v4", [["10.244.1.5", "node-a"], ["10.244.2.7", "node-b"]]),
    ...(dualStack ? [slice("web", "v6", [["fd00:244:1::5", "node-a"]])] : []),
    service({ name: "apiserver", clusterIPs: ["10.96.0.1"], port: 443 }),
    slice("apiserver", "1", [["192.168.1.12", ""]]),
    service({ name: "outside", clusterIPs: ["10.96.0.30"] }),
    slice("outside", "1", [["203.0.113.50", ""]]),
    service({
      name: "edge",
      clusterIPs: ["10.96.0.20"],
      type: "LoadBalancer",
      nodePort: 30090,
      externalIPs: ["198.51.100.20"],
      ingress: ["203.0.113.20"],
      local: true,
    }),
    slice("edge", "1", [["10.244.1.6", "node-a"], ["10.244.2.8", "node-b"]]),
    service({
      name: "kept",
      clusterIPs: ["10.96.0.40"],
      type: "LoadBalancer",
      nodePort: 30100,
      ingress: ["203.0.113.40"],
      annotations: { "preserve-destination": "true" },
    }),
    slice("kept", "1", [["10.244.1.5", "node-a"], ["10.244.2.7", "node-b"]]),
  ];
}

interface NodeRun {
  type: "L2Bridge" | "Overlay";
  dualStack: boolean;
  args: string[];
  /** Changes the seeded HCN state before kproxy starts. */
  before?: (document: HcnStateDocument) => void;
}

/**
 * Starts `main()` on a stand-in seeded for `run`, waits for the first sync to succeed (or for
 * two to fail), stops kproxy and returns what HCN holds and the failed-sync count.
 */
async function runNode(run: NodeRun): Promise<{ hcn: HcnView; failures: number }> {
  if (typeof tools === "string") throw new Error(tools);
  const document = seed(run.type);
  run.before?.(document);
  const state = await HcnState.create(document);
  const kproxy = await startKproxy({
    source: ManualSource.listed(cluster(run.dualStack)),
    executor: state.executor(tools),
    args: [
      "--proxy-mode=kernelspace",
      `--network-name=${run.type === "Overlay" ? "vxlan0" : "cbr0"}`,
      "--cluster-cidr=10.244.0.0/16,fd00:244::/48",
      "--iptables-sync-period=1h",
      "--iptables-min-sync-period=100ms",
      ...run.args,
    ],
  });
  try {
    let failures = 0;
    await waitFor("a sync to succeed or two to fail", async () => {
      const text = await kproxy.metricsText();
      failures = sample(text, FAILURES);
      return sample(text, SUCCESSES) > 0 || failures >= 2;
    }, WAIT_MS);
    return { hcn: new HcnView(await state.read()), failures };
  } finally {
    await kproxy.stop();
    await state.remove();
  }
}

/** What a load balancer's mapping and flags are. */
function shape(hcn: HcnView, lb: HcnLoadBalancer) {
  const { portFlags, flags, sourceVip } = hcn.shape(lb);
  return { portFlags: portFlags ?? 0, flags: flags ?? 0, sourceVip };
}

function providerAddress(hcn: HcnView, ip: string): unknown {
  return hcn.remote(ip).Policies;
}

const pa = (address: string) => [{
  Type: "ProviderAddress",
  Settings: { ProviderAddress: address },
}];

Deno.test({
  name: "kernelspace (pwsh): main() on a dual-stack Overlay node with --source-vip converges " +
    "as upstream's proxier programs it",
  ignore: typeof tools === "string" || host === undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const { hcn, failures } = await runNode({
      type: "Overlay",
      dualStack: true,
      args: [`--source-vip=${SOURCE_VIP}`],
    });
    await t.step("no sync failed", () => assertEquals(failures, 0));
    await t.step("pod endpoints: the configured source VIP", () => {
      for (const [vip, port] of [["10.96.0.10", 80], ["", 30080]] as const) {
        const lb = hcn.lb(vip, port);
        assertEquals(hcn.backends(lb), ["10.244.1.5 local", "10.244.2.7 remote"]);
        assertEquals(shape(hcn, lb).sourceVip, SOURCE_VIP);
      }
      assertEquals(providerAddress(hcn, "10.244.2.7"), pa("192.168.1.12"));
    });
    await t.step("IPv6: its own load balancers, no IPv4 source VIP", () => {
      const lb = hcn.lb("fd00:96::10", 80, { ipv6: true });
      assertEquals(hcn.backends(lb), ["fd00:244:1::5 local"]);
      assertEquals(shape(hcn, lb), { portFlags: 0, flags: 2, sourceVip: undefined });
      assertEquals(hcn.backends(hcn.lb("", 30080, { ipv6: true })), ["fd00:244:1::5 local"]);
    });
    await t.step("an endpoint on a remote node's own address: that provider address", () => {
      const lb = hcn.lb("10.96.0.1", 443);
      assertEquals(hcn.backends(lb), ["192.168.1.12 remote"]);
      assertEquals(providerAddress(hcn, "192.168.1.12"), pa("192.168.1.12"));
      assertEquals(shape(hcn, lb).sourceVip, NODE_IP);
    });
    await t.step("an endpoint outside every subnet: the node IP", () => {
      const lb = hcn.lb("10.96.0.30", 80);
      assertEquals(hcn.backends(lb), ["203.0.113.50 remote"]);
      assertEquals(providerAddress(hcn, "203.0.113.50"), pa(NODE_IP));
      assertEquals(shape(hcn, lb).sourceVip, NODE_IP);
    });
    await t.step("the source VIP's endpoint and the cluster IPs' with the host's MAC", () => {
      const mine = (ip: string) =>
        hcn.document.endpoints.filter((e) =>
          e.IpConfigurations?.[0]?.IpAddress === ip && e.Name?.startsWith("kproxy-")
        );
      const [sourceVip, ...others] = mine(SOURCE_VIP);
      assertEquals(others, []);
      assertEquals([sourceVip?.Flags, sourceVip?.MacAddress, sourceVip?.Policies], [
        0,
        host!.mac,
        [],
      ]);
      for (const ip of ["10.96.0.10", "10.96.0.1", "10.96.0.30", "10.96.0.20"]) {
        const [vip] = mine(ip);
        assertEquals([vip?.Flags, vip?.MacAddress, vip?.Policies], [1, host!.mac, pa(NODE_IP)], ip);
      }
    });
    await t.step("externalTrafficPolicy Local: DSR on node port, external and ingress IPs", () => {
      const cluster = hcn.lb("10.96.0.20", 80);
      assertEquals(hcn.backends(cluster), ["10.244.1.6 local", "10.244.2.8 remote"]);
      assertEquals(shape(hcn, cluster), { portFlags: 0, flags: 0, sourceVip: SOURCE_VIP });
      for (
        const [vip, port, portFlags] of [["", 30090, 18], ["198.51.100.20", 80, 16], [
          "203.0.113.20",
          80,
          16,
        ]] as const
      ) {
        const lb = hcn.lb(vip, port);
        assertEquals(hcn.backends(lb), ["10.244.1.6 local"], `${vip}:${port}`);
        assertEquals(shape(hcn, lb), { portFlags, flags: 1, sourceVip: SOURCE_VIP }, vip);
      }
    });
  },
});

Deno.test({
  name: "kernelspace (pwsh): main() on an L2Bridge node with --enable-dsr, --source-vip and " +
    "--forward-healthcheck-vip converges with DSR, no source VIP and the health-check forwarded",
  ignore: typeof tools === "string",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const { hcn, failures } = await runNode({
      type: "L2Bridge",
      dualStack: false,
      args: [
        `--source-vip=${NODE_IP}`,
        "--enable-dsr",
        "--feature-gates=WinDSR=true",
        "--forward-healthcheck-vip",
      ],
      before: addRootEndpoint,
    });
    await t.step("no sync failed", () => assertEquals(failures, 0));
    await t.step("cluster IPs: DSR (--enable-dsr), no source VIP on L2Bridge", () => {
      const lb = hcn.lb("10.96.0.10", 80);
      assertEquals(hcn.backends(lb), ["10.244.1.5 local", "10.244.2.7 remote"]);
      assertEquals(shape(hcn, lb), { portFlags: 0, flags: 1, sourceVip: undefined });
      assertEquals(hcn.remote("10.244.2.7").Policies, []);
      assertEquals(shape(hcn, hcn.lb("", 30080)), {
        portFlags: 18,
        flags: 0,
        sourceVip: undefined,
      });
    });
    await t.step("externalTrafficPolicy Local: DSR on the node port too", () => {
      const lb = hcn.lb("", 30090);
      assertEquals(hcn.backends(lb), ["10.244.1.6 local"]);
      assertEquals(shape(hcn, lb), { portFlags: 18, flags: 1, sourceVip: undefined });
    });
    await t.step("preserve-destination: node port and ingress IP to local endpoints", () => {
      assertEquals(hcn.backends(hcn.lb("10.96.0.40", 80)), [
        "10.244.1.5 local",
        "10.244.2.7 remote",
      ]);
      const ingress = hcn.lb("203.0.113.40", 80);
      assertEquals(hcn.backends(ingress), ["10.244.1.5 local"]);
      assertEquals(shape(hcn, ingress), { portFlags: 28, flags: 1, sourceVip: undefined });
      assertEquals(hcn.backends(hcn.lb("", 30100)), ["10.244.1.5 local"]);
    });
    await t.step(
      "forwardHealthCheckVip: the ingress IP's health-check port to the root endpoint",
      () => {
        const lb = hcn.lb("203.0.113.20", 32000);
        assertEquals(lb.HostComputeEndpoints, [ROOT.toUpperCase()]);
        assertEquals(lb.PortMappings?.[0]?.InternalPort, 32000);
        assertEquals(shape(hcn, lb), { portFlags: 0, flags: 0, sourceVip: undefined });
      },
    );
    ok(hcn.document.loadBalancers.every((lb) => lb.SourceVIP === undefined));
  },
});

/** kube-proxy's objects on the node: load balancers on kproxy's frontends and one stale. */
function kubeProxyLeftovers(document: HcnStateDocument): void {
  const remote = "0a0a0a0a-0000-4000-8000-000000000001";
  document.endpoints.push({
    ID: remote.toUpperCase(),
    HostComputeNetwork: NETWORK.toUpperCase(),
    IpConfigurations: [{ IpAddress: "10.244.2.7" }],
    MacAddress: "02-11-0a-f4-02-07",
    Flags: 1,
    Policies: [{ Type: "ProviderAddress", Settings: { ProviderAddress: "192.168.1.12" } }],
    SchemaVersion: { Major: 2, Minor: 0 },
  });
  const lb = (n: number, vip: string, port: number, endpoints: string[]): HcnLoadBalancer => ({
    ID: `0a0a0a0a-0000-4000-8000-00000000010${n}`.toUpperCase(),
    HostComputeEndpoints: endpoints,
    SourceVIP: SOURCE_VIP,
    FrontendVIPs: vip === "" ? [] : [vip],
    PortMappings: [{ Protocol: 6, InternalPort: 8080, ExternalPort: port, Flags: vip ? 0 : 18 }],
    SchemaVersion: { Major: 2, Minor: 0 },
  });
  const pods = [PODS["10.244.1.5"]!.toUpperCase(), remote.toUpperCase()];
  document.loadBalancers.push(
    lb(1, "10.96.0.10", 80, pods),
    lb(2, "", 30080, pods),
    lb(3, "10.96.9.9", 80, pods),
  );
}

Deno.test({
  name: "kernelspace (pwsh): main() started where kube-proxy ran removes its load balancers " +
    "and converges",
  ignore: typeof tools === "string" || host === undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const { hcn, failures } = await runNode({
      type: "Overlay",
      dualStack: false,
      args: [`--source-vip=${SOURCE_VIP}`],
      before: kubeProxyLeftovers,
    });
    await t.step("no sync failed", () => assertEquals(failures, 0));
    await t.step("kproxy's load balancers hold the frontends", () => {
      for (const [vip, port] of [["10.96.0.10", 80], ["", 30080]] as const) {
        ok(hcn.lb(vip, port).ID.toLowerCase().startsWith("6b70726f"), `${vip}:${port}`);
      }
      ok(
        !hcn.document.loadBalancers.some((lb) => lb.FrontendVIPs?.[0] === "10.96.9.9"),
        "kube-proxy's stale load balancer is gone",
      );
    });
  },
});
