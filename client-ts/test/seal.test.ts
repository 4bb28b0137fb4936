// Sealed reports (docs/device-protocol.md §16): the HPKE construction on @noble against
// RFC 9180 Appendix A.2.1, fresh ephemeral keys, the fixed size, and the seal object's rules.
// Byte equality with the Python SDK is conformance/v1/seal.json (conformance.test.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import { bytesToHex, hexToBytes, keyIdOf, parseJson, parseSeal, sealedLength, sealInfo } from "../src/core/index.js";
import { hpkeSeal, sealReport } from "../src/core/seal.js";
import * as hpke from "../src/core/hpke.js";
import * as sealFormat from "../src/core/sealFormat.js";
import * as sealPayload from "../src/core/sealPayload.js";
import { utf8 } from "../src/core/random.js";
import { x25519 } from "@noble/curves/ed25519.js";

test("RFC 9180 A.2.1 (base mode, X25519 / HKDF-SHA256 / ChaCha20-Poly1305)", () => {
  const out = hpkeSeal(hexToBytes("4310ee97d88cc1f088a5576c77ab0cf5c3ac797f3d95139c6c84b5429c59662a"),
    hexToBytes("4f6465206f6e2061204772656369616e2055726e"), hexToBytes("436f756e742d30"),
    hexToBytes("4265617574792069732074727574682c20747275746820626561757479"),
    hexToBytes("f4ec9b33b792c372c1d2c2063507b684ef925b8c75a42dbcbf57d63ccd381600"));
  assert.equal(bytesToHex(out), "1afa08d3dec047a643885163f1180476fa7ddb54c6a8029ea33f95796bf2ac4a"
    + "1c5250d8034ec2b784ba2cfd69dbdb8af406cfe3ff938e131f0def8c8b60b4db21993c62ce81883d2dd1b51a28");
});

const sealObject = (pk: Uint8Array, change: Record<string, unknown> = {}) => parseJson(JSON.stringify({
  kem_id: 32, kdf_id: 1, aead_id: 3, key_id: keyIdOf(pk), public_key: bytesToHex(pk), ...change,
}));

test("a production seal uses a fresh ephemeral key and has the fixed size", () => {
  const pk = x25519.getPublicKey(x25519.utils.randomSecretKey());
  const key = parseSeal(sealObject(pk));
  assert.notEqual(typeof key, "string");
  if (typeof key === "string") return;
  const info = sealInfo("q", 1, 0, 2, "ab".repeat(32));
  const a = sealReport(key, info, [1n, -2n, 3n], false);
  const b = sealReport(key, info, [1n, -2n, 3n], false);
  assert.equal(a.length, sealedLength(3));
  assert.equal(b.length, 49 + 24);
  assert.notEqual(bytesToHex(a), bytesToHex(b));
});

test("the seal object's rules give their reasons", () => {
  const pk = x25519.getPublicKey(x25519.utils.randomSecretKey());
  const zero = new Uint8Array(32);
  const bad: [string, unknown][] = [
    ["suite", sealObject(pk, { aead_id: 1 })],
    ["suite", sealObject(pk, { kdf_id: true })],
    ["exactly", sealObject(pk, { extra: 1 })],
    ["64 lowercase", sealObject(pk, { public_key: bytesToHex(pk).toUpperCase() })],
    ["key id", sealObject(pk, { key_id: "0".repeat(16) })],
    ["low-order", sealObject(zero)],
  ];
  for (const [why, obj] of bad) {
    const got = parseSeal(obj as never);
    assert.equal(typeof got, "string", why);
    assert.match(got as string, new RegExp(why), why);
    assert.equal(hpke.parseSeal(obj as never), got, why); // the chunk's check (a Device's), @noble's SHA-256
  }
  assert.deepEqual(hpke.parseSeal(sealObject(pk)), parseSeal(sealObject(pk)));
  for (let n = 0; n < 32; n++) { // key ids: the core's SHA-256 and @noble's
    const k = Uint8Array.from({ length: 32 }, (_, i) => (i * 37 + n * 101 + 7) & 255);
    assert.equal(hpke.keyIdOf(k), keyIdOf(k));
  }
});

test("the sealing chunk's own copies (it imports nothing the device's start loads) equal the core's", () => {
  assert.deepEqual([hpke.KEM_ID, hpke.KDF_ID, hpke.AEAD_ID], [sealFormat.KEM_ID, sealFormat.KDF_ID, sealFormat.AEAD_ID]);
  for (const s of ["", "q", "steps@de", "é€😀 mixed", "\u{10ffff}"]) {
    assert.deepEqual(sealPayload.utf8(s), utf8(s));
  }
  for (const bad of ["\ud800", "a\udfffb"]) {
    assert.throws(() => sealPayload.utf8(bad), RangeError);
    assert.throws(() => utf8(bad), RangeError);
  }
  assert.deepEqual(sealPayload.hexToBytes("00ff7Fa0"), hexToBytes("00ff7Fa0"));
  for (const bad of ["0", "zz", "0g"]) assert.throws(() => sealPayload.hexToBytes(bad), RangeError);
});
