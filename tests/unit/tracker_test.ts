import assert from "node:assert/strict";
import { parseTriggerTime, Tracker } from "../../lib/core/tracker.ts";
import type { ObjectKind } from "../../lib/core/source.ts";
import { withLogRecords } from "../support/logs.ts";

type Json = Record<string, any>;

function svc(name: string, spec: Json = {}, namespace = "default"): Json {
  return {
    metadata: { namespace, name },
    spec: {
      clusterIP: "10.96.0.10",
      ports: [{ name: "http", port: 80, targetPort: 8080 }],
      ...spec,
    },
  };
}

function slice(name: string, service: string, ips: string[], extra: Json = {}): Json {
  return {
    metadata: { namespace: "default", name, labels: { "kubernetes.io/service-name": service } },
    addressType: extra.addressType ?? "IPv4",
    ports: [{ name: "http", port: 8080 }],
    endpoints: ips.map((ip) => ({ addresses: [ip], nodeName: extra.nodeName ?? "node-a" })),
  };
}

function node(name: string, labels: Json = {}): Json {
  return {
    metadata: { name, labels },
    status: { addresses: [{ type: "InternalIP", address: "10.200.0.2" }] },
  };
}

function serviceCIDR(name: string, cidrs: string[]): Json {
  return { metadata: { name }, spec: { cidrs } };
}

function upsert(kind: ObjectKind, object: Json) {
  return { type: "upsert" as const, kind, object };
}

function remove(kind: ObjectKind, object: Json) {
  return { type: "delete" as const, kind, object };
}

function newTracker(now = { t: 1000 }) {
  return new Tracker({ nodeName: "node-a", clock: { now: () => now.t } });
}

Deno.test("Tracker.synced is true only after the synced event", () => {
  const tracker = newTracker();
  assert.equal(tracker.synced, false);
  assert.equal(tracker.apply({ type: "synced" }), true);
  assert.equal(tracker.synced, true);
});

Deno.test("Tracker.drain() reports added services and their slices", () => {
  const now = { t: 1000 };
  const tracker = newTracker(now);
  assert.equal(tracker.apply(upsert("Service", svc("web"))), true);
  now.t = 2000;
  tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ["10.244.1.5"])));
  const change = tracker.drain();
  assert.deepEqual([...change.changedServices], ["default/web"]);
  assert.equal(change.serviceChanges, 1);
  assert.equal(change.endpointChanges, 1);
  assert.equal(change.oldestChangeAt, 1000);
  assert.equal(change.globalChange, false);
  assert.equal(change.state.services.get("default/web")?.clusterIPs[0], "10.96.0.10");
  assert.equal(
    change.state.slicesByService.get("default/web")?.[0]?.endpoints[0]?.ip,
    "10.244.1.5",
  );

  const empty = tracker.drain();
  assert.equal(empty.changedServices.size, 0);
  assert.equal(empty.oldestChangeAt, undefined);
  assert.equal(empty.state.services.size, 1);
});

Deno.test("Tracker.apply() coalesces a change and its revert into no change", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("web")));
  tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ["10.244.1.5"])));
  tracker.drain();
  assert.equal(tracker.apply(upsert("Service", svc("web", { clusterIP: "10.96.0.11" }))), true);
  assert.equal(tracker.apply(upsert("Service", svc("web"))), false);
  assert.equal(tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ["10.244.1.6"]))), true);
  assert.equal(
    tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ["10.244.1.5"]))),
    false,
  );
  const change = tracker.drain();
  assert.equal(change.changedServices.size, 0);
  assert.equal(change.serviceChanges, 0);
  assert.equal(change.endpointChanges, 0);
});

Deno.test("Tracker.apply() treats an add then delete before drain as no change", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("web")));
  assert.equal(tracker.apply(remove("Service", svc("web"))), false);
  assert.equal(tracker.drain().changedServices.size, 0);
});

Deno.test("Tracker.apply() returns false for an identical resend", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("web")));
  tracker.drain();
  assert.equal(tracker.apply(upsert("Service", svc("web"))), false);
});

Deno.test("Tracker.apply() keeps the previous valid version on an invalid update", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("web")));
  tracker.drain();
  const bad = svc("web", { ports: [{ name: "http", port: 70000 }] });
  assert.equal(tracker.apply(upsert("Service", bad)), false);
  assert.equal(tracker.apply(upsert("Service", bad)), false);
  const change = tracker.drain();
  assert.equal(change.changedServices.size, 0);
  assert.equal(change.state.services.get("default/web")?.ports[0]?.port, 80);
});

Deno.test("Tracker.apply() skips an invalid new object", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("bad;name")));
  tracker.apply(upsert("EndpointSlice", slice("s", "web", ["10.244.1.005"])));
  const change = tracker.drain();
  assert.equal(change.state.services.size, 0);
  assert.equal(change.state.slicesByService.size, 0);
});

Deno.test("Tracker groups slices per service, merges and removes them", () => {
  const tracker = newTracker();
  tracker.apply(
    upsert("EndpointSlice", slice("web-b", "web", ["10.244.2.5"], { nodeName: "node-b" })),
  );
  tracker.apply(upsert("EndpointSlice", slice("web-a", "web", ["10.244.1.5"])));
  tracker.apply(upsert("EndpointSlice", slice("dns-a", "dns", ["10.244.1.9"])));
  let change = tracker.drain();
  assert.deepEqual(change.state.slicesByService.get("default/web")?.map((s) => s.name), [
    "web-a",
    "web-b",
  ]);
  assert.deepEqual([...change.changedServices].sort(), ["default/dns", "default/web"]);

  tracker.apply(remove("EndpointSlice", slice("web-a", "web", [])));
  change = tracker.drain();
  assert.deepEqual([...change.changedServices], ["default/web"]);
  assert.deepEqual(change.state.slicesByService.get("default/web")?.map((s) => s.name), ["web-b"]);

  tracker.apply(remove("EndpointSlice", { metadata: { namespace: "default", name: "web-b" } }));
  change = tracker.drain();
  assert.equal(change.state.slicesByService.has("default/web"), false);
});

Deno.test("Tracker keeps IPv4 and IPv6 slices of a dual-stack service together", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("dual", { clusterIPs: ["10.96.0.20", "fd00:96::20"] })));
  tracker.apply(upsert("EndpointSlice", slice("dual-v4", "dual", ["10.244.1.7"])));
  tracker.apply(
    upsert("EndpointSlice", slice("dual-v6", "dual", ["fd00:244:1::7"], { addressType: "IPv6" })),
  );
  const slices = tracker.drain().state.slicesByService.get("default/dual") ?? [];
  assert.deepEqual(slices.map((s) => s.family), ["IPv4", "IPv6"]);
});

Deno.test("Tracker drops a service that becomes headless or ExternalName", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("web")));
  tracker.drain();
  tracker.apply(upsert("Service", svc("web", { clusterIP: "None" })));
  const change = tracker.drain();
  assert.equal(change.state.services.has("default/web"), false);
  assert.deepEqual([...change.changedServices], ["default/web"]);
});

Deno.test("Tracker snapshots are not changed by later events", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("web")));
  tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ["10.244.1.5"])));
  const first = tracker.drain().state;
  tracker.apply(upsert("Service", svc("api", { clusterIP: "10.96.0.12" })));
  tracker.apply(remove("Service", svc("web")));
  tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ["10.244.1.6"])));
  const second = tracker.drain().state;
  assert.deepEqual([...first.services.keys()], ["default/web"]);
  assert.equal(first.slicesByService.get("default/web")?.[0]?.endpoints[0]?.ip, "10.244.1.5");
  assert.deepEqual([...second.services.keys()], ["default/api"]);
  assert.equal(second.slicesByService.get("default/web")?.[0]?.endpoints[0]?.ip, "10.244.1.6");
});

Deno.test("Tracker shares unchanged maps between snapshots", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Service", svc("web")));
  tracker.apply(upsert("Node", node("node-a")));
  const first = tracker.drain().state;
  tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ["10.244.1.5"])));
  const second = tracker.drain().state;
  assert.equal(second.services, first.services);
  assert.equal(second.nodes, first.nodes);
  assert.notEqual(second.slicesByService, first.slicesByService);
});

Deno.test("Tracker reports globalChange for this node and ServiceCIDRs only", () => {
  const tracker = newTracker();
  tracker.apply(upsert("Node", node("node-a", { zone: "a" })));
  assert.equal(tracker.drain().globalChange, true);

  tracker.apply(upsert("Node", node("node-b", { zone: "b" })));
  let change = tracker.drain();
  assert.equal(change.globalChange, false);
  assert.equal(change.state.nodes.get("node-b")?.labels.zone, "b");

  tracker.apply(upsert("Node", node("node-a", { zone: "c" })));
  assert.equal(tracker.apply(upsert("Node", node("node-a", { zone: "a" }))), false);
  assert.equal(tracker.drain().globalChange, false);

  tracker.apply(upsert("ServiceCIDR", serviceCIDR("kubernetes", ["10.96.0.0/16"])));
  change = tracker.drain();
  assert.equal(change.globalChange, true);
  assert.deepEqual(change.state.serviceCIDRs, [{ name: "kubernetes", cidrs: ["10.96.0.0/16"] }]);

  tracker.apply(remove("ServiceCIDR", serviceCIDR("kubernetes", [])));
  change = tracker.drain();
  assert.equal(change.globalChange, true);
  assert.deepEqual(change.state.serviceCIDRs, []);

  tracker.apply(remove("Node", node("node-a")));
  assert.equal(tracker.drain().globalChange, true);
});

Deno.test("Tracker ignores other nodes' label changes: topology takes their zone from slices", () => {
  const tracker = newTracker();
  tracker.apply(
    upsert("Service", svc("topo", { topologyKeys: ["topology.kubernetes.io/zone", "*"] })),
  );
  tracker.apply(
    upsert("EndpointSlice", slice("topo-1", "topo", ["10.244.2.5"], { nodeName: "node-b" })),
  );
  tracker.apply(upsert("Node", node("node-b", { "topology.kubernetes.io/zone": "zone-b" })));
  tracker.drain();
  tracker.apply(upsert("Node", node("node-b", { "topology.kubernetes.io/zone": "zone-c" })));
  const change = tracker.drain();
  assert.deepEqual([...change.changedServices], []);
  assert.equal(change.globalChange, false);
});

Deno.test("Tracker warns once which topologyKeys only endpoints on this node can match", async () => {
  await withLogRecords(["kproxy", "tracker"], (records) => {
    const keys = ["kubernetes.io/hostname", "topology.kubernetes.io/region", "*"];
    const gated = new Tracker({
      nodeName: "node-a",
      clock: { now: () => 0 },
      featureGates: { ServiceTopology: true },
    });
    gated.apply(upsert("Service", svc("topo", { topologyKeys: keys })));
    gated.apply(upsert("Service", svc("topo", { topologyKeys: keys, clusterIP: "10.96.0.14" })));
    gated.apply(upsert("Service", svc("zonal", { topologyKeys: ["topology.kubernetes.io/zone"] })));
    newTracker().apply(upsert("Service", svc("off", { topologyKeys: keys })));
    assert.equal(records.length, 1);
    assert.equal(records[0]?.level, "warning");
    assert.deepEqual(records[0]?.properties, {
      key: "default/topo",
      keys: ["topology.kubernetes.io/region"],
    });
  });
});

Deno.test("Tracker.drain() reports oldestChangeAt of the earliest effective change", () => {
  const now = { t: 5000 };
  const tracker = newTracker(now);
  tracker.apply(upsert("Service", svc("a", { clusterIP: "10.96.0.1" })));
  tracker.apply(remove("Service", svc("a")));
  now.t = 6000;
  tracker.apply(upsert("Service", svc("b", { clusterIP: "10.96.0.2" })));
  now.t = 7000;
  tracker.apply(upsert("Node", node("node-a")));
  const change = tracker.drain();
  assert.equal(change.oldestChangeAt, 6000);
  assert.deepEqual([...change.changedServices], ["default/b"]);
});

Deno.test("Tracker.drain() after one change reports that service only and shares every other object", () => {
  // The cost of a drain follows the change; its speed at 30k is in the bench (one change).
  const tracker = newTracker();
  for (let i = 0; i < 1000; i++) {
    const name = `svc-${i}`;
    tracker.apply(upsert("Service", svc(name, { clusterIP: `10.96.${i >> 8}.${i & 255}` })));
    const ips = Array.from({ length: 10 }, (_, j) => `10.244.${i >> 4}.${(i & 15) * 10 + j}`);
    tracker.apply(upsert("EndpointSlice", slice(`${name}-x`, name, ips)));
  }
  let before = tracker.drain().state;
  for (let round = 0; round < 3; round++) {
    tracker.apply(upsert("EndpointSlice", slice("svc-7-x", "svc-7", [`10.250.0.${round + 1}`])));
    const change = tracker.drain();
    assert.deepEqual([...change.changedServices], ["default/svc-7"]);
    assert.equal(change.endpointChanges, 1);
    assert.equal(change.serviceChanges, 0);
    const after = change.state;
    assert.notEqual(
      after.slicesByService.get("default/svc-7"),
      before.slicesByService.get("default/svc-7"),
    );
    for (const key of ["default/svc-0", "default/svc-8", "default/svc-999"]) {
      assert.equal(after.slicesByService.get(key), before.slicesByService.get(key));
      assert.equal(after.services.get(key), before.services.get(key));
    }
    before = after;
  }
});

Deno.test("Tracker logs one warning per distinct error of an invalid object", async () => {
  await withLogRecords(["kproxy", "tracker"], (records) => {
    const tracker = newTracker();
    const bad = svc("web", { ports: [{ port: 70000 }] });
    tracker.apply(upsert("Service", bad));
    tracker.apply(upsert("Service", bad));
    tracker.apply(upsert("Service", svc("web", { ports: [{ port: 0 }] })));
    assert.equal(records.length, 2);
    assert.equal(records[0]?.level, "warning");
    assert.deepEqual(records[0]?.properties, {
      kind: "Service",
      key: "default/web",
      reason: "spec.ports[0].port: 70000 is out of range 1-65535",
    });
  });
});

Deno.test("Tracker logs refused special addresses once per change, naming the object and fields", async () => {
  await withLogRecords(["kproxy", "tracker"], (records) => {
    const tracker = newTracker();
    const sshd = svc("web", { externalIPs: ["127.0.0.1", "203.0.113.7"] });
    tracker.apply(upsert("Service", sshd));
    tracker.apply(upsert("Service", sshd));
    tracker.apply(
      upsert("EndpointSlice", slice("web-1", "web", ["169.254.169.254", "10.244.1.5"])),
    );
    tracker.apply(
      upsert("EndpointSlice", slice("web-1", "web", ["169.254.169.254", "10.244.1.6"])),
    );
    assert.deepEqual(records.map((r) => [r.level, r.properties]), [
      ["warning", {
        kind: "Service",
        key: "default/web",
        reason: 'spec.externalIPs[0]: "127.0.0.1" is a loopback address (127.0.0.0/8, ::1)',
      }],
      ["warning", {
        kind: "EndpointSlice",
        key: "default/web-1",
        reason:
          'endpoints[0].addresses[0]: "169.254.169.254" is a link-local address (169.254.0.0/16, fe80::/10)',
      }],
    ]);
    tracker.apply({ type: "synced" });
    const state = tracker.drain().state;
    assert.deepEqual(state.services.get("default/web")?.externalIPs, ["203.0.113.7"]);
    assert.deepEqual(
      state.slicesByService.get("default/web")?.[0]?.endpoints.map((e) => e.ip),
      ["10.244.1.6"],
    );
    // Fixed, then broken again: logged again.
    tracker.apply(upsert("Service", svc("web", { externalIPs: ["203.0.113.7"] })));
    tracker.apply(upsert("Service", sshd));
    assert.equal(records.length, 3);
  });
});

Deno.test("Tracker bounds the refusals of one object to one line", async () => {
  await withLogRecords(["kproxy", "tracker"], (records) => {
    const tracker = newTracker();
    const ips = Array.from({ length: 1000 }, (_, i) => `127.0.${i >> 8}.${i & 0xff}`);
    tracker.apply(upsert("EndpointSlice", slice("web-1", "web", ips)));
    assert.equal(records.length, 1);
    const reason = String(records[0]?.properties.reason);
    assert.match(reason, /^endpoints\[0\]\.addresses\[0\]: "127\.0\.0\.0" is a loopback/);
    assert.match(reason, /; and 997 more$/);
  });
});

const TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time";

function triggered(name: string, ips: string[], triggerTime: unknown): Json {
  const object = slice(name, "web", ips);
  object.metadata.annotations = { [TRIGGER]: triggerTime };
  return object;
}

/** A tracker started at wall time 2026-01-01T00:00:00Z, monotonic 1000, then 60 s later. */
function clockedTracker() {
  const clock = { t: 1000, wall: Date.UTC(2026, 0, 1) };
  const tracker = new Tracker({
    nodeName: "node-a",
    clock: { now: () => clock.t, wallNow: () => clock.wall },
  });
  clock.t += 60_000;
  clock.wall += 60_000;
  return { clock, tracker };
}

Deno.test("parseTriggerTime() takes RFC 3339 times only, as Go's time.RFC3339Nano", () => {
  assert.equal(parseTriggerTime("2026-01-01T00:00:59Z"), Date.UTC(2026, 0, 1, 0, 0, 59));
  assert.equal(
    parseTriggerTime("2026-01-01T00:00:59.123456789Z"),
    Date.UTC(2026, 0, 1, 0, 0, 59) + 123.456789,
  );
  assert.equal(parseTriggerTime("2026-01-01T02:00:59+02:00"), Date.UTC(2026, 0, 1, 0, 0, 59));
  assert.equal(parseTriggerTime("2025-12-31T23:30:00.5-00:30"), Date.UTC(2026, 0, 1, 0, 0, 0, 500));
  for (
    const bad of [
      undefined,
      "",
      1767225600,
      "yesterday",
      "2026-01-01",
      "2026-01-01 00:00:59Z",
      "2026-01-01T00:00:59",
      "2026-01-01T00:00:59z",
      "2026-13-01T00:00:59Z",
      "2026-02-30T00:00:59Z",
      "2026-01-01T24:00:00Z",
      "2026-01-01T00:60:00Z",
      "2026-01-01T00:00:60Z",
      "2026-01-01T00:00:59.Z",
      "2026-01-01T00:00:59.1234567890Z",
      "2026-01-01T00:00:59+24:00",
      " 2026-01-01T00:00:59Z",
    ]
  ) {
    assert.equal(parseTriggerTime(bad), undefined, String(bad));
  }
});

Deno.test("Tracker.drain() starts an EndpointSlice change at its last-change-trigger-time", () => {
  const { clock, tracker } = clockedTracker();
  // Triggered 3 s before kproxy saw it (wall 00:00:57; seen at 00:01:00, monotonic 61000).
  tracker.apply(
    upsert("EndpointSlice", triggered("web-1", ["10.244.1.5"], "2026-01-01T00:00:57Z")),
  );
  assert.equal(tracker.drain().oldestChangeAt, clock.t - 3000);

  // The earliest trigger time of the period wins, also over a later-seen change of the service.
  clock.t += 1000;
  clock.wall += 1000;
  tracker.apply(upsert("Service", svc("web")));
  tracker.apply(
    upsert("EndpointSlice", triggered("web-1", ["10.244.1.6"], "2026-01-01T00:00:59.5Z")),
  );
  assert.equal(tracker.drain().oldestChangeAt, clock.t - 1500);
});

Deno.test("Tracker.drain() starts at the time seen for a bad, older or future trigger time", () => {
  const { clock, tracker } = clockedTracker();
  const seen = clock.t;
  const cases = [
    "not a time", // unparseable: ignored
    "2025-12-31T23:59:59Z", // before the tracker started (a restart's initial list): ignored
    "2026-01-01T00:05:00Z", // in the future (clock skew): clamped to when kproxy saw it
  ];
  cases.forEach((value, i) => {
    tracker.apply(upsert("EndpointSlice", triggered("web-1", [`10.244.1.${i + 1}`], value)));
    assert.equal(tracker.drain().oldestChangeAt, seen, value);
  });
});

Deno.test("Tracker ignores trigger times without a wall clock", () => {
  const tracker = newTracker({ t: 5000 });
  tracker.apply(
    upsert("EndpointSlice", triggered("web-1", ["10.244.1.5"], "2026-01-01T00:00:57Z")),
  );
  assert.equal(tracker.drain().oldestChangeAt, 5000);
});
