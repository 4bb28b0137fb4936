/**
 * Generalized randomized response (GRR, k-ary RR), device half — docs/device-protocol.md
 * §17.3, docs/mechanisms.md (GRR); Python: uldp.client.mechanisms.grr.
 *
 * Wang, Blocki, Li, Jha, USENIX Security 2017, §4.1 ("direct encoding"): report the true value
 * with probability p = e^ε/(e^ε + k − 1), otherwise a uniformly chosen other value.
 *
 * Exact design: Q = ⌈2^128 / (S + (k−1)·2^64)⌉ and P = 2^64 − (k−1)·Q with S/2^64 <= e^ε
 * (./exact.ts), so P/Q <= S/2^64; if that leaves P < Q, Q = ⌊2^64/k⌋. The report is the value
 * kept with probability P/2^64 (one word w < P), else below(k − 1) mapped past v. k = 1: the
 * report is 0 and nothing is drawn.
 */
import type { RandomSource } from "../random.js";
import { type FrequencyOracle, oneByOne, type OracleProbability } from "./base.js";
import { ceilDiv, coins, designCheck, dyadic, expLower, memo, ONE, Ratio, unitsOf, where } from "./exact.js";

/** P(report = v | v) = P/2^64; P(report = u | v) = Q/2^64 for each u ≠ v. */
export interface GRRDesign {
  readonly k: number;
  readonly P: bigint;
  readonly Q: bigint;
}

export const grrDesign = memo((k: number, units: bigint): GRRDesign => {
  if (!Number.isSafeInteger(k) || k < 1) throw new RangeError(`k must be >= 1, got ${k}`);
  if (k === 1) return { k: 1, P: ONE, Q: 0n };
  const S = expLower(units);
  const k1 = BigInt(k - 1);
  let Q = ceilDiv(ONE * ONE, S + k1 * ONE);
  let P = ONE - k1 * Q;
  if (P < Q) {
    Q = ONE / BigInt(k);
    P = ONE - k1 * Q;
  }
  designCheck(P * ONE <= S * Q && Q * ONE <= S * P && Q > 0n && Q <= P && P < ONE, "GRR", k, units);
  return { k, P, Q };
});

/** k-ary randomized response of `items` with keep numerator P (GRR, and OLH over its hash
 * range): one keep word per item (in order), then one below(k − 1) call for the items not
 * kept (in order). */
export function grrValues(items: readonly number[], k: number, P: bigint, rng: RandomSource): bigint[] {
  const out = items.map(BigInt);
  if (k === 1) return out.map(() => 0n);
  const keep = coins(rng, items.map(() => P));
  const flip = where(keep, false);
  const other = rng.below(BigInt(k - 1), flip.length);
  flip.forEach((i, j) => { out[i] = other[j] < out[i] ? other[j] : other[j] + 1n; });
  return out;
}

export const GRR: FrequencyOracle = {
  name: "grr",
  family: "oracle",
  length: () => 1,
  limit: (k) => Math.max(k - 1, 0),
  privatize(item, k, eps, rng) {
    return grrValues([item], k, grrDesign(k, unitsOf(eps)).P, rng);
  },
  privatizeMany(items, ks, eps, rng) {
    return oneByOne(this, items, ks, eps, rng);
  },
};

/** Exact P(report | input) of GRR, for the likelihood-ratio audits (never on a device's path). */
export const grrProbability: OracleProbability = (report, item, k, eps) => {
  const d = grrDesign(k, unitsOf(eps));
  if (report.length !== 1) return Ratio.ZERO;
  const y = report[0];
  if (!(y >= 0n && y < BigInt(k))) return Ratio.ZERO;
  return dyadic(y === BigInt(item) ? d.P : d.Q);
};
