/**
 * SHA-256 (FIPS 180-4): task digests (§11), Kashin frame digests, seeded streams and key ids.
 *
 * A small, dependency-free implementation kept in the core so that a web page carries no
 * general hash library (the HKDF of shuffle mode's sealing, loaded only then, uses
 * @noble/hashes). It hashes public data only (the task text, a frame's parameters, a public
 * key) — or, in simulation mode, seeds. Checked against FIPS 180-4 / NIST examples and against
 * @noble/hashes on random inputs of every length around the block boundaries
 * (test/primitives.test.ts).
 */

/** The first 32 bits of the fractional parts of the cube roots (K, 64 words) and square roots
 * (H0, 8 words) of the first 64 primes (FIPS 180-4 §4.2.2, §5.3.3), computed rather than listed:
 * every one of these fractions lies at least 0.0055 · 2^-32 away from a multiple of 2^-32
 * (checked in exact integer arithmetic, test/primitives.test.ts), over 1000 ulps of any
 * double below 8, so Math.cbrt / Math.sqrt within a few ulps, in any engine, floor to the
 * same words; the NIST vectors of the same test check them. */
const PRIMES: number[] = [];
for (let n = 2; PRIMES.length < 64; n++) if (PRIMES.every((p) => n % p)) PRIMES.push(n);
const frac32 = (x: number): number => ((x - Math.floor(x)) * 2 ** 32) >>> 0;
export const K = Uint32Array.from(PRIMES, (p) => frac32(Math.cbrt(p)));
export const H0 = PRIMES.slice(0, 8).map((p) => frac32(Math.sqrt(p)));

const rotr = (x: number, n: number): number => (x >>> n) | (x << (32 - n));

/** The SHA-256 digest (32 bytes) of `data`. */
export function sha256(data: Uint8Array): Uint8Array {
  const n = data.length;
  const total = Math.ceil((n + 9) / 64) * 64; // message, 0x80, zeros, 64-bit big-endian bit length
  const m = new Uint8Array(total);
  m.set(data);
  m[n] = 0x80;
  const view = new DataView(m.buffer);
  view.setUint32(total - 8, Math.floor(n / 0x20000000)); // n·8 >> 32
  view.setUint32(total - 4, (n * 8) >>> 0);
  const h = H0.slice();
  const w = new Uint32Array(64);
  for (let at = 0; at < total; at += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(at + 4 * i);
    for (let i = 16; i < 64; i++) {
      const a = w[i - 15];
      const b = w[i - 2];
      w[i] = (rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3)) + (rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10)) + w[i - 7] + w[i - 16];
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] = (h[0] + a) | 0; h[1] = (h[1] + b) | 0; h[2] = (h[2] + c) | 0; h[3] = (h[3] + d) | 0;
    h[4] = (h[4] + e) | 0; h[5] = (h[5] + f) | 0; h[6] = (h[6] + g) | 0; h[7] = (h[7] + hh) | 0;
  }
  const out = new Uint8Array(32);
  const ov = new DataView(out.buffer);
  h.forEach((x, i) => ov.setUint32(4 * i, x >>> 0));
  return out;
}
