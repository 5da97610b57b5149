import assert from "node:assert/strict";
import { busyCores, cpuTimes } from "../../scripts/bench/idle.ts";

const STAT_BEFORE = [
  "cpu  1000 50 500 8000 100 0 20 5 0 0",
  "cpu0 500 25 250 4000 50 0 10 3 0 0",
  "cpu1 500 25 250 4000 50 0 10 2 0 0",
  "intr 12345",
].join("\n");

Deno.test("cpuTimes() reads the machine's busy and total ticks; idle and iowait are not busy", () => {
  assert.deepEqual(cpuTimes(STAT_BEFORE), { busy: 1000 + 50 + 500 + 20 + 5, total: 9675 });
  assert.throws(() => cpuTimes("intr 1\n"), /no cpu line/);
});

Deno.test("busyCores() is how many cores' worth of time was busy between two readings", () => {
  const before = { busy: 1000, total: 10_000 };
  const cases: [{ busy: number; total: number }, number][] = [
    [{ busy: 1100, total: 10_200 }, 1], // 100 of 200 ticks busy on 2 cores: one core's worth
    [{ busy: 1000, total: 10_200 }, 0],
    [{ busy: 1200, total: 10_200 }, 2],
    [{ busy: 1000, total: 10_000 }, 0], // no ticks passed
  ];
  for (const [after, want] of cases) assert.equal(busyCores(before, after, 2), want);
});
