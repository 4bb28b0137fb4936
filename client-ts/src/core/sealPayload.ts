/**
 * Shuffle mode's sealed payload (docs/device-protocol.md §16; Python: uldp.client.sealing): the
 * HPKE info binding a report to its task, the sealed plaintext, a sealed report's length, and the
 * byte helpers of `./seal.ts`. Only the sealing chunk (`./seal.ts`, loaded by a Device for a
 * sealed task) imports it, so a page that never seals carries none of it.
 */
// No import: this module is in the sealing chunk, which shares no module with the device's start
// (see ./hpke.ts), so its two byte helpers are its own (the same as ./random.ts's utf8 and
// ./encoding.ts's hexToBytes; test/seal.test.ts checks they agree).

/** UTF-8 bytes of a string (no TextEncoder: not every React Native engine has it). */
export function utf8(s: string): Uint8Array {
  const out: number[] = [];
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (c >= 0xd800 && c <= 0xdfff) throw new RangeError("lone surrogate in string");
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(out);
}

/** The bytes of a hex string (a task digest). */
export function hexToBytes(hex: string): Uint8Array {
  if (hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) throw new RangeError(`bad hex: ${hex}`);
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** The sealed plaintext: flags byte (bit 0 = simulated), then int64 little-endian values. */
export function sealPlaintext(values: readonly bigint[], simulated: boolean): Uint8Array {
  const out = new Uint8Array(1 + 8 * values.length);
  out[0] = simulated ? 1 : 0;
  const view = new DataView(out.buffer);
  values.forEach((x, i) => view.setBigInt64(1 + 8 * i, x, true));
  return out;
}

export const concat = (...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};
const u32 = (x: number): Uint8Array => {
  if (!Number.isInteger(x) || x < 0 || x > 0xffffffff) throw new RangeError(`not a u32: ${x}`);
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, x);
  return b;
};
export const u16 = (x: number): Uint8Array => u32(x).slice(2);

/** The HPKE info binding a sealed report to its (query, phase, group, stage, task). */
export function sealInfo(queryId: string, phase: number, group: number, stage: number, taskDigest: string): Uint8Array {
  const q = utf8(queryId);
  return concat(utf8("uldp-seal/1"), new Uint8Array([0]), u32(q.length), q, u32(phase), u32(group), u32(stage),
    hexToBytes(taskDigest));
}
