/**
 * The core's own ChaCha20 (src/core/chacha20.ts) and SHA-256 (src/core/sha256.ts) — small so
 * that a web page carries no general crypto library — against RFC 8439 / FIPS 180-4 examples
 * and against @noble/ciphers and @noble/hashes (audited, independent) on random inputs; and
 * shuffle mode's low-order check (src/core/sealFormat.ts, a list) against @noble's x25519.
 * Every conformance vector also checks the keystream and digests against the Python SDK.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { chacha20 as nobleChacha } from "@noble/ciphers/chacha.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { sha256 as nobleSha } from "@noble/hashes/sha2.js";
import { chacha20 } from "../src/core/chacha20.js";
import { bytesToHex, hexToBytes, isLowOrder, RandomSource, seededSource } from "../src/core/index.js";
import { H0, K, sha256 } from "../src/core/sha256.js";

const rng = seededSource("primitives-cross-check");
const u = (n: number): number => Number(rng.words(1)[0] % BigInt(n));

test("ChaCha20: RFC 8439 §2.4.2 and A.2 #1", () => {
  const key = Uint8Array.from({ length: 32 }, (_, i) => i);
  const nonce = hexToBytes("000000000000004a00000000");
  const text = "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
  const ct = chacha20(key, nonce, Uint8Array.from(text, (c) => c.charCodeAt(0)), undefined, 1);
  assert.equal(bytesToHex(ct).slice(0, 64), "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b");
  assert.equal(bytesToHex(ct).slice(-36), "5af90bbf74a35be6b40b8eedf2785e42874d");
  const zero = chacha20(new Uint8Array(32), new Uint8Array(12), new Uint8Array(64));
  assert.equal(bytesToHex(zero), "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
    + "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586");
});

test("ChaCha20 equals @noble/ciphers on random keys, nonces, counters and lengths", () => {
  for (let k = 0; k < 300; k++) {
    const key = rng.bytes(32);
    const nonce = rng.bytes(12);
    const len = [0, 1, 63, 64, 65, 127, 128, 4096, u(700)][u(9)];
    const data = rng.bytes(len);
    const counter = [0, 1, u(1000), 0xffffffff - 80][u(4)];
    assert.equal(bytesToHex(chacha20(key, nonce, data, undefined, counter)),
      bytesToHex(nobleChacha(key, nonce, data, undefined, counter)), `len ${len} counter ${counter}`);
  }
  assert.throws(() => chacha20(new Uint8Array(32), new Uint8Array(12), new Uint8Array(65), undefined, 0xffffffff), /counter/);
  assert.throws(() => chacha20(new Uint8Array(31), new Uint8Array(12), new Uint8Array(1)), /key/);
  assert.throws(() => chacha20(new Uint8Array(32), new Uint8Array(8), new Uint8Array(1)), /nonce/);
  assert.throws(() => chacha20(new Uint8Array(32), new Uint8Array(12), new Uint8Array(9), new Uint8Array(8)), /output/);
  assert.throws(() => chacha20(new Uint8Array(32), new Uint8Array(12), new Uint8Array(1), undefined, -1), /counter/);
});

test("SHA-256: FIPS 180-4 examples, and equal to @noble/hashes on every length 0..300 and large inputs", () => {
  const ascii = (s: string) => Uint8Array.from(s, (c) => c.charCodeAt(0));
  assert.equal(bytesToHex(sha256(ascii("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert.equal(bytesToHex(sha256(new Uint8Array(0))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert.equal(bytesToHex(sha256(ascii("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  for (let len = 0; len <= 300; len++) {
    const m = rng.bytes(len);
    assert.equal(bytesToHex(sha256(m)), bytesToHex(nobleSha(m)), `length ${len}`);
  }
  const big = rng.bytes(1_000_003);
  assert.equal(bytesToHex(sha256(big)), bytesToHex(nobleSha(big)));
});

test("SHA-256's computed constants: exact, and far from a rounding boundary (any engine's cbrt/sqrt)", () => {
  // floor(r·2^(32+20)) of r = cbrt(p) or sqrt(p) by an exact integer root: the top 32 bits of its
  // fraction are the word, the next 20 bits its distance to the nearest word boundary
  const iroot = (n: bigint, k: bigint): bigint => { // floor(n^(1/k)), Newton from above
    let x = 1n << BigInt(Math.ceil(n.toString(2).length / Number(k)) + 1);
    for (;;) {
      const y = ((k - 1n) * x + n / x ** (k - 1n)) / k;
      if (y >= x) return x;
      x = y;
    }
  };
  const primes: number[] = [];
  for (let n = 2; primes.length < 64; n++) if (primes.every((p) => n % p)) primes.push(n);
  let margin = 1;
  const check = (word: number, p: number, k: bigint) => {
    const r = iroot(BigInt(p) << (52n * k), k);
    assert.equal(word, Number((r >> 20n) & 0xffffffffn), `prime ${p}, root ${k}`);
    const low = Number(r & 0xfffffn) / 2 ** 20;
    margin = Math.min(margin, low, 1 - low);
  };
  primes.forEach((p, i) => check(K[i], p, 3n));
  H0.forEach((h, i) => check(h, primes[i], 2n));
  assert.equal(K[0], 0x428a2f98);
  assert.equal(K[63], 0xc67178f2);
  assert.equal(H0[7], 0x5be0cd19);
  assert.ok(margin > 0.005, `a constant lies ${margin} · 2^-32 from a boundary`);
});

test("the low-order list equals x25519's all-zero shared secret (every entry, both top bits, and random keys)", () => {
  const PROBE = new Uint8Array(32);
  PROBE[0] = 0x40;
  PROBE[31] = 0x40;
  const zeroSecret = (pk: Uint8Array): boolean => {
    try {
      return x25519.getSharedSecret(PROBE, pk).every((b) => b === 0);
    } catch {
      return true;
    }
  };
  const p = (1n << 255n) - 19n;
  const le = (x: bigint) => Uint8Array.from({ length: 32 }, (_, i) => Number((x >> BigInt(8 * i)) & 0xffn));
  const listed = [0n, 1n, p - 1n, p, p + 1n,
    325606250916557431795983626356110631294008115727848805560023387167927233504n,
    39382357235489614581723060781553021112529911719440698176882885853963445705823n];
  const near = [2n, 3n, p - 2n, p + 2n, p + 18n, (1n << 255n) - 1n, 9n];
  for (const x of [...listed, ...near]) {
    for (const top of [0, 0x80]) {
      const pk = le(x);
      pk[31] |= top;
      assert.equal(isLowOrder(pk), zeroSecret(pk), `u = ${x}, top bit ${top}`);
      assert.equal(isLowOrder(pk), listed.includes(x), `u = ${x}`);
    }
  }
  for (let k = 0; k < 200; k++) {
    const pk = k % 2 ? x25519.getPublicKey(rng.bytes(32)) : rng.bytes(32);
    assert.equal(isLowOrder(pk), zeroSecret(pk));
  }
});
