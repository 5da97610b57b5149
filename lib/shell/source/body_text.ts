/**
 * Reads response bodies (list pages) as text through one byte buffer that
 * grows to the largest body and is reused for the next: each received chunk
 * is copied and is garbage at once, and a page is decoded in one call. Decoding
 * chunk by chunk (`TextDecoderStream`) instead kept every decoded piece of a
 * page alive until the page was joined, so the pieces of each page were
 * copied by the young generation's collections and promoted.
 *
 * @module
 */

/** Buffer size a reader starts with. */
const INITIAL_BYTES = 64 * 1024;

/**
 * Reads bodies one at a time (one reader per sequence of requests, such as
 * the pages of one list; not shared by concurrent reads).
 *
 * @example Usage
 * ```ts ignore
 * const reader = new BodyReader();
 * const text = await reader.text(response);
 * ```
 */
export class BodyReader {
  #buffer: Uint8Array;
  readonly #decoder = new TextDecoder();

  /** @param initialBytes the buffer's size before the first body. */
  constructor(initialBytes: number = INITIAL_BYTES) {
    this.#buffer = new Uint8Array(Math.max(1, initialBytes));
  }

  /**
   * The body as UTF-8 text ("" without a body).
   *
   * @throws what reading the body threw.
   */
  async text(response: Response): Promise<string> {
    if (!response.body) return "";
    const reader = response.body.getReader();
    let length = 0;
    try {
      while (true) {
        const { done, value } = await reader.read();
        if (done) break;
        this.#reserve(length, length + value.length);
        this.#buffer.set(value, length);
        length += value.length;
      }
    } finally {
      reader.releaseLock();
    }
    return this.#decoder.decode(this.#buffer.subarray(0, length));
  }

  /** Grows the buffer to hold `needed` bytes, keeping its first `used`. */
  #reserve(used: number, needed: number): void {
    if (needed <= this.#buffer.length) return;
    const grown = new Uint8Array(Math.max(needed, this.#buffer.length * 2));
    grown.set(this.#buffer.subarray(0, used));
    this.#buffer = grown;
  }
}
