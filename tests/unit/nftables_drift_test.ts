import assert from "node:assert/strict";
import { parseTableChains, ruleLines, SkeletonCheck } from "../../backends/nftables/drift.ts";
import { FakeExecutor } from "../support/fake_executor.ts";

const BASE_CHAIN = `table ip kproxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 172.30.0.10 . tcp . 80 : goto dnat-2,
			     172.30.0.11 . tcp . 80 : goto dnat-1 }
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services # handle 12
		counter packets 31 bytes 1860 jump services
	}
}
`;

Deno.test("parseTableChains() keeps each chain's declaration and rules, drops handles and counts", () => {
  const chains = parseTableChains(BASE_CHAIN);
  assert.deepEqual([...chains.keys()], ["nat-prerouting"]);
  const lines = chains.get("nat-prerouting")!;
  assert.deepEqual(lines, [
    "type nat hook prerouting priority dstnat; policy accept;",
    "jump services",
    "counter jump services",
  ]);
  assert.deepEqual(ruleLines(lines), ["jump services", "counter jump services"]);
  assert.deepEqual(
    parseTableChains("table ip kproxy {\n\tchain empty {\n\t}\n}\n").get("empty"),
    [],
  );
});

const TARGET = {
  ref: { family: "ip" as const, table: "kproxy" },
  ruleCounts: new Map([["nat-prerouting", 2]]),
  elements: 2,
};

/** A fake clock and an nft whose every listing of BASE_CHAIN advances it by `listingMs`. */
function timedListings(listingMs: number) {
  const time = { ms: 0 };
  const executor = new FakeExecutor(() => {
    time.ms += listingMs;
    return { code: 0, stdout: BASE_CHAIN, stderr: "" };
  });
  return { time, executor, clock: { now: () => time.ms } };
}

Deno.test("SkeletonCheck spaces its listings so they take at most the budget", async () => {
  const { time, executor, clock } = timedListings(100);
  const check = new SkeletonCheck({ executor, budget: 0.05, clock });
  assert.equal(await check.check([TARGET]), undefined);
  assert.equal(executor.calls.length, 1);
  // 100 ms of listing at 5% allows one listing per 2 s from the start of the last.
  time.ms += 1_899;
  assert.equal(check.due, false);
  assert.equal(await check.check([TARGET]), undefined);
  assert.equal(executor.calls.length, 1);
  time.ms += 1;
  assert.equal(check.due, true);
  await check.check([TARGET]);
  assert.equal(executor.calls.length, 2);
});

Deno.test("SkeletonCheck waits for the next full sync after a listing slower than maxCheckMs", async () => {
  const { time, executor, clock } = timedListings(1_500);
  const check = new SkeletonCheck({ executor, budget: 1, clock });
  await check.check([TARGET]);
  time.ms += 3_600_000;
  assert.equal(check.due, false);
  check.reset();
  assert.equal(check.due, true);
});

Deno.test("SkeletonCheck reports a missing chain, a wrong count and an edit of its baseline", async (t) => {
  const replies: [string, { code: number; stdout?: string; stderr?: string }, RegExp][] = [
    ["missing table", { code: 1, stderr: "Error: No such file or directory" }, /cannot be listed/],
    ["missing chain", { code: 0, stdout: "table ip kproxy {\n}\n" }, /nat-prerouting is missing/],
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

Deno.test("SkeletonCheck does not list a table whose element count predicts more than maxCheckMs", async () => {
  const executor = new FakeExecutor(() => ({ code: 0, stdout: BASE_CHAIN, stderr: "" }));
  const check = new SkeletonCheck({ executor, budget: 1, maxCheckMs: 1_000 });
  // 0.03 ms per element until a listing is measured: 40k elements predict 1.2 s.
  assert.equal(await check.check([{ ...TARGET, elements: 40_000 }]), undefined);
  assert.equal(executor.calls.length, 0);
  assert.equal(check.due, false, "not again before the next full sync");
  check.reset();
  assert.equal(await check.check([{ ...TARGET, elements: 20_000 }]), undefined);
  assert.equal(executor.calls.length, 1);
});
