import assert from "node:assert/strict";
import { programRuns } from "../support/programs.ts";
import { onHostPath } from "../../scripts/netns.ts";

Deno.test("programRuns() is false for a program the host lacks, without an unhandled rejection", async () => {
  assert.equal(await programRuns("kproxy-test-no-such-program"), false);
});

Deno.test("programRuns() is true for a program that exits 0 and false for one that fails", async () => {
  assert.equal(await programRuns("true", []), true);
  assert.equal(await programRuns("false", []), false);
});

Deno.test("onHostPath() finds a program by name on PATH or by its own path", () => {
  assert.equal(onHostPath("sh"), true);
  assert.equal(onHostPath("/bin/sh"), true);
  assert.equal(onHostPath("kproxy-test-no-such-program"), false);
  assert.equal(onHostPath("/nonexistent/sh"), false);
});
