/**
 * The ChaCha20 stream cipher of RFC 8439 §2.3–2.4 (32-byte key, 96-bit nonce, 32-bit block
 * counter): the keystream every coin of the device is drawn from (docs/device-protocol.md §2).
 *
 * A small, dependency-free implementation kept in the core so that a web page carries no
 * general cipher library (the sealing of shuffle mode, loaded only then, uses @noble/ciphers'
 * ChaCha20-Poly1305). It is checked against RFC 8439's test vectors and against @noble/ciphers
 * on random keys, nonces, counters and lengths (test/primitives.test.ts), and every conformance
 * vector checks its keystream against the Python SDK's (`cryptography`).
 */

const SIGMA = [0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]; // "expand 32-byte k"

/** One block: the 16 output words of ChaCha20(state) (a Uint32Array wraps the sums mod 2^32). */
function block(s: Uint32Array, out: Uint32Array): void {
  let x0 = s[0], x1 = s[1], x2 = s[2], x3 = s[3], x4 = s[4], x5 = s[5], x6 = s[6], x7 = s[7];
  let x8 = s[8], x9 = s[9], x10 = s[10], x11 = s[11], x12 = s[12], x13 = s[13], x14 = s[14], x15 = s[15];
  for (let i = 0; i < 10; i++) {
    // column rounds
    x0 = (x0 + x4) | 0; x12 ^= x0; x12 = (x12 << 16) | (x12 >>> 16);
    x8 = (x8 + x12) | 0; x4 ^= x8; x4 = (x4 << 12) | (x4 >>> 20);
    x0 = (x0 + x4) | 0; x12 ^= x0; x12 = (x12 << 8) | (x12 >>> 24);
    x8 = (x8 + x12) | 0; x4 ^= x8; x4 = (x4 << 7) | (x4 >>> 25);
    x1 = (x1 + x5) | 0; x13 ^= x1; x13 = (x13 << 16) | (x13 >>> 16);
    x9 = (x9 + x13) | 0; x5 ^= x9; x5 = (x5 << 12) | (x5 >>> 20);
    x1 = (x1 + x5) | 0; x13 ^= x1; x13 = (x13 << 8) | (x13 >>> 24);
    x9 = (x9 + x13) | 0; x5 ^= x9; x5 = (x5 << 7) | (x5 >>> 25);
    x2 = (x2 + x6) | 0; x14 ^= x2; x14 = (x14 << 16) | (x14 >>> 16);
    x10 = (x10 + x14) | 0; x6 ^= x10; x6 = (x6 << 12) | (x6 >>> 20);
    x2 = (x2 + x6) | 0; x14 ^= x2; x14 = (x14 << 8) | (x14 >>> 24);
    x10 = (x10 + x14) | 0; x6 ^= x10; x6 = (x6 << 7) | (x6 >>> 25);
    x3 = (x3 + x7) | 0; x15 ^= x3; x15 = (x15 << 16) | (x15 >>> 16);
    x11 = (x11 + x15) | 0; x7 ^= x11; x7 = (x7 << 12) | (x7 >>> 20);
    x3 = (x3 + x7) | 0; x15 ^= x3; x15 = (x15 << 8) | (x15 >>> 24);
    x11 = (x11 + x15) | 0; x7 ^= x11; x7 = (x7 << 7) | (x7 >>> 25);
    // diagonal rounds
    x0 = (x0 + x5) | 0; x15 ^= x0; x15 = (x15 << 16) | (x15 >>> 16);
    x10 = (x10 + x15) | 0; x5 ^= x10; x5 = (x5 << 12) | (x5 >>> 20);
    x0 = (x0 + x5) | 0; x15 ^= x0; x15 = (x15 << 8) | (x15 >>> 24);
    x10 = (x10 + x15) | 0; x5 ^= x10; x5 = (x5 << 7) | (x5 >>> 25);
    x1 = (x1 + x6) | 0; x12 ^= x1; x12 = (x12 << 16) | (x12 >>> 16);
    x11 = (x11 + x12) | 0; x6 ^= x11; x6 = (x6 << 12) | (x6 >>> 20);
    x1 = (x1 + x6) | 0; x12 ^= x1; x12 = (x12 << 8) | (x12 >>> 24);
    x11 = (x11 + x12) | 0; x6 ^= x11; x6 = (x6 << 7) | (x6 >>> 25);
    x2 = (x2 + x7) | 0; x13 ^= x2; x13 = (x13 << 16) | (x13 >>> 16);
    x8 = (x8 + x13) | 0; x7 ^= x8; x7 = (x7 << 12) | (x7 >>> 20);
    x2 = (x2 + x7) | 0; x13 ^= x2; x13 = (x13 << 8) | (x13 >>> 24);
    x8 = (x8 + x13) | 0; x7 ^= x8; x7 = (x7 << 7) | (x7 >>> 25);
    x3 = (x3 + x4) | 0; x14 ^= x3; x14 = (x14 << 16) | (x14 >>> 16);
    x9 = (x9 + x14) | 0; x4 ^= x9; x4 = (x4 << 12) | (x4 >>> 20);
    x3 = (x3 + x4) | 0; x14 ^= x3; x14 = (x14 << 8) | (x14 >>> 24);
    x9 = (x9 + x14) | 0; x4 ^= x9; x4 = (x4 << 7) | (x4 >>> 25);
  }
  out[0] = x0 + s[0]; out[1] = x1 + s[1]; out[2] = x2 + s[2]; out[3] = x3 + s[3];
  out[4] = x4 + s[4]; out[5] = x5 + s[5]; out[6] = x6 + s[6]; out[7] = x7 + s[7];
  out[8] = x8 + s[8]; out[9] = x9 + s[9]; out[10] = x10 + s[10]; out[11] = x11 + s[11];
  out[12] = x12 + s[12]; out[13] = x13 + s[13]; out[14] = x14 + s[14]; out[15] = x15 + s[15];
}

const word = (b: Uint8Array, i: number): number => b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24);

/**
 * `output` = `data` XOR the ChaCha20 keystream of (`key`, `nonce`) from block `counter` on
 * (RFC 8439 §2.4; the signature of @noble/ciphers' `chacha20`). The keystream must not run past
 * block 2^32 − 1.
 */
export function chacha20(key: Uint8Array, nonce: Uint8Array, data: Uint8Array,
  output: Uint8Array<ArrayBuffer> = new Uint8Array(data.length), counter = 0): Uint8Array<ArrayBuffer> {
  if (key.length !== 32) throw new RangeError("ChaCha20 key must be 32 bytes");
  if (nonce.length !== 12) throw new RangeError("ChaCha20 nonce must be 12 bytes");
  if (output.length < data.length) throw new RangeError("ChaCha20 output is shorter than the data");
  const blocks = Math.ceil(data.length / 64);
  if (!Number.isSafeInteger(counter) || counter < 0 || counter + blocks > 0x1_0000_0000) {
    throw new RangeError("ChaCha20 block counter out of range (2^32 blocks)");
  }
  const s = new Uint32Array(16);
  s.set(SIGMA);
  for (let i = 0; i < 8; i++) s[4 + i] = word(key, 4 * i);
  for (let i = 0; i < 3; i++) s[13 + i] = word(nonce, 4 * i);
  const words = new Uint32Array(16);
  const ks = new Uint8Array(64);
  for (let b = 0; b < blocks; b++) {
    s[12] = counter + b;
    block(s, words);
    for (let i = 0; i < 16; i++) { // serialized little-endian, whatever the platform's byte order
      const w = words[i];
      ks[4 * i] = w;
      ks[4 * i + 1] = w >>> 8;
      ks[4 * i + 2] = w >>> 16;
      ks[4 * i + 3] = w >>> 24;
    }
    const at = 64 * b;
    const n = Math.min(64, data.length - at);
    for (let i = 0; i < n; i++) output[at + i] = data[at + i] ^ ks[i];
  }
  return output;
}
