/**
 * Reads what an ELF executable or shared library needs from the dynamic
 * loader: its interpreter (`PT_INTERP`) and the sonames it links
 * (`DT_NEEDED`). The image builder follows these to copy exactly the
 * libraries its programs load. Pure: bytes in, names out.
 *
 * @module
 */

/** The dynamic-linking needs of one ELF file. */
export interface ElfNeeds {
  /** The program interpreter, e.g. `/lib64/ld-linux-x86-64.so.2`; undefined for libraries. */
  interpreter?: string;
  /** Sonames in `DT_NEEDED` order, e.g. `["libmnl.so.0", "libc.so.6"]`. */
  needed: string[];
}

const ELF_MAGIC = [0x7f, 0x45, 0x4c, 0x46];
const PT_INTERP = 3;
const SHT_DYNAMIC = 6;
const DT_NULL = 0n;
const DT_NEEDED = 1n;

/** True when `bytes` start with the ELF magic number. */
export function isElf(bytes: Uint8Array): boolean {
  return ELF_MAGIC.every((byte, i) => bytes[i] === byte);
}

function cString(bytes: Uint8Array, offset: number): string {
  let end = offset;
  while (end < bytes.length && bytes[end] !== 0) end++;
  return new TextDecoder().decode(bytes.subarray(offset, end));
}

/**
 * Reads the interpreter and `DT_NEEDED` entries of a 64-bit little-endian ELF
 * file (the only kind the image carries).
 *
 * @example Usage
 * ```ts ignore
 * const { needed } = readElfNeeds(await Deno.readFile("/usr/sbin/nft"));
 * ```
 * @throws {TypeError} when the bytes are not a 64-bit little-endian ELF file
 */
export function readElfNeeds(bytes: Uint8Array): ElfNeeds {
  if (!isElf(bytes) || bytes[4] !== 2 || bytes[5] !== 1) {
    throw new TypeError("Cannot read ELF: not a 64-bit little-endian ELF file");
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const u16 = (at: number) => view.getUint16(at, true);
  const u32 = (at: number) => view.getUint32(at, true);
  const u64 = (at: number) => Number(view.getBigUint64(at, true));

  let interpreter: string | undefined;
  const programHeaders = u64(0x20);
  for (let i = 0; i < u16(0x38); i++) {
    const header = programHeaders + i * u16(0x36);
    if (u32(header) === PT_INTERP) interpreter = cString(bytes, u64(header + 8));
  }

  const needed: string[] = [];
  const sections = u64(0x28);
  const sectionSize = u16(0x3a);
  for (let i = 0; i < u16(0x3c); i++) {
    const section = sections + i * sectionSize;
    if (u32(section + 4) !== SHT_DYNAMIC) continue;
    const strings = u64(sections + u32(section + 40) * sectionSize + 24);
    const start = u64(section + 24);
    const end = start + u64(section + 32);
    for (let entry = start; entry + 16 <= end; entry += 16) {
      const tag = view.getBigInt64(entry, true);
      if (tag === DT_NULL) break;
      if (tag === DT_NEEDED) needed.push(cString(bytes, strings + u64(entry + 8)));
    }
  }
  return { interpreter, needed };
}
