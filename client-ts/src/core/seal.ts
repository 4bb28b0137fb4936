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
 * HPKE is composed here from the audited @noble primitives the core already uses
 * (x25519 from @noble/curves, HKDF/HMAC-SHA256 from @noble/hashes, ChaCha20-Poly1305 from
 * @noble/ciphers): pure, synchronous JavaScript that runs in browsers, React Native and
 * Node without WebCrypto, and that can take a fixed ephemeral key for the conformance
 * vectors. It is checked against RFC 9180 Appendix A.2.1 (test/seal.test.ts) and against
 * every case of conformance/v1/seal.json, whose ciphertexts the Python collector opens with
 * the `cryptography` package's HPKE. A device always seals with a fresh ephemeral key from
 * crypto.getRandomValues.
 */
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { expand, extract } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex, hexToBytes } from "./encoding.js";
import { isJInt, isJObject, type JValue } from "./json.js";
import { utf8 } from "./random.js";

export const KEM_ID = 0x0020;
export const KDF_ID = 0x0001;
export const AEAD_ID = 0x0003;
export const ENC_BYTES = 32;
export const TAG_BYTES = 16;
export const SEAL_FIELDS = ["aead_id", "kdf_id", "kem_id", "key_id", "public_key"] as const;

/** The collector's public sealing key, as a task carries it. */
export interface SealKey {
  readonly keyId: string;
  readonly publicKey: Uint8Array;
}

class SealProblem extends Error {}
const refuse = (message: string): never => {
  throw new SealProblem(message);
};
const PROBE = new Uint8Array(32);
PROBE[0] = 0x40;
PROBE[31] = 0x40;

/** The key id of a raw X25519 public key: the first 16 hex digits of its SHA-256. */
export function keyIdOf(publicKey: Uint8Array): string {
  return bytesToHex(sha256(publicKey)).slice(0, 16);
}

/**
 * A task's "seal" object, checked: the key, or the reason it is refused (code `seal`):
 * exactly {kem_id: 32, kdf_id: 1, aead_id: 3, key_id, public_key}, a 64-hex public key that
 * is not of low order, and its key id.
 */
export function parseSeal(v: JValue): SealKey | string {
  try {
    return checkedSeal(v);
  } catch (e) {
    if (e instanceof SealProblem) return e.message;
    throw e;
  }
}

function checkedSeal(v: JValue): SealKey {
  if (!isJObject(v)) return refuse("seal must be an object");
  const keys = [...v.keys()].sort();
  if (keys.join(",") !== [...SEAL_FIELDS].join(",")) refuse(`seal must have exactly the fields ${SEAL_FIELDS.join(", ")}`);
  const ids = [v.get("kem_id"), v.get("kdf_id"), v.get("aead_id")];
  const want = [KEM_ID, KDF_ID, AEAD_ID];
  if (!ids.every((x, i) => isJInt(x) && x.value === BigInt(want[i]))) {
    refuse("unsupported HPKE suite: this device seals with kem 0x0020, kdf 0x0001, aead 0x0003");
  }
  const pk = v.get("public_key");
  const kid = v.get("key_id");
  if (typeof pk !== "string" || !/^[0-9a-f]{64}$/.test(pk)) refuse("seal.public_key must be 64 lowercase hex digits");
  const raw = hexToBytes(pk as string);
  if (typeof kid !== "string" || !/^[0-9a-f]{16}$/.test(kid) || kid !== keyIdOf(raw)) {
    refuse("seal.key_id is not the key id of seal.public_key");
  }
  let shared: Uint8Array;
  try {
    shared = x25519.getSharedSecret(PROBE, raw);
  } catch {
    shared = new Uint8Array(32);
  }
  if (shared.every((b) => b === 0)) refuse("seal.public_key is a low-order point");
  return { keyId: kid as string, publicKey: raw };
}

/** The sealed plaintext: flags byte (bit 0 = simulated), then int64 little-endian values. */
export function sealPlaintext(values: readonly bigint[], simulated: boolean): Uint8Array {
  const out = new Uint8Array(1 + 8 * values.length);
  out[0] = simulated ? 1 : 0;
  const view = new DataView(out.buffer);
  values.forEach((x, i) => view.setBigInt64(1 + 8 * i, x, true));
  return out;
}

const concat = (...parts: Uint8Array[]): Uint8Array => {
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
const u16 = (x: number): Uint8Array => u32(x).slice(2);

/** The HPKE info binding a sealed report to its (query, phase, group, stage, task). */
export function sealInfo(queryId: string, phase: number, group: number, stage: number, taskDigest: string): Uint8Array {
  const q = utf8(queryId);
  return concat(utf8("uldp-seal/1"), new Uint8Array([0]), u32(q.length), q, u32(phase), u32(group), u32(stage),
    hexToBytes(taskDigest));
}

/** Bytes of a sealed report of `reportLength` values. */
export const sealedLength = (reportLength: number): number => ENC_BYTES + 1 + 8 * reportLength + TAG_BYTES;

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
