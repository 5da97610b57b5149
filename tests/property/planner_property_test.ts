import assert from "node:assert/strict";
import fc from "fast-check";
import { Tracker } from "../../lib/core/tracker.ts";
import { type PlannerOptions, planNode } from "../../lib/core/planner.ts";
import type { NodePlans } from "../../lib/core/plan.ts";
import { specialAddress } from "../../lib/core/ip.ts";
import type { SourceEvent } from "../../lib/core/source.ts";
import {
  clusterArb,
  fuzzRuns,
  listEvents,
  plannerOptionsArb,
  sourceEventArb,
  THIS_NODE,
} from "./arbitraries.ts";

const RUNS = fuzzRuns(150);

/** Characters any string of a Plan may hold, except `reason` (human text, never rendered). */
const SAFE_TEXT = /^[A-Za-z0-9._:/-]*$/;

/** Every string and number in a Plan, with its JSON path, for checks. */
function* leaves(
  value: unknown,
  path = "$",
): Generator<{ path: string; key: string; value: unknown }> {
  if (Array.isArray(value)) {
    for (const [i, item] of value.entries()) yield* leaves(item, `${path}[${i}]`);
  } else if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      if (typeof item === "object" && item !== null) yield* leaves(item, `${path}.${key}`);
      else yield { path: `${path}.${key}`, key, value: item };
    }
  }
}

/** Asserts that nothing unsafe reached the plans: the charset rule and sane numbers. */
function assertSafePlans(plans: NodePlans): void {
  for (const { path, key, value } of leaves(plans)) {
    if (typeof value === "string") {
      if (key === "reason") continue;
      assert.match(value, SAFE_TEXT, `unsafe string at ${path}: ${JSON.stringify(value)}`);
      assert.ok(value.length <= 600, `overlong string at ${path}`);
    } else if (typeof value === "number") {
      assert.ok(Number.isInteger(value) && value >= 0, `odd number at ${path}: ${value}`);
      if (/port$/i.test(key)) assert.ok(value <= 65535, `port out of range at ${path}: ${value}`);
    } else {
      assert.ok(typeof value === "boolean", `unexpected ${typeof value} at ${path}`);
    }
  }
  for (const plan of [plans.ipv4, plans.ipv6]) {
    for (const service of plan.services) {
      for (
        const ip of [...service.clusterIPs, ...service.externalIPs, ...service.loadBalancerIPs]
      ) {
        assert.equal(ip.includes(":"), plan.family === "IPv6", `${ip} in the ${plan.family} plan`);
        assert.equal(specialAddress(ip), undefined, `special address ${ip} in a plan`);
      }
      for (const endpoint of [...service.internal.endpoints, ...service.external.endpoints]) {
        assert.equal(
          endpoint.ip.includes(":"),
          plan.family === "IPv6",
          `${endpoint.ip} in the ${plan.family} plan`,
        );
        assert.ok(endpoint.port >= 1 && endpoint.port <= 65535);
        assert.equal(specialAddress(endpoint.ip), undefined, `special endpoint ${endpoint.ip}`);
      }
    }
  }
}

const eventsArb = fc.array(sourceEventArb(), { maxLength: 40 });
const batchesArb = fc.array(fc.array(sourceEventArb(), { maxLength: 8 }), {
  minLength: 1,
  maxLength: 6,
});

function replay(
  options: PlannerOptions,
  batches: readonly (readonly SourceEvent[])[],
  check: (incremental: NodePlans, full: NodePlans) => void,
): void {
  const tracker = new Tracker({ nodeName: THIS_NODE, clock: { now: () => 0 } });
  let previous: NodePlans | undefined;
  for (const batch of batches) {
    for (const event of batch) tracker.apply(event);
    const change = tracker.drain();
    const next = planNode({
      state: change.state,
      options,
      previous,
      changedServices: change.changedServices,
      globalChange: change.globalChange,
    });
    check(next, planNode({ state: change.state, options }));
    previous = next;
  }
}

Deno.test("Tracker and planNode() never throw on any sequence of valid and broken events", () => {
  fc.assert(
    fc.property(plannerOptionsArb, eventsArb, (options, events) => {
      const tracker = new Tracker({ nodeName: THIS_NODE, clock: { now: () => 0 } });
      for (const event of events) tracker.apply(event);
      const plans = planNode({ state: tracker.drain().state, options });
      assert.equal(plans.ipv4.family, "IPv4");
      assert.equal(plans.ipv6.family, "IPv6");
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planNode() lets no unsafe string reach a Plan, whatever the events", () => {
  fc.assert(
    fc.property(plannerOptionsArb, eventsArb, (options, events) => {
      const tracker = new Tracker({ nodeName: THIS_NODE, clock: { now: () => 0 } });
      for (const event of events) tracker.apply(event);
      assertSafePlans(planNode({ state: tracker.drain().state, options }));
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planNode() plans every valid cluster with only safe strings", () => {
  fc.assert(
    fc.property(plannerOptionsArb, clusterArb({ large: true }), (options, cluster) => {
      const tracker = new Tracker({ nodeName: THIS_NODE, clock: { now: () => 0 } });
      for (const event of listEvents(cluster)) tracker.apply(event);
      const state = tracker.drain().state;
      assert.equal(state.services.size, cluster.services.length, "every valid service is kept");
      assertSafePlans(planNode({ state, options }));
    }),
    { numRuns: Math.ceil(RUNS / 3) },
  );
});

Deno.test("planNode() incremental replan equals a full replan under hostile event sequences", () => {
  fc.assert(
    fc.property(plannerOptionsArb, batchesArb, (options, batches) => {
      replay(options, batches, (incremental, full) => assert.deepEqual(incremental, full));
    }),
    { numRuns: RUNS },
  );
});

Deno.test("planNode() incremental replan equals a full replan from a valid cluster onwards", () => {
  fc.assert(
    fc.property(plannerOptionsArb, clusterArb(), batchesArb, (options, cluster, batches) => {
      replay(options, [listEvents(cluster), ...batches], (incremental, full) => {
        assert.deepEqual(incremental, full);
      });
    }),
    { numRuns: RUNS },
  );
});
