import assert from "node:assert/strict";
import fc from "fast-check";
import { stableJson, writeStableJson } from "../../lib/commands/stable_json.ts";

/** What kproxy printed before: JSON.stringify with a key-sorting replacer. */
function reference(value: unknown): string | undefined {
  return JSON.stringify(value, (_key, inner) => {
    if (inner === null || typeof inner !== "object" || Array.isArray(inner)) return inner;
    if (inner instanceof Set) return [...inner].sort();
    if (inner instanceof Map) inner = Object.fromEntries(inner);
    return Object.fromEntries(
      Object.entries(inner as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)),
    );
  }, 2);
}

const key = fc.oneof(fc.string(), fc.constantFrom("0", "1", "10", "2", "01", "-1", "a", "B"));
const leaf = fc.oneof(
  fc.string(),
  fc.double(),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
  fc.constant(-0),
);
const tree = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    leaf,
    tie("array"),
    tie("object"),
    tie("set"),
    tie("map"),
  ),
  array: fc.array(tie("value"), { maxLength: 4 }),
  object: fc.dictionary(key, tie("value"), { maxKeys: 5 }),
  set: fc.array(fc.string(), { maxLength: 4 }).map((items) => new Set(items)),
  map: fc.array(fc.tuple(key, tie("value")), { maxLength: 4 }).map((entries) => new Map(entries)),
})).value;

Deno.test("stableJson() writes what JSON.stringify with a key-sorting replacer writes", () => {
  fc.assert(
    fc.property(tree, (value) => {
      assert.equal(stableJson(value), reference(value) ?? "");
    }),
    { numRuns: 2000 },
  );
  const date = new Date(0);
  assert.equal(stableJson({ b: date, a: { toJSON: () => undefined } }), reference({ b: date }));
});

Deno.test("writeStableJson() hands a large value over in pieces", () => {
  const value = { items: Array.from({ length: 20_000 }, (_, i) => ({ i, name: `n${i}` })) };
  const pieces: string[] = [];
  writeStableJson(value, (text) => pieces.push(text));
  assert.ok(pieces.length > 10);
  assert.ok(pieces.every((piece) => piece.length < 70 * 1024));
  assert.equal(pieces.join(""), reference(value));
});
