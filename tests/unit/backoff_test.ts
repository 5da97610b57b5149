import assert from "node:assert/strict";
import { Backoff, sleep } from "../../lib/shell/source/backoff.ts";

Deno.test("Backoff.next() doubles up to the cap and reset() starts over", () => {
  const backoff = new Backoff({ initialMs: 1000, maxMs: 30000, jitter: 0 });
  const delays = Array.from({ length: 7 }, () => backoff.next());
  assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  assert.equal(backoff.failures, 7);
  backoff.reset();
  assert.equal(backoff.next(), 1000);
});

Deno.test("Backoff.next() spreads delays by the jitter without passing the cap", () => {
  const low = new Backoff({ initialMs: 1000, maxMs: 1000, jitter: 0.1, random: () => 0 });
  const high = new Backoff({ initialMs: 1000, maxMs: 1000, jitter: 0.1, random: () => 0.999 });
  assert.equal(low.next(), 900);
  assert.equal(high.next(), 1000);
});

Deno.test("sleep() resolves early when its signal aborts", async () => {
  const controller = new AbortController();
  const started = Date.now();
  const done = sleep(10_000, controller.signal);
  controller.abort();
  await done;
  assert.ok(Date.now() - started < 1000);
  await sleep(1);
});
