/**
 * A frontend two Services claim (the same externalIP and port) through the
 * planner and every mode's renderer: the lower service port id holds it in
 * every mode, and when it goes, the other claimant takes it in the next,
 * incremental, sync (lib/core/frontends.ts).
 */

import assert from "node:assert/strict";
import { modelService } from "../support/model_fixtures.ts";
import type { EndpointSlice, Service } from "../../lib/core/model.ts";
import { serviceKey } from "../../lib/core/model.ts";
import type { NodePlans, Plan } from "../../lib/core/plan.ts";
import { changedServicePortIds, type PlannerOptions, planNode } from "../../lib/core/planner.ts";
import type { ClusterState } from "../../lib/core/state.ts";
import { renderFull as renderNftables } from "../../backends/nftables/render.ts";
import { renderIncremental } from "../../backends/nftables/incremental.ts";
import { inputText, renderFull as renderIptables } from "../../backends/iptables/render.ts";
import { renderPartialSync } from "../../backends/iptables/partial.ts";
import { renderIpvs } from "../../backends/ipvs/render.ts";
import { renderWindows } from "../../backends/windows/render.ts";

const SHARED = "192.0.2.1";

function service(name: string, clusterIP: string): Service {
  return modelService({ name, clusterIPs: [clusterIP], externalIPs: [SHARED] });
}

function slice(name: string, ip: string): EndpointSlice {
  return {
    namespace: "default",
    name: `${name}-1`,
    serviceName: name,
    family: "IPv4",
    ports: [{ name: "", protocol: "TCP", port: 8080 }],
    endpoints: [{
      ip,
      ready: true,
      serving: true,
      terminating: false,
      nodeName: "node-b",
      zone: "",
    }],
  };
}

const options: PlannerOptions = {
  nodeName: "node-a",
  nodePortAddresses: ["primary"],
  localAddresses: ["192.168.1.10"],
  clusterCIDRs: ["10.244.0.0/16"],
  detectLocalMode: "",
  bridgeInterface: "",
  interfaceNamePrefix: "",
  masqueradeAll: false,
  serviceClusterIPRange: ["10.96.0.0/16"],
  externalIPAllowedCIDRs: [],
  featureGates: {},
};

function state(services: Service[]): ClusterState {
  const slices = [slice("a", "10.244.1.1"), slice("b", "10.244.2.2")];
  return {
    services: new Map(services.map((s) => [serviceKey(s.namespace, s.name), s])),
    slicesByService: new Map(slices.map((s) => [serviceKey(s.namespace, s.serviceName), [s]])),
    nodes: new Map([["node-a", {
      name: "node-a",
      labels: {},
      addresses: ["192.168.1.10"],
      podCIDRs: [],
      deleting: false,
    }]]),
    serviceCIDRs: [],
  };
}

const a = service("a", "10.96.0.1");
const b = service("b", "10.96.0.2");
const both = planNode({ state: state([b, a]), options });
const onlyB: NodePlans = planNode({
  state: state([b]),
  options,
  previous: both,
  changedServices: new Set(["default/a"]),
});
const changed = changedServicePortIds(both.ipv4, onlyB.ipv4);

/** The endpoint that traffic to the shared address reaches in a mode's output, by its IP. */
const ENDPOINT_OF = { a: "10.244.1.1", b: "10.244.2.2" };

Deno.test("the planner hands the shared frontend from a to b when a goes", () => {
  assert.deepEqual(both.ipv4.services.map((s) => [s.id, s.externalIPs]), [
    ["default/a:/TCP", [SHARED]],
    ["default/b:/TCP", []],
  ]);
  assert.deepEqual(onlyB.ipv4.services.map((s) => [s.id, s.externalIPs]), [
    ["default/b:/TCP", [SHARED]],
  ]);
  assert.deepEqual(changed, new Set(["default/a:/TCP", "default/b:/TCP"]));
});

Deno.test("nftables: the shared address dispatches to a's endpoints, then to b's", () => {
  const slots = (text: string) =>
    [...text.matchAll(/192\.0\.2\.1 \. tcp \. 80 \. 0 : ([\d.]+) \. 8080/g)].map((m) => m[1]);
  assert.deepEqual(slots(renderNftables(both.ipv4).toString()), [ENDPOINT_OF.a]);
  const update = renderIncremental({ plan: onlyB.ipv4, previous: both.ipv4, changed })!;
  assert.deepEqual(slots(update.toString()), [ENDPOINT_OF.b]);
  assert.deepEqual(slots(renderNftables(onlyB.ipv4).toString()), [ENDPOINT_OF.b]);
});

Deno.test("iptables: only the holder has a rule for the shared address, in full and partial syncs", () => {
  const rules = (text: string) =>
    text.split("\n").filter((line) => line.startsWith("-A KUBE-SERVICES") && line.includes(SHARED))
      .map((line) => line.match(/--comment "?([^ "]+)/)?.[1]);
  assert.deepEqual(rules(renderIptables(both.ipv4).toString()), ["default/a"]);
  const partial = renderPartialSync({ previous: both.ipv4, next: onlyB.ipv4, changed });
  assert.deepEqual(rules(inputText(partial.commit)), ["default/b"]);
});

Deno.test("ipvs and Windows: the shared address has one virtual server, a's, then b's", () => {
  const ipvs = (plan: Plan) =>
    renderIpvs(plan).virtualServers.filter((vs) => vs.address === SHARED).map((vs) =>
      vs.realServers.map((rs) => rs.address)
    );
  assert.deepEqual(ipvs(both.ipv4), [[ENDPOINT_OF.a]]);
  assert.deepEqual(ipvs(onlyB.ipv4), [[ENDPOINT_OF.b]]);
  const windows = (plan: Plan) =>
    renderWindows(plan).loadBalancers.filter((lb) => lb.vip === SHARED).map((lb) =>
      lb.servicePortId
    );
  assert.deepEqual(windows(both.ipv4), ["default/a:/TCP"]);
  assert.deepEqual(windows(onlyB.ipv4), ["default/b:/TCP"]);
});
