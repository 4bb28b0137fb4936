/**
 * Shuffle mode's HPKE sealing itself (docs/device-protocol.md §16; the whole of sealing, with its
 * formats, is the public entry `./seal.ts`): RFC 9180 base mode, DHKEM(X25519, HKDF-SHA256) /
 * HKDF-SHA256 / ChaCha20-Poly1305, composed from @noble primitives. The Device imports THIS module
 * dynamically (src/device/sealing.ts), for a sealed task only; it imports nothing the rest of the
 * device also loads (only @noble, ./sealFormat.ts and ./sealPayload.ts, whose helpers are their own), so a bundler
 * puts it in a chunk of its own and leaves the device's start as one file, with no chunk shared
 * between the two (smaller gzip for the page that never seals).
 */
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { expand, extract } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { keyIdWith, type SealKey, sealCheckWith } from "./sealFormat.js";
import { concat, sealPlaintext, u16, utf8 } from "./sealPayload.js";

export { sealInfo } from "./sealPayload.js";

/** A task's "seal" object checked (./sealFormat.ts), loaded with this chunk by a Device. */
export const parseSeal = sealCheckWith(sha256);
/** The key id of a raw X25519 public key: the first 16 hex digits of its SHA-256. */
export const keyIdOf = (publicKey: Uint8Array): string => keyIdWith(sha256, publicKey);

// the suite's ids, as ./sealFormat.ts checks them in a task's seal object (not imported from there:
// this chunk shares no module with the device's start; test/seal.test.ts checks they are equal)
export const KEM_ID = 0x0020;
export const KDF_ID = 0x0001;
export const AEAD_ID = 0x0003;

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
