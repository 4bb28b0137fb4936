/**
 * Optimized local hashing (OLH), device half — docs/device-protocol.md §17.6,
 * docs/mechanisms.md (OLH); Python: uldp.client.mechanisms.olh.
 *
 * Wang, Blocki, Li, Jha, USENIX Security 2017, §4.4: the device draws a random hash function
 * H: [k] → [g] from a public family, hashes its value and reports (H, GRR_g(H(v))) with
 * g = e^ε + 1 (rounded). The report is two integers whatever k.
 *
 * The family: H_s for a seed s < 2^32; H_s(v) = ⌊w_v · g / 2^64⌋ where w_v is word v (bytes
 * 8v … 8v+7, little-endian) of the ChaCha20 keystream keyed by
 * SHA-256("uldp.olh.hash/v1" ‖ s as 8 bytes big-endian) — a public function of the seed, so
 * the collector recomputes it; a device reads only block ⌊v/8⌋.
 *
 * Exact design: g = clamp(⌊(S + 2^64 + 2^63) / 2^64⌋, 2, 2^16) and the GRR design over g
 * (./grr.ts). Given the seed the report is GRR's, so it is ε-LDP; the seed does not depend on
 * the data. Draws: the seed (the top 32 bits of one word), then GRR over g of H_s(v).
 */
import { sha256 } from "../sha256.js";
import { chachaBlock, utf8 } from "../random.js";
import { type FrequencyOracle, oneByOne, type OracleProbability } from "./base.js";
import { dyadic, expLower, memo, ONE, Ratio, unitsOf } from "./exact.js";
import { type GRRDesign, grrDesign, grrValues } from "./grr.js";

/** A report's hash seed is uniform below 2^SEED_BITS. */
export const SEED_BITS = 32;
const SEEDS = 1n << BigInt(SEED_BITS);
const MAX_RANGE = 1n << 16n;
const LABEL = utf8("uldp.olh.hash/v1");

/** The hash range g (design.k) and the GRR design over it. */
export const olhDesign = memo((units: bigint): GRRDesign => {
  const S = expLower(units);
  let g = (S + ONE + ONE / 2n) / ONE;
  g = g < 2n ? 2n : g > MAX_RANGE ? MAX_RANGE : g;
  return grrDesign(Number(g), units);
});

/** SHA-256(label ‖ seed as 8 bytes big-endian): the ChaCha20 key of H_seed. */
export function hashKey(seed: bigint): Uint8Array {
  const msg = new Uint8Array(LABEL.length + 8);
  msg.set(LABEL);
  new DataView(msg.buffer).setBigUint64(LABEL.length, seed, false);
  return sha256(msg);
}

/** H_seed(value) over g buckets: one keystream block, read at word `value`. */
export function hashOf(seed: bigint, value: number, g: number): number {
  const block = chachaBlock(hashKey(seed), Math.floor(value / 8));
  const w = new DataView(block.buffer, block.byteOffset, 64).getBigUint64(8 * (value % 8), true);
  return Number((w * BigInt(g)) >> 64n);
}

export const OLH: FrequencyOracle = {
  name: "olh",
  family: "oracle",
  length: () => 2,
  limit: () => Number(SEEDS - 1n),
  privatize(item, k, eps, rng) {
    const d = olhDesign(unitsOf(eps));
    const seed = rng.below(SEEDS, 1)[0];
    return [seed, ...grrValues([hashOf(seed, item, d.k)], d.k, d.P, rng)];
  },
  privatizeMany(items, ks, eps, rng) {
    return oneByOne(this, items, ks, eps, rng);
  },
};

/** Exact P(report | input) of OLH, for the likelihood-ratio audits (never on a device's path). */
export const olhProbability: OracleProbability = (report, item, k, eps) => {
  const d = olhDesign(unitsOf(eps));
  if (report.length !== 2) return Ratio.ZERO;
  const [s, y] = report;
  if (!(s >= 0n && s < SEEDS && y >= 0n && y < BigInt(d.k))) return Ratio.ZERO;
  const hit = Number(y) === hashOf(s, item, d.k);
  return dyadic(hit ? d.P : d.Q).div(new Ratio(SEEDS));
};
