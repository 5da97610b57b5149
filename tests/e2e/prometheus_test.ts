import assert from "node:assert/strict";
import { join } from "node:path";
import { RecordingBackend } from "../support/recording_backend.ts";
import { main, type RunningApp } from "../../lib/commands/app.ts";
import {
  dashboardQueries,
  exposedFamilies,
  metricNames,
  type NamedQuery,
  ruleQueries,
  seriesNames,
  withGrafanaVariables,
} from "../support/promql.ts";
import { programRuns } from "../support/programs.ts";

const DEPLOY = new URL("../../scripts/deploy/", import.meta.url).pathname;
const RULES = join(DEPLOY, "prometheus-rules.yaml");
const MANIFESTS = new URL("../../scripts/manifests", import.meta.url).pathname;

/**
 * Metrics the dashboard or the alerts name that kproxy does not serve yet. Remove each name once
 * kproxy serves it: the check below fails until then, so its use is checked from that day on.
 */
export const PENDING_METRICS: readonly string[] = [];

/** The process series kube-proxy exposes that kproxy serves under any permissions. */
const PROCESS_SERIES = [
  "process_cpu_seconds_total",
  "process_resident_memory_bytes",
  "process_start_time_seconds",
];

/** Series Prometheus makes itself for every target. */
const PROMETHEUS_SERIES = ["up"];

async function allQueries(): Promise<NamedQuery[]> {
  const dashboard = JSON.parse(await Deno.readTextFile(join(DEPLOY, "grafana-dashboard.json")));
  return [...ruleQueries(await Deno.readTextFile(RULES)), ...dashboardQueries(dashboard)];
}

async function waitFor(check: () => Promise<boolean> | boolean, ms: number, what: string) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** Runs kproxy in-process on the shipped manifests with a backend that programs nothing. */
async function withKproxy(fn: (app: RunningApp) => Promise<void>): Promise<void> {
  const backend = new RecordingBackend({ mode: "nftables" });
  const controller = new AbortController();
  const stderr: string[] = [];
  let started: (app: RunningApp) => void = () => {};
  const running = new Promise<RunningApp>((resolve) => (started = resolve));
  const exit = main([
    "--proxy-mode=nftables",
    "--manifests",
    MANIFESTS,
    "--hostname-override",
    "node-a",
    "--healthz-bind-address=127.0.0.1:0",
    "--metrics-bind-address=127.0.0.1:0",
  ], {
    backend,
    signal: controller.signal,
    handleSignals: false,
    setupLogging: false,
    serviceHealthHostname: "127.0.0.1",
    io: { stdout: () => {}, stderr: (text) => stderr.push(text) },
    onStarted: (app) => started(app),
  });
  const app = await Promise.race([
    running,
    exit.then((code) => Promise.reject(new Error(`kproxy exited ${code}: ${stderr.join("")}`))),
  ]);
  try {
    await waitFor(() => backend.applied.length > 0, 10_000, "kproxy's first sync");
    // Health answers are counted by status code: make one of each kind exist.
    for (const path of ["/healthz", "/livez"]) {
      await (await fetch(`http://127.0.0.1:${app.healthServer!.addr.port}${path}`)).body?.cancel();
    }
    await fn(app);
  } finally {
    controller.abort();
    assert.equal(await exit, 0, stderr.join(""));
  }
}

async function scrape(app: RunningApp): Promise<Map<string, string>> {
  const text = await (await fetch(`http://127.0.0.1:${app.metricsServer!.addr.port}/metrics`))
    .text();
  return exposedFamilies(text);
}

Deno.test("every metric the alert rules and the dashboard name is one kproxy serves", async () => {
  const queries = await allQueries();
  await withKproxy(async (app) => {
    const families = await scrape(app);
    const served = new Set([...families].flatMap(([name, type]) => seriesNames(name, type)));
    const unknown: string[] = [];
    for (const query of queries) {
      for (const name of metricNames(query.expr)) {
        if (served.has(name) || PROMETHEUS_SERIES.includes(name)) continue;
        if (!PENDING_METRICS.includes(name)) unknown.push(`${query.where}: ${name}`);
      }
    }
    assert.deepEqual(unknown, [], "queries name metrics kproxy does not serve");
    const nowServed = PENDING_METRICS.filter((name) => served.has(name));
    assert.deepEqual(nowServed, [], "kproxy serves these now: remove them from PENDING_METRICS");
  });
});

Deno.test("metricNames() finds the selected metrics, not functions, labels or variables", () => {
  assert.deepEqual(
    metricNames(
      'histogram_quantile(0.99, sum by (instance, le) (rate(a_bucket{job="$job", x=~"b"}[$__rate_interval])))',
    ),
    ["a_bucket"],
  );
  assert.deepEqual(metricNames("time() - min by (instance) (b) > 300"), ["b"]);
  assert.deepEqual(metricNames('up{job="kproxy"} == 0 and on (instance) c offset 5m'), ["c", "up"]);
  assert.deepEqual(metricNames("sum without (mode) (increase(d[1h])) > 1e3"), ["d"]);
});

const prometheus = await programRuns("prometheus");
if (!prometheus) {
  console.warn("Prometheus test ignored: prometheus (Debian package) is not installed");
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/** A Prometheus server on loopback with its own data directory. */
async function withPrometheus(
  options: { target: string; dir: string },
  fn: (query: (path: string, params: Record<string, string>) => Promise<any>) => Promise<void>,
): Promise<void> {
  const port = freePort();
  await Deno.writeTextFile(
    join(options.dir, "prometheus.yml"),
    JSON.stringify({
      global: { scrape_interval: "1s", evaluation_interval: "1s" },
      rule_files: [RULES],
      scrape_configs: [{ job_name: "kproxy", static_configs: [{ targets: [options.target] }] }],
    }),
  );
  const server = new Deno.Command("prometheus", {
    args: [
      `--config.file=${join(options.dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(options.dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const log = new Response(server.stderr).text();
  const api = async (path: string, params: Record<string, string>) => {
    const response = await fetch(
      `http://127.0.0.1:${port}/api/v1/${path}?${new URLSearchParams(params)}`,
    );
    return await response.json();
  };
  try {
    await fn(api);
  } catch (error) {
    server.kill("SIGTERM");
    await server.status;
    throw new Error(`${error instanceof Error ? error.message : error}\nprometheus: ${await log}`);
  }
  server.kill("SIGTERM");
  await server.status;
}

Deno.test({
  name:
    "a real Prometheus scraping kproxy has every kubeproxy_* and process_* series, evaluates every alert " +
    "and dashboard query, and loads the rules healthy",
  ignore: !prometheus,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "kproxy-prometheus-" });
    try {
      await withKproxy(async (app) => {
        const families = await scrape(app);
        for (const name of PROCESS_SERIES) assert.ok(families.has(name), name);
        const expected = [...families]
          .filter(([name]) => /^(kubeproxy|process)_/.test(name))
          .flatMap(([name, type]) => seriesNames(name, type))
          .sort();
        const target = `127.0.0.1:${app.metricsServer!.addr.port}`;
        await withPrometheus({ target, dir }, async (api) => {
          const scrapes = async () => {
            const result = await api("query", {
              query: 'count_over_time(up{job="kproxy"}[1m])',
            }).catch(() => undefined);
            return Number(result?.data?.result?.[0]?.value?.[1] ?? 0) >= 2;
          };
          await waitFor(scrapes, 60_000, "two scrapes of kproxy");
          const up = await api("query", { query: 'up{job="kproxy"}' });
          assert.equal(up.data.result[0].value[1], "1", JSON.stringify(up));

          const names = await api("query", {
            query: 'group by (__name__) ({__name__=~"(kubeproxy|process)_.+", job="kproxy"})',
          });
          const present = names.data.result.map((r: any) => r.metric.__name__).sort();
          assert.deepEqual(present, expected);

          for (const query of await allQueries()) {
            const expr = withGrafanaVariables(query.expr, { job: "kproxy" });
            const result = await api("query", { query: expr });
            assert.equal(result.status, "success", `${query.where}: ${expr}: ${result.error}`);
          }

          const healthy = async () => {
            const rules = await api("rules", {});
            const all = rules.data.groups.flatMap((group: any) => group.rules);
            return all.length === 6 &&
              all.every((rule: any) => rule.health === "ok" && rule.evaluationTime !== undefined);
          };
          await waitFor(healthy, 20_000, "every rule evaluated with health ok");
          const alerts = await api("alerts", {});
          assert.deepEqual(alerts.data.alerts, [], "no alert fires for a healthy kproxy");
        });
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
