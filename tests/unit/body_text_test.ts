import assert from "node:assert/strict";
import { BodyReader } from "../../lib/shell/source/body_text.ts";

/** A response whose body arrives in the given pieces. */
function responseOf(pieces: Uint8Array[]): Response {
  return new Response(
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const piece of pieces) controller.enqueue(piece);
        controller.close();
      },
    }),
  );
}

const encoder = new TextEncoder();

Deno.test("BodyReader.text() decodes a character split across two pieces", async () => {
  const bytes = encoder.encode('{"name":"café ✓"}');
  const cut = bytes.indexOf(0xc3) + 1;
  const text = await new BodyReader().text(
    responseOf([bytes.subarray(0, cut), bytes.subarray(cut)]),
  );
  assert.equal(text, '{"name":"café ✓"}');
});

Deno.test("BodyReader.text() reads bodies larger than its buffer, and reuses it", async () => {
  const reader = new BodyReader(8);
  const first = "x".repeat(100) + "é";
  const second = "short";
  const a = await reader.text(
    responseOf([encoder.encode(first.slice(0, 30)), encoder.encode(first.slice(30))]),
  );
  const b = await reader.text(responseOf([encoder.encode(second)]));
  assert.equal(a, first);
  assert.equal(b, second);
});

Deno.test("BodyReader.text() of a response without a body is empty", async () => {
  assert.equal(await new BodyReader().text(new Response(null, { status: 204 })), "");
  assert.equal(await new BodyReader().text(responseOf([])), "");
});

Deno.test("BodyReader.text() fails when the body fails, and stays usable", async () => {
  const reader = new BodyReader();
  const broken = new Response(
    new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode("part"));
        controller.error(new Error("connection reset"));
      },
    }),
  );
  await assert.rejects(reader.text(broken), /connection reset/);
  assert.equal(await reader.text(responseOf([encoder.encode("next")])), "next");
});
