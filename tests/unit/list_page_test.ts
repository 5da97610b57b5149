import assert from "node:assert/strict";
import fc from "fast-check";
import { splitListPage } from "../../lib/core/parse/list_page.ts";

/** What `JSON.parse` makes of a list, in the shape splitListPage gives. */
function wholeParse(text: string): { envelope: unknown; items: unknown[] } {
  const list = JSON.parse(text);
  return { envelope: { ...list, items: [] }, items: list.items ?? [] };
}

function split(text: string): { envelope: unknown; items: unknown[] } {
  const page = splitListPage(text);
  return { envelope: page.envelope, items: page.items.map((item) => JSON.parse(item)) };
}

Deno.test("splitListPage gives each item's text and the list without its items", () => {
  const text = JSON.stringify({
    kind: "ServiceList",
    apiVersion: "v1",
    metadata: { resourceVersion: "42", continue: "abc" },
    items: [
      { metadata: { name: "a", annotations: { x: 'say "}]" \\' } } },
      { metadata: { name: "b" }, spec: { ports: [{ port: 80 }, { port: 443 }] } },
    ],
  });
  const page = splitListPage(text);
  assert.deepEqual(page.envelope, {
    kind: "ServiceList",
    apiVersion: "v1",
    metadata: { resourceVersion: "42", continue: "abc" },
    items: [],
  });
  assert.equal(page.items.length, 2);
  assert.deepEqual(split(text), wholeParse(text));
});

Deno.test("splitListPage handles whitespace, empty and missing items, and the items key anywhere", () => {
  for (
    const text of [
      ' { "items" : [ ] , "metadata" : { "resourceVersion" : "1" } } ',
      '{"metadata":{"resourceVersion":"1"}}',
      '{"items":[{"a":1} ,\n {"b":[1,2,{"c":"]"}]}],"kind":"List"}',
      '{"kind":"List","n":12.5e3,"t":true,"z":null,"items":[{"a":"\\\\"}]}',
    ]
  ) {
    assert.deepEqual(split(text), wholeParse(text), text);
  }
});

Deno.test("splitListPage leaves odd lists to JSON.parse, with its result and errors", () => {
  // A repeated key (JSON.parse keeps the last), an escaped key, items that are not objects.
  for (
    const text of [
      '{"items":[{"a":1}],"items":[{"b":2}]}',
      '{"ite\\u006ds":[{"a":1}]}',
      '{"items":[1,"x",{"a":1}]}',
    ]
  ) {
    assert.deepEqual(split(text), wholeParse(text), text);
  }
  for (const text of ['{"items":[{"a":1}', '{"items":[{"a":"\\"}]}', "", "[]x"]) {
    assert.throws(() => splitListPage(text), SyntaxError, text);
  }
});

Deno.test("splitListPage agrees with JSON.parse on random lists", () => {
  fc.assert(
    fc.property(
      fc.dictionary(fc.string(), fc.jsonValue()),
      fc.array(fc.dictionary(fc.string(), fc.jsonValue())),
      (envelope, items) => {
        const text = JSON.stringify({ ...envelope, items }, null, items.length % 2 ? 1 : 0);
        assert.deepEqual(split(text), wholeParse(text));
      },
    ),
    { numRuns: 300 },
  );
});
