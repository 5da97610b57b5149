import assert from "node:assert/strict";
import { startingEvent } from "../../lib/shell/source/events.ts";

Deno.test("startingEvent() names and times the event as client-go's recorder", () => {
  const wallNowMs = Date.UTC(2026, 10, 28, 1, 2, 3, 45);
  const event = startingEvent({ nodeName: "node-a", hostname: "host-a", wallNowMs });
  assert.deepEqual(event, {
    apiVersion: "events.k8s.io/v1",
    kind: "Event",
    metadata: {
      name: `node-a.${(BigInt(wallNowMs) * 1_000_000n).toString(16)}`,
      namespace: "default",
    },
    eventTime: "2026-11-28T01:02:03.045000Z",
    reportingController: "kproxy",
    reportingInstance: "kproxy-host-a",
    action: "StartKubeProxy",
    reason: "Starting",
    regarding: { apiVersion: "v1", kind: "Node", name: "node-a" },
    note: "",
    type: "Normal",
  });
});
