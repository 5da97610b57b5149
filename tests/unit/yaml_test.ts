import assert from "node:assert/strict";
import { MAX_ALIASES, parseYamlDocument } from "../../lib/core/yaml.ts";

Deno.test("parseYamlDocument() reads YAML 1.2's core schema, as kube-proxy's settings are written", async (t) => {
  const cases: [string, string, unknown][] = [
    ["a map", "kind: Config\nclusters: []\n", { kind: "Config", clusters: [] }],
    ["JSON text", '{"kind": "Config", "n": 1}', { kind: "Config", n: 1 }],
    ["yes and on stay strings", "a: yes\nb: on\nc: true\n", { a: "yes", b: "on", c: true }],
    ["a date stays a string", "expiry: 2026-12-05\n", { expiry: "2026-12-05" }],
    ["numbers and null", "n: 0x10\nf: 1.5\nz: ~\n", { n: 16, f: 1.5, z: null }],
    ["an empty text", "", null],
    ["only a comment", "# nothing\n", null],
  ];
  for (const [name, text, want] of cases) {
    await t.step(name, () => assert.deepEqual(parseYamlDocument(text), want));
  }
});

Deno.test("parseYamlDocument() refuses what a settings file cannot mean", async (t) => {
  const bomb = ["a: &a [x, x]"]
    .concat(
      Array.from(
        { length: 60 },
        (_, i) => `${"b" + i}: &b${i} [${i === 0 ? "*a, *a" : `*b${i - 1}, *b${i - 1}`}]`,
      ),
    )
    .join("\n");
  const cases: [string, string, RegExp][] = [
    ["a duplicate key", "mode: nftables\nmode: iptables\n", /duplicate/],
    ["a syntax error, with its line", "mode: ok\nx: [\n", /line 3/],
    ["two documents", "a: 1\n---\nb: 2\n", /expected a single document, found 2/],
    ["no text of the file in the error", "token: secret\nx: [\n", /^(?!.*secret)/s],
    [`more than ${MAX_ALIASES} aliases`, bomb, /alias/i],
  ];
  for (const [name, text, pattern] of cases) {
    await t.step(name, () => assert.throws(() => parseYamlDocument(text), pattern));
  }
});
