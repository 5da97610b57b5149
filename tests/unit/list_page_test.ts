import assert from "node:assert/strict";
import fc from "fast-check";
import { splitListPage, withoutManagedFields } from "../../lib/core/parse/list_page.ts";

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

/** What kproxy reads of an item: everything but metadata.managedFields. */
function withoutManagedFieldsParsed(text: string): unknown {
  const item = JSON.parse(text);
  if (item?.metadata && typeof item.metadata === "object") delete item.metadata.managedFields;
  return item;
}

Deno.test("withoutManagedFields cuts metadata.managedFields out of an item's text", () => {
  const managedFields = [{
    manager: "kube-controller-manager",
    operation: "Update",
    fieldsType: "FieldsV1",
    fieldsV1: { "f:metadata": { "f:labels": { ".": {}, "f:x": {} } }, "f:endpoints": {} },
  }];
  for (
    const item of [
      { metadata: { name: "a", managedFields }, spec: { ports: [{ port: 80 }] } },
      { metadata: { managedFields, name: "a", labels: { x: "y" } }, spec: {} },
      { metadata: { managedFields } },
      { spec: { x: 1 }, metadata: { name: "a", annotations: { n: 'ends "in]' }, managedFields } },
    ]
  ) {
    for (const text of [JSON.stringify(item), JSON.stringify(item, null, 2)]) {
      const cut = withoutManagedFields(text);
      assert.ok(!cut.includes("managedFields"), cut);
      assert.deepEqual(JSON.parse(cut), withoutManagedFieldsParsed(text));
    }
  }
});

Deno.test("withoutManagedFields leaves text alone where the key is not plainly there", () => {
  for (
    const text of [
      '{"metadata":{"name":"a"}}',
      // A key that only ends in managedFields, and an annotation that holds the word.
      '{"metadata":{"abc\\"managedFields":[1],"name":"a"}}',
      '{"metadata":{"annotations":{"x":"\\"managedFields\\":[]"}}}',
      // Not JSON after the key: JSON.parse reports it.
      '{"metadata":{"managedFields":[{"a":1}',
      '{"metadata":{"managedFields":null}}',
    ]
  ) {
    assert.equal(withoutManagedFields(text), text);
  }
});

Deno.test("withoutManagedFields keeps any JSON object what JSON.parse makes of it, but for the cut field", () => {
  fc.assert(
    fc.property(
      fc.dictionary(fc.string(), fc.jsonValue()),
      fc.dictionary(fc.string(), fc.jsonValue()),
      fc.array(fc.jsonValue(), { maxLength: 3 }),
      fc.nat(),
      (rest, metadata, managedFields, at) => {
        const keys = Object.keys(metadata);
        const entries = Object.entries(metadata);
        entries.splice(at % (keys.length + 1), 0, ["managedFields", managedFields]);
        const text = JSON.stringify({ ...rest, metadata: Object.fromEntries(entries) });
        assert.deepEqual(JSON.parse(withoutManagedFields(text)), withoutManagedFieldsParsed(text));
      },
    ),
  );
});
