import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { sha1Hex } from "../../lib/core/sha1.ts";

Deno.test("sha1Hex() matches FIPS 180-4's examples", () => {
  const cases: [string, string][] = [
    ["", "da39a3ee5e6b4b0d3255bfef95601890afd80709"],
    ["abc", "a9993e364706816aba3e25717850c26c9cd0d89d"],
    [
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "84983e441c3bd26ebaae4aa1f95129e5e54670f1",
    ],
  ];
  for (const [text, digest] of cases) assert.equal(sha1Hex(text), digest, text);
});

Deno.test("sha1Hex() agrees with node:crypto at every length around the block edges, and on UTF-8", () => {
  for (let length = 0; length < 200; length++) {
    const text = "remote-endpoint/10.244.1.7|10.0.0.2".repeat(8).slice(0, length);
    assert.equal(sha1Hex(text), createHash("sha1").update(text).digest("hex"), `${length}`);
  }
  const utf8 = "負荷分散/サービス:ポート";
  assert.equal(sha1Hex(utf8), createHash("sha1").update(utf8).digest("hex"));
});
