import assert from "node:assert/strict";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { CommandError } from "../../lib/shell/exec.ts";
import type { CommandResult } from "../../lib/core/executor.ts";
import { FakeExecutor, type RecordedCommand } from "../support/fake_executor.ts";
import { isTableProbe, probedTable, tableProbeAnswer } from "../support/nft_table_probe.ts";
import { PROBE_CHAIN } from "../../backends/nftables/table_probe.ts";
import type { Plan } from "../../lib/core/plan.ts";
import { endpoint, plan, servicePort } from "../golden/nftables/fixtures.ts";
import { withLogRecords } from "../support/logs.ts";

const services = Array.from(
  { length: 20 },
  (_, i) => servicePort("ns", `s${i}`, { clusterIPs: [`172.30.2.${i}`], nodePort: 30100 + i }),
);
const v4 = plan(services);
const v6 = plan([
  servicePort("ns", "six", {
    clusterIPs: ["fd00:10:96::1"],
    internal: { endpoints: [endpoint("fd00:10::1")], whenEmpty: "reject", reason: "" },
    external: { endpoints: [endpoint("fd00:10::1")], whenEmpty: "reject", reason: "" },
  }),
], { family: "IPv6" });

/** The nft calls other than table probes (the warm-up's, for the staged first load). */
function nftCalls(executor: FakeExecutor): RecordedCommand[] {
  return executor.calls.filter((c) => c.program === "nft" && !isTableProbe(c.args));
}

/** The `nft -f -` inputs that edit kproxy's own tables (not only the load guard). */
function tableLoads(executor: FakeExecutor): string[] {
  return nftCalls(executor)
    .filter((c) => c.args.join(" ") === "-f -" && /^\w+ \w+ ip6? kproxy /m.test(c.stdin ?? ""))
    .map((c) => c.stdin!);
}

/** The commands run from the `from`-th on, without the load guard's one-time check (`nft -c`). */
function callsAfter(executor: FakeExecutor, from: number) {
  return executor.calls.slice(from).filter((c) => c.args[0] !== "-c");
}

/** Answers `nft -c` (the load guard probe) as a kernel that refuses an armed guard. */
function refusingProbe(command: RecordedCommand): CommandResult {
  return command.args[0] === "-c"
    ? { code: 1, stdout: "", stderr: "Error: Could not process rule: Operation not supported" }
    : { code: 0, stdout: "", stderr: "" };
}

function withOneEndpointChanged(base: Plan, index: number): Plan {
  const id = services[index]!.id;
  const endpoints = [endpoint("10.180.9.9")];
  return {
    ...base,
    services: base.services.map((s) =>
      s.id === id
        ? { ...s, internal: { ...s.internal, endpoints }, external: { ...s.external, endpoints } }
        : s
    ),
  };
}

function backend(executor: FakeExecutor, tcpBeLiberal = false) {
  const config = defaultConfig("node-a");
  config.conntrack.tcpBeLiberal = tcpBeLiberal;
  return createNftablesBackend({ executor, config });
}

Deno.test("createNftablesBackend() full sync is one guarded nft load with every family on stdin", async () => {
  const executor = new FakeExecutor(refusingProbe);
  const result = await backend(executor).sync({
    plans: [v4, v6],
    changed: new Set(),
    full: true,
  });
  assert.equal(result.full, true);
  const calls = nftCalls(executor);
  assert.deepEqual(calls.map((c) => c.args.join(" ")), ["-f -", "-f -", "-c -f -"]);
  assert.match(calls[0]!.stdin!, /^add table ip kproxy-guard \{ flags dormant ;/);
  assert.equal(calls[2]!.stdin, "add rule ip kproxy-guard switch jump armed\n");
  const [script, ...others] = tableLoads(executor);
  assert.equal(others.length, 0);
  assert.ok(script!.startsWith(calls[0]!.stdin! + calls[2]!.stdin!), "guard set-up, then the arm");
  assert.ok(script!.endsWith("\nflush chain ip kproxy-guard switch\n"), "the disarm comes last");
  assert.match(script!, /^add table ip kproxy$/m);
  assert.match(script!, /^add table ip6 kproxy$/m);
  assert.match(script!, /^delete table ip6 kproxy$/m);
  assert.ok(script!.includes("172.30.2.19 . tcp . 80 : goto dnat-2-masq-nonlocal"));
  assert.equal(executor.calls.filter((c) => c.program === "sysctl").length, 0);
});

Deno.test("createNftablesBackend() probes the load guard once, after the first sync, and warns when the kernel accepts it armed", async () => {
  const executor = new FakeExecutor();
  await withLogRecords(["kproxy", "nftables"], async (records) => {
    const nft = backend(executor);
    await nft.sync({ plans: [v4], changed: new Set(), full: true });
    assert.deepEqual(
      nftCalls(executor).map((c) => c.args.join(" ")),
      ["-f -", "-f -", "-c -f -"],
      "the probe (a diagnostic) runs once the first rules are in, not on their way",
    );
    await nft.sync({ plans: [v4], changed: new Set(), full: true });
    const warnings = records.filter((r) => r.level === "warning");
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!.message.join(""), /accepted an armed nftables load guard/);
  });
  assert.equal(nftCalls(executor).filter((c) => c.args[0] === "-c").length, 1);
});

Deno.test("createNftablesBackend() a probe still running holds the next sync", async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const executor = new FakeExecutor(async (command) => {
    if (command.args[0] === "-c") await held;
    return refusingProbe(command);
  });
  const nft = backend(executor);
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  const next = nft.sync({ plans: [v4], changed: new Set(), full: true });
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(tableLoads(executor).length, 1, "no load beside the probe");
  release();
  await next;
  assert.equal(tableLoads(executor).length, 2);
});

Deno.test("createNftablesBackend() warmUp() sets up the load guard, so the first full sync is its load alone", async () => {
  const executor = new FakeExecutor(refusingProbe);
  const nft = backend(executor);
  await nft.warmUp!();
  const args = () => nftCalls(executor).map((c) => c.args.join(" "));
  assert.deepEqual(args(), ["-f -"]);
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  assert.deepEqual(args(), ["-f -", "-f -", "-c -f -"]);
  assert.equal(tableLoads(executor).length, 1);
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  assert.deepEqual(
    args(),
    ["-f -", "-f -", "-c -f -", "-f -", "-f -"],
    "later full syncs set it up",
  );
});

Deno.test("createNftablesBackend() a sync waits for warmUp(); a failed warm-up is the first sync's to redo", async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const executor = new FakeExecutor(async (command) => {
    if (command.args.join(" ") === "-f -" && nftCalls(executor).length === 1) {
      await held;
      return { code: 1, stdout: "", stderr: "Error: Could not process rule: No buffer space" };
    }
    return refusingProbe(command);
  });
  const nft = backend(executor);
  const warming = nft.warmUp!();
  const syncing = nft.sync({ plans: [v4], changed: new Set(), full: true });
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(
    nftCalls(executor).length,
    1,
    "the sync runs nothing while the guard is being set up",
  );
  release();
  await warming;
  await syncing;
  assert.deepEqual(
    nftCalls(executor).map((c) => c.args.join(" ")),
    ["-f -", "-f -", "-f -", "-c -f -"],
    "the failed set-up, then the sync's own set-up and load, then the check",
  );
});

Deno.test("createNftablesBackend() partial sync after one endpoint change holds only that service", async () => {
  const executor = new FakeExecutor();
  const nft = backend(executor);
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  const next = withOneEndpointChanged(v4, 7);
  const result = await nft.sync({
    plans: [next],
    changed: new Set([services[7]!.id]),
    full: false,
  });
  assert.equal(result.full, false);
  const script = tableLoads(executor)[1]!;
  assert.ok(!/^(add|delete) table ip6? kproxy( |$)/m.test(script));
  assert.doesNotMatch(
    script,
    /^add (chain|rule) ip kproxy /m,
    "the preset dnat-1 chains are reused",
  );
  assert.ok(script.endsWith("\nflush chain ip kproxy-guard switch\n"), "guarded as well");
  assert.match(script, /172\.30\.2\.7 \. tcp \. 80 : goto dnat-1-masq-nonlocal/);
  assert.match(script, /172\.30\.2\.7 \. tcp \. 80 \. 0 : 10\.180\.9\.9 \. 8080/);
  assert.match(script, /tcp \. 30107 \. 0 : 10\.180\.9\.9 \. 8080/);
  for (const [i, other] of services.entries()) {
    if (i === 7) continue;
    assert.ok(!script.includes(`172.30.2.${i} .`), `${other.name} must not appear`);
    assert.ok(!script.includes(`${30100 + i} .`), `${other.name} must not appear`);
  }
});

Deno.test("createNftablesBackend() syncs fully after a failed sync", async () => {
  const executor = new FakeExecutor();
  const nft = backend(executor);
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  executor.reply({ code: 1, stderr: "Error: Could not process rule: No such file or directory" });
  const next = withOneEndpointChanged(v4, 3);
  const request = {
    plans: [next],
    previous: [v4],
    changed: new Set([services[3]!.id]),
    full: false,
  };
  await assert.rejects(nft.sync(request), CommandError);
  const retry = await nft.sync(request);
  assert.equal(retry.full, true);
  assert.match(nftCalls(executor).at(-1)!.stdin!, /^delete table ip kproxy$/m);
  const after = await nft.sync({
    ...request,
    plans: [withOneEndpointChanged(v4, 4)],
  });
  assert.equal(after.full, false);
});

Deno.test("createNftablesBackend() upgrades a partial sync without a recorded previous plan", async () => {
  const executor = new FakeExecutor();
  const result = await backend(executor).sync({
    plans: [v4],
    changed: new Set(),
    full: false,
  });
  assert.equal(result.full, true);
});

/**
 * Answers nft as a kernel holding the rules of the last `nft -f` would: the
 * canary set and `list table` with every chain written, after `tamper` edits them.
 */
class FakeNftKernel {
  readonly chains = new Map<string, string[]>();
  generation = 0;

  handle = (command: RecordedCommand): CommandResult => ({
    code: 0,
    stdout: "",
    stderr: "",
    ...this.#answer(command),
  });

  #answer(command: RecordedCommand): Partial<CommandResult> {
    const args = command.args;
    if (args[0] === "-f") {
      for (const line of (command.stdin ?? "").split("\n")) {
        if (line === "delete table ip kproxy") this.chains.clear();
        const rule = line.match(/^add rule ip kproxy (\S+) (.*)$/);
        if (rule) this.chains.set(rule[1]!, [...this.chains.get(rule[1]!) ?? [], rule[2]!]);
        const canary = line.match(/^add element ip kproxy canary \{ (\d+) \}$/);
        if (canary) this.generation = Number(canary[1]);
      }
      return { code: 0 };
    }
    if (args.join(" ") === "list set ip kproxy canary") {
      const hex = this.generation.toString(16).padStart(8, "0");
      return {
        code: 0,
        stdout:
          `table ip kproxy {\n\tset canary {\n\t\ttype mark\n\t\telements = { 0x${hex} }\n\t}\n}\n`,
      };
    }
    if (args.join(" ") === "list table ip kproxy") {
      const chains = [...this.chains].map(([name, rules]) =>
        `\tchain ${name} {\n${rules.map((rule) => `\t\t${rule}\n`).join("")}\t}\n`
      );
      return { code: 0, stdout: `table ip kproxy {\n${chains.join("\n")}}\n` };
    }
    return { code: 0 };
  }
}

function driftBackend(kernel: FakeNftKernel, executor = new FakeExecutor(kernel.handle)) {
  const config = defaultConfig("node-a");
  return createNftablesBackend({ executor, config, driftCheckBudget: 1 });
}

Deno.test("createNftablesBackend() checkDrift() reads the canary set first", async (t) => {
  const cases: [string, { code: number; stdout?: string; stderr?: string }, boolean][] = [
    ["older generation", {
      code: 0,
      stdout: "set canary {\n\t\ttype mark\n\t\telements = { 0x00000000 }\n\t}",
    }, true],
    [
      "table deleted or ruleset flushed",
      { code: 1, stderr: "Error: No such file or directory" },
      true,
    ],
  ];
  for (const [name, reply, drifted] of cases) {
    await t.step(name, async () => {
      const kernel = new FakeNftKernel();
      const executor = new FakeExecutor(kernel.handle);
      const nft = driftBackend(kernel, executor);
      await nft.sync({ plans: [v4], changed: new Set(), full: true });
      executor.reply(reply);
      assert.equal(await nft.checkDrift!(), drifted);
      assert.deepEqual(executor.calls.at(-1)!.args, ["list", "set", "ip", "kproxy", "canary"]);
      const next = await nft.sync({ plans: [v4], changed: new Set(), full: false });
      assert.equal(next.full, drifted);
    });
  }
});

Deno.test("createNftablesBackend() checkDrift() catches an edited skeleton chain", async (t) => {
  const cases: [string, (chains: Map<string, string[]>) => void, boolean][] = [
    ["untouched", () => {}, false],
    ["nat-prerouting flushed", (chains) => chains.set("nat-prerouting", []), true],
    ["a services rule deleted", (chains) => chains.get("services")!.pop(), true],
    [
      "a rule added to filter-forward",
      (chains) => chains.get("filter-forward")!.push("drop"),
      true,
    ],
    ["a masquerading rule replaced", (chains) => {
      chains.get("masquerading")![3] = "accept";
    }, true],
    ["firewall-check deleted", (chains) => chains.delete("firewall-check"), true],
  ];
  for (const [name, tamper, drifted] of cases) {
    await t.step(name, async () => {
      const kernel = new FakeNftKernel();
      const nft = driftBackend(kernel);
      await nft.sync({ plans: [v4], changed: new Set(), full: true });
      assert.equal(await nft.checkDrift!(), false, "clean after the full sync");
      tamper(kernel.chains);
      assert.equal(await nft.checkDrift!(), drifted);
      const next = await nft.sync({ plans: [v4], changed: new Set(), full: false });
      assert.equal(next.full, drifted);
      assert.equal(await nft.checkDrift!(), false, "clean after the repair");
    });
  }
});

/** An nftables backend replacing kube-proxy's tables, as the registry creates it. */
function replacing(executor: FakeExecutor) {
  return createNftablesBackend({
    executor,
    config: defaultConfig("node-a"),
    replacedTables: ["kube-proxy"],
  });
}

/** The tables of a node, as kproxy's table probe finds them. */
const PRESENT = new Set(["ip kproxy", "ip kproxy-guard", "ip kube-proxy"]);

/** nft's answer to a table probe on a node holding `present`. */
function tableProbe(command: { args: readonly string[] }, present: ReadonlySet<string> = PRESENT) {
  return tableProbeAnswer(command.args, present);
}

const isProbe = (command: { args: readonly string[] }) => isTableProbe(command.args);

Deno.test("createNftablesBackend() cleanup() deletes its and kube-proxy's tables that exist, in one transaction", async () => {
  const executor = new FakeExecutor((command) =>
    isProbe(command) ? tableProbe(command) : { code: 0, stdout: "", stderr: "" }
  );
  await replacing(executor).cleanup();
  const probes = executor.calls.filter(isProbe).map((c) => probedTable(c.args));
  assert.deepEqual(probes.sort(), [
    "ip kproxy",
    "ip kproxy-guard",
    "ip kube-proxy",
    "ip6 kproxy",
    "ip6 kproxy-guard",
    "ip6 kube-proxy",
  ]);
  assert.deepEqual(
    executor.calls.filter((c) => !isProbe(c)).map((c) => [c.args.join(" "), c.stdin]),
    [
      [
        "-f -",
        "add table ip kproxy\ndelete table ip kproxy\nadd table ip kproxy-guard\n" +
        "delete table ip kproxy-guard\nadd table ip kube-proxy\ndelete table ip kube-proxy\n",
      ],
    ],
  );
  const empty = new FakeExecutor((command) => tableProbe(command, new Set()));
  await replacing(empty).cleanup();
  assert.ok(empty.calls.every(isProbe), "nothing to delete");
  const failing = new FakeExecutor().reply({ code: 1, stderr: "Error: Operation not permitted" });
  await assert.rejects(replacing(failing).cleanup(), CommandError);
});

Deno.test("createNftablesBackend() never lists every table of the node: iptables-nft's chains would be read too", async () => {
  const executor = new FakeExecutor((command) =>
    isProbe(command) ? tableProbe(command) : refusingProbe(command)
  );
  const nft = replacing(executor);
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  await nft.cleanup();
  const listings = executor.calls.filter((c) => c.args.includes("list"));
  assert.ok(listings.length > 0);
  for (const call of listings) assert.ok(isTableProbe(call.args), call.args.join(" "));
});

Deno.test("createNftablesBackend() deletes the replaced tables in the transaction of its first full write", async () => {
  const executor = new FakeExecutor((command) =>
    isProbe(command) ? tableProbe(command) : refusingProbe(command)
  );
  const nft = replacing(executor);
  // The first full sync: the table probes (ip, ip6), the guard's set-up, the probe, then a failing load.
  executor.reply(
    { code: 0 },
    tableProbeAnswer(["list", "chain", "ip6", "kube-proxy", PROBE_CHAIN], new Set()),
    { code: 0 },
    { code: 1, stderr: "Error: Could not process rule: Operation not supported" },
    { code: 1, stderr: "Error: interrupted" },
  );
  await assert.rejects(nft.sync({ plans: [v4], changed: new Set(), full: true }));
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  await nft.sync({ plans: [v4], changed: new Set(), full: true });
  const loads = tableLoads(executor);
  const deletions = "add table ip kube-proxy\ndelete table ip kube-proxy\n" +
    "add table ip6 kube-proxy\ndelete table ip6 kube-proxy\n";
  assert.equal(loads.length, 3);
  for (const failedThenApplied of loads.slice(0, 2)) {
    assert.match(failedThenApplied, /\nadd table ip kproxy\n/);
    assert.ok(
      failedThenApplied.endsWith(deletions + "flush chain ip kproxy-guard switch\n"),
      "program first, then delete, in the guarded batch",
    );
  }
  assert.doesNotMatch(loads[2]!, /kube-proxy/, "only until the first write succeeds");
});

Deno.test("createNftablesBackend() warmUp() finds the replaced tables, so the first full sync only loads", async () => {
  const executor = new FakeExecutor((command) =>
    isProbe(command) ? tableProbe(command) : refusingProbe(command)
  );
  const nft = replacing(executor);
  await withLogRecords(["kproxy", "nftables"], async (records) => {
    await nft.warmUp!();
    const warmUpCalls = executor.calls.length;
    assert.deepEqual(
      executor.calls.filter(isProbe).map((c) => probedTable(c.args)).sort(),
      ["ip kproxy", "ip kube-proxy", "ip6 kproxy", "ip6 kube-proxy"],
    );
    await nft.sync({ plans: [v4], changed: new Set(), full: true });
    assert.deepEqual(
      executor.calls.slice(warmUpCalls).map((c) => c.args.join(" ")),
      ["-f -", "-c -f -"],
      "the load, then the guard's one-time check",
    );
    assert.match(tableLoads(executor)[0]!, /\ndelete table ip kube-proxy\n/);
    const removed = records.filter((r) => /Removed nftables table/.test(r.message.join("")));
    assert.equal(removed.length, 1, "ip kube-proxy, the one that existed");
  });
});

Deno.test("createNftablesBackend() programs only its configured families", async () => {
  const executor = new FakeExecutor();
  const nft = createNftablesBackend({
    executor,
    config: defaultConfig("node-a"),
    families: ["IPv4"],
  });
  await nft.sync({ plans: [v4, v6], changed: new Set(), full: true });
  assert.ok(!nftCalls(executor)[0]!.stdin!.includes("ip6"));
});

/** A node just booted: kube-proxy's ip table is there, none of kproxy's. */
const BOOTED = new Set(["ip kube-proxy"]);

/** An nftables backend replacing kube-proxy's tables that stages a first load of `minElements`. */
function staging(executor: FakeExecutor, minElements = 1) {
  return createNftablesBackend({
    executor,
    config: defaultConfig("node-a"),
    replacedTables: ["kube-proxy"],
    stagedLoad: { minElements, parts: 2 },
  });
}

/** Whether a load holds only element lines. */
const elementsOnly = (stdin: string) => /^(add element [^\n]*\n)+$/.test(stdin);

Deno.test("createNftablesBackend() loads a first sync in stages on a node without kproxy's tables", async () => {
  let running = 0;
  let together = 0;
  let bothStarted!: () => void;
  const started = new Promise<void>((resolve) => (bothStarted = resolve));
  const executor = new FakeExecutor(async (command) => {
    if (isProbe(command)) return tableProbe(command, BOOTED);
    if (elementsOnly(command.stdin ?? "")) {
      together = Math.max(together, ++running);
      if (running === 2) bothStarted();
      await Promise.race([started, new Promise((resolve) => setTimeout(resolve, 200))]);
      running--;
    }
    return refusingProbe(command);
  });
  const nft = staging(executor);
  await nft.warmUp!();
  const warmUpCalls = executor.calls.length;
  const result = await nft.sync({ plans: [v4, v6], changed: new Set(), full: true });
  assert.equal(result.full, true);
  const loads = callsAfter(executor, warmUpCalls).map((c) => c.stdin!);
  assert.equal(loads.length, 4, "set-up, two element parts, hooks");
  const [setup, first, second, hooks] = loads as [string, string, string, string];
  assert.match(setup, /^add table ip kproxy\ndelete table ip kproxy\n/);
  assert.match(setup, /^delete table ip6 kproxy$/m);
  assert.doesNotMatch(setup, /hook|kube-proxy|kproxy-guard/, "no base chain, nothing else");
  assert.ok(elementsOnly(first) && elementsOnly(second));
  assert.equal(together, 2, "the element parts load at once");
  assert.match(hooks, /^add table ip kproxy-guard \{ flags dormant ;/, "in the guarded batch");
  assert.match(hooks, /^add chain ip6? kproxy nat-prerouting \{ type nat hook prerouting/m);
  assert.ok(
    hooks.endsWith(
      "add table ip kube-proxy\ndelete table ip kube-proxy\n" +
        "add table ip6 kube-proxy\ndelete table ip6 kube-proxy\n" +
        "flush chain ip kproxy-guard switch\n",
    ),
    "the hooks and the replaced tables' deletion in one batch",
  );
  assert.doesNotMatch(hooks, /^add (map|set) ip6? kproxy (?!canary)/m);

  await nft.sync({ plans: [v4, v6], changed: new Set(), full: true });
  assert.equal(
    callsAfter(executor, warmUpCalls).length,
    6,
    "later full syncs: guard set-up, one load",
  );
});

Deno.test("createNftablesBackend() a staged load adds the service ports' own chains and maps after the set-up, before their elements", async () => {
  const executor = new FakeExecutor((command) =>
    isProbe(command) ? tableProbe(command, BOOTED) : refusingProbe(command)
  );
  const nft = staging(executor);
  await nft.warmUp!();
  const warmUpCalls = executor.calls.length;
  const sticky = plan([
    ...services,
    servicePort("ns1", "sticky", {
      clusterIPs: ["172.30.0.99"],
      affinityTimeoutSeconds: 60,
      internal: { endpoints: [endpoint("10.180.0.9")], whenEmpty: "reject", reason: "" },
    }),
  ]);
  await nft.sync({ plans: [sticky], changed: new Set(), full: true });
  const loads = callsAfter(executor, warmUpCalls).map((c) => c.stdin!);
  assert.equal(loads.length, 5, "set-up, the service ports' objects, two element parts, hooks");
  const [setup, objects, first, second] = loads as [string, string, string, string];
  assert.doesNotMatch(setup, /ns1\/sticky/);
  assert.match(objects, /^add map ip kproxy aff-ns1\/sticky\/tcp\/http /m);
  assert.match(objects, /^add chain ip kproxy svc-ns1\/sticky\/tcp\/http$/m);
  assert.ok(elementsOnly(first) && elementsOnly(second));
  assert.match(first + second, /goto svc-ns1\/sticky\/tcp\/http/);
});

Deno.test("createNftablesBackend() loads a first sync in one batch where kproxy's table serves, or a small one", async (t) => {
  for (
    const [name, present, minElements] of [
      ["a restart: kproxy's table serves", PRESENT, 1],
      ["a first sync below the elements of a staged load", BOOTED, 10_000],
    ] as const
  ) {
    await t.step(name, async () => {
      const executor = new FakeExecutor((command) =>
        isProbe(command) ? tableProbe(command, present) : refusingProbe(command)
      );
      const nft = staging(executor, minElements);
      await nft.warmUp!();
      const warmUpCalls = executor.calls.length;
      await nft.sync({ plans: [v4, v6], changed: new Set(), full: true });
      const loads = callsAfter(executor, warmUpCalls);
      assert.equal(loads.length, 1);
      assert.match(loads[0]!.stdin!, /^add table ip kproxy-guard[^]*\nadd table ip kproxy\n/);
    });
  }
});

Deno.test("createNftablesBackend() a staged load that fails loads no hooks; the next full sync is one batch", async () => {
  let slowPartEnded = false;
  let parts = 0;
  const executor = new FakeExecutor(async (command) => {
    if (isProbe(command)) return tableProbe(command, BOOTED);
    if (elementsOnly(command.stdin ?? "") && ++parts === 1) {
      return { code: 1, stdout: "", stderr: "Error: Could not process rule: No buffer space" };
    }
    if (elementsOnly(command.stdin ?? "")) {
      await new Promise((resolve) => setTimeout(resolve, 30));
      slowPartEnded = true;
    }
    return refusingProbe(command);
  });
  const nft = staging(executor);
  await nft.warmUp!();
  const warmUpCalls = executor.calls.length;
  await assert.rejects(nft.sync({ plans: [v4, v6], changed: new Set(), full: true }), CommandError);
  assert.ok(slowPartEnded, "the sync ends after every part it started");
  const failed = executor.calls.slice(warmUpCalls).map((c) => c.stdin!);
  assert.equal(failed.length, 3, "set-up and element parts, no hooks");
  assert.ok(failed.every((stdin) => !/ hook /.test(stdin)));
  await nft.sync({ plans: [v4, v6], changed: new Set(), full: true });
  const retry = callsAfter(executor, warmUpCalls + 3);
  assert.deepEqual(retry.map((c) => c.args.join(" ")), ["-f -", "-f -"], "guard set-up, one load");
  assert.match(retry[1]!.stdin!, /\nadd table ip kproxy\ndelete table ip kproxy\n[^]* hook /);
  assert.match(retry[1]!.stdin!, /\ndelete table ip kube-proxy\n/, "still replacing kube-proxy's");
});
