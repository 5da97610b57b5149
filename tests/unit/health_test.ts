import assert from "node:assert/strict";
import { formatGoTime, handleHealthRequest, ProxyHealth } from "../../lib/shell/health.ts";
import {
  parseBindAddress,
  ServiceHealthServers,
  startHealthServer,
  startMetricsServer,
} from "../../lib/shell/servers.ts";
import { ProxyMetrics, valueOf } from "../../lib/shell/metrics.ts";
import { withLogRecords } from "../support/logs.ts";

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

/** A ProxyHealth whose Node is known and not being deleted. */
function newHealth(clock = manualClock()): ProxyHealth {
  const health = new ProxyHealth({ healthTimeoutMs: 2 * SYNC_PERIOD_MS, clock });
  health.setNodeDeleting(false);
  return health;
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
      name: "an update queued while a sync runs stays pending after that sync",
      steps: (h, c) => {
        h.queuedUpdate();
        h.drained();
        c.advance(1_000);
        h.queuedUpdate();
        h.updated();
        c.advance(60_000);
      },
      healthy: false,
    },
    {
      name: "a sync that took every queued update leaves nothing pending",
      steps: (h, c) => {
        h.queuedUpdate();
        c.advance(1_000);
        h.drained();
        h.updated();
        c.advance(120_000);
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

Deno.test("ProxyHealth.status() reports wall times, the start as the first update", () => {
  const clock = manualClock();
  const health = newHealth(clock);
  clock.advance(1000);
  health.queuedUpdate();
  clock.wall -= 3_600_000;
  assert.deepEqual(health.status(), {
    healthy: true,
    nodeEligible: true,
    lastUpdated: T0,
    currentTime: T0 - 3_599_000,
    families: [
      { family: "IPv4", lastUpdated: T0, healthy: true },
      { family: "IPv6", lastUpdated: T0, healthy: true },
    ],
  });
  health.updated();
  assert.equal(health.status().lastUpdated, T0 - 3_599_000);
});

Deno.test("formatGoTime() writes RFC 3339 in UTC as Go marshals time.Time", () => {
  assert.equal(formatGoTime(T0), "2026-01-01T00:00:00Z");
  assert.equal(formatGoTime(T0 + 1), "2026-01-01T00:00:00.001Z");
  assert.equal(formatGoTime(T0 + 120), "2026-01-01T00:00:00.12Z");
});

Deno.test("handleHealthRequest() fails /healthz but not /livez until the Node is known, as kube-proxy", async () => {
  const health = new ProxyHealth({ healthTimeoutMs: 2 * SYNC_PERIOD_MS, clock: manualClock() });
  const healthz = handleHealthRequest(new Request("http://x/healthz"), { health });
  assert.equal(healthz.status, 503);
  assert.equal((await healthz.json()).nodeEligible, false);
  const livez = handleHealthRequest(new Request("http://x/livez"), { health });
  assert.equal(livez.status, 200);
  await livez.body?.cancel();
  health.setNodeDeleting(false);
  const known = handleHealthRequest(new Request("http://x/healthz"), { health });
  assert.equal(known.status, 200);
  await known.body?.cancel();
});

Deno.test("handleHealthRequest() fails /healthz but not /livez while the node is deleting", async () => {
  const health = newHealth();
  const metrics = new ProxyMetrics();
  health.setNodeDeleting(true);
  const healthz = handleHealthRequest(new Request("http://x/healthz"), { health, metrics });
  assert.equal(healthz.status, 503);
  assert.equal((await healthz.json()).nodeEligible, false);
  const livez = handleHealthRequest(new Request("http://x/livez"), { health, metrics });
  assert.equal(livez.status, 200);
  await livez.body?.cancel();
  assert.equal(await valueOf(metrics.proxyHealthzTotal, { code: "503" }), 1);
  assert.equal(await valueOf(metrics.proxyLivezTotal, { code: "200" }), 1);
  const missing = handleHealthRequest(new Request("http://x/other"), { health });
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
});

/**
 * kube-proxy 1.36's body (pkg/proxy/healthcheck/proxy_health.go): Go's json.Marshal of
 * ProxyHealth, fields in struct order, `nodeEligible` only on /healthz, `status` keyed by IP
 * family in sorted order, times as RFC 3339 with the fraction's trailing zeros cut; while
 * healthy the top-level `lastUpdated` is the current time.
 */
function upstreamBody(
  options: {
    lastUpdated: string;
    currentTime: string;
    nodeEligible?: boolean;
    healthy: boolean;
    familyUpdated: string;
  },
): string {
  const family = `{"lastUpdated":"${options.familyUpdated}","healthy":${options.healthy}}`;
  const eligible = options.nodeEligible === undefined
    ? ""
    : `"nodeEligible":${options.nodeEligible},`;
  return `{"lastUpdated":"${options.lastUpdated}","currentTime":"${options.currentTime}",${eligible}` +
    `"healthy":${options.healthy},"status":{"IPv4":${family},"IPv6":${family}}}`;
}

Deno.test("handleHealthRequest() answers /healthz and /livez in kube-proxy 1.36's shape", async (t) => {
  const clock = manualClock();
  const health = newHealth(clock);
  const answer = async (path: string) => {
    const response = handleHealthRequest(new Request(`http://x${path}`), { health });
    assert.equal(response.headers.get("content-type"), "application/json");
    assert.equal(response.headers.get("x-content-type-options"), "nosniff");
    return { status: response.status, body: await response.text() };
  };
  clock.advance(500);
  health.updated();
  clock.advance(1_000);

  await t.step("healthy", async () => {
    const now = "2026-01-01T00:00:01.5Z";
    assert.deepEqual(await answer("/healthz"), {
      status: 200,
      body: upstreamBody({
        lastUpdated: now,
        currentTime: now,
        nodeEligible: true,
        healthy: true,
        familyUpdated: "2026-01-01T00:00:00.5Z",
      }),
    });
    assert.deepEqual(await answer("/livez"), {
      status: 200,
      body: upstreamBody({
        lastUpdated: now,
        currentTime: now,
        healthy: true,
        familyUpdated: "2026-01-01T00:00:00.5Z",
      }),
    });
  });

  await t.step("an update late by the timeout", async () => {
    health.queuedUpdate();
    clock.advance(2 * SYNC_PERIOD_MS);
    const late = {
      lastUpdated: "2026-01-01T00:00:00.5Z",
      currentTime: "2026-01-01T00:01:01.5Z",
      healthy: false,
      familyUpdated: "2026-01-01T00:00:00.5Z",
    };
    assert.deepEqual(await answer("/healthz"), {
      status: 503,
      body: upstreamBody({ ...late, nodeEligible: true }),
    });
    assert.deepEqual(await answer("/livez"), { status: 503, body: upstreamBody(late) });
    health.updated();
  });

  await t.step("a node being deleted fails /healthz only", async () => {
    health.setNodeDeleting(true);
    const now = "2026-01-01T00:01:01.5Z";
    const healthy = { lastUpdated: now, currentTime: now, healthy: true, familyUpdated: now };
    assert.deepEqual(await answer("/healthz"), {
      status: 503,
      body: upstreamBody({ ...healthy, lastUpdated: now, nodeEligible: false }),
    });
    assert.deepEqual(await answer("/livez"), { status: 200, body: upstreamBody(healthy) });
  });
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
    assert.equal(response.headers.get("x-content-type-options"), "nosniff");
    assert.equal((await response.json()).healthy, true);
    clock.advance(1000);
    health.queuedUpdate();
    clock.advance(2 * SYNC_PERIOD_MS);
    for (const path of ["/healthz", "/livez"]) {
      response = await fetch(`${url}${path}`);
      assert.equal(response.status, 503, path);
      await response.body?.cancel();
    }
    assert.equal(await valueOf(metrics.proxyHealthzTotal, { code: "200" }), 1);
    assert.equal(await valueOf(metrics.proxyHealthzTotal, { code: "503" }), 1);
    assert.equal(await valueOf(metrics.proxyLivezTotal, { code: "503" }), 1);
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

Deno.test("a server that cannot bind names its address and what it serves", async (t) => {
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const address = `127.0.0.1:${taken.addr.port}`;
  try {
    await t.step("health", () => {
      assert.throws(
        () => startHealthServer({ address, health: new ProxyHealth({ healthTimeoutMs: 1 }) }),
        (error: Error) =>
          error.message.startsWith(
            `Cannot serve health checks (--healthz-bind-address) on ${address}: `,
          ) &&
          /in use/i.test(error.message),
      );
    });
    await t.step("metrics", () => {
      assert.throws(
        () => startMetricsServer({ address, registry: new ProxyMetrics().registry }),
        (error: Error) =>
          error.message.startsWith(
            `Cannot serve metrics (--metrics-bind-address) on ${address}: `,
          ) &&
          /in use/i.test(error.message),
      );
    });
    await t.step("health check node port", async () => {
      await withLogRecords(["kproxy", "health"], async (records) => {
        const servers = new ServiceHealthServers({ hostname: "127.0.0.1" });
        await servers.sync(
          new Map([[taken.addr.port, { namespace: "shop", name: "lb", localEndpoints: 1 }]]),
        );
        await servers.close();
        const errors = records.filter((record) => record.level === "error");
        assert.equal(errors.length, 1);
        assert.match(
          errors[0]!.message.map(String).join(""),
          new RegExp(
            `Cannot serve the health check node port of shop/lb on ${address}: .*in use`,
            "i",
          ),
        );
      });
    });
  } finally {
    taken.close();
  }
});
