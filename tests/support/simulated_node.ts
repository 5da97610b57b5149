/**
 * kproxy's sync loop (tracker, proxier, runner, metrics) on a fake clock that starts at the
 * epoch, scraped once a minute: the series Prometheus would hold for one node, as
 * `promtool test rules` input (its evaluation time starts at 0 too).
 *
 * @module
 */

import FakeTimers from "@sinonjs/fake-timers";
import { fakeClock } from "./clock.ts";
import { RecordingBackend } from "./recording_backend.ts";
import { ProxyHealth } from "../../lib/shell/health.ts";
import { ProxyMetrics } from "../../lib/shell/metrics.ts";
import { Proxier } from "../../lib/shell/proxier.ts";
import { BoundedFrequencyRunner } from "../../lib/shell/runner.ts";
import { LAST_CHANGE_TRIGGER_TIME, Tracker } from "../../lib/core/tracker.ts";
import type { PlannerOptions } from "../../lib/core/planner.ts";
import type { SourceEvent } from "../../lib/core/source.ts";

/** What happens on the simulated node. */
export interface NodeScenario {
  /** The `instance` label of its series. */
  instance: string;
  /** How long it runs, scraped once a minute from minute 0. */
  minutes: number;
  /** Services on the cluster, each with one endpoint on this node. @default {10} */
  services?: number;
  /** Seconds between two endpoint changes (one Service's slice), none when undefined. */
  changeEverySeconds?: number;
  /** How long before it reaches kproxy each change was made (its last-change-trigger-time). @default {300} */
  changeAgeMs?: number;
  /** Fails the backend sync it returns an Error for (`index` counts every sync request). */
  failWith?: (sync: { minute: number; index: number }) => Error | undefined;
  /** Answers the drift check every sync period. @default {() => false} */
  drift?: (minute: number) => boolean;
}

/** Series by selector (`name{label="value",...}`), one value per minute. */
export type Series = Map<string, number[]>;

const NODE = "node-a";
const SYNC_PERIOD_MS = 30_000;

const PLANNER_OPTIONS: PlannerOptions = {
  nodeName: NODE,
  nodePortAddresses: ["primary"],
  localAddresses: ["192.168.0.10"],
  clusterCIDRs: ["10.244.0.0/16"],
  detectLocalMode: "ClusterCIDR",
  bridgeInterface: "",
  interfaceNamePrefix: "",
  masqueradeAll: false,
  serviceClusterIPRange: ["10.96.0.0/12"],
  externalIPAllowedCIDRs: [],
  featureGates: {},
};

function serviceEvent(index: number): SourceEvent {
  return {
    type: "upsert",
    kind: "Service",
    object: {
      metadata: { namespace: "default", name: `svc-${index}` },
      spec: {
        clusterIP: `10.96.${index >> 8}.${index & 255}`,
        ports: [{ name: "http", port: 80, targetPort: 8080 }],
      },
    },
  };
}

function sliceEvent(index: number, generation: number, triggeredAt?: number): SourceEvent {
  const annotations = triggeredAt === undefined
    ? undefined
    : { [LAST_CHANGE_TRIGGER_TIME]: new Date(triggeredAt).toISOString() };
  return {
    type: "upsert",
    kind: "EndpointSlice",
    object: {
      metadata: {
        namespace: "default",
        name: `svc-${index}-1`,
        labels: { "kubernetes.io/service-name": `svc-${index}` },
        annotations,
      },
      addressType: "IPv4",
      ports: [{ name: "http", port: 8080 }],
      endpoints: [{
        addresses: [`10.244.${generation % 200}.${index % 250 + 1}`],
        nodeName: NODE,
      }],
    },
  };
}

/** Parses the text exposition format into `selector → value`. */
function parseExposition(text: string, extraLabels: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const labels = [match[2], extraLabels].filter((part) => part).join(",");
    samples.set(`${match[1]}{${labels}}`, Number(match[3]));
  }
  return samples;
}

/**
 * Runs `scenario` and returns every `kubeproxy_*` and `kproxy_*` series kproxy served, plus
 * `up` and `process_start_time_seconds` (the process starts at 0), labelled `job="kproxy"` and
 * the scenario's `instance`.
 */
export async function simulateNode(scenario: NodeScenario): Promise<Series> {
  const timers = FakeTimers.createClock(0);
  const clock = fakeClock(timers);
  const services = scenario.services ?? 10;
  let minute = 0;
  const backend = new RecordingBackend({
    mode: "nftables",
    failWith: (_request, index) => scenario.failWith?.({ minute, index }),
    drift: () => scenario.drift?.(minute) ?? false,
  });
  const metrics = new ProxyMetrics({ mode: backend.mode });
  const proxier: Proxier = new Proxier({
    backend,
    tracker: new Tracker({ nodeName: NODE, clock }),
    plannerOptions: PLANNER_OPTIONS,
    health: new ProxyHealth({ healthTimeoutMs: 2 * SYNC_PERIOD_MS, clock }),
    metrics,
    syncPeriodMs: SYNC_PERIOD_MS,
    fullSyncPeriodMs: 3_600_000,
    requestSync: () => runner.run(),
    clock,
  });
  const runner = new BoundedFrequencyRunner({
    name: "sync-proxy-rules",
    fn: async () => {
      await proxier.sync();
    },
    minIntervalMs: 1_000,
    maxIntervalMs: SYNC_PERIOD_MS,
    retryIntervalMs: 1_000,
    clock,
  });
  const controller = new AbortController();
  const looping = runner.loop(controller.signal);
  for (let i = 0; i < services; i++) {
    proxier.onEvent(serviceEvent(i));
    proxier.onEvent(sliceEvent(i, 0));
  }
  proxier.onEvent({ type: "synced" });

  const labels = `instance="${scenario.instance}",job="kproxy"`;
  const series: Series = new Map();
  const scrape = async () => {
    const samples = parseExposition(await metrics.registry.metrics(), labels);
    samples.set(`up{${labels}}`, 1);
    samples.set(`process_start_time_seconds{${labels}}`, 0);
    for (const [selector, value] of samples) {
      if (!/^(kubeproxy|kproxy|up|process)_?/.test(selector)) continue;
      const values = series.get(selector) ?? new Array<number>(minute).fill(0);
      values.push(value);
      series.set(selector, values);
    }
  };
  try {
    await scrape();
    let generation = 0;
    for (minute = 1; minute <= scenario.minutes; minute++) {
      for (let second = 0; second < 60; second++) {
        const every = scenario.changeEverySeconds;
        if (every !== undefined && ((minute - 1) * 60 + second) % every === 0) {
          generation++;
          proxier.onEvent(
            sliceEvent(
              generation % services,
              generation,
              timers.now - (scenario.changeAgeMs ?? 300),
            ),
          );
        }
        await timers.tickAsync(1_000);
      }
      await scrape();
    }
  } finally {
    controller.abort();
    await timers.tickAsync(0);
    await looping;
  }
  return series;
}
