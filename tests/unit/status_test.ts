import assert from "node:assert/strict";
import type { Plan, PlanEndpoint, ServicePortPlan } from "../../lib/core/plan.ts";
import { emptyPlan } from "../../lib/core/plan.ts";
import { servicePortPlan } from "../../scripts/testbed/plans.ts";
import {
  countPlan,
  countPlans,
  type StatusSnapshot,
  summarizeTraffic,
  TOP_TRAFFIC,
} from "../../lib/commands/status/snapshot.ts";
import { escapeHtml, formatUptime, renderStatusHtml } from "../../lib/commands/status/html.ts";
import { statusHandler } from "../../lib/commands/status/handler.ts";
import { SyncHistory } from "../../lib/shell/sync_history.ts";

const HOSTILE = `<script>alert("x")</script>&'`;

function endpoint(ip: string, isLocal: boolean): PlanEndpoint {
  return {
    ip,
    port: 8080,
    nodeName: isLocal ? "node-a" : "node-b",
    zone: "",
    isLocal,
    ready: true,
    serving: true,
    terminating: false,
  };
}

function servicePort(name: string, endpoints: PlanEndpoint[]): ServicePortPlan {
  const traffic = { endpoints, whenEmpty: "reject" as const, reason: "" };
  return servicePortPlan({
    name,
    portName: "http",
    clusterIPs: ["10.96.0.10"],
    internal: traffic,
    external: traffic,
    servingEndpoints: endpoints,
  });
}

function plan(services: ServicePortPlan[]): Plan {
  return { ...emptyPlan("IPv4", "node-a"), services };
}

function snapshot(overrides: Partial<StatusSnapshot> = {}): StatusSnapshot {
  const history = new SyncHistory();
  const start = Date.UTC(2025, 0, 1, 12, 0, 0);
  for (let i = 0; i < 60; i++) {
    history.record({
      at: start + i * 1000,
      full: i % 10 === 0,
      durationMs: 5 + (i % 7) * 3,
      changed: i % 4,
      ok: i !== 42,
      error: i === 42 ? `Cannot sync: ${HOSTILE}` : undefined,
    });
  }
  return {
    version: "0.1.0",
    mode: "nftables",
    node: "node-a",
    startedAt: start - 3_600_000,
    now: start + 61_000,
    uptimeMs: 3_661_000,
    healthy: true,
    families: countPlans({
      ipv4: plan([
        servicePort("web", [endpoint("10.244.1.10", true), endpoint("10.244.2.10", false)]),
        servicePort(HOSTILE, []),
      ]),
      ipv6: emptyPlan("IPv6", "node-a"),
    }),
    syncs: history.entries(),
    totalSyncs: history.total,
    failedSyncs: history.failures,
    lastFailure: history.lastFailure,
    driftRepairs: 2,
    ...overrides,
  };
}

/** Serves `handler` on 127.0.0.1, port 0, for the duration of `body`. */
async function withServer(
  handler: (req: Request) => Response,
  body: (base: string) => Promise<void>,
): Promise<void> {
  const controller = new AbortController();
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, signal: controller.signal, onListen: () => {} },
    (req) =>
      new URL(req.url).pathname === "/statusz" ? handler(req) : new Response(null, { status: 404 }),
  );
  try {
    await body(`http://127.0.0.1:${server.addr.port}/statusz`);
  } finally {
    controller.abort();
    await server.finished;
  }
}

Deno.test("SyncHistory.record() keeps the last syncs in order", () => {
  const history = new SyncHistory({ capacity: 3 });
  assert.deepEqual(history.entries(), []);
  for (let i = 0; i < 5; i++) {
    history.record({
      at: i,
      full: false,
      durationMs: i,
      changed: 0,
      ok: i !== 1,
      error: i === 1 ? "boom" : undefined,
    });
  }
  assert.deepEqual(history.entries().map((e) => e.at), [2, 3, 4]);
  assert.equal(history.total, 5);
  assert.equal(history.failures, 1);
  assert.equal(history.lastFailure?.error, "boom");
  const copy = history.entries();
  copy[0]!.at = 99;
  assert.equal(history.entries()[0]!.at, 2);
  assert.throws(() => new SyncHistory({ capacity: 0 }), RangeError);
});

Deno.test("countPlan() counts services, endpoints and ports without endpoints", () => {
  const counts = countPlan(plan([
    servicePort("web", [endpoint("10.244.1.10", true), endpoint("10.244.2.10", false)]),
    { ...servicePort("web", [endpoint("10.244.1.10", true)]), id: "default/web:https/TCP" },
    servicePort("empty", []),
  ]));
  assert.deepEqual(counts, {
    services: 2,
    servicePorts: 3,
    endpoints: 2,
    localEndpoints: 1,
    withoutEndpoints: 1,
    withoutEndpointsIds: ["default/empty:http/TCP"],
  });
  assert.equal(countPlans(undefined), undefined);
});

Deno.test("escapeHtml() escapes every markup character", () => {
  assert.equal(escapeHtml(HOSTILE), "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;");
});

Deno.test("formatUptime() picks two units", () => {
  assert.deepEqual(
    [0, 59_999, 61_000, 3_723_000, 90_061_000].map(formatUptime),
    ["0s", "59s", "1m 1s", "1h 2m", "1d 1h"],
  );
});

Deno.test("statusHandler() serves JSON when asked, over HTTP", async () => {
  await withServer(statusHandler(() => snapshot()), async (url) => {
    for (const init of [{ headers: { accept: "application/json" } }, {}]) {
      const target = "headers" in init ? url : `${url}?format=json`;
      const res = await fetch(target, init);
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
      assert.equal(res.headers.get("cache-control"), "no-store");
      const body = await res.json();
      assert.deepEqual(Object.keys(body).sort(), [
        "driftRepairs",
        "failedSyncs",
        "families",
        "healthy",
        "lastFailure",
        "mode",
        "node",
        "now",
        "startedAt",
        "syncs",
        "totalSyncs",
        "uptimeSeconds",
        "version",
      ]);
      assert.equal(body.mode, "nftables");
      assert.equal(body.uptimeSeconds, 3661);
      assert.equal(body.syncs.length, 50);
      assert.deepEqual(Object.keys(body.syncs[0]).sort(), [
        "at",
        "changed",
        "durationMs",
        "full",
        "ok",
      ]);
      assert.equal(body.syncs[0].at, "2025-01-01T12:00:10.000Z");
      assert.equal(body.totalSyncs, 60);
      assert.equal(body.failedSyncs, 1);
      assert.equal(body.lastFailure.error, `Cannot sync: ${HOSTILE}`);
      assert.equal(body.driftRepairs, 2);
      assert.equal(body.families.ipv4.services, 2);
      assert.equal(body.families.ipv4.endpoints, 2);
      assert.deepEqual(body.families.ipv4.withoutEndpointsIds, [`default/${HOSTILE}:http/TCP`]);
      assert.equal(body.families.ipv6.servicePorts, 0);
    }
  });
});

Deno.test("statusHandler() serves escaped, self-contained HTML by default", async () => {
  await withServer(statusHandler(() => snapshot({ node: `node-${HOSTILE}` })), async (url) => {
    const res = await fetch(url, { headers: { accept: "text/html,application/json;q=0.9" } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/html/);
    assert.match(res.headers.get("content-security-policy") ?? "", /default-src 'none'/);
    const html = await res.text();
    assert.ok(!html.includes("<script"), "no script element, hostile or otherwise");
    assert.ok(!html.includes(HOSTILE));
    assert.ok(
      html.includes("default/&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;:http/TCP"),
    );
    assert.ok(html.includes("Cannot sync: &lt;script&gt;"));
    assert.ok(html.includes("<title>kproxy status: node-&lt;script&gt;"));
    assert.doesNotMatch(html, /\b(src|href)=/, "no external asset");
    assert.equal((html.match(/<rect /g) ?? []).length, 50);
    assert.equal((html.match(/<rect class="fail"/g) ?? []).length, 1);
    assert.match(html, /<li><b>Drift repairs<\/b><span>2<\/span><\/li>/);
    assert.match(html, /<li><b>Uptime<\/b><span>1h 1m<\/span><\/li>/);
    assert.equal((html.match(/<tr><td><time/g) ?? []).length, 20);
  });
});

Deno.test("statusHandler() answers HEAD without a body and refuses other methods", async () => {
  await withServer(statusHandler(() => snapshot()), async (url) => {
    const head = await fetch(url, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(await head.text(), "");
    const post = await fetch(url, { method: "POST", body: "x" });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get("allow"), "GET, HEAD");
    await post.body?.cancel();
  });
});

Deno.test("renderStatusHtml() renders a proxy that never synced", () => {
  const html = renderStatusHtml(
    snapshot({
      families: undefined,
      syncs: [],
      totalSyncs: 0,
      failedSyncs: 0,
      lastFailure: undefined,
      healthy: false,
    }),
  );
  assert.match(html, /Nothing programmed yet/);
  assert.match(html, /No sync yet\./);
  assert.match(html, /No failed sync since start\./);
  assert.match(html, /<span class="bad">unhealthy<\/span>/);
  assert.match(html, /<li><b>Last sync<\/b><span>never<\/span><\/li>/);
});

Deno.test("summarizeTraffic() picks the busiest ports and the top refusers", () => {
  const traffic = Array.from({ length: 12 }, (_, i) => ({
    key: `ns/s${String(i).padStart(2, "0")}:http/TCP IPv4`,
    connectionsPerSecond: i,
    refusedPackets: i % 3 === 0 ? 0 : 100 - i,
  }));
  const summary = summarizeTraffic(traffic, 60);
  assert.equal(summary.busiest.length, TOP_TRAFFIC);
  assert.equal(summary.busiest[0]!.key, "ns/s11:http/TCP IPv4");
  assert.ok(summary.busiest.every((t) => t.connectionsPerSecond > 0));
  assert.equal(summary.refusers[0]!.key, "ns/s01:http/TCP IPv4");
  assert.ok(summary.refusers.every((t) => t.refusedPackets > 0));
});

Deno.test("renderStatusHtml() shows traffic by Service and top refusers, escaped", () => {
  const html = renderStatusHtml(snapshot({
    traffic: {
      windowSeconds: 60,
      busiest: [{ key: "ns/<web>:http/TCP IPv4", connectionsPerSecond: 2.5 }],
      refusers: [{ key: "ns/empty:80/TCP IPv4", refusedPackets: 42 }],
    },
  }));
  assert.match(html, /Traffic by Service \(last 60 s\)/);
  assert.match(html, /ns\/&lt;web&gt;:http\/TCP IPv4<\/td><td class="num">2\.50/);
  assert.match(html, /Top refusers[\s\S]*ns\/empty:80\/TCP IPv4<\/td><td class="num">42/);
  assert.doesNotMatch(renderStatusHtml(snapshot()), /Traffic by Service/);
});
