import assert from "node:assert/strict";
import { join } from "node:path";
import { type NodeScenario, type Series, simulateNode } from "../support/simulated_node.ts";
import { programRuns } from "../support/programs.ts";

const RULES = new URL("../../scripts/deploy/prometheus-rules.yaml", import.meta.url).pathname;
const CASES = new URL("./prometheus_rules_test.yaml", import.meta.url).pathname;

const promtool = await programRuns("promtool");
if (!promtool) {
  console.warn("promtool tests ignored: promtool (Debian package prometheus) is not installed");
}

async function runPromtool(...args: string[]): Promise<string> {
  const output = await new Deno.Command("promtool", { args, stdout: "piped", stderr: "piped" })
    .output();
  const text = new TextDecoder().decode(output.stdout) + new TextDecoder().decode(output.stderr);
  assert.ok(output.success, text);
  return text;
}

Deno.test({
  name: "promtool check rules accepts scripts/deploy/prometheus-rules.yaml",
  ignore: !promtool,
  async fn() {
    assert.match(await runPromtool("check", "rules", RULES), /SUCCESS: 6 rules found/);
  },
});

Deno.test({
  name: "promtool test rules: each alert fires when it should and stays quiet otherwise",
  ignore: !promtool,
  async fn() {
    assert.match(await runPromtool("test", "rules", CASES), /SUCCESS/);
  },
});

/** Every alert the shipped rules define. */
async function alertNames(): Promise<string[]> {
  const text = await Deno.readTextFile(RULES);
  return [...text.matchAll(/^\s*- alert: (\w+)$/gm)].map((match) => match[1]!);
}

/** A `promtool test rules` case: `series` in, no alert of the shipped rules out, ever. */
async function silentCase(name: string, series: Series, minutes: number) {
  const alertRuleTest = [];
  for (const alertname of await alertNames()) {
    for (let minute = 1; minute <= minutes; minute++) {
      alertRuleTest.push({ eval_time: `${minute}m`, alertname, exp_alerts: [] });
    }
  }
  return {
    name,
    interval: "1m",
    input_series: [...series].map(([selector, values]) => ({
      series: selector,
      values: values.join(" "),
    })),
    alert_rule_test: alertRuleTest,
  };
}

/** Runs promtool on `cases` (JSON is YAML) and returns its output and status. */
async function promtoolTest(cases: unknown[]): Promise<{ success: boolean; text: string }> {
  const dir = await Deno.makeTempDir({ prefix: "kproxy-promtool-" });
  try {
    const file = join(dir, "cases.yaml");
    await Deno.writeTextFile(
      file,
      JSON.stringify({ rule_files: [RULES], evaluation_interval: "1m", tests: cases }),
    );
    const output = await new Deno.Command("promtool", {
      args: ["test", "rules", file],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
    return { success: output.success, text: decode(output.stdout) + decode(output.stderr) };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const HEALTHY_NODES: readonly NodeScenario[] = [
  // Nothing changes for three hours: periodic syncs with nothing to do, one hourly full sync.
  { instance: "quiet", minutes: 180 },
  // An endpoint change every 2 s for 90 minutes, and one sync that fails (and is retried).
  {
    instance: "busy",
    minutes: 90,
    services: 50,
    changeEverySeconds: 2,
    failWith: ({ index }) => index === 1000 ? new Error("nft: injected failure") : undefined,
  },
];

for (const scenario of HEALTHY_NODES) {
  Deno.test({
    name:
      `promtool test rules: no alert fires for kproxy's own series of a ${scenario.instance} node`,
    ignore: !promtool,
    async fn() {
      const series = await simulateNode(scenario);
      const synced = series.get(
        `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4",instance="${scenario.instance}",job="kproxy"}`,
      );
      assert.ok(synced, [...series.keys()].join("\n"));
      const failures = series.get(
        `kproxy_sync_failures_total{mode="nftables",instance="${scenario.instance}",job="kproxy"}`,
      );
      assert.equal(
        failures?.at(-1),
        scenario.failWith ? 1 : 0,
        "the failures the scenario injects",
      );
      const cases = [await silentCase(`a ${scenario.instance} node`, series, scenario.minutes)];
      const { success, text } = await promtoolTest(cases);
      assert.ok(success, text.split("\n").filter((line) => line.trim()).slice(0, 40).join("\n"));
    },
  });
}

/** Broken nodes and the alerts their series must raise (and no other). */
const BROKEN_NODES: readonly { scenario: NodeScenario; fires: string[] }[] = [
  // Every sync fails from minute 20 (say nft refuses the ruleset): the retries are counted and
  // the last sync grows old.
  {
    scenario: {
      instance: "failing",
      minutes: 45,
      changeEverySeconds: 60,
      failWith: ({ minute }) => minute >= 20 ? new Error("nft: injected failure") : undefined,
    },
    fires: ["KproxyRulesStale", "KproxySyncsFailing"],
  },
  // Endpoint changes reach kproxy 45 s after they were made (a slow apiserver or watch).
  {
    scenario: { instance: "slow", minutes: 45, changeEverySeconds: 10, changeAgeMs: 45_000 },
    fires: ["KproxyNetworkProgrammingSlow"],
  },
  // Something rewrites kproxy's rules at minute 30.
  {
    scenario: { instance: "drifting", minutes: 45, drift: (minute) => minute === 30 },
    fires: ["KproxyDriftRepairs"],
  },
];

for (const { scenario, fires } of BROKEN_NODES) {
  Deno.test({
    name: `promtool test rules: kproxy's own series of a ${scenario.instance} node raise ${
      fires.join(" and ")
    }`,
    ignore: !promtool,
    async fn() {
      const series = await simulateNode(scenario);
      const cases = [await silentCase(`a ${scenario.instance} node`, series, scenario.minutes)];
      const { success, text } = await promtoolTest(cases);
      assert.equal(success, false, "no alert fired");
      const fired = new Set([...text.matchAll(/alertname: (\w+), time/g)].map((m) => m[1]));
      assert.deepEqual([...fired].sort(), fires, text.slice(0, 2000));
    },
  });
}
