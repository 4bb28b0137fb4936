/**
 * The one source of randomness for privacy noise (docs/device-protocol.md §2).
 *
 * A ChaCha20 keystream (RFC 8439: 32-byte key, 96-bit nonce of zeros, 32-bit block counter
 * starting at 0) read as a byte stream; 64-bit words are 8 consecutive bytes read
 * little-endian. On top of the words: exact uniform integers below n (rejection), exact
 * Bernoulli(num/den), and Bernoulli(p) for a float p rounded down to 53 bits.
 *
 * Modes:
 *  - `RandomSource.secure()`: key from the platform CSPRNG (`crypto.getRandomValues`), the
 *    only mode of a production device (`simulation === false`);
 *  - `RandomSource.keyed(key)` / `seededSource(seed)`: a reproducible stream for
 *    conformance vectors, tests and simulations only (`simulation === true`; reports made
 *    with it are marked `simulated` on the wire).
 *
 * No Node-only API is used here: the module runs in browsers and React Native.
 */
import { chacha20 } from "./chacha20.js";
import { sha256 } from "./sha256.js";
import { hexToBytes } from "./encoding.js";

const CHUNK_BYTES = 4096; // keystream generated 64 blocks at a time
const BLOCKS_PER_CHUNK = CHUNK_BYTES / 64;
const ZERO_NONCE = new Uint8Array(12);
const ZEROS = new Uint8Array(CHUNK_BYTES);
const TWO64 = 1n << 64n;
const TWO63 = 1n << 63n;

/** A minimal view of the Web Crypto object (present in browsers, Node >= 19, RN polyfills). */
interface CryptoLike {
  getRandomValues<T extends Uint8Array>(array: T): T;
}

/** The raw ChaCha20 keystream of one key, consumed front to back. */
export class ChaCha20Stream {
  readonly #key: Uint8Array;
  #block = 0; // next block counter to generate
  #buf = new Uint8Array(0);
  #pos = 0;

  constructor(key: Uint8Array) {
    if (!(key instanceof Uint8Array) || key.length !== 32) {
      throw new RangeError("key must be 32 bytes");
    }
    this.#key = key.slice();
  }

  /** The next `n` keystream bytes. */
  bytes(n: number): Uint8Array {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`bad byte count ${n}`);
    const out = new Uint8Array(n);
    let filled = 0;
    while (filled < n) {
      if (this.#pos === this.#buf.length) this.#refill();
      const take = Math.min(n - filled, this.#buf.length - this.#pos);
      out.set(this.#buf.subarray(this.#pos, this.#pos + take), filled);
      this.#pos += take;
      filled += take;
    }
    return out;
  }

  #refill(): void { // chacha20 refuses a block counter past 2^32 - 1: the stream never wraps
    this.#buf = chacha20(this.#key, ZERO_NONCE, ZEROS, new Uint8Array(CHUNK_BYTES), this.#block);
    this.#block += BLOCKS_PER_CHUNK;
    this.#pos = 0;
  }
}

/** The 64 bytes of ChaCha20 block `counter` of `key` (nonce of zeros): a public function of
 * the key, e.g. the OLH hash family (docs/device-protocol.md §17.6). */
export function chachaBlock(key: Uint8Array, counter: number): Uint8Array {
  return chacha20(key, ZERO_NONCE, new Uint8Array(64), new Uint8Array(64), counter);
}

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

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** Big-endian bytes of a non-negative integer, `floor(bitLength/8) + 1` bytes long
 * (Python: `seed.to_bytes((seed.bit_length() + 8) // 8, "big")`). */
function seedIntBytes(seed: bigint): Uint8Array {
  const bitLength = seed === 0n ? 0 : seed.toString(2).length;
  return hexToBytes(seed.toString(16).padStart(2 * Math.floor((bitLength + 8) / 8), "0"));
}

/** `p` as the integer floor(p * 2^53) (exact: scaling by a power of two is exact). */
function floatThreshold(p: number): bigint {
  return BigInt(Math.floor(p * 9007199254740992));
}

export class RandomSource {
  readonly simulation: boolean;
  readonly #stream: ChaCha20Stream;

  private constructor(key: Uint8Array, simulation: boolean) {
    this.#stream = new ChaCha20Stream(key);
    this.simulation = simulation;
  }

  /** Production: a fresh key from the platform CSPRNG. */
  static secure(crypto?: CryptoLike): RandomSource {
    const c = crypto ?? (globalThis as { crypto?: CryptoLike }).crypto;
    if (!c || typeof c.getRandomValues !== "function") {
      throw new Error("no crypto.getRandomValues on this platform: cannot make secure noise");
    }
    const key = c.getRandomValues(new Uint8Array(32));
    return new RandomSource(key, false);
  }

  /** A reproducible stream from an explicit 32-byte key (vectors, tests, simulation). */
  static keyed(key: Uint8Array): RandomSource {
    return new RandomSource(key, true);
  }

  /** An independent child (same mode): key = SHA-256(utf8(label) || next 32 stream bytes). */
  spawn(label: string): RandomSource {
    return new RandomSource(sha256(concat(utf8(label), this.bytes(32))), this.simulation);
  }

  bytes(n: number): Uint8Array {
    return this.#stream.bytes(n);
  }

  /** `n` uniform 64-bit words (8 stream bytes each, little-endian). */
  words(n: number): bigint[] {
    if (n <= 0) return [];
    const b = this.bytes(8 * n);
    const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const out = new Array<bigint>(n);
    for (let i = 0; i < n; i++) out[i] = view.getBigUint64(8 * i, true);
    return out;
  }

  /**
   * `size` uniform integers in [0, n), 1 <= n < 2^63 (Python `below(n, size)`, scalar n).
   *  - n = 1: zeros, no word consumed;
   *  - n a power of two 2^r: one word per value, its top r bits (`w >> (64 - r)`);
   *  - otherwise rounds of rejection: each round draws one word per value still missing
   *    (in index order); a word w is accepted iff w >= 2^64 mod n, giving w mod n.
   */
  below(n: bigint, size: number): bigint[] {
    if (n < 1n || n >= TWO63) throw new RangeError(`n must be in [1, 2^63), got ${n}`);
    if (n === 1n) return new Array<bigint>(size).fill(0n);
    if ((n & (n - 1n)) === 0n) {
      const shift = 64n - BigInt(n.toString(2).length - 1);
      return this.words(size).map((w) => w >> shift);
    }
    return this.belowEach(new Array<bigint>(size).fill(n)); // the same rounds of rejection
  }

  /**
   * One uniform integer in [0, ns[i]) per entry (Python `below(array)`): rounds of rejection
   * over all entries still missing, one word each in index order, accepted iff
   * w >= 2^64 mod ns[i], giving w mod ns[i] (the scalar form's rounds when every n is the same).
   * NOTE: unlike the scalar form there is no power-of-two shortcut: for n = 2^r this takes the
   * LOW r bits, and n = 1 consumes a word.
   */
  belowEach(ns: readonly bigint[]): bigint[] {
    for (const n of ns) {
      if (n < 1n || n >= TWO63) throw new RangeError("n must be in [1, 2^63)");
    }
    const lim = ns.map((n) => TWO64 % n);
    const out = new Array<bigint>(ns.length);
    let todo = Array.from({ length: ns.length }, (_, i) => i);
    while (todo.length) {
      const w = this.words(todo.length);
      const rest: number[] = [];
      for (let j = 0; j < todo.length; j++) {
        const i = todo[j];
        if (w[j] >= lim[i]) out[i] = w[j] % ns[i];
        else rest.push(i);
      }
      todo = rest;
    }
    return out;
  }

  /**
   * Bernoulli(p) for data rounding (not noise): one word per entry (all drawn at once);
   * true iff (w >> 11) < floor(p * 2^53).
   */
  bernoulliFloat(p: readonly number[]): boolean[] {
    for (const x of p) {
      if (!(x >= 0 && x <= 1)) throw new RangeError("probabilities must lie in [0, 1]");
    }
    const w = this.words(p.length);
    return p.map((x, i) => w[i] >> 11n < floatThreshold(x));
  }
}

/** A reproducible stream from a public seed: key = SHA-256("uldp-simulation-seed:" || material).
 * A free function, not a static method, so a device bundle (which never seeds) leaves it out. */
export function seededSource(seed: bigint | number | string | Uint8Array): RandomSource {
  let material: Uint8Array;
  if (typeof seed === "number" || typeof seed === "bigint") {
    if (typeof seed === "number" && !Number.isSafeInteger(seed)) {
      throw new RangeError(`seed must be an integer, got ${seed}`);
    }
    const s = BigInt(seed);
    if (s < 0n) throw new RangeError(`seed must be non-negative, got ${seed}`);
    material = seedIntBytes(s);
  } else if (typeof seed === "string") {
    material = utf8(seed);
  } else {
    material = seed.slice();
  }
  return RandomSource.keyed(sha256(concat(utf8("uldp-simulation-seed:"), material)));
}

/** Exact Bernoulli(num[i]/den[i]) draws, 0 <= num <= den: `rng.belowEach(den)[i] < num[i]`. A free
 * function, not a method, so a bundle that never draws one leaves it out. */
export function bernoulliRational(rng: RandomSource, num: readonly bigint[], den: readonly bigint[]): boolean[] {
  if (num.length !== den.length) throw new RangeError("num and den lengths differ");
  const u = rng.belowEach(den);
  return u.map((x, i) => x < num[i]);
}
