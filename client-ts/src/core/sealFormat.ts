/**
 * Shuffle mode's public formats (docs/device-protocol.md §16; Python: uldp.client.sealing):
 * the task's "seal" object and its checks (code `seal`) and the key id — what a device decides
 * BEFORE it is charged, with no elliptic-curve code. The task rules (./task.ts) take this check
 * as a parameter (`SealCheck`): the core's entry points pass it (./index.ts), and a Device loads
 * it with the sealing chunk (./hpke.ts re-exports it; src/device/sealing.ts), only when a task
 * carries "seal", before the charge — so a page that never seals carries none of it. That chunk
 * shares no module with the device's start, so this module imports only ./sealPayload.ts (its
 * own hex helper), takes the SHA-256 it uses for the key id as a parameter (the chunk passes
 * @noble's, bundled into it; the core passes its own — no ES-module-only import in the CommonJS
 * build of the core) and tells a JSON integer by its bigint `value` (within a JValue only a JInt
 * has one) instead of importing ./json.ts's class.
 * The HPKE info, the sealed plaintext and a sealed report's length are `./sealPayload.ts`; the
 * HPKE sealing itself (X25519, HKDF, ChaCha20-Poly1305) is `./hpke.ts`.
 */
import type { JInt, JValue } from "./json.js";
import { hexToBytes } from "./sealPayload.js";

/** A SHA-256: the core's own (./sha256.ts, for ./index.ts) or @noble's (in the sealing chunk). */
export type Sha256 = (data: Uint8Array) => Uint8Array;

const isJInt = (v: JValue | undefined): v is JInt => typeof (v as { value?: unknown } | null)?.value === "bigint";
const isJObject = (v: JValue): v is Map<string, JValue> => v instanceof Map;

export const KEM_ID = 0x0020;
export const KDF_ID = 0x0001;
export const AEAD_ID = 0x0003;
export const ENC_BYTES = 32;
export const TAG_BYTES = 16;
/** Bytes of a sealed report of `reportLength` values. */
export const sealedLength = (reportLength: number): number => ENC_BYTES + 1 + 8 * reportLength + TAG_BYTES;
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

/**
 * The X25519 public keys of low order (RFC 7748 §5: the top bit is ignored and the
 * u-coordinate is read mod p = 2^255 − 19). X25519 with any clamped scalar (a multiple of 8)
 * maps exactly the points of order dividing 8 to the all-zero secret: on the curve (cofactor 8)
 * u ∈ {0, 1, and the two u-coordinates of order 8}, on the twist (cofactor 4) u = p − 1; the
 * only other encodings below 2^255 of these are p and p + 1 (of 0 and 1), which reduce mod p
 * to 0 and 1. The Python SDK (uldp.client.sealing) probes with an exchange;
 * test/primitives.test.ts checks this rule against @noble's x25519 on every such key, with and
 * without the top bit, and on the keys next to them.
 */
const P25519 = (1n << 255n) - 19n;
const LOW_ORDER = [0n, 1n, P25519 - 1n,
  0xb8495f16056286fdb1329ceb8d09da6ac49ff1fae35616aeb8413b7c7aebe0n,
  0x57119fd0dd4e22d8868e1c58c45c44045bef839c55b1d0b1248c50a3bc959c5fn];

/** Whether a raw X25519 public key is of low order (its shared secrets are all zero). */
export function isLowOrder(publicKey: Uint8Array): boolean {
  let u = 0n;
  for (let i = 31; i >= 0; i--) u = (u << 8n) | BigInt(i === 31 ? publicKey[i] & 0x7f : publicKey[i]);
  return LOW_ORDER.includes(u % P25519);
}

/** The key id of a raw X25519 public key: the first 16 hex digits of its SHA-256. */
export function keyIdWith(sha256: Sha256, publicKey: Uint8Array): string {
  return Array.from(sha256(publicKey).subarray(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The check of a task's "seal" object with a given SHA-256 (`parseSeal` of ./index.ts and of
 * the sealing chunk): the key, or the reason it is refused (code `seal`): the key, or the reason it is refused (code `seal`):
 * exactly {kem_id: 32, kdf_id: 1, aead_id: 3, key_id, public_key}, a 64-hex public key that
 * is not of low order, and its key id.
 */
export const sealCheckWith = (sha256: Sha256) => (v: JValue): SealKey | string => {
  try {
    return checkedSeal(v, sha256);
  } catch (e) {
    if (e instanceof SealProblem) return e.message;
    throw e;
  }
};

function checkedSeal(v: JValue, sha256: Sha256): SealKey {
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
  if (typeof kid !== "string" || !/^[0-9a-f]{16}$/.test(kid) || kid !== keyIdWith(sha256, raw)) {
    refuse("seal.key_id is not the key id of seal.public_key");
  }
  if (isLowOrder(raw)) refuse("seal.public_key is a low-order point");
  return { keyId: kid as string, publicKey: raw };
}
