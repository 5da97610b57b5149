import assert from "node:assert/strict";
import {
  fullCollector,
  GarbageBudget,
  ListGarbage,
  reducingCollector,
  releaseThen,
  StartupRelease,
} from "../../lib/shell/list_garbage.ts";

const MiB = 1024 * 1024;

Deno.test("ListGarbage collects every 16 MiB listed, then every quarter of all listed", () => {
  let collections = 0;
  const garbage = new ListGarbage(() => collections++);
  for (let i = 0; i < 15; i++) garbage.listed(MiB);
  assert.equal(collections, 0);
  garbage.listed(MiB);
  assert.equal(collections, 1);
  for (let i = 0; i < 48; i++) garbage.listed(MiB);
  assert.equal(collections, 4, "16 MiB budgets up to 64 MiB listed");
  for (let i = 0; i < 16; i++) garbage.listed(MiB);
  for (let i = 0; i < 5; i++) garbage.listed(MiB);
  assert.equal(collections, 4, "at 85 MiB listed the budget is 21.25 MiB");
  garbage.listed(MiB);
  assert.equal(collections, 5);
});

Deno.test("ListGarbage collects at the end of a list when a MiB or more was read since the last collection", () => {
  let collections = 0;
  const garbage = new ListGarbage(() => collections++);
  garbage.ended();
  assert.equal(collections, 0);
  garbage.listed(MiB);
  garbage.ended();
  garbage.ended();
  assert.equal(collections, 1);
});

Deno.test("ListGarbage leaves the garbage of a small list (a Node, the ServiceCIDRs) to V8", () => {
  let collections = 0;
  const garbage = new ListGarbage(() => collections++);
  garbage.listed(MiB - 1);
  garbage.ended();
  assert.equal(
    collections,
    0,
    "a collection costs the whole live heap, whatever a small list left",
  );
  garbage.listed(1);
  garbage.ended();
  assert.equal(collections, 1, "the small list's bytes count toward the next one");
});

Deno.test("ListGarbage's default collection runs V8's gc without flags", () => {
  const garbage = new ListGarbage();
  garbage.listed(MiB);
  garbage.ended();
});

Deno.test("GarbageBudget collects every minBytes, then every share of all bytes so far", () => {
  let collections = 0;
  const garbage = new GarbageBudget({ minBytes: 100, share: 1 / 2, collect: () => collections++ });
  garbage.spent(99);
  assert.equal(collections, 0);
  garbage.spent(1);
  assert.equal(collections, 1);
  garbage.spent(100);
  assert.equal(collections, 2, "200 spent: the budget is still 100");
  garbage.spent(199);
  assert.equal(collections, 2, "399 spent: the budget is 199.5");
  garbage.spent(1);
  assert.equal(collections, 3);
  garbage.settle();
  assert.equal(collections, 3, "nothing since the last collection");
});

Deno.test("fullCollector() runs V8's own gc when the process has it (--expose-gc: one mark-compact)", () => {
  let calls = 0;
  const collect = fullCollector({ gc: () => calls++ });
  collect();
  collect();
  assert.equal(calls, 2);
});

Deno.test("fullCollector() without a global gc still collects, through a node:vm context", async () => {
  const collect = fullCollector({});
  assert.doesNotThrow(collect);
  await import("node:vm");
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.doesNotThrow(collect);
});

Deno.test("ListGarbage collects with collectAtEnd when a list ends, with collect while it goes on", () => {
  let during = 0;
  let atEnd = 0;
  const garbage = new ListGarbage(() => during++, () => atEnd++);
  for (let i = 0; i < 16; i++) garbage.listed(MiB);
  garbage.listed(MiB);
  garbage.ended();
  assert.deepEqual({ during, atEnd }, { during: 1, atEnd: 1 });
});

Deno.test("reducingCollector() asks V8's own gc for the memory-reducing last-resort collection", () => {
  const asked: unknown[] = [];
  reducingCollector({ gc: (options: unknown) => asked.push(options) })();
  assert.deepEqual(asked, [{ type: "major", execution: "sync", flavor: "last-resort" }]);
  assert.doesNotThrow(() => reducingCollector({})());
});

Deno.test("StartupRelease collects before the first sync is applied, when the lists left a large heap", async (t) => {
  const cases: [string, number, number][] = [
    ["1k Services: a small heap, nothing to gain", 20 * 2 ** 20, 0],
    ["10k Services: the plan's garbage goes before the ruleset is rendered", 90 * 2 ** 20, 1],
  ];
  for (const [name, heapBytes, want] of cases) {
    await t.step(name, () => {
      let collections = 0;
      const release = new StartupRelease(() => {}, {
        collect: () => collections++,
        heapUsed: () => heapBytes,
      });
      release.beforeApply();
      release.afterSync();
      release.beforeApply();
      assert.equal(collections, want, "once, before the first sync only");
    });
  }
});

Deno.test("StartupRelease runs its memory-reducing collection after the first sync only", () => {
  let reductions = 0;
  const release = new StartupRelease(() => reductions++);
  assert.equal(reductions, 0);
  release.afterSync();
  release.afterSync();
  release.afterSync();
  assert.equal(reductions, 1);
});

Deno.test("releaseThen collects the first sync's garbage before the follow-up work runs", async () => {
  // The follow-ups spawn programs (conntrack, the leftover checks): run on the first sync's
  // heap, they made the 1k start's peak (lab: median 76.9 MiB against 75.9 released first).
  const order: string[] = [];
  const afterSync = releaseThen(new StartupRelease(() => order.push("release")), [
    { afterSync: (sync: { full: boolean }) => void order.push(`conntrack full=${sync.full}`) },
    undefined,
    {
      afterSync: async () => {
        await Promise.resolve();
        order.push("leftovers");
      },
    },
  ]);
  await afterSync({ full: true });
  await afterSync({ full: false });
  assert.deepEqual(order, [
    "release",
    "conntrack full=true",
    "leftovers",
    "conntrack full=false",
    "leftovers",
  ]);
});
