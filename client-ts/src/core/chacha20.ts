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

/** One block: the 16 output words of ChaCha20(state) — 10 double rounds, each 4 column then
 * 4 diagonal quarter rounds (RFC 8439 §2.1–2.3; a Uint32Array wraps the sums mod 2^32). */
function block(s: Uint32Array, out: Uint32Array): void {
  const x = s.slice();
  const rot = (v: number, n: number): number => (v << n) | (v >>> (32 - n));
  for (let r = 0; r < 80; r++) {
    const i = r & 3;
    const k = (r >> 2) & 1; // 0: column round, 1: diagonal round
    const a = i, b = 4 + ((i + k) & 3), c = 8 + ((i + 2 * k) & 3), d = 12 + ((i + 3 * k) & 3);
    x[a] += x[b]; x[d] = rot(x[d] ^ x[a], 16);
    x[c] += x[d]; x[b] = rot(x[b] ^ x[c], 12);
    x[a] += x[b]; x[d] = rot(x[d] ^ x[a], 8);
    x[c] += x[d]; x[b] = rot(x[b] ^ x[c], 7);
  }
  for (let i = 0; i < 16; i++) out[i] = x[i] + s[i];
}

const word = (b: Uint8Array, i: number): number => b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24);

/**
 * `output` = `data` XOR the ChaCha20 keystream of (`key`, `nonce`) from block `counter` on
 * (RFC 8439 §2.4; the signature of @noble/ciphers' `chacha20`). The keystream must not run past
 * block 2^32 − 1.
 */
export function chacha20(key: Uint8Array, nonce: Uint8Array, data: Uint8Array,
  output: Uint8Array<ArrayBuffer> = new Uint8Array(data.length), counter = 0): Uint8Array<ArrayBuffer> {
  const blocks = Math.ceil(data.length / 64);
  if (key.length !== 32 || nonce.length !== 12 || output.length < data.length || !Number.isSafeInteger(counter)
    || counter < 0 || counter + blocks > 0x1_0000_0000) {
    throw new RangeError("ChaCha20: a 32-byte key, 12-byte nonce, output as long as the data, block counter < 2^32");
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
