import assert from "node:assert/strict";
import { exactArray } from "../../lib/core/exact_array.ts";

Deno.test("exactArray() copies the items into a new array", () => {
  const grown: number[] = [];
  grown.push(1, 2, 3);
  const exact = exactArray(grown);
  assert.deepEqual(exact, [1, 2, 3]);
  assert.notEqual(exact, grown);
  assert.deepEqual(exactArray([]), []);
});
