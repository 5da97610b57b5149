import assert from "node:assert/strict";
import { parseChainListing, ruleLines, SkeletonCheck } from "../../backends/nftables/drift.ts";
import { FakeExecutor } from "../../lib/exec.ts";

const BASE_CHAIN = `table ip kproxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services # handle 12
		counter packets 31 bytes 1860 jump services
	}
}
`;

Deno.test("parseChainListing() keeps the declaration and rules, drops handles and counts", () => {
  const lines = parseChainListing(BASE_CHAIN);
  assert.deepEqual(lines, [
    "type nat hook prerouting priority dstnat; policy accept;",
    "jump services",
    "counter jump services",
  ]);
  assert.deepEqual(ruleLines(lines), ["jump services", "counter jump services"]);
  assert.deepEqual(parseChainListing("table ip kproxy {\n\tchain empty {\n\t}\n}\n"), []);
});

const TARGET = {
  ref: { family: "ip" as const, table: "kproxy" },
  ruleCounts: new Map([["nat-prerouting", 2]]),
};

Deno.test("SkeletonCheck spaces its listings so they take at most the budget", async () => {
  let clock = 0;
  const executor = new FakeExecutor(() => {
    clock += 100;
    return { code: 0, stdout: BASE_CHAIN, stderr: "" };
  });
  const check = new SkeletonCheck({ executor, budget: 0.05, now: () => clock });
  assert.equal(await check.check([TARGET]), undefined);
  assert.equal(executor.calls.length, 1);
  // 100 ms of listing at 5% allows one listing per 2 s from the start of the last.
  clock += 1_899;
  assert.equal(check.due, false);
  assert.equal(await check.check([TARGET]), undefined);
  assert.equal(executor.calls.length, 1);
  clock += 1;
  assert.equal(check.due, true);
  await check.check([TARGET]);
  assert.equal(executor.calls.length, 2);
});

Deno.test("SkeletonCheck waits for the next full sync after a listing slower than maxCheckMs", async () => {
  let clock = 0;
  const executor = new FakeExecutor(() => {
    clock += 1_500;
    return { code: 0, stdout: BASE_CHAIN, stderr: "" };
  });
  const check = new SkeletonCheck({ executor, budget: 1, now: () => clock });
  await check.check([TARGET]);
  clock += 3_600_000;
  assert.equal(check.due, false);
  check.reset();
  assert.equal(check.due, true);
});

Deno.test("SkeletonCheck reports a missing chain, a wrong count and an edit of its baseline", async (t) => {
  const replies: [string, { code: number; stdout?: string; stderr?: string }, RegExp][] = [
    ["missing chain", { code: 1, stderr: "Error: No such file or directory" }, /cannot be listed/],
    [
      "flushed chain",
      { code: 0, stdout: "table ip kproxy {\n\tchain nat-prerouting {\n\t}\n}\n" },
      /holds 0 rules, 2 were written/,
    ],
    [
      "replaced rule",
      { code: 0, stdout: BASE_CHAIN.replace("jump services # handle 12", "accept") },
      /nat-prerouting was edited/,
    ],
  ];
  for (const [name, reply, expected] of replies) {
    await t.step(name, async () => {
      const executor = new FakeExecutor(() => ({ code: 0, stdout: BASE_CHAIN, stderr: "" }));
      const check = new SkeletonCheck({ executor, budget: 1 });
      assert.equal(await check.check([TARGET]), undefined, "first listing is the baseline");
      executor.reply(reply);
      assert.match((await check.check([TARGET])) ?? "no drift", expected);
    });
  }
});
