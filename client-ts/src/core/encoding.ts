/** Hex helpers shared by the conformance vectors and the ledger (no Node dependency). */

export function hexToBytes(hex: string): Uint8Array {
  if (hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) throw new RangeError(`bad hex: ${hex}`);
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function bytesToHex(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += x.toString(16).padStart(2, "0");
  return s;
}

/** A double from its IEEE-754 bit pattern as 16 hex digits (big-endian). */
export function f64FromHex(hex: string): number {
  if (!/^[0-9a-f]{16}$/.test(hex)) throw new RangeError(`bad f64 hex: ${hex}`);
  const view = new DataView(new ArrayBuffer(8));
  view.setBigUint64(0, BigInt("0x" + hex));
  return view.getFloat64(0);
}

/** The IEEE-754 bit pattern of a double as 16 lowercase hex digits (big-endian). */
export function f64ToHex(x: number): string {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  return view.getBigUint64(0).toString(16).padStart(16, "0");
}
