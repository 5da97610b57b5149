import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { sha256 } from "../../lib/core/sha256.ts";

const hex = (bytes: Uint8Array) => [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");

Deno.test("sha256() matches FIPS 180-4's examples", () => {
  const cases: [string, string][] = [
    ["", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
    ["abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"],
    [
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
    ],
  ];
  for (const [text, digest] of cases) assert.equal(hex(sha256(text)), digest, text);
});

Deno.test("sha256() agrees with node:crypto at every length around the block edges, and on UTF-8", () => {
  for (let length = 0; length < 200; length++) {
    const text = "kube-system/dns:dns-tcp/TCP".repeat(8).slice(0, length);
    assert.equal(hex(sha256(text)), createHash("sha256").update(text).digest("hex"), `${length}`);
  }
  const utf8 = "名前空間/サービス:ポート";
  assert.equal(hex(sha256(utf8)), createHash("sha256").update(utf8).digest("hex"));
});
