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
import { createNftablesBackend } from "../../backends/nftables/mod.ts";
import type { Backend } from "../../backends/backend.ts";
import { defaultConfig } from "../../lib/config.ts";
import { type Command, type CommandResult, type Executor, stdinWrites } from "../../lib/exec.ts";
import type { Plan, ServicePortPlan } from "../../lib/plan.ts";
import { benchPlan } from "../../scripts/bench/plan.ts";
import { endpoint, plan, servicePort } from "../golden/nftables/fixtures.ts";
import {
  createNamespace,
  deleteNamespace,
  faultsSkipReason,
  HostExecutor,
  NetnsExecutor,
  Topology,
} from "./harness.ts";

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
 * but answered with a failure, so the kernel keeps the previous ruleset.
 */
class CapturingExecutor implements Executor {
  readonly loads: Captured[] = [];
  holding = false;

  constructor(readonly inner: Executor, readonly load: (command: Command) => boolean) {}

  run(command: Command): Promise<CommandResult> {
    if (!this.load(command)) return this.inner.run(command);
    const writes = command.stdin === undefined ? [] : [...stdinWrites(command.stdin)];
    const recorded = { ...command, stdin: writes.join("") };
    this.loads.push({ command: recorded, writes });
    if (!this.holding) return this.inner.run(recorded);
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
    await backend.sync({ plans: [previous, V6], previous: [], changed: new Set(), full: true });
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
        previous: [previous, V6],
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
