/**
 * The metrics kproxy serves on `/metrics`: kube-proxy's (`kubeproxy_*`, same
 * names, types, labels and buckets as kube-proxy 1.36), the process metrics
 * every Go component exposes (`process_*`, see `process_metrics.ts`) and
 * kproxy's own (`kproxy_*`). The metric types and the text are
 * `prometheus.ts`'s.
 *
 * @module
 */

import type { IpFamily } from "../core/model.ts";
import { IPTABLES_COUNTED_TABLES } from "../core/backend.ts";
import {
  Counter,
  exponentialBuckets,
  Gauge,
  Histogram,
  linearBuckets,
  Registry,
} from "./prometheus.ts";
import { FRONTEND_KINDS } from "./shadowed_frontends.ts";

export { Counter, Gauge, Histogram, Registry };

/** Buckets of sync durations, as upstream: 1 ms doubling 15 times (to ~16 s). */
export const SYNC_DURATION_BUCKETS: readonly number[] = exponentialBuckets(0.001, 2, 15);

/** Buckets of network programming latency, as upstream: 0.25 s … 5 min. */
export const NETWORK_PROGRAMMING_BUCKETS: readonly number[] = [
  ...linearBuckets(0.25, 0.25, 2),
  ...linearBuckets(1, 1, 59),
  ...linearBuckets(60, 5, 12),
  ...linearBuckets(120, 30, 7),
];

/** The `ip_family` label of kube-proxy's per-family metrics. */
export type FamilyLabel = "ip_family";

/** Options for {@linkcode ProxyMetrics}. */
export interface ProxyMetricsOptions {
  /** The proxy mode: kube-proxy registers some metrics in one mode only. @default {"nftables"} */
  mode?: string;
  /** Families whose per-family series exist from the start. @default {["IPv4", "IPv6"]} */
  families?: readonly IpFamily[];
  /** @default a registry of its own */
  registry?: Registry;
}

/** Count and sum of a histogram's series that carry `labels` (for benchmarks and tests). */
export async function histogramTotals(
  histogram: Histogram<string>,
  labels: Record<string, string> = {},
): Promise<{ count: number; sum: number }> {
  const totals = { count: 0, sum: 0 };
  for (const value of (await histogram.get()).values) {
    const labelled = value.labels;
    if (Object.entries(labels).some(([name, wanted]) => labelled[name] !== wanted)) continue;
    if (value.metricName?.endsWith("_count")) totals.count += value.value;
    else if (value.metricName?.endsWith("_sum")) totals.sum += value.value;
  }
  return totals;
}

/** Current value of one counter or gauge series (0 when it does not exist). */
export async function valueOf(
  metric: Counter<string> | Gauge<string>,
  labels: Record<string, string> = {},
): Promise<number> {
  const wanted = JSON.stringify(Object.entries(labels).sort());
  const found = (await metric.get()).values.find((value) =>
    JSON.stringify(Object.entries(value.labels).sort()) === wanted
  );
  return found?.value ?? 0;
}

/**
 * Every metric kproxy exports: kube-proxy's (`kubeproxy_`) and its own
 * (`kproxy_`). Metrics kube-proxy registers in one mode only exist in that
 * mode (undefined otherwise); per-family series exist at zero from the start.
 */
export class ProxyMetrics {
  readonly registry: Registry;
  readonly mode: string;
  readonly syncProxyRulesDuration: Histogram<FamilyLabel>;
  readonly syncFullProxyRulesDuration: Histogram<FamilyLabel>;
  readonly syncPartialProxyRulesDuration: Histogram<FamilyLabel>;
  readonly syncProxyRulesLastTimestamp: Gauge<FamilyLabel>;
  readonly networkProgrammingDuration: Histogram<FamilyLabel>;
  readonly endpointChangesPending: Gauge;
  readonly endpointChangesTotal: Counter;
  readonly serviceChangesPending: Gauge;
  readonly serviceChangesTotal: Counter;
  readonly noLocalEndpointsTotal: Gauge<FamilyLabel | "traffic_policy">;
  readonly lastQueuedTimestamp: Gauge<FamilyLabel>;
  readonly proxyHealthzTotal: Counter<"code">;
  readonly proxyLivezTotal: Counter<"code">;
  readonly conntrackReconcilerSyncDuration: Histogram<FamilyLabel>;
  readonly conntrackReconcilerDeletedEntriesTotal: Counter<FamilyLabel>;
  /** nftables mode: failed syncs. */
  readonly nftablesSyncFailuresTotal?: Counter<FamilyLabel>;
  /**
   * nftables mode: failed removals of stale chains. Stays 0: kproxy removes
   * them in the sync's own transaction, whose failure is a sync failure.
   */
  readonly nftablesCleanupFailuresTotal?: Counter<FamilyLabel>;
  /** iptables and ipvs modes: failed `iptables-restore` runs. */
  readonly iptablesRestoreFailuresTotal?: Counter<FamilyLabel>;
  /** iptables mode: failed partial restores (a full one follows). */
  readonly iptablesPartialRestoreFailuresTotal?: Counter<FamilyLabel>;
  /** iptables mode: rules kproxy owns, per table. */
  readonly iptablesRulesTotal?: Gauge<FamilyLabel | "table">;
  /** iptables mode: rules written by the last sync, per table. */
  readonly iptablesRulesLast?: Gauge<FamilyLabel | "table">;
  readonly syncFailuresTotal: Counter<"mode">;
  readonly driftRepairsTotal: Counter<"mode">;
  /** Frontends a service port declares but another holds (lib/shell/shadowed_frontends.ts). */
  readonly shadowedFrontends: Gauge<FamilyLabel | "kind">;

  constructor(options: ProxyMetricsOptions = {}) {
    const registry = options.registry ?? new Registry();
    const families = options.families ?? ["IPv4", "IPv6"];
    this.registry = registry;
    this.mode = options.mode ?? "nftables";
    const registers = [registry];
    const histogram = (name: string, help: string, buckets: readonly number[]) => {
      const metric = new Histogram({
        name: `kubeproxy_${name}`,
        help,
        buckets: [...buckets],
        labelNames: ["ip_family"],
        registers,
      });
      for (const ip_family of families) metric.zero({ ip_family });
      return metric;
    };
    const familyCounter = (name: string, help: string) => {
      const metric = new Counter({
        name: `kubeproxy_${name}`,
        help,
        labelNames: ["ip_family"],
        registers,
      });
      for (const ip_family of families) metric.inc({ ip_family }, 0);
      return metric;
    };
    const familyGauge = (name: string, help: string) => {
      const metric = new Gauge({
        name: `kubeproxy_${name}`,
        help,
        labelNames: ["ip_family"],
        registers,
      });
      for (const ip_family of families) metric.set({ ip_family }, 0);
      return metric;
    };

    this.syncProxyRulesDuration = histogram(
      "sync_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds",
      SYNC_DURATION_BUCKETS,
    );
    this.syncFullProxyRulesDuration = histogram(
      "sync_full_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for full resyncs",
      SYNC_DURATION_BUCKETS,
    );
    this.syncPartialProxyRulesDuration = histogram(
      "sync_partial_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for partial resyncs",
      SYNC_DURATION_BUCKETS,
    );
    this.networkProgrammingDuration = histogram(
      "network_programming_duration_seconds",
      "In Cluster Network Programming Latency in seconds",
      NETWORK_PROGRAMMING_BUCKETS,
    );
    this.syncProxyRulesLastTimestamp = familyGauge(
      "sync_proxy_rules_last_timestamp_seconds",
      "The last time proxy rules were successfully synced",
    );
    this.lastQueuedTimestamp = familyGauge(
      "sync_proxy_rules_last_queued_timestamp_seconds",
      "The last time a sync of proxy rules was queued",
    );
    this.endpointChangesPending = new Gauge({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
      help: "Pending proxy rules Endpoint changes",
      registers,
    });
    this.endpointChangesTotal = new Counter({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      help: "Cumulative proxy rules Endpoint changes",
      registers,
    });
    this.serviceChangesPending = new Gauge({
      name: "kubeproxy_sync_proxy_rules_service_changes_pending",
      help: "Pending proxy rules Service changes",
      registers,
    });
    this.serviceChangesTotal = new Counter({
      name: "kubeproxy_sync_proxy_rules_service_changes_total",
      help: "Cumulative proxy rules Service changes",
      registers,
    });
    this.noLocalEndpointsTotal = new Gauge({
      name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
      help: "Number of services with a Local traffic policy and no endpoints",
      labelNames: ["ip_family", "traffic_policy"],
      registers,
    });
    for (const ip_family of families) {
      for (const traffic_policy of ["internal", "external"]) {
        this.noLocalEndpointsTotal.set({ ip_family, traffic_policy }, 0);
      }
    }
    this.proxyHealthzTotal = new Counter({
      name: "kubeproxy_proxy_healthz_total",
      help: "Cumulative proxy healthz HTTP status",
      labelNames: ["code"],
      registers,
    });
    this.proxyLivezTotal = new Counter({
      name: "kubeproxy_proxy_livez_total",
      help: "Cumulative proxy livez HTTP status",
      labelNames: ["code"],
      registers,
    });
    this.conntrackReconcilerSyncDuration = histogram(
      "conntrack_reconciler_sync_duration_seconds",
      "ReconcileConntrackFlowsLatency latency in seconds",
      SYNC_DURATION_BUCKETS,
    );
    this.conntrackReconcilerDeletedEntriesTotal = familyCounter(
      "conntrack_reconciler_deleted_entries_total",
      "Cumulative conntrack flows deleted by conntrack reconciler",
    );

    if (this.mode === "nftables") {
      this.nftablesSyncFailuresTotal = familyCounter(
        "sync_proxy_rules_nftables_sync_failures_total",
        "Cumulative proxy nftables sync failures",
      );
      this.nftablesCleanupFailuresTotal = familyCounter(
        "sync_proxy_rules_nftables_cleanup_failures_total",
        "Cumulative proxy nftables cleanup failures",
      );
    }
    if (this.mode === "iptables" || this.mode === "ipvs") {
      this.iptablesRestoreFailuresTotal = familyCounter(
        "sync_proxy_rules_iptables_restore_failures_total",
        "Cumulative proxy iptables restore failures",
      );
    }
    if (this.mode === "iptables") {
      this.iptablesPartialRestoreFailuresTotal = familyCounter(
        "sync_proxy_rules_iptables_partial_restore_failures_total",
        "Cumulative proxy iptables partial restore failures",
      );
      const tableGauge = (name: string, help: string) => {
        const gauge = new Gauge({
          name: `kubeproxy_${name}`,
          help,
          labelNames: ["ip_family", "table"],
          registers,
        });
        for (const ip_family of families) {
          for (const table of IPTABLES_COUNTED_TABLES) gauge.set({ ip_family, table }, 0);
        }
        return gauge;
      };
      this.iptablesRulesTotal = tableGauge(
        "sync_proxy_rules_iptables_total",
        "Total number of iptables rules owned by kube-proxy",
      );
      this.iptablesRulesLast = tableGauge(
        "sync_proxy_rules_iptables_last",
        "Number of iptables rules written by kube-proxy in last sync",
      );
    }

    this.syncFailuresTotal = new Counter({
      name: "kproxy_sync_failures_total",
      help: "Syncs of proxy rules that failed and will be retried",
      labelNames: ["mode"],
      registers,
    });
    this.syncFailuresTotal.inc({ mode: this.mode }, 0);
    this.driftRepairsTotal = new Counter({
      name: "kproxy_drift_repairs_total",
      help: "Full syncs triggered because the kernel no longer held the applied rules",
      labelNames: ["mode"],
      registers,
    });
    this.driftRepairsTotal.inc({ mode: this.mode }, 0);
    this.shadowedFrontends = new Gauge({
      name: "kproxy_shadowed_frontends",
      help: "Frontends (address or node port, protocol and port) a service port declares " +
        "but another service port holds, so they are left out of its rules",
      labelNames: ["ip_family", "kind"],
      registers,
    });
    for (const ip_family of families) {
      for (const kind of FRONTEND_KINDS) this.shadowedFrontends.set({ ip_family, kind }, 0);
    }
  }
}
