import assert from "node:assert/strict";
import fc from "fast-check";
import { SnapshotMap } from "../../lib/core/snapshot_map.ts";

type Op = { kind: "set"; key: number; value: number } | { kind: "delete"; key: number } | {
  kind: "share";
};

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant("set" as const), key: fc.nat(40), value: fc.integer() }),
  fc.record({ kind: fc.constant("delete" as const), key: fc.nat(40) }),
  fc.record({ kind: fc.constant("share" as const) }),
);

function sameAs(actual: ReadonlyMap<number, number>, expected: ReadonlyMap<number, number>) {
  assert.equal(actual.size, expected.size);
  assert.deepEqual(new Map(actual), new Map(expected));
  assert.deepEqual(new Set(actual.keys()), new Set(expected.keys()));
  for (const key of new Set([...actual.keys(), ...expected.keys(), 0, 1, 2, 40])) {
    assert.equal(actual.has(key), expected.has(key));
    assert.equal(actual.get(key), expected.get(key));
  }
}

Deno.test("SnapshotMap snapshots keep their contents whatever is written later", () => {
  fc.assert(
    fc.property(fc.array(op, { maxLength: 3000 }), (ops) => {
      const map = new SnapshotMap<number, number>();
      const model = new Map<number, number>();
      const snapshots: [ReadonlyMap<number, number>, Map<number, number>][] = [];
      for (const o of ops) {
        if (o.kind === "set") {
          map.set(o.key, o.value);
          model.set(o.key, o.value);
        } else if (o.kind === "delete") {
          assert.equal(map.delete(o.key), model.delete(o.key));
        } else {
          snapshots.push([map.share(), new Map(model)]);
        }
        assert.equal(map.size, model.size);
      }
      for (const [snapshot, expected] of snapshots) sameAs(snapshot, expected);
      sameAs(map.share(), model);
    }),
    { numRuns: 200 },
  );
});

Deno.test("SnapshotMap hands out the same snapshot until a write", () => {
  const map = new SnapshotMap<string, number>();
  map.set("a", 1);
  const first = map.share();
  assert.equal(map.share(), first);
  map.set("a", 2);
  assert.notEqual(map.share(), first);
  assert.equal(first.get("a"), 1);
});

Deno.test("SnapshotMap keeps many entries through folds", () => {
  const map = new SnapshotMap<number, number>();
  const model = new Map<number, number>();
  for (let i = 0; i < 5000; i++) map.set(i, i);
  for (let i = 0; i < 5000; i++) model.set(i, i);
  const before = map.share();
  const middle: [ReadonlyMap<number, number>, Map<number, number>][] = [];
  for (let round = 0; round < 3000; round++) {
    map.set(round % 5000 + (round % 3 === 0 ? 5000 : 0), -round);
    model.set(round % 5000 + (round % 3 === 0 ? 5000 : 0), -round);
    if (round % 7 === 0) {
      assert.equal(map.delete((round * 13) % 5000), model.delete((round * 13) % 5000));
    }
    const snapshot = map.share();
    if (round % 500 === 0) middle.push([snapshot, new Map(model)]);
  }
  sameAs(map.share(), model);
  for (const [snapshot, expected] of middle) sameAs(snapshot, expected);
  assert.equal(before.size, 5000);
  for (let i = 0; i < 5000; i++) assert.equal(before.get(i), i);
  assert.deepEqual([...before.keys()], Array.from({ length: 5000 }, (_, i) => i));
});
