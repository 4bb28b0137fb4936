/**
 * Sealed reports (shuffle mode, docs/device-protocol.md §16; Python: uldp.client.sealing).
 *
 * A task whose JSON carries "seal" asks for its report sealed with RFC 9180 HPKE — base
 * mode, DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / ChaCha20-Poly1305, single-shot Seal with
 * an empty aad — to the collector's public key, and sent to a shuffler:
 *
 *   plaintext = flags byte (bit 0: simulated) || values as int64 little-endian (1 + 8·L bytes)
 *   info      = "uldp-seal/1" 0x00 || u32be(len query_id) || query_id || u32be(phase)
 *               || u32be(group) || u32be(stage) || task digest (32 bytes)
 *   sealed    = enc (32 bytes) || ciphertext (plaintext + 16-byte tag) = 49 + 8·L bytes
 *
 * HPKE is composed here from audited @noble primitives
 * (x25519 from @noble/curves, HKDF/HMAC-SHA256 from @noble/hashes, ChaCha20-Poly1305 from
 * @noble/ciphers): pure, synchronous JavaScript that runs in browsers, React Native and
 * Node without WebCrypto, and that can take a fixed ephemeral key for the conformance
 * vectors. It is checked against RFC 9180 Appendix A.2.1 (test/seal.test.ts) and against
 * every case of conformance/v1/seal.json, whose ciphertexts the Python collector opens with
 * the `cryptography` package's HPKE. A device always seals with a fresh ephemeral key from
 * crypto.getRandomValues.
 *
 * This module is the only one that loads @noble/curves: the Device imports it dynamically, for a
 * sealed task only (src/device/sealing.ts), so a page that never seals neither downloads nor
 * runs the curve code. The checks made before the charge are in ./sealFormat.ts.
 */
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { expand, extract } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { utf8 } from "./random.js";
import { AEAD_ID, KDF_ID, KEM_ID, type SealKey } from "./sealFormat.js";
import { concat, sealPlaintext, u16 } from "./sealPayload.js";

// the formats (seal object, key id, info, plaintext, length) live in ./sealFormat.ts, which has
// no curve code; they are re-exported here so this module is the whole of sealing
export * from "./sealFormat.js";
export * from "./sealPayload.js";

// ---- RFC 9180, base mode, the one suite -------------------------------------------------
const KEM_SUITE = concat(utf8("KEM"), u16(KEM_ID));
const HPKE_SUITE = concat(utf8("HPKE"), u16(KEM_ID), u16(KDF_ID), u16(AEAD_ID));
const V1 = utf8("HPKE-v1");

const labeledExtract = (suite: Uint8Array, salt: Uint8Array, label: string, ikm: Uint8Array): Uint8Array =>
  extract(sha256, concat(V1, suite, utf8(label), ikm), salt.length ? salt : new Uint8Array(32));
const labeledExpand = (suite: Uint8Array, prk: Uint8Array, label: string, info: Uint8Array, n: number): Uint8Array =>
  expand(sha256, prk, concat(u16(n), V1, suite, utf8(label), info), n);

/** enc || ciphertext of RFC 9180 SealBase(pkR, info, aad, pt) with ephemeral key skE. */
export function hpkeSeal(publicKey: Uint8Array, info: Uint8Array, aad: Uint8Array, plaintext: Uint8Array,
  ephemeralPrivateKey: Uint8Array): Uint8Array {
  const enc = x25519.getPublicKey(ephemeralPrivateKey);
  const dh = x25519.getSharedSecret(ephemeralPrivateKey, publicKey);
  const eaePrk = labeledExtract(KEM_SUITE, new Uint8Array(0), "eae_prk", dh);
  const shared = labeledExpand(KEM_SUITE, eaePrk, "shared_secret", concat(enc, publicKey), 32);
  const empty = new Uint8Array(0);
  const context = concat(new Uint8Array([0]), labeledExtract(HPKE_SUITE, empty, "psk_id_hash", empty),
    labeledExtract(HPKE_SUITE, empty, "info_hash", info));
  const secret = labeledExtract(HPKE_SUITE, shared, "secret", empty);
  const key = labeledExpand(HPKE_SUITE, secret, "key", context, 32);
  const nonce = labeledExpand(HPKE_SUITE, secret, "base_nonce", context, 12);
  return concat(enc, chacha20poly1305(key, nonce, aad).encrypt(plaintext));
}

/** Seal a report for a task (fresh ephemeral key unless one is given: vectors only). */
export function sealReport(key: SealKey, info: Uint8Array, values: readonly bigint[], simulated: boolean,
  ephemeralPrivateKey?: Uint8Array): Uint8Array {
  const c = (globalThis as { crypto?: { getRandomValues(a: Uint8Array): Uint8Array } }).crypto;
  if (ephemeralPrivateKey === undefined && (!c || typeof c.getRandomValues !== "function")) {
    throw new Error("no crypto.getRandomValues on this platform: cannot seal a report");
  }
  const eph = ephemeralPrivateKey ?? c!.getRandomValues(new Uint8Array(32));
  return hpkeSeal(key.publicKey, info, new Uint8Array(0), sealPlaintext(values, simulated), eph);
}
