/**
 * Per-Service-port traffic counters with real traffic (issue 28): connections
 * to a cluster IP, a node port and a load-balancer IP, refusals for no
 * endpoints and for a source range, counts kept across an unrelated sync,
 * series gone with their Service, and no counter at all with the feature off.
 */

import assert from "node:assert/strict";
import type { Backend } from "../../lib/core/backend.ts";
import type { Plan } from "../../lib/core/plan.ts";
import type { ServiceCounterSample } from "../../lib/core/service_counters.ts";
import { exposeServiceCounters } from "../../lib/shell/service_counters.ts";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { serviceNfacctNames } from "../../backends/iptables/counters.ts";
import { parseCountedSet } from "../../backends/nftables/counters.ts";
import { COUNTED_SETS } from "../../backends/nftables/skeleton.ts";
import { plannedFromObjects } from "./cases.ts";
import {
  ADDRESSES as A,
  createTestTopology,
  kernelSkipReason,
  NetnsExecutor,
  type Topology,
} from "./netns.ts";
import { testConfig } from "./netns.ts";
import { TARGET_PORT } from "../../scripts/testbed/plans.ts";
import {
  createFaultTopology,
  ManualSource,
  type RunningKproxy,
  sample,
  startKproxy,
  waitFor,
} from "../../scripts/testbed/kproxy.ts";
import { nodeObject, serviceObject, sliceObject } from "../../scripts/testbed/objects.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";

const skipReason = await kernelSkipReason(["nft", "conntrack"]);
const iptablesSkip = await kernelSkipReason(["iptables-nft", "iptables-legacy", "nfacct"]);

const N = 4;
const WEB = { clusterIP: "10.96.1.40", nodePort: 30140, lbIP: "10.204.0.40" };
const OTHER_IP = "10.96.1.41";
const EMPTY_IP = "10.96.1.42";
const LOCAL_ONLY = { clusterIP: "10.96.1.43", nodePort: 30143, lbIP: "10.204.0.43" };

interface Objects {
  web?: boolean;
  otherEndpoints: number;
}

function objects(t: Topology, spec: Objects): Record<string, unknown>[] {
  const slice = (name: string, pods: number[], nodeName = "node-a") => ({
    kind: "EndpointSlice",
    metadata: {
      namespace: "kernel",
      name: `${name}-1`,
      labels: { "kubernetes.io/service-name": name },
    },
    addressType: "IPv4",
    ports: [{ name: "http", port: TARGET_PORT }],
    endpoints: pods.map((i) => ({ addresses: [t.pods[i]!.ipv4], nodeName })),
  });
  const service = (name: string, spec: Record<string, unknown>, status = {}) => ({
    kind: "Service",
    metadata: { namespace: "kernel", name },
    spec: { ports: [{ name: "http", port: 80, targetPort: TARGET_PORT }], ...spec },
    status,
  });
  const list: Record<string, unknown>[] = [
    service("other", { clusterIP: OTHER_IP }),
    slice("other", spec.otherEndpoints === 1 ? [1] : [1, 2]),
    service("empty", { clusterIP: EMPTY_IP }),
    // externalTrafficPolicy Local, its one endpoint on the other node.
    service("localonly", {
      type: "LoadBalancer",
      clusterIP: LOCAL_ONLY.clusterIP,
      externalTrafficPolicy: "Local",
      ports: [{ name: "http", port: 80, targetPort: TARGET_PORT, nodePort: LOCAL_ONLY.nodePort }],
    }, { loadBalancer: { ingress: [{ ip: LOCAL_ONLY.lbIP }] } }),
    slice("localonly", [t.pods.length - 1], "node-b"),
  ];
  if (spec.web !== false) {
    list.push(
      service("web", {
        type: "LoadBalancer",
        clusterIP: WEB.clusterIP,
        ports: [{ name: "http", port: 80, targetPort: TARGET_PORT, nodePort: WEB.nodePort }],
        loadBalancerSourceRanges: [`${A.clientV4}/32`],
      }, { loadBalancer: { ingress: [{ ip: WEB.lbIP }] } }),
      slice("web", [0]),
    );
  }
  return list;
}

/** Packets of one counter of one Service's IPv4 port, undefined when it has no such series. */
function value(samples: ServiceCounterSample[], service: string, counter: string) {
  return samples.find((s) =>
    s.service.name === service && s.family === "IPv4" && s.counter === counter
  )?.packets;
}

async function runCounterCases(
  t: Deno.TestContext,
  options: {
    topology: Topology;
    backend: Backend;
    listRules: () => Promise<string>;
    /** The counter objects (or counted elements) in the node's kernel, by name. */
    listCounters: () => Promise<string[]>;
    /** Those that belong to Service "web". */
    webCounters: string[];
  },
): Promise<void> {
  const { topology, backend } = options;
  const sync = async (plans: Plan[], changed?: string[]) => {
    await backend.sync({
      plans,
      changed: new Set(changed ?? plans.flatMap((p) => p.services.map((s) => s.id))),
      full: changed === undefined,
    });
  };
  const read = () => backend.readServiceCounters!();
  const tcp = (ip: string, port = 80, sourceIp?: string, timeoutMs?: number) => ({
    protocol: "TCP" as const,
    ip,
    port,
    ...(sourceIp === undefined ? {} : { sourceIp }),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
  });
  const send = async (spec: ReturnType<typeof tcp>, count: number) => {
    const replies = await topology.requests(topology.client, Array(count).fill(spec));
    return replies;
  };
  const on = { serviceCounters: true };
  const webId = "kernel/web:http/TCP";

  await sync(plannedFromObjects(objects(topology, { otherEndpoints: 1 }), on));
  const start = await read();
  assert.equal(value(start, "web", "connections"), 0);
  assert.equal(value(start, "other", "connections"), 0);
  assert.equal(value(start, "web", "no-local-endpoints"), undefined, "Cluster policy: none");

  await t.step(
    "N connections to a cluster IP, a node port, a load-balancer IP count N",
    async () => {
      const targets = [
        tcp(WEB.clusterIP),
        tcp(A.nodeV4, WEB.nodePort),
        tcp(WEB.lbIP),
      ];
      let expected = 0;
      for (const target of targets) {
        const replies = await send(target, N);
        assert.ok(
          replies.every((r) => r.ok),
          `${target.ip}:${target.port}: ${JSON.stringify(replies)}`,
        );
        expected += N;
        const samples = await read();
        assert.equal(value(samples, "web", "connections"), expected, `${target.ip}:${target.port}`);
        assert.equal(value(samples, "other", "connections"), 0, "no other Service counts it");
        assert.equal(value(samples, "empty", "connections"), 0);
        for (const sample of samples.filter((s) => s.counter !== "connections")) {
          assert.equal(sample.packets, 0, `${sample.service.id} ${sample.counter}`);
        }
      }
    },
  );

  await t.step(
    'a Service with no endpoints counts refusals with reason "no-endpoints"',
    async () => {
      const replies = await send(tcp(EMPTY_IP), 3);
      assert.ok(replies.every((r) => !r.ok && r.error === "refused"), JSON.stringify(replies));
      const samples = await read();
      assert.equal(value(samples, "empty", "no-endpoints"), 3);
      assert.equal(value(samples, "web", "no-endpoints"), 0);
      const text = await exposeServiceCounters(samples);
      assert.match(
        text,
        /kproxy_service_refused_packets_total\{namespace="kernel",service="empty",port="http",protocol="TCP",ip_family="IPv4",reason="no-endpoints"\} 3/,
      );
    },
  );

  await t.step('a source-range refusal counts with reason "source-range"', async () => {
    const replies = await send(tcp(WEB.lbIP, 80, A.clientV4Other, 700), 2);
    assert.ok(replies.every((r) => !r.ok && r.error === "timeout"), JSON.stringify(replies));
    const samples = await read();
    const refused = value(samples, "web", "source-range") ?? 0;
    assert.ok(refused >= 2, `source-range refusals: ${refused}`);
    assert.equal(value(samples, "web", "connections"), 3 * N, "a refused packet is no connection");
  });

  await t.step(
    'externalTrafficPolicy Local without a local endpoint counts reason "no-local-endpoints"',
    async () => {
      const replies = await send(tcp(LOCAL_ONLY.lbIP, 80, undefined, 700), 2);
      assert.ok(replies.every((r) => !r.ok && r.error === "timeout"), JSON.stringify(replies));
      const samples = await read();
      const dropped = value(samples, "localonly", "no-local-endpoints") ?? 0;
      assert.ok(dropped >= 2, `no-local-endpoints: ${dropped}`);
      assert.equal(value(samples, "localonly", "no-endpoints"), 0);
      assert.equal(value(samples, "localonly", "connections"), 0);
    },
  );

  await t.step("an unrelated sync leaves the counts untouched", async () => {
    const before = await read();
    await sync(plannedFromObjects(objects(topology, { otherEndpoints: 2 }), on), [
      "kernel/other:http/TCP",
    ]);
    const after = await read();
    const counts = (samples: ServiceCounterSample[]) =>
      samples.map((s) => `${s.service.id} ${s.family} ${s.counter} ${s.packets}`).sort();
    assert.deepEqual(counts(after), counts(before));
  });

  await t.step("a deleted Service's series are gone", async () => {
    const before = await options.listCounters();
    for (const name of options.webCounters) assert.ok(before.includes(name), name);
    await sync(plannedFromObjects(objects(topology, { web: false, otherEndpoints: 2 }), on), [
      webId,
    ]);
    const after = new Set(await options.listCounters());
    assert.deepEqual(before.filter((name) => !after.has(name)).sort(), options.webCounters.sort());
    const samples = await read();
    assert.equal(samples.filter((s) => s.service.name === "web").length, 0);
    assert.doesNotMatch(await options.listRules(), /kernel\/web/);
    assert.ok(samples.some((s) => s.service.name === "other"));
  });

  await t.step("with the feature off, no counter is in the ruleset", async () => {
    await sync(plannedFromObjects(objects(topology, { otherEndpoints: 2 }), {
      serviceCounters: false,
    }));
    assert.deepEqual(await read(), []);
    assert.deepEqual(await options.listCounters(), []);
    const rules = await options.listRules();
    assert.doesNotMatch(rules, /counter/);
    assert.ok(rules.length > 0);
  });
}

Deno.test({
  name: "nftables service counters count real traffic per Service port",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const topology = await createTestTopology();
    try {
      const node = new NetnsExecutor({ namespace: topology.node });
      const backend = createNftablesBackend({
        executor: node,
        config: testConfig({ proxyMode: "nftables" }),
        families: ["IPv4", "IPv6"],
      });
      const listRules = async () =>
        (await node.run({ program: "nft", args: ["list", "ruleset"] })).stdout;
      const listCounters = async () => {
        const names: string[] = [];
        for (const set of COUNTED_SETS) {
          const kind = set.startsWith("no-endpoint") ? "map" : "set";
          const listed = await node.run({
            program: "nft",
            args: ["-j", "list", kind, "ip", "kproxy", set],
          });
          if (listed.code !== 0) continue;
          for (const key of parseCountedSet(listed.stdout).keys()) names.push(`${set} ${key}`);
        }
        return names;
      };
      const webCounters = [
        `connection-counters ${WEB.clusterIP} . tcp . 80`,
        `connection-counters ${WEB.lbIP} . tcp . 80`,
        `nodeport-connection-counters tcp . ${WEB.nodePort}`,
        `firewall-ips ${WEB.lbIP} . tcp . 80`,
      ];
      await runCounterCases(t, { topology, backend, listRules, listCounters, webCounters });
    } finally {
      await topology.destroy();
    }
  },
});

for (const variant of ["nft", "legacy"] as const) {
  Deno.test({
    name: `iptables (${variant}) service counters count real traffic per Service port`,
    ignore: skipReason !== undefined || iptablesSkip !== undefined,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn(t) {
      const topology = await createTestTopology();
      const node = new NetnsExecutor({ namespace: topology.node });
      const backend = createIptablesBackend({
        executor: node,
        config: testConfig({ proxyMode: "iptables", iptablesBackend: variant }),
        families: ["IPv4", "IPv6"],
      });
      try {
        const listRules = async () => {
          let text = "";
          for (const table of ["nat", "filter"]) {
            const saved = await node.run({
              program: `iptables-${variant}-save`,
              args: ["-t", table],
            });
            text += saved.stdout;
          }
          return text;
        };
        const listCounters = async () => {
          const listed = await node.run({ program: "nfacct", args: ["list"] });
          return [...listed.stdout.matchAll(/ = (KP-\S+);$/gm)].map((m) => m[1]!);
        };
        const webPlan = plannedFromObjects(objects(topology, { otherEndpoints: 1 }), {
          serviceCounters: true,
        })[0]!;
        const web = webPlan.services.find((s) => s.name === "web")!;
        const webCounters = [...serviceNfacctNames(webPlan, web).values()];
        await runCounterCases(t, { topology, backend, listRules, listCounters, webCounters });
        await t.step("cleanup deletes kproxy's nfacct objects", async () => {
          await backend.cleanup();
          const listed = (await node.run({ program: "nfacct", args: ["list"] })).stdout;
          assert.doesNotMatch(listed, /KP-/);
        });
      } finally {
        await topology.destroy();
      }
    },
  });
}

Deno.test({
  name: "main() serves real traffic's counts on /metrics and drops a deleted Service's series",
  ignore: skipReason !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topology = await createFaultTopology("c");
    const [a1] = topology.localPods;
    const web = serviceObject({ name: "web", clusterIP: "10.96.0.10" });
    const slice = sliceObject("web", [a1!.ipv4]);
    const source = ManualSource.listed([nodeObject(), web, slice]);
    const series =
      'kproxy_service_connections_total{namespace="default",service="web",port="http",protocol="TCP",ip_family="IPv4"}';
    let kproxy: RunningKproxy | undefined;
    try {
      const executor = new NetnsExecutor({ namespace: topology.node });
      kproxy = await startKproxy({
        source,
        executor,
        backend: createNftablesBackend({ executor, config: defaultConfig("node-a") }),
      });
      await waitFor("the first sync", () => kproxy!.app.proxier.lastSynced !== undefined);
      const replies = await topology.requests(
        topology.client,
        Array(5).fill({ protocol: "TCP", ip: "10.96.0.10", port: 80 }),
      );
      assert.ok(replies.every((r) => r.ok), JSON.stringify(replies));
      // A scrape serves the last reading and refreshes it in the background (≤ 5 s old).
      await waitFor(
        "5 connections on /metrics",
        async () => sample(await kproxy!.metricsText(), series) === 5,
        15_000,
      );
      source.delete(slice);
      source.delete(web);
      await waitFor(
        "the deleted Service's series gone",
        async () => !(await kproxy!.metricsText()).includes('service="web"'),
        15_000,
      );
    } finally {
      await kproxy?.stop();
      await kproxy?.app.backend.cleanup().catch((error) => console.warn(`cleanup: ${error}`));
      await topology.destroy();
    }
  },
});
