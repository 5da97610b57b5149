import assert from "node:assert/strict";
import FakeTimers from "@sinonjs/fake-timers";
import { BoundedFrequencyRunner } from "../../lib/shell/runner.ts";
import { fakeClock } from "../support/clock.ts";

interface Harness {
  clock: ReturnType<typeof FakeTimers.createClock>;
  runner: BoundedFrequencyRunner;
  /** Fake-clock times (ms since start) at which fn started. */
  runs: number[];
  stop(): Promise<void>;
}

function start(
  options: { minIntervalMs: number; maxIntervalMs: number; retryIntervalMs?: number },
  fn: (runIndex: number) => Promise<void> | void = () => {},
): Harness {
  const clock = FakeTimers.createClock(0);
  const runs: number[] = [];
  const runner = new BoundedFrequencyRunner({
    name: "test",
    minIntervalMs: options.minIntervalMs,
    maxIntervalMs: options.maxIntervalMs,
    retryIntervalMs: options.retryIntervalMs ?? 1000,
    clock: fakeClock(clock),
    fn: async () => {
      runs.push(clock.now);
      await fn(runs.length - 1);
    },
  });
  const controller = new AbortController();
  const done = runner.loop(controller.signal);
  return {
    clock,
    runner,
    runs,
    async stop() {
      controller.abort();
      await done;
    },
  };
}

Deno.test("BoundedFrequencyRunner.run() runs at once on the first poke", async () => {
  const h = start({ minIntervalMs: 1000, maxIntervalMs: 30_000 });
  await h.clock.tickAsync(10);
  assert.deepEqual(h.runs, []);
  h.runner.run();
  await h.clock.tickAsync(0);
  assert.deepEqual(h.runs, [10]);
  await h.stop();
});

Deno.test("BoundedFrequencyRunner.run() coalesces a burst and respects the minimum interval", async () => {
  const h = start({ minIntervalMs: 1000, maxIntervalMs: 30_000 });
  h.runner.run();
  await h.clock.tickAsync(0);
  for (let i = 0; i < 20; i++) {
    h.runner.run();
    await h.clock.tickAsync(20);
  }
  assert.deepEqual(h.runs, [0]);
  await h.clock.tickAsync(1000);
  assert.deepEqual(h.runs, [0, 1000]);
  await h.clock.tickAsync(5000);
  assert.deepEqual(h.runs, [0, 1000]);
  await h.stop();
});

Deno.test("BoundedFrequencyRunner.loop() runs periodically at the maximum interval", async () => {
  const h = start({ minIntervalMs: 1000, maxIntervalMs: 10_000 });
  await h.clock.tickAsync(35_000);
  assert.deepEqual(h.runs, [10_000, 20_000, 30_000]);
  h.runner.run();
  await h.clock.tickAsync(0);
  assert.deepEqual(h.runs, [10_000, 20_000, 30_000, 35_000]);
  await h.clock.tickAsync(10_000);
  assert.deepEqual(h.runs, [10_000, 20_000, 30_000, 35_000, 45_000]);
  await h.stop();
});

Deno.test("BoundedFrequencyRunner.loop() retries a failure with capped doubling backoff", async () => {
  const h = start(
    { minIntervalMs: 100, maxIntervalMs: 5000, retryIntervalMs: 1000 },
    (i) => {
      if (i < 5) throw new Error(`failure ${i}`);
    },
  );
  h.runner.run();
  await h.clock.tickAsync(20_000);
  // Retries after 1 s, 2 s, 4 s, then capped at 5 s; the 6th run succeeds,
  // after which only the periodic run remains.
  assert.deepEqual(h.runs.slice(0, 6), [0, 1000, 3000, 7000, 12_000, 17_000]);
  assert.equal(h.runner.failures, 0);
  await h.stop();
});

Deno.test("BoundedFrequencyRunner.run() during a retry wait still honours the minimum interval", async () => {
  const h = start(
    { minIntervalMs: 500, maxIntervalMs: 60_000, retryIntervalMs: 10_000 },
    (i) => {
      if (i === 0) throw new Error("first fails");
    },
  );
  h.runner.run();
  await h.clock.tickAsync(100);
  h.runner.run();
  await h.clock.tickAsync(1000);
  assert.deepEqual(h.runs, [0, 500]);
  await h.stop();
});

Deno.test("BoundedFrequencyRunner.run() during a run schedules exactly one more run", async () => {
  const h = start({ minIntervalMs: 1000, maxIntervalMs: 60_000 }, async () => {
    await new Promise<void>((resolve) => h.clock.setTimeout(() => resolve(), 300));
  });
  h.runner.run();
  await h.clock.tickAsync(100);
  h.runner.run();
  h.runner.run();
  await h.clock.tickAsync(3000);
  assert.deepEqual(h.runs, [0, 1000]);
  await h.stop();
});

Deno.test("BoundedFrequencyRunner.loop() resolves promptly when aborted", async () => {
  const h = start({ minIntervalMs: 1000, maxIntervalMs: Infinity });
  await h.clock.tickAsync(100_000);
  assert.deepEqual(h.runs, []);
  await h.stop();
});

Deno.test("BoundedFrequencyRunner rejects inconsistent intervals", () => {
  for (const [min, max, retry] of [[-1, 10, 1], [10, 5, 1], [0, 10, 0]] as const) {
    assert.throws(
      () =>
        new BoundedFrequencyRunner({
          name: "bad",
          fn: async () => {},
          minIntervalMs: min,
          maxIntervalMs: max,
          retryIntervalMs: retry,
        }),
      RangeError,
    );
  }
});
