/**
 * SHA-1 (FIPS 180-4) of a string's UTF-8 bytes, in plain JavaScript. Pure.
 * The Windows mode derives the ids of the HNS objects it creates from a
 * SHA-1 of what they hold (ids that earlier versions made with
 * `node:crypto`, so the digest must stay SHA-1); this keeps that module, and
 * Deno's Node compatibility layer, off every node's start-up.
 *
 * @module
 */

const encoder = new TextEncoder();

function rotate(word: number, bits: number): number {
  return (word << bits) | (word >>> (32 - bits));
}

/**
 * The SHA-1 digest of `text` (UTF-8), as lowercase hex.
 *
 * @example Usage
 * ```ts
 * import { sha1Hex } from "./sha1.ts";
 * sha1Hex("abc"); // "a9993e364706816aba3e25717850c26c9cd0d89d"
 * ```
 */
export function sha1Hex(text: string): string {
  const bytes = encoder.encode(text);
  const size = Math.ceil((bytes.length + 9) / 64) * 64;
  const padded = new Uint8Array(size);
  padded.set(bytes);
  padded[bytes.length] = 0x80;
  const view = new DataView(padded.buffer);
  const bits = bytes.length * 8;
  view.setUint32(size - 8, Math.floor(bits / 0x100000000));
  view.setUint32(size - 4, bits >>> 0);
  const words = new Int32Array(80);
  let h0 = 0x67452301, h1 = 0xefcdab89, h2 = 0x98badcfe, h3 = 0x10325476, h4 = 0xc3d2e1f0;
  for (let block = 0; block < size; block += 64) {
    for (let i = 0; i < 16; i++) words[i] = view.getInt32(block + i * 4);
    for (let i = 16; i < 80; i++) {
      words[i] = rotate(words[i - 3]! ^ words[i - 8]! ^ words[i - 14]! ^ words[i - 16]!, 1);
    }
    let a = h0, b = h1, c = h2, d = h3, e = h4;
    for (let i = 0; i < 80; i++) {
      let mix: number;
      let constant: number;
      if (i < 20) {
        mix = (b & c) | (~b & d);
        constant = 0x5a827999;
      } else if (i < 40) {
        mix = b ^ c ^ d;
        constant = 0x6ed9eba1;
      } else if (i < 60) {
        mix = (b & c) | (b & d) | (c & d);
        constant = 0x8f1bbcdc;
      } else {
        mix = b ^ c ^ d;
        constant = 0xca62c1d6;
      }
      const next = (rotate(a, 5) + mix + e + constant + words[i]!) | 0;
      e = d;
      d = c;
      c = rotate(b, 30);
      b = a;
      a = next;
    }
    h0 = (h0 + a) | 0;
    h1 = (h1 + b) | 0;
    h2 = (h2 + c) | 0;
    h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0;
  }
  return [h0, h1, h2, h3, h4].map((word) => (word >>> 0).toString(16).padStart(8, "0")).join("");
}
