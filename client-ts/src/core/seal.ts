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
 * runs the curve code (that dynamic import is of ./hpke.ts, the HPKE code alone). The checks
 * made before the charge are in ./sealFormat.ts.
 */
// the whole of sealing: the formats (seal object, key id, info, plaintext, length; no curve code)
// and the HPKE sealing (./hpke.ts, the module a Device loads for a sealed task)
export * from "./sealFormat.js";
export * from "./sealPayload.js";
export { hpkeSeal, keyIdOf, parseSeal, sealReport } from "./hpke.js";
