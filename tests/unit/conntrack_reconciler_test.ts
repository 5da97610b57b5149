import assert from "node:assert/strict";
import { ConntrackReconciler } from "../../lib/shell/conntrack_reconciler.ts";
import { FakeExecutor, type RecordedCommand } from "../support/fake_executor.ts";
import { ProxyMetrics } from "../../lib/shell/metrics.ts";
import type { Plan, ServicePortPlan } from "../../lib/core/plan.ts";
import { commandRefusal, KPROXY_COMMAND_POLICY } from "../../lib/shell/command_policy.ts";
import { withLogRecords } from "../support/logs.ts";
import { endpoint, plan, servicePort } from "../golden/nftables/fixtures.ts";

const DNS = servicePort("kube-system", "dns", {
  protocol: "UDP",
  portName: "dns",
  port: 53,
  clusterIPs: ["10.96.0.10"],
  nodePort: 30053,
  servingEndpoints: [endpoint("10.244.1.5", { port: 5353 })],
});
const WEB = servicePort("default", "web", { clusterIPs: ["10.96.0.20"] });
const PLANS: Plan[] = [plan([DNS, WEB]), plan([], { family: "IPv6" })];

function entry(dst: string, dport: number, replySrc: string, replySport: number, sport = 40000) {
  return `udp      17 29 src=10.201.0.2 dst=${dst} sport=${sport} dport=${dport} [UNREPLIED] ` +
    `src=${replySrc} dst=10.201.0.2 sport=${replySport} dport=${sport} mark=0 use=1`;
}

/** A node whose conntrack table holds `listing` (IPv4 UDP) and deletes what it is asked to. */
function node(listing: string[], options: { failList?: boolean } = {}) {
  return new FakeExecutor((command: RecordedCommand) => {
    if (command.args[0] === "-L") {
      if (options.failList) return { code: 1, stdout: "", stderr: "Operation not permitted\n" };
      const text = command.args.join(" ") === "-L -f ipv4 -p udp" ? listing.join("\n") : "";
      return { code: 0, stdout: text, stderr: "0 flow entries have been shown.\n" };
    }
    const deleted = (command.stdin ?? "").split("\n").filter((line) => line !== "");
    return { code: 0, stdout: deleted.map(() => `udp 17 29 src=…`).join("\n"), stderr: "" };
  });
}

Deno.test("ConntrackReconciler lists once per family and protocol and deletes stale pairs in one batch", async () => {
  const executor = node([
    entry("10.96.0.10", 53, "10.244.1.5", 5353), // serving: kept
    entry("10.96.0.10", 53, "10.244.1.5", 8080, 40001), // old port: stale
    entry("10.96.0.10", 53, "10.244.1.5", 8080, 40002), // same pair, another client
    entry("10.96.0.10", 53, "10.244.1.9", 5353), // gone endpoint: stale
    entry("10.201.0.1", 30053, "10.244.1.9", 5353), // node port, gone endpoint: stale
    entry("10.96.0.20", 80, "10.244.9.9", 8080), // a TCP Service's address: not ours
    entry("8.8.8.8", 53, "8.8.8.8", 53), // not Service traffic
  ]);
  const metrics = new ProxyMetrics();
  const reconciler = new ConntrackReconciler({ executor, metrics });
  await reconciler.afterSync({ previous: [], plans: PLANS, changed: new Set(), full: true });
  assert.deepEqual(executor.calls.map((c) => c.args.join(" ")), ["-L -f ipv4 -p udp", "-R -"]);
  assert.deepEqual(executor.calls[1]!.stdin!.split("\n"), [
    "-D -f ipv4 -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.5 --reply-port-src 8080",
    "-D -f ipv4 -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.9 --reply-port-src 5353",
    "-D -f ipv4 -p udp --orig-dst 10.201.0.1 --orig-port-dst 30053 --reply-src 10.244.1.9 --reply-port-src 5353",
    "",
  ]);
  for (const command of executor.calls) {
    assert.equal(commandRefusal(command, KPROXY_COMMAND_POLICY), undefined);
  }
  const text = await metrics.registry.metrics();
  assert.match(
    text,
    /^kubeproxy_conntrack_reconciler_deleted_entries_total\{ip_family="IPv4"\} 3$/m,
  );
  assert.match(
    text,
    /^kubeproxy_conntrack_reconciler_sync_duration_seconds_count\{ip_family="IPv4"\} 1$/m,
  );
  assert.match(
    text,
    /^kubeproxy_conntrack_reconciler_sync_duration_seconds_count\{ip_family="IPv6"\} 0$/m,
    "an IPv6 plan without UDP Services lists nothing",
  );
});

Deno.test("ConntrackReconciler deletes nothing when nothing is stale", async () => {
  const executor = node([entry("10.96.0.10", 53, "10.244.1.5", 5353)]);
  const reconciler = new ConntrackReconciler({ executor });
  const result = await reconciler.reconcile(PLANS[0]!);
  assert.deepEqual(result, { family: "IPv4", listed: 1, stalePairs: 0, deleted: 0 });
  assert.equal(executor.calls.length, 1);
});

Deno.test("ConntrackReconciler runs nothing for a plan without UDP or SCTP Services", async () => {
  const executor = node([]);
  const noEndpoints: ServicePortPlan = { ...DNS, servingEndpoints: [] };
  const reconciler = new ConntrackReconciler({ executor });
  await reconciler.afterSync({
    previous: [],
    plans: [plan([WEB, noEndpoints])],
    changed: new Set(),
    full: true,
  });
  assert.equal(executor.calls.length, 0);
});

Deno.test("ConntrackReconciler skips TCP-only changes and retries after a failure", async () => {
  const executor = node([entry("10.96.0.10", 53, "10.244.1.9", 5353)], { failList: true });
  const metrics = new ProxyMetrics();
  const reconciler = new ConntrackReconciler({ executor, metrics });
  const tcpOnly = { previous: PLANS, plans: PLANS, changed: new Set([WEB.id]), full: false };
  await reconciler.afterSync(tcpOnly);
  assert.equal(executor.calls.length, 0, "a TCP-only change lists nothing");

  await withLogRecords(["kproxy", "conntrack"], async (records) => {
    await reconciler.afterSync({ ...tcpOnly, changed: new Set([DNS.id]) });
    assert.equal(executor.calls.length, 1);
    const warning = records.find((r) => r.level === "warning");
    assert.match(String(warning?.properties.error), /Operation not permitted/);
  });
  assert.match(
    await metrics.registry.metrics(),
    /^kubeproxy_conntrack_reconciler_sync_duration_seconds_count\{ip_family="IPv4"\} 1$/m,
  );

  // The failure is retried on the next sync, whatever it changed.
  await reconciler.afterSync(tcpOnly);
  assert.equal(executor.calls.length, 2);
});
