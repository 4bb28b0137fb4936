/**
 * Shuffle mode's sealed payload (docs/device-protocol.md §16; Python: uldp.client.sealing): the
 * HPKE info binding a report to its task, the sealed plaintext, a sealed report's length, and the
 * byte helpers of `./seal.ts`. Only the sealing chunk (`./seal.ts`, loaded by a Device for a
 * sealed task) imports it, so a page that never seals carries none of it.
 */
import { hexToBytes } from "./encoding.js";
import { utf8 } from "./random.js";
import { ENC_BYTES, TAG_BYTES } from "./sealFormat.js";

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

/** Bytes of a sealed report of `reportLength` values. */
export const sealedLength = (reportLength: number): number => ENC_BYTES + 1 + 8 * reportLength + TAG_BYTES;
