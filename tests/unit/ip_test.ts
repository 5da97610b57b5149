import assert from "node:assert/strict";
import fc from "fast-check";
import {
  cidrContains,
  collapseCIDRs,
  formatIP,
  parseCIDR,
  parseIP,
  specialAddress,
} from "../../lib/core/ip.ts";

/** IPv6 addresses with many zero groups (compression cases), IPv4-mapped ones excluded. */
const v6Bytes = fc.array(
  fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 0xffff })),
  {
    minLength: 8,
    maxLength: 8,
  },
).map((groups) => {
  const bytes = new Uint8Array(16);
  groups.forEach((g, i) => {
    bytes[2 * i] = g >> 8;
    bytes[2 * i + 1] = g & 0xff;
  });
  return bytes;
}).filter((b) => !(b.slice(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff));

Deno.test("formatIP() writes IPv6 as WHATWG URL hosts do (RFC 5952) and parseIP() reads it back", () => {
  fc.assert(
    fc.property(v6Bytes, (bytes) => {
      const text = formatIP(bytes);
      assert.equal(`[${text}]`, new URL(`http://[${text}]/`).hostname);
      assert.deepEqual(parseIP(text)?.bytes, bytes);
      assert.equal(parseIP(text.toUpperCase())?.address, text);
    }),
    { numRuns: 2000 },
  );
});

Deno.test("parseIP() round-trips every IPv4 address", () => {
  fc.assert(
    fc.property(fc.uint8Array({ minLength: 4, maxLength: 4 }), (bytes) => {
      const text = Array.from(bytes).join(".");
      assert.equal(parseIP(text)?.address, text);
      assert.equal(new URL(`http://${text}/`).hostname, text);
    }),
  );
});

Deno.test("parseCIDR() network contains exactly the addresses sharing its prefix", () => {
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 4, maxLength: 4 }),
      fc.uint8Array({ minLength: 4, maxLength: 4 }),
      fc.integer({ min: 0, max: 32 }),
      (a, b, prefix) => {
        const cidr = parseCIDR(`${Array.from(a).join(".")}/${prefix}`);
        assert.ok(cidr);
        const toInt = (x: Uint8Array) =>
          ((x[0]! << 24) | (x[1]! << 16) | (x[2]! << 8) | x[3]!) >>> 0;
        const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
        const same = ((toInt(a) & mask) >>> 0) === ((toInt(b) & mask) >>> 0);
        assert.equal(cidrContains(cidr, Array.from(b).join(".")), same);
      },
    ),
  );
});

Deno.test("collapseCIDRs() drops duplicates and ranges inside another", () => {
  const cases: [string[], string[]][] = [
    [["10.1.0.0/16", "10.0.0.0/8"], ["10.0.0.0/8"]],
    [["10.0.0.0/8", "10.0.0.0/8"], ["10.0.0.0/8"]],
    [["fd00:96::/108", "fd00:96::/112"], ["fd00:96::/108"]],
    [["10.0.0.0/24", "10.0.1.0/24"], ["10.0.0.0/24", "10.0.1.0/24"]],
    [["0.0.0.0/0", "::/0", "192.0.2.0/24"], ["0.0.0.0/0", "::/0"]],
    [[], []],
  ];
  for (const [input, expected] of cases) {
    assert.deepEqual(collapseCIDRs(input), expected, input.join(","));
  }
});

Deno.test("specialAddress() names what the apiserver's ValidateNonSpecialIP refuses, plus all multicast and broadcast", async (t) => {
  const cases: [string, ReturnType<typeof specialAddress>][] = [
    // upstream's categories
    ["0.0.0.0", "unspecified"],
    ["::", "unspecified"],
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["::1", "loopback"],
    ["169.254.169.254", "link-local"],
    ["169.254.0.1", "link-local"],
    ["fe80::1", "link-local"],
    ["febf:ffff::1", "link-local"],
    ["224.0.0.251", "multicast"],
    ["ff02::1", "multicast"],
    // stricter than upstream: every multicast group and the limited broadcast
    ["239.255.255.250", "multicast"],
    ["ff05::1:3", "multicast"],
    ["255.255.255.255", "broadcast"],
    // ordinary addresses
    ["10.0.0.1", undefined],
    ["0.0.0.1", undefined],
    ["126.255.255.255", undefined],
    ["128.0.0.1", undefined],
    ["169.253.255.255", undefined],
    ["169.255.0.1", undefined],
    ["223.255.255.255", undefined],
    ["240.0.0.1", undefined],
    ["255.255.255.254", undefined],
    ["::2", undefined],
    ["fec0::1", undefined],
    ["fe7f::1", undefined],
    ["fd00::1", undefined],
    ["2001:db8::1", undefined],
    ["not an address", undefined],
  ];
  for (const [ip, expected] of cases) {
    await t.step(ip, () => assert.equal(specialAddress(ip), expected));
  }
});
