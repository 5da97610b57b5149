import assert from "node:assert/strict";
import {
  handleHealthRequest,
  parseBindAddress,
  ProxyHealth,
  ServiceHealthServers,
  startHealthServer,
} from "../../lib/health.ts";
import { ProxyMetrics } from "../../lib/metrics.ts";

const SYNC_PERIOD_MS = 30_000;
const T0 = Date.UTC(2026, 0, 1);

/** A hand-driven clock: `ms` moves both times, `wall` steps the wall time alone. */
function manualClock() {
  return {
    ms: 0,
    wall: T0,
    now() {
      return this.ms;
    },
    wallNow() {
      return this.wall + this.ms;
    },
    advance(ms: number) {
      this.ms += ms;
    },
  };
}

function newHealth(clock = manualClock()): ProxyHealth {
  return new ProxyHealth({ healthTimeoutMs: 2 * SYNC_PERIOD_MS, clock });
}

Deno.test("ProxyHealth.status() follows queued and applied updates", async (t) => {
  type Clock = ReturnType<typeof manualClock>;
  const cases: { name: string; steps: (h: ProxyHealth, c: Clock) => void; healthy: boolean }[] = [
    { name: "healthy at start", steps: (_, c) => c.advance(10 * 60_000), healthy: true },
    {
      name: "healthy while a queued update is young",
      steps: (h, c) => {
        h.queuedUpdate();
        c.advance(59_999);
      },
      healthy: true,
    },
    {
      name: "unhealthy once a queued update waited 2 × syncPeriod",
      steps: (h, c) => {
        h.queuedUpdate();
        c.advance(60_000);
      },
      healthy: false,
    },
    {
      name: "keeps the oldest queued time",
      steps: (h, c) => {
        h.queuedUpdate();
        c.advance(50_000);
        h.queuedUpdate();
        c.advance(11_000);
      },
      healthy: false,
    },
    {
      name: "healthy again after an update",
      steps: (h, c) => {
        h.queuedUpdate();
        c.advance(70_000);
        h.updated();
        c.advance(130_000);
      },
      healthy: true,
    },
    {
      name: "a wall clock step back does not hide a late update",
      steps: (h, c) => {
        h.queuedUpdate();
        c.wall -= 3_600_000;
        c.advance(60_000);
      },
      healthy: false,
    },
    {
      name: "a wall clock step forward does not fail a young update",
      steps: (h, c) => {
        h.queuedUpdate();
        c.wall += 3_600_000;
        c.advance(1_000);
      },
      healthy: true,
    },
  ];
  for (const c of cases) {
    await t.step(c.name, () => {
      const clock = manualClock();
      const health = newHealth(clock);
      c.steps(health, clock);
      assert.equal(health.status().healthy, c.healthy);
    });
  }
});

Deno.test("ProxyHealth.status() reports wall times as ISO strings", () => {
  const clock = manualClock();
  const health = newHealth(clock);
  assert.equal(health.status().lastUpdated, "");
  health.updated();
  clock.advance(1000);
  assert.deepEqual(health.status(), {
    healthy: true,
    nodeEligible: true,
    lastUpdated: "2026-01-01T00:00:00.000Z",
    currentTime: "2026-01-01T00:00:01.000Z",
  });
});

Deno.test("handleHealthRequest() fails /healthz but not /livez while the node is deleting", async () => {
  const health = newHealth();
  const metrics = new ProxyMetrics();
  health.setNodeDeleting(true);
  const healthz = handleHealthRequest(new Request("http://x/healthz"), { health, metrics });
  assert.equal(healthz.status, 503);
  assert.deepEqual(await healthz.json(), {
    lastUpdated: "",
    currentTime: "2026-01-01T00:00:00.000Z",
    nodeEligible: false,
  });
  const livez = handleHealthRequest(new Request("http://x/livez"), { health, metrics });
  assert.equal(livez.status, 200);
  await livez.body?.cancel();
  assert.equal(metrics.proxyHealthzTotal.get({ code: "503" }), 1);
  assert.equal(metrics.proxyLivezTotal.get({ code: "200" }), 1);
  const missing = handleHealthRequest(new Request("http://x/other"), { health });
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
});

Deno.test("startHealthServer() serves /healthz 200, then 503 after 2 × syncPeriod pending", async () => {
  const clock = manualClock();
  const health = newHealth(clock);
  const metrics = new ProxyMetrics();
  const server = startHealthServer({ address: "127.0.0.1:0", health, metrics });
  try {
    const url = `http://127.0.0.1:${server.addr.port}`;
    health.updated();
    let response = await fetch(`${url}/healthz`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "application/json");
    assert.deepEqual(await response.json(), {
      lastUpdated: "2026-01-01T00:00:00.000Z",
      currentTime: "2026-01-01T00:00:00.000Z",
      nodeEligible: true,
    });
    clock.advance(1000);
    health.queuedUpdate();
    clock.advance(2 * SYNC_PERIOD_MS);
    for (const path of ["/healthz", "/livez"]) {
      response = await fetch(`${url}${path}`);
      assert.equal(response.status, 503, path);
      await response.body?.cancel();
    }
    assert.equal(metrics.proxyHealthzTotal.get({ code: "200" }), 1);
    assert.equal(metrics.proxyHealthzTotal.get({ code: "503" }), 1);
    assert.equal(metrics.proxyLivezTotal.get({ code: "503" }), 1);
  } finally {
    await server.shutdown();
  }
});

Deno.test("parseBindAddress() splits host and port", async (t) => {
  const cases: [string, { hostname: string; port: number } | undefined][] = [
    ["0.0.0.0:10256", { hostname: "0.0.0.0", port: 10256 }],
    ["127.0.0.1:0", { hostname: "127.0.0.1", port: 0 }],
    ["[::]:10249", { hostname: "::", port: 10249 }],
    [":10249", { hostname: "0.0.0.0", port: 10249 }],
    ["localhost", undefined],
    ["1.2.3.4:70000", undefined],
    ["::1:80", undefined],
  ];
  for (const [input, expected] of cases) {
    await t.step(input, () => {
      if (expected) assert.deepEqual(parseBindAddress(input), expected);
      else assert.throws(() => parseBindAddress(input), /Cannot parse bind address/);
    });
  }
});

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

Deno.test("ServiceHealthServers.sync() serves 200 with local endpoints and 503 without", async () => {
  const clock = manualClock();
  const health = newHealth(clock);
  const servers = new ServiceHealthServers({ hostname: "127.0.0.1", health });
  const [portA, portB] = [freePort(), freePort()];
  try {
    await servers.sync(
      new Map([
        [portA, { namespace: "default", name: "web", localEndpoints: 2 }],
        [portB, { namespace: "prod", name: "api", localEndpoints: 0 }],
      ]),
    );
    assert.deepEqual(servers.ports, [portA, portB].sort((a, b) => a - b));
    let response = await fetch(`http://127.0.0.1:${portA}/`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), {
      service: { namespace: "default", name: "web" },
      localEndpoints: 2,
      serviceProxyHealthy: true,
    });
    response = await fetch(`http://127.0.0.1:${portB}/`);
    assert.equal(response.status, 503);
    assert.equal((await response.json()).localEndpoints, 0);

    health.queuedUpdate();
    clock.advance(2 * SYNC_PERIOD_MS);
    response = await fetch(`http://127.0.0.1:${portA}/`);
    assert.equal(response.status, 503);
    assert.equal((await response.json()).serviceProxyHealthy, false);
    health.updated();

    await servers.sync(new Map([[portB, { namespace: "prod", name: "api", localEndpoints: 1 }]]));
    assert.deepEqual(servers.ports, [portB]);
    response = await fetch(`http://127.0.0.1:${portB}/`);
    assert.equal(response.status, 200);
    await response.body?.cancel();
    await assert.rejects(fetch(`http://127.0.0.1:${portA}/`));
  } finally {
    await servers.close();
  }
  assert.deepEqual(servers.ports, []);
});

Deno.test("ServiceHealthServers.sync() skips a port it cannot bind and retries it later", async () => {
  const blocker = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (blocker.addr as Deno.NetAddr).port;
  const servers = new ServiceHealthServers({ hostname: "127.0.0.1" });
  const services = new Map([[port, { namespace: "a", name: "b", localEndpoints: 1 }]]);
  try {
    await servers.sync(services);
    assert.deepEqual(servers.ports, []);
    blocker.close();
    await servers.sync(services);
    assert.deepEqual(servers.ports, [port]);
  } finally {
    await servers.close();
  }
});
