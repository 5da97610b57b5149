import { deepStrictEqual as assertEquals, ok, rejects, throws } from "node:assert/strict";
import {
  createWindowsBackend,
  diffHns,
  HnsSyncError,
  POWERSHELL_ARGS,
} from "../../backends/windows/applier.ts";
import {
  conjureMac,
  DISTRIBUTION,
  isKproxyId,
  LB_FLAGS,
  PORT_FLAGS,
  renderWindows,
} from "../../backends/windows/render.ts";
import type { SyncRequest } from "../../lib/core/backend.ts";
import type { CommandResult } from "../../lib/core/executor.ts";
import { FakeExecutor, type RecordedCommand } from "../support/fake_executor.ts";
import type { Plan, ServicePortPlan } from "../../lib/core/plan.ts";
import { endpoint, planOf, SCENARIOS, servicePort, testConfig } from "../golden/ipvs/plans.ts";

const FOREIGN_LB = "0f0e0d0c-0000-0000-0000-000000000001";
const FOREIGN_EP = "0f0e0d0c-0000-0000-0000-000000000002";
const STALE_LB = "6b70726f-0001-0000-0000-00000000dead";
const STALE_EP = "6b70726f-0002-0000-0000-00000000dead";
const POD = "c0c0c0c0-0000-4000-8000-000000000105";

/**
 * A fake HNS behind a FakeExecutor: answers list scripts with recorded HCN
 * JSON and applies sync scripts by reading their command lines.
 */
class FakeHns {
  readonly loadBalancers = new Set<string>();
  readonly endpoints = new Set<string>();
  readonly failing = new Set<string>();
  /** Endpoints a load balancer holds, when fewer than it was created with. */
  readonly held = new Map<string, number>();
  readonly scripts: string[] = [];
  readonly executor = new FakeExecutor((command) => this.#run(command));

  #run(command: RecordedCommand): CommandResult {
    assertEquals(command.program, "powershell.exe");
    assertEquals(command.args, [...POWERSHELL_ARGS]);
    const script = command.stdin ?? "";
    this.scripts.push(script);
    if (script.includes("$KpList =")) {
      // Recorded shape of HCN properties (trimmed), as ConvertTo-Json prints them.
      const loadBalancers = [...this.loadBalancers].map((id) => ({
        ID: id.toUpperCase(),
        HostComputeEndpoints: Array.from({ length: this.held.get(id) ?? 16 }, () => POD),
        FrontendVIPs: ["10.96.0.10"],
        PortMappings: [{ Protocol: 6, InternalPort: 8080, ExternalPort: 80 }],
        SchemaVersion: { Major: 2, Minor: 0 },
      }));
      const endpoints = [...this.endpoints].map((id) => ({
        ID: id,
        Name: "ep",
        IpConfigurations: [{ IpAddress: "10.244.2.7" }],
        Flags: 1,
      }));
      const network = script.includes("Find-KpNetwork 'cbr0'")
        ? { ID: "0B0B0B0B-0000-4000-8000-000000000001", Type: "L2Bridge", Policies: [] }
        : null;
      const listing = { loadBalancers, endpoints, network };
      return { code: 0, stdout: JSON.stringify(listing) + "\r\n", stderr: "" };
    }
    const reply = {
      createdLoadBalancers: [] as string[],
      createdEndpoints: [] as string[],
      deleted: [] as string[],
      skipped: [],
      missingLocal: [],
      errors: [] as { id: string; error: string }[],
    };
    for (const line of script.split("\n")) {
      const match =
        /^(Remove-KpLoadBalancer|Remove-KpEndpoint|New-KpRemoteEndpoint -Id|New-KpLoadBalancer -Id) '([0-9a-f-]+)'/
          .exec(line);
      if (!match) continue;
      const [, verb = "", id = ""] = match;
      if (this.failing.has(id)) {
        reply.errors.push({
          id,
          error: "HcnCreateLoadBalancer failed (0x803B0011): already exists",
        });
        continue;
      }
      if (verb === "Remove-KpLoadBalancer") this.loadBalancers.delete(id);
      if (verb === "Remove-KpEndpoint") this.endpoints.delete(id);
      if (verb.startsWith("Remove")) reply.deleted.push(id);
      if (verb.startsWith("New-KpRemoteEndpoint")) {
        this.endpoints.add(id);
        reply.createdEndpoints.push(id);
      }
      if (verb.startsWith("New-KpLoadBalancer")) {
        this.loadBalancers.add(id);
        reply.createdLoadBalancers.push(id);
      }
    }
    return { code: 0, stdout: "WARNING: noise\r\n" + JSON.stringify(reply) + "\r\n", stderr: "" };
  }

  /** Command lines (verb and id) of the last sync script. */
  lastChanges(): string[] {
    const script = this.scripts.at(-1) ?? "";
    return script.split("\n").filter((line) => /^(Remove|New)-Kp\w+ /.test(line)).map((line) =>
      line.split(" ").slice(0, 3).join(" ").replace(/ -Id/, "")
    );
  }
}

function config() {
  const c = testConfig({ proxyMode: "kernelspace" });
  c.winkernel.networkName = "cbr0";
  return c;
}

function request(plan: Plan, full: boolean): SyncRequest {
  return { plans: [plan], changed: new Set(), full };
}

function ids(plan: Plan): string[] {
  return renderWindows(plan).loadBalancers.map((lb) => lb.id);
}

Deno.test("WindowsBackend.sync() at start deletes every load balancer but its own, stale kproxy endpoints and no other endpoint", async () => {
  const hns = new FakeHns();
  const [kept = ""] = ids(SCENARIOS.nodeport!);
  for (const id of [FOREIGN_LB, STALE_LB, kept]) hns.loadBalancers.add(id);
  for (const id of [FOREIGN_EP, STALE_EP]) hns.endpoints.add(id);
  const backend = createWindowsBackend({ executor: hns.executor, config: config() });
  const result = await backend.sync(request(SCENARIOS.nodeport!, true));
  assertEquals(result.full, true);
  assertEquals(hns.scripts.length, 2, "one list script, one sync script");
  const desired = renderWindows(SCENARIOS.nodeport!);
  assertEquals(hns.lastChanges(), [
    `Remove-KpLoadBalancer '${STALE_LB}'`,
    `Remove-KpLoadBalancer '${FOREIGN_LB}'`,
    `Remove-KpEndpoint '${STALE_EP}'`,
    `New-KpRemoteEndpoint '${desired.remoteEndpoints[0]!.id}'`,
    ...desired.loadBalancers.filter((lb) => lb.id !== kept).map((lb) =>
      `New-KpLoadBalancer '${lb.id}'`
    ),
  ]);
  ok(!hns.loadBalancers.has(FOREIGN_LB) && hns.endpoints.has(FOREIGN_EP));
  assertEquals(
    [...hns.loadBalancers].filter(isKproxyId).sort(),
    desired.loadBalancers.map((lb) => lb.id),
  );
  hns.loadBalancers.add(FOREIGN_LB);
  await backend.sync(request(SCENARIOS.nodeport!, true));
  ok(hns.loadBalancers.has(FOREIGN_LB), "after start, a foreign load balancer is kept");
});

Deno.test("WindowsBackend.sync() at start replaces a load balancer HNS holds with fewer endpoints than wanted", async () => {
  const hns = new FakeHns();
  const [lb] = renderWindows(SCENARIOS.clusterip!).loadBalancers;
  ok(lb!.backends.length > 1);
  hns.loadBalancers.add(lb!.id);
  hns.held.set(lb!.id, 1);
  for (const ep of renderWindows(SCENARIOS.clusterip!).remoteEndpoints) hns.endpoints.add(ep.id);
  const backend = createWindowsBackend({ executor: hns.executor, config: config() });
  await backend.sync(request(SCENARIOS.clusterip!, true));
  const last = hns.scripts.at(-1)!.split("\n").filter((line) => line.startsWith("New-Kp"));
  assertEquals(last.length, 1);
  ok(last[0]!.startsWith(`New-KpLoadBalancer -Id '${lb!.id}'`) && last[0]!.endsWith(" -Replace"));
});

Deno.test("WindowsBackend.sync() fails while HNS has no such network", async () => {
  const c = config();
  c.winkernel.networkName = "other";
  const backend = createWindowsBackend({ executor: new FakeHns().executor, config: c });
  await rejects(backend.sync(request(SCENARIOS.nodeport!, true)), /Cannot find HNS network other/);
});

Deno.test("createWindowsBackend() takes the network from KUBE_NETWORK without --network-name", () => {
  const c = config();
  c.winkernel.networkName = "";
  const read: string[] = [];
  const getEnv = (name: string) => (read.push(name), "cbr0");
  createWindowsBackend({ executor: new FakeExecutor(), config: c, getEnv });
  assertEquals(read, ["KUBE_NETWORK"]);
  throws(
    () => createWindowsBackend({ executor: new FakeExecutor(), config: c, getEnv: () => "" }),
    /neither --network-name nor KUBE_NETWORK/,
  );
});

Deno.test("WindowsBackend.sync() incremental touches only the changed service", async () => {
  const hns = new FakeHns();
  const backend = createWindowsBackend({ executor: hns.executor, config: config() });
  const web = servicePort();
  const api = servicePort({
    id: "default/api:/TCP",
    name: "api",
    clusterIPs: ["10.96.0.20"],
    port: 443,
  });
  await backend.sync(request(planOf([web, api]), true));
  const scripts = hns.scripts.length;

  const web2 = servicePort({
    internal: { ...web.internal, endpoints: [endpoint("10.244.1.5", 8080, true)] },
  });
  const result = await backend.sync(request(planOf([web2, api]), false));
  assertEquals(result.full, false);
  assertEquals(hns.scripts.length, scripts + 1, "no list script on an incremental sync");
  const [oldWeb = ""] = ids(planOf([web]));
  const [newWeb = ""] = ids(planOf([web2]));
  assertEquals(hns.lastChanges(), [
    `Remove-KpLoadBalancer '${oldWeb}'`,
    // The remote endpoint 10.244.2.7 stays: api still uses it.
    `New-KpLoadBalancer '${newWeb}'`,
  ]);

  await backend.sync(request(planOf([web2, api]), false));
  assertEquals(hns.scripts.length, scripts + 1, "nothing changed: no PowerShell at all");
});

Deno.test("WindowsBackend.sync() failure reports HNS errors and resyncs fully next time", async () => {
  const hns = new FakeHns();
  const backend = createWindowsBackend({ executor: hns.executor, config: config() });
  const [first = ""] = ids(SCENARIOS.clusterip!);
  hns.failing.add(first);
  await rejects(backend.sync(request(SCENARIOS.clusterip!, true)), HnsSyncError);
  hns.failing.clear();
  const before = hns.scripts.length;
  const result = await backend.sync(request(SCENARIOS.clusterip!, false));
  assertEquals(result.full, true);
  ok(hns.scripts[before]!.includes("$KpList ="), "lists HNS again");
  assertEquals(hns.lastChanges(), [`New-KpLoadBalancer '${first}'`]);
});

Deno.test("WindowsBackend.cleanup() removes every kproxy object and nothing else", async () => {
  const hns = new FakeHns();
  const backend = createWindowsBackend({ executor: hns.executor, config: config() });
  await backend.sync(request(SCENARIOS["loadbalancer-source-ranges"]!, true));
  hns.loadBalancers.add(FOREIGN_LB);
  hns.endpoints.add(FOREIGN_EP);
  hns.loadBalancers.add(STALE_LB);
  assertEquals(await backend.checkDrift!(), true);
  await backend.cleanup();
  assertEquals([...hns.loadBalancers], [FOREIGN_LB]);
  assertEquals([...hns.endpoints], [FOREIGN_EP]);
  ok(!hns.scripts.at(-1)!.includes("$KpNetworkName"), "deleting needs no network lookup");
});

Deno.test("createWindowsBackend() rejects a network name that is not printable ASCII", () => {
  for (const name of ["", "cbr0\nRemove-Item C:\\", "x".repeat(300)]) {
    const c = config();
    c.winkernel.networkName = name;
    const getEnv = () => undefined;
    throws(
      () => createWindowsBackend({ executor: new FakeExecutor(), config: c, getEnv }),
      TypeError,
    );
  }
});

Deno.test("renderWindows() sets HNS flags per address kind, DSR and affinity", () => {
  const plan = planOf([
    servicePort({
      nodePort: 30080,
      externalIPs: ["198.51.100.20"],
      loadBalancerIPs: ["203.0.113.10"],
      externalLocal: true,
      affinityTimeoutSeconds: 10800,
    }),
  ]);
  const byKind = (dsr: boolean) =>
    Object.fromEntries(
      renderWindows(plan, { dsr }).loadBalancers.map((lb) => [lb.kind, lb]),
    );
  const off = byKind(false);
  assertEquals(off.clusterIP?.portFlags, PORT_FLAGS.none);
  assertEquals(off.nodePort?.portFlags, PORT_FLAGS.localRoutedVip | PORT_FLAGS.vipExternalIp);
  assertEquals(off.nodePort?.vip, "");
  assertEquals(off.nodePort?.externalPort, 30080);
  assertEquals(off.clusterIP?.flags, LB_FLAGS.none);
  assertEquals(off.clusterIP?.distribution, DISTRIBUTION.sourceIP);
  // externalTrafficPolicy Local: DSR on every external address, with or without --enable-dsr.
  for (const on of [off, byKind(true)]) {
    assertEquals(on.loadBalancerIP?.flags, LB_FLAGS.dsr);
    assertEquals(on.externalIP?.flags, LB_FLAGS.dsr);
    assertEquals(on.nodePort?.flags, LB_FLAGS.dsr);
  }
  assertEquals(byKind(true).clusterIP?.flags, LB_FLAGS.dsr);
  const cluster = Object.fromEntries(
    renderWindows(planOf([servicePort({ nodePort: 30080, externalIPs: ["198.51.100.20"] })]))
      .loadBalancers.map((lb) => [lb.kind, lb.flags]),
  );
  assertEquals(cluster, { clusterIP: 0, nodePort: 0, externalIP: 0 }, "Cluster: no DSR");
  assertEquals(renderWindows(plan).unsupported, []);
});

Deno.test("renderWindows() reports what HNS cannot do", () => {
  const plan = planOf([
    servicePort({
      affinityTimeoutSeconds: 60,
      loadBalancerIPs: ["203.0.113.10"],
      sourceRanges: ["198.51.100.0/24"],
      internal: {
        endpoints: [endpoint("10.244.1.5", 8080, true), endpoint("10.244.2.7", 9090)],
        whenEmpty: "reject",
        reason: "",
      },
    }),
  ]);
  const reasons = renderWindows(plan).unsupported.map((u) => u.reason);
  ok(reasons.some((r) => r.includes("session affinity timeout 60s is not supported on Windows")));
  ok(reasons.some((r) => r.includes("loadBalancerSourceRanges")));
  ok(reasons.some((r) => r.includes("10.244.2.7:9090 left out")));
});

Deno.test("renderWindows() creates no load balancer without endpoints", () => {
  const plan = planOf([
    servicePort({ internal: { endpoints: [], whenEmpty: "reject", reason: "" } }),
  ]);
  const state = renderWindows(plan);
  assertEquals(state.loadBalancers.filter((lb) => lb.kind === "clusterIP"), []);
});

Deno.test("renderWindows() on Overlay: provider addresses and the source VIP as upstream", async (t) => {
  const network = {
    type: "Overlay",
    remoteSubnets: [{ destinationPrefix: "10.244.2.0/24", providerAddress: "192.168.1.12" }],
  };
  const options = { network, sourceVip: "10.244.1.2", nodeIP: "10.201.0.1" };
  const cases: { name: string; ip: string; providerAddress: string; sourceVip: string }[] = [
    {
      name: "a pod in a remote subnet",
      ip: "10.244.2.7",
      providerAddress: "192.168.1.12",
      sourceVip: "10.244.1.2",
    },
    {
      name: "a remote node's own address",
      ip: "192.168.1.12",
      providerAddress: "192.168.1.12",
      sourceVip: "10.201.0.1",
    },
    {
      name: "outside every subnet",
      ip: "203.0.113.50",
      providerAddress: "10.201.0.1",
      sourceVip: "10.201.0.1",
    },
  ];
  for (const c of cases) {
    await t.step(c.name, () => {
      const traffic = {
        endpoints: [endpoint(c.ip, 8080)],
        whenEmpty: "reject" as const,
        reason: "",
      };
      const state = renderWindows(planOf([servicePort({ internal: traffic })]), options);
      const remotes = state.remoteEndpoints.filter((ep) => ep.hostMacOf === undefined);
      assertEquals(remotes.map((ep) => [ep.ip, ep.providerAddress]), [
        [c.ip, c.providerAddress],
      ]);
      assertEquals(state.loadBalancers.map((lb) => lb.sourceVip), [c.sourceVip]);
    });
  }
  await t.step("the source VIP's endpoint and the cluster IP's, with the host's MAC", () => {
    const state = renderWindows(SCENARIOS.clusterip!, options);
    const host = state.remoteEndpoints.filter((ep) => ep.hostMacOf !== undefined).map((ep) => ({
      ip: ep.ip,
      local: ep.local ?? false,
      mac: ep.mac,
      providerAddress: ep.providerAddress,
      hostMacOf: ep.hostMacOf,
    }));
    const base = { mac: "", hostMacOf: "10.201.0.1" };
    assertEquals(host.sort((a, b) => a.ip < b.ip ? -1 : 1), [
      { ip: "10.244.1.2", local: true, providerAddress: "", ...base },
      { ip: "10.96.0.10", local: false, providerAddress: "10.201.0.1", ...base },
    ]);
    const noSourceVip = renderWindows(SCENARIOS.clusterip!, { ...options, sourceVip: "" });
    ok(!noSourceVip.remoteEndpoints.some((ep) => ep.local));
  });
  await t.step("L2Bridge: no provider address, no source VIP", () => {
    const bridge = { ...options, network: { type: "L2Bridge", remoteSubnets: [] } };
    const state = renderWindows(SCENARIOS.nodeport!, bridge);
    ok(state.remoteEndpoints.every((ep) => ep.providerAddress === "" && !ep.hostMacOf));
    ok(state.loadBalancers.every((lb) => lb.sourceVip === ""));
  });
  await t.step("a route that moves gives the remote endpoint a new id", () => {
    const traffic = {
      endpoints: [endpoint("10.244.2.7", 8080)],
      whenEmpty: "reject" as const,
      reason: "",
    };
    const plan = planOf([servicePort({ internal: traffic })]);
    const moved = {
      ...options,
      network: {
        ...network,
        remoteSubnets: [{ ...network.remoteSubnets[0]!, providerAddress: "192.168.1.99" }],
      },
    };
    const pod = (o: typeof options) =>
      renderWindows(plan, o).remoteEndpoints.find((ep) => ep.ip === "10.244.2.7");
    const before = pod(options);
    const after = pod(moved);
    ok(before!.id !== after!.id);
  });
});

Deno.test("renderWindows() with preserve-destination and health-check forwarding, as upstream", async (t) => {
  const external = {
    endpoints: [endpoint("10.244.1.5", 8080, true), endpoint("10.244.2.7", 8080)],
    whenEmpty: "reject" as const,
    reason: "",
  };
  const service = (extra: Partial<ServicePortPlan>) =>
    servicePort({
      nodePort: 30080,
      externalIPs: ["198.51.100.20"],
      loadBalancerIPs: ["203.0.113.10"],
      external,
      internal: external,
      ...extra,
    });
  const healthCheck = { rootEndpointName: "cbr0", healthzPort: 10256 };
  const rows = (extra: Partial<ServicePortPlan>, options = {}) =>
    renderWindows(planOf([service(extra)]), options).loadBalancers.map((lb) => ({
      kind: lb.kind,
      vip: lb.vip,
      port: `${lb.internalPort}->${lb.externalPort}`,
      flags: lb.flags,
      portFlags: lb.portFlags,
      backends: lb.backends.map((b) => b.endpointName ?? `${b.ip}${b.isLocal ? " local" : ""}`),
    })).sort((a, b) => `${a.kind}${a.port}` < `${b.kind}${b.port}` ? -1 : 1);
  const all = ["10.244.1.5 local", "10.244.2.7"];
  await t.step("preserve-destination: local endpoints and DSR|UseMux|PreserveDIP", () => {
    assertEquals(rows({ preserveDestination: true }), [
      {
        kind: "clusterIP",
        vip: "10.96.0.10",
        port: "8080->80",
        flags: 0,
        portFlags: 0,
        backends: all,
      },
      {
        kind: "externalIP",
        vip: "198.51.100.20",
        port: "8080->80",
        flags: 0,
        portFlags: 16,
        backends: all,
      },
      {
        kind: "loadBalancerIP",
        vip: "203.0.113.10",
        port: "8080->80",
        flags: 1,
        portFlags: 28,
        backends: ["10.244.1.5 local"],
      },
      {
        kind: "nodePort",
        vip: "",
        port: "8080->30080",
        flags: 0,
        portFlags: 18,
        backends: ["10.244.1.5 local"],
      },
    ]);
  });
  await t.step("health check: the node's healthz port to the root endpoint, no DSR", () => {
    const found = rows({}, { healthCheck }).filter((row) => row.kind === "healthCheck");
    assertEquals(found, [
      {
        kind: "healthCheck",
        vip: "203.0.113.10",
        port: "10256->10256",
        flags: 0,
        portFlags: 0,
        backends: ["cbr0"],
      },
    ]);
  });
  await t.step(
    "health check: the Service's health-check node port, preserve-destination flags",
    () => {
      const found = rows({ healthCheckNodePort: 32000, preserveDestination: true }, { healthCheck })
        .filter((row) => row.kind === "healthCheck");
      assertEquals(found.map((row) => [row.port, row.portFlags]), [["32000->32000", 12]]);
    },
  );
  await t.step("no health check without the option or a port", () => {
    ok(!rows({}).some((row) => row.kind === "healthCheck"));
    ok(
      !rows({}, { healthCheck: { ...healthCheck, healthzPort: 0 } }).some((row) =>
        row.kind === "healthCheck"
      ),
    );
  });
});

Deno.test("conjureMac() derives upstream's 02-11 MAC from IPv4 and IPv6 addresses", () => {
  assertEquals(conjureMac("10.244.2.7"), "02-11-0a-f4-02-07");
  assertEquals(conjureMac("fd00:244::1:2:3:4"), "02-11-04-00-03-00");
});

Deno.test("diffHns() replaces a wanted load balancer HNS holds incomplete, deletes an unwanted one", () => {
  const desired = renderWindows(SCENARIOS.nodeport!);
  const [kept, other] = desired.loadBalancers;
  const changes = diffHns(
    {
      loadBalancers: new Set([kept!.id, STALE_LB]),
      endpoints: new Set(desired.remoteEndpoints.map((ep) => ep.id)),
      incomplete: new Set([kept!.id, STALE_LB]),
    },
    desired,
  );
  assertEquals(changes.replaceLoadBalancers?.map((lb) => lb.id), [kept!.id]);
  assertEquals(changes.deleteLoadBalancers, [STALE_LB]);
  assertEquals(changes.createLoadBalancers.map((lb) => lb.id), [other!.id]);
  assertEquals(changes.createEndpoints, []);
});
