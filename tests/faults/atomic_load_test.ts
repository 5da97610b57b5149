/**
 * Every byte at which kproxy can die while it writes a sync's input to a
 * tool: the input is cut there and fed to the real tool (`nft -f -`,
 * `iptables-restore`) in a scratch network namespace that holds the previous
 * ruleset, which must stay exactly as it was. The stop points are every write
 * the Executor makes (`stdinWrites()`), line boundaries and places inside
 * lines; a sync of several calls is also cut between calls.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createIptablesBackend } from "../../backends/iptables/applier.ts";
import { createNftablesBackend } from "../../backends/nftables/applier.ts";
import type { Backend } from "../../lib/core/backend.ts";
import { defaultConfig } from "../../lib/config/defaults.ts";
import { stdinWrites } from "../../lib/shell/exec.ts";
import type { Command, CommandResult, Executor } from "../../lib/core/executor.ts";
import type { Plan, ServicePortPlan } from "../../lib/core/plan.ts";
import { benchPlan } from "../../scripts/bench/plan.ts";
import { endpoint, plan, servicePort } from "../golden/nftables/fixtures.ts";
import {
  endpoint as iptEndpoint,
  plan as iptPlan,
  servicePort as iptServicePort,
  traffic as iptTraffic,
} from "../golden/iptables/fixtures.ts";
import { createNamespace, deleteNamespace } from "../../scripts/testbed/tables.ts";
import { faultsSkipReason } from "../../scripts/testbed/kproxy.ts";
import { HostExecutor, NetnsExecutor, Topology } from "../../scripts/netns.ts";

const nftSkip = await faultsSkipReason(["nft"]);

/** One command of a sync as the backend handed it to the Executor. */
interface Captured {
  command: Command;
  /** Its stdin, cut where the Executor writes. */
  writes: string[];
}

/**
 * Runs commands through `inner` and records the loads `load` selects with
 * their stdin; while {@linkcode CapturingExecutor.holding}, loads are not run
 * but answered with a failure, so the kernel keeps the previous ruleset; so
 * is the load numbered {@linkcode CapturingExecutor.failing} (from 0).
 */
class CapturingExecutor implements Executor {
  readonly loads: Captured[] = [];
  holding = false;
  failing = -1;

  constructor(readonly inner: Executor, readonly load: (command: Command) => boolean) {}

  run(command: Command): Promise<CommandResult> {
    if (!this.load(command)) return this.inner.run(command);
    const writes = command.stdin === undefined ? [] : [...stdinWrites(command.stdin)];
    const recorded = { ...command, stdin: writes.join("") };
    this.loads.push({ command: recorded, writes });
    if (!this.holding && this.loads.length - 1 !== this.failing) return this.inner.run(recorded);
    return Promise.resolve({ code: 1, stdout: "", stderr: "held by the test" });
  }
}

/** A place where the writer of call `call` stopped: `length` characters of its input written. */
interface StopPoint {
  call: number;
  length: number;
  kind: "write" | "line" | "mid-line";
}

/** A small deterministic generator, so a failing stop point is the same on every run. */
function* pseudoRandom(seed: number): Generator<number> {
  let state = seed;
  while (true) {
    state = (state * 1103515245 + 12345) % 2147483648;
    yield state / 2147483648;
  }
}

/**
 * The stop points of one call's input: every write boundary, `lines` line
 * boundaries spread over the input (all of the first and last few), and
 * `midLine` places inside lines. The whole input is not a stop point.
 */
function stopPoints(
  call: number,
  writes: readonly string[],
  options: { lines: number; midLine: number },
): StopPoint[] {
  const text = writes.join("");
  const points = new Map<number, StopPoint>();
  const add = (length: number, kind: StopPoint["kind"]) => {
    if (length < text.length && !points.has(length)) points.set(length, { call, length, kind });
  };
  let offset = 0;
  for (const piece of writes) {
    add(offset, "write");
    offset += piece.length;
  }
  const ends: number[] = [];
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) ends.push(i + 1);
  const edge = Math.min(12, ends.length);
  const step = Math.max(1, Math.floor(ends.length / Math.max(1, options.lines)));
  ends.forEach((end, i) => {
    if (i < edge || i >= ends.length - 3 || i % step === 0) add(end, "line");
  });
  const random = pseudoRandom(text.length);
  for (let n = 0; n < options.midLine; n++) {
    const at = 1 + Math.floor(random.next().value! * (text.length - 2));
    if (text[at - 1] !== "\n") add(at, "mid-line");
  }
  for (const back of [1, 2, 6]) add(text.length - back, "mid-line");
  return [...points.values()].sort((a, b) => a.length - b.length);
}

/** What a prefix test needs from one mode in one namespace. */
interface PrefixTarget {
  /** Runs one call with `stdin` as its input; its exit status does not matter. */
  feed(command: Command, stdin: string): Promise<void>;
  /** Everything kproxy owns in the kernel, as text. */
  listing(): Promise<string>;
  /** Loads the previous ruleset again after a stop point changed it. */
  restore(): Promise<void>;
}

/** What {@linkcode brokenStopPoints} found. */
interface StopPointReport {
  /** Stop points that left the kernel neither as before nor as after the whole sync. */
  broken: string[];
  /** Stop points that left it as after the whole sync (the input was complete but for whitespace). */
  complete: number;
  before: string;
  after: string;
}

/**
 * Feeds the input of `calls` stopped at every stop point (the calls before
 * the stopped one complete) and reports the stop points that left the
 * kernel in a state that is neither the one before the sync nor the one
 * after all of `calls`.
 */
async function brokenStopPoints(
  target: PrefixTarget,
  calls: readonly Captured[],
  points: readonly StopPoint[],
): Promise<StopPointReport> {
  const feed = async (call: Captured, length = Infinity) => {
    await target.feed(call.command, call.writes.join("").slice(0, length));
  };
  const before = await target.listing();
  for (const call of calls) await feed(call);
  const after = await target.listing();
  await target.restore();
  assert.equal(await target.listing(), before, "the previous ruleset is restored");
  const report: StopPointReport = { broken: [], complete: 0, before, after };
  for (const point of points) {
    for (const earlier of calls.slice(0, point.call)) await feed(earlier);
    await feed(calls[point.call]!, point.length);
    const listing = await target.listing();
    if (listing === before) continue;
    if (listing === after) report.complete++;
    else {
      const total = calls[point.call]!.writes.join("").length;
      report.broken.push(
        `call ${point.call + 1}/${calls.length} at ${point.length}/${total} (${point.kind})`,
      );
    }
    await target.restore();
  }
  return report;
}

// ---------------------------------------------------------------------------
// nftables

const SERVICES = 1000;
const ENDPOINTS = 4;

function withEndpointPort(service: ServicePortPlan, port: number): ServicePortPlan {
  const endpoints = service.internal.endpoints.map((e) => ({ ...e, port }));
  return {
    ...service,
    internal: { ...service.internal, endpoints },
    external: { ...service.external, endpoints },
  };
}

/** The plan loaded first: bulk services, every 50th with session affinity. */
function previousPlan(): Plan {
  return benchPlan(SERVICES, ENDPOINTS, { affinityEvery: 50 });
}

/**
 * The next plan: the services whose index `pick` selects get a new endpoint
 * port, the last `churn` are gone and `churn` new ones appear.
 */
function nextPlan(pick: (index: number) => boolean, churn: number): {
  plan: Plan;
  changed: Set<string>;
} {
  const previous = previousPlan();
  const grown = benchPlan(SERVICES + churn, ENDPOINTS, { affinityEvery: 50 });
  const changed = new Set<string>();
  const services = grown.services.flatMap((service, i) => {
    if (i >= SERVICES - churn && i < SERVICES) {
      changed.add(service.id);
      return [];
    }
    if (i >= SERVICES || pick(i)) {
      changed.add(service.id);
      return [i >= SERVICES ? service : withEndpointPort(service, 9090)];
    }
    return [service];
  });
  return { plan: { ...previous, services }, changed };
}

const V6 = plan([
  servicePort("ns", "six", {
    clusterIPs: ["fd00:10:96::1"],
    internal: { endpoints: [endpoint("fd00:10::1")], whenEmpty: "reject", reason: "" },
    external: { endpoints: [endpoint("fd00:10::1")], whenEmpty: "reject", reason: "" },
  }),
], { family: "IPv6" });

/** An `nft -f -` input that edits kproxy's tables (not only the load guard's). */
function isNftLoad(command: Command): boolean {
  const stdin = typeof command.stdin === "string"
    ? command.stdin
    : [...command.stdin ?? []].join("");
  return command.program === "nft" && command.args.join(" ") === "-f -" &&
    /^\w+ \w+ ip6? kproxy /m.test(stdin);
}

/**
 * Loads `previous` through the nftables backend in a fresh namespace, then
 * holds the input of the sync to `next` and checks every stop point of it.
 */
async function checkNftSync(
  options: { next: Plan; changed: Set<string>; full: boolean; lines: number; midLine: number },
): Promise<{ report: StopPointReport; points: number }> {
  const ns = `kp-f-al${Topology.randomTag()}`;
  await createNamespace(ns);
  try {
    const netns = new NetnsExecutor({ namespace: ns, inner: new HostExecutor() });
    const executor = new CapturingExecutor(netns, isNftLoad);
    const backend: Backend = createNftablesBackend({ executor, config: defaultConfig("node-a") });
    const previous = previousPlan();
    await backend.sync({ plans: [previous, V6], changed: new Set(), full: true });
    const firstLoad = executor.loads.splice(0);
    const listing = async () => {
      let text = "";
      for (const family of ["ip", "ip6"]) {
        text += (await netns.run({ program: "nft", args: ["list", "table", family, "kproxy"] }))
          .stdout;
      }
      return text;
    };
    assert.match(await listing(), /service-ips/, "the previous table was loaded");
    executor.holding = true;
    await assert.rejects(
      backend.sync({
        plans: [options.next, V6],
        changed: options.changed,
        full: options.full,
      }),
    );
    const [load, ...rest] = executor.loads.splice(0);
    assert.ok(load !== undefined && rest.length === 0, "one held load");
    const target: PrefixTarget = {
      feed: async (command, stdin) => {
        await netns.run({ ...command, stdin });
      },
      listing,
      restore: async () => {
        for (const call of firstLoad) await netns.run(call.command);
      },
    };
    const points = stopPoints(0, load.writes, options);
    const report = await brokenStopPoints(target, [load], points);
    assert.notEqual(report.after, report.before, "the whole input changes the tables");
    return { report, points: points.length };
  } finally {
    await deleteNamespace(ns);
  }
}

Deno.test({
  name: "nftables full sync: no prefix of its nft input changes the loaded tables",
  ignore: nftSkip !== undefined,
  sanitizeResources: false,
  async fn() {
    const { plan, changed } = nextPlan((i) => i % 3 !== 0, 50);
    const result = await checkNftSync({ next: plan, changed, full: true, lines: 10, midLine: 6 });
    assert.ok(result.points > 20, `only ${result.points} stop points`);
    assert.deepEqual(result.report.broken, [], "stop points that left a broken table");
  },
});

Deno.test({
  name: "nftables partial sync: no prefix of its nft input changes the loaded tables",
  ignore: nftSkip !== undefined,
  sanitizeResources: false,
  async fn() {
    const { plan, changed } = nextPlan((i) => i % 97 === 5 || i % 50 === 0, 4);
    const result = await checkNftSync({ next: plan, changed, full: false, lines: 24, midLine: 8 });
    assert.ok(result.points > 30, `only ${result.points} stop points`);
    assert.deepEqual(result.report.broken, [], "stop points that left a broken table");
  },
});

// ---------------------------------------------------------------------------
// iptables

const iptSkip = await faultsSkipReason(["iptables-legacy-restore", "iptables-nft-restore"]);

const BUILT_IN = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

/** One table of `iptables-save` output: each chain's rules, in order. */
type SavedTable = Map<string, string[]>;

function parseSave(text: string): SavedTable {
  const table: SavedTable = new Map();
  for (const line of text.split("\n")) {
    const chain = /^:(\S+) /.exec(line)?.[1];
    if (chain !== undefined) table.set(chain, []);
    const rule = /^-A (\S+) (.*)$/.exec(line);
    if (rule) table.get(rule[1]!)?.push(rule[2]!);
  }
  return table;
}

/** The chains reachable from the built-in chains, with their rules: what decides packets. */
function live(table: SavedTable): string {
  const seen = new Set<string>();
  const visit = (chain: string) => {
    if (seen.has(chain) || !table.has(chain)) return;
    seen.add(chain);
    for (const rule of table.get(chain)!) {
      const target = / -[jg] (\S+)/.exec(rule)?.[1];
      if (target !== undefined) visit(target);
    }
  };
  BUILT_IN.forEach(visit);
  return JSON.stringify([...seen].sort().map((chain) => [chain, table.get(chain)]));
}

/** Whether every chain of `before` is in `after` with its old rules first, in order. */
function widens(before: SavedTable, after: SavedTable): boolean {
  return [...before].every(([chain, rules]) => {
    const now = after.get(chain);
    return now !== undefined && rules.every((rule, i) => now[i] === rule);
  });
}

/** Whether `state` holds every rule of every chain of `target`. */
function holds(state: SavedTable, target: SavedTable): boolean {
  return [...target].every(([chain, rules]) => {
    const now = new Set(state.get(chain) ?? []);
    return rules.every((rule) => now.has(rule));
  });
}

const ipEndpoints = (base: number, count: number) =>
  Array.from(
    { length: count },
    (_, j) => iptEndpoint(`10.244.${base >> 6}.${(base & 63) * 4 + j}`, 8080),
  );

/** The plan loaded first: 60 services, some without endpoints, some with node ports. */
function iptPrevious(): Plan {
  return iptPlan(
    Array.from({ length: 60 }, (_, i) => {
      const endpoints = i % 10 === 3 ? [] : ipEndpoints(i, 3);
      return iptServicePort({
        name: `svc-${String(i).padStart(2, "0")}`,
        clusterIPs: [`10.96.1.${i}`],
        nodePort: i % 4 === 0 ? 30000 + i : 0,
        internal: iptTraffic(endpoints),
        external: iptTraffic(endpoints),
      });
    }),
  );
}

/**
 * The next plan: every third service gets other endpoints, services that
 * had none get some and every tenth loses all, one port changes, one service
 * goes and one comes.
 */
function iptNext(): { plan: Plan; changed: Set<string> } {
  const changed = new Set<string>();
  const services = iptPrevious().services.flatMap((service, i) => {
    if (i === 59) {
      changed.add(service.id);
      return [];
    }
    let endpoints = service.internal.endpoints;
    if (i % 3 === 0 || endpoints.length === 0) endpoints = ipEndpoints(i + 100, 2);
    if (i % 10 === 7) endpoints = [];
    const port = i === 5 ? 81 : service.port;
    const next = {
      ...service,
      port,
      internal: iptTraffic(endpoints),
      external: iptTraffic(endpoints),
    };
    if (JSON.stringify(next) !== JSON.stringify(service)) changed.add(service.id);
    return [next];
  });
  const added = iptServicePort({ name: "svc-new", clusterIPs: ["10.96.2.1"], nodePort: 30999 });
  changed.add(added.id);
  return { plan: iptPlan([...services, added]), changed };
}

function isRestore(command: Command): boolean {
  return command.program.endsWith("-restore");
}

/**
 * Loads the previous plan through the iptables backend in a fresh namespace,
 * holds every restore input of the sync to the next plan, and checks every
 * stop point of that sequence: the nat rules that decide packets must be the
 * old or the new ones, and while they are the old ones the filter table may
 * only have gained rules after the old ones; once they are the new ones it
 * must hold every new filter rule.
 */
async function checkIptablesSync(
  variant: "legacy" | "nft",
  options: {
    full: boolean;
    lines: number;
    midLine: number;
    /** The backend's `nftChainsPerRestore`. @default {100} */
    chainsPerRestore?: number;
  },
): Promise<{ broken: string[]; calls: number; points: number; full: boolean }> {
  const ns = `kp-f-al${Topology.randomTag()}`;
  await createNamespace(ns);
  try {
    const netns = new NetnsExecutor({ namespace: ns, inner: new HostExecutor() });
    const executor = new CapturingExecutor(netns, isRestore);
    const config = defaultConfig("node-a");
    config.iptables.backend = variant;
    const backend = createIptablesBackend({
      executor,
      config,
      families: ["IPv4"],
      nftChainsPerRestore: options.chainsPerRestore ?? 100,
    });
    const previous = iptPrevious();
    await backend.sync({ plans: [previous], changed: new Set(), full: true });
    executor.loads.splice(0);
    const save = async (table: string) =>
      parseSave(
        (await netns.run({ program: `iptables-${variant}-save`, args: ["-t", table] })).stdout,
      );
    const state = async () => ({ nat: await save("nat"), filter: await save("filter") });
    // Whole rulesets as iptables-save prints them, loaded back (tables replaced) to start over.
    const snapshot = async () =>
      (await netns.run({ program: `iptables-${variant}-save`, args: [] })).stdout;
    const load = async (saved: string) => {
      const result = await netns.run({
        program: `iptables-${variant}-restore`,
        args: [],
        stdin: saved,
      });
      assert.equal(result.code, 0, result.stderr);
    };
    const before = await state();
    assert.ok(before.nat.has("KUBE-SERVICES"), "the previous rules were loaded");

    // The sync runs for real, its inputs recorded as it wrote them; then every
    // stop point of those inputs is tried from the state the previous inputs left.
    const snapshots = [await snapshot()];
    const { plan: next, changed } = iptNext();
    const result = await backend.sync({
      plans: [next],
      changed,
      full: options.full,
    });
    const calls = executor.loads.splice(0);
    const after = await state();
    for (const call of calls) {
      await load(snapshots.at(-1)!);
      await netns.run(call.command);
      snapshots.push(await snapshot());
    }
    const points = calls.flatMap((call, i) => stopPoints(i, call.writes, options));
    const broken: string[] = [];
    for (const point of points) {
      await load(snapshots[point.call]!);
      const call = calls[point.call]!;
      const input = call.writes.join("");
      await netns.run({ ...call.command, stdin: input.slice(0, point.length) });
      const now = await state();
      const nat = live(now.nat);
      const ok = (nat === live(before.nat) && widens(before.filter, now.filter)) ||
        (nat === live(after.nat) && holds(now.filter, after.filter));
      if (!ok) {
        broken.push(
          `call ${
            point.call + 1
          }/${calls.length} at ${point.length}/${input.length} (${point.kind})`,
        );
      }
    }
    return { broken, points: points.length, calls: calls.length, full: result.full };
  } finally {
    await deleteNamespace(ns);
  }
}

for (const variant of ["legacy", "nft"] as const) {
  for (const full of [true, false]) {
    Deno.test({
      name: `iptables (${variant}) ${
        full ? "full" : "partial"
      } sync: no stop point leaves a table half old, half new`,
      ignore: iptSkip !== undefined,
      sanitizeResources: false,
      async fn() {
        const result = await checkIptablesSync(variant, { full, lines: 6, midLine: 2 });
        if (full && variant === "nft") assert.ok(result.calls > 2, `${result.calls} inputs`);
        assert.deepEqual(result.broken, [], "stop points that left a broken ruleset");
      },
    });
  }
}

Deno.test({
  name: "iptables (nft) chunked partial sync: no stop point leaves a table half old, half new",
  ignore: iptSkip !== undefined,
  sanitizeResources: false,
  async fn() {
    const result = await checkIptablesSync("nft", {
      full: false,
      lines: 6,
      midLine: 2,
      chainsPerRestore: 25,
    });
    assert.equal(result.full, false, "the partial sync stays partial");
    assert.ok(result.calls > 4, `${result.calls} inputs`);
    assert.deepEqual(result.broken, [], "stop points that left a broken ruleset");
  },
});

/** `text` with per-service chains named by their upstream names (a full sync may pick either). */
function upstream(text: string): string {
  return text.replace(/(KUBE-(?:SVC|SVL|EXT|FW|SEP)-[A-Z2-7]{16})-2\b/g, "$1");
}

Deno.test({
  name:
    "iptables (nft) chunked partial sync: a failed input leaves old or new rules, and the next sync repairs them",
  ignore: iptSkip !== undefined,
  sanitizeResources: false,
  async fn() {
    const ns = `kp-f-al${Topology.randomTag()}`;
    await createNamespace(ns);
    try {
      const netns = new NetnsExecutor({ namespace: ns, inner: new HostExecutor() });
      const executor = new CapturingExecutor(netns, isRestore);
      const config = defaultConfig("node-a");
      config.iptables.backend = "nft";
      const backend = createIptablesBackend({
        executor,
        config,
        families: ["IPv4"],
        nftChainsPerRestore: 25,
      });
      const save = async (table: string) =>
        parseSave((await netns.run({ program: "iptables-nft-save", args: ["-t", table] })).stdout);
      const state = async () => ({ nat: await save("nat"), filter: await save("filter") });
      const previous = iptPrevious();
      const { plan: next, changed } = iptNext();
      const forward = { plans: [next], changed, full: false };
      const back = { plans: [previous], changed, full: false };
      await backend.sync({ plans: [previous], changed: new Set(), full: true });
      const before = await state();
      executor.loads.splice(0);
      await backend.sync(forward);
      const after = await state();
      const calls = executor.loads.length;
      assert.ok(calls > 4, `${calls} inputs`);
      await backend.sync(back);
      for (let failing = 0; failing < calls; failing++) {
        executor.loads.splice(0);
        executor.failing = failing;
        await assert.rejects(backend.sync(forward), /held by the test/);
        executor.failing = -1;
        const now = await state();
        const nat = upstream(live(now.nat));
        assert.ok(
          (nat === upstream(live(before.nat)) && widens(before.filter, now.filter)) ||
            (nat === upstream(live(after.nat)) && holds(now.filter, after.filter)),
          `input ${failing + 1}/${calls} failed: neither old nor new rules`,
        );
        const repair = await backend.sync(forward);
        assert.equal(repair.full, true, "the sync after a failure is full");
        const repaired = await state();
        assert.equal(
          upstream(live(repaired.nat)),
          upstream(live(after.nat)),
          `after input ${failing + 1} failed`,
        );
        assert.equal(live(repaired.filter), live(after.filter));
        assert.equal(repaired.nat.size, after.nat.size, "chains left behind");
        await backend.sync(back);
      }
    } finally {
      await deleteNamespace(ns);
    }
  },
});
