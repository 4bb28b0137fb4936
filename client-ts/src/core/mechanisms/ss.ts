/**
 * Subset selection (ω-subset mechanism), device half — docs/device-protocol.md §17.5,
 * docs/mechanisms.md (SS); Python: uldp.client.mechanisms.ss.
 *
 * Wang et al., arXiv:1607.08025 (2016), and Ye, Barg, IEEE Trans. IT 64(8) (2018): report a
 * subset Y of size ω; P(Y | v) ∝ e^ε if v ∈ Y and ∝ 1 otherwise, ω ≈ k/(e^ε + 1). With
 * probability p_in = ωe^ε / (ωe^ε + k − ω) the subset holds v and ω − 1 uniformly chosen other
 * values, otherwise ω uniformly chosen other values. GRR is the case ω = 1.
 *
 * Exact design (S/2^64 <= e^ε): ω = clamp(⌊(2k·2^64 + S + 2^64) / (2(S + 2^64))⌋, 1, k − 1)
 * and P_in = ⌊2^64·ωS / (ωS + (k − ω)·2^64)⌋; the likelihood ratio P_in(k − ω) / ((2^64 − P_in)ω)
 * and its inverse are checked against S/2^64.
 *
 * Draws: one word (w < P_in: v is in), then the t other values (t = ω − 1 or ω) as a uniform
 * t-subset of the k − 1 positions {0, …, k−2} by Floyd's algorithm: for j = k−1−t, …, k−2:
 * r = below(j + 1); add j if r is already chosen, else r. Position p is the value p if p < v,
 * else p + 1. The report is the ω values in increasing order. k = 1: [0], no draw.
 */
import { type FrequencyOracle, oneByOne, type OracleProbability } from "./base.js";
import { coins, designCheck, dyadic, expLower, memo, ONE, Ratio, unitsOf } from "./exact.js";

export interface SSDesign {
  readonly k: number;
  /** the subset size ω */
  readonly omega: number;
  /** P(v ∈ Y | v) = P_in / 2^64 */
  readonly Pin: bigint;
}

export const ssDesign = memo((k: number, units: bigint): SSDesign => {
  if (!Number.isSafeInteger(k) || k < 1) throw new RangeError(`k must be >= 1, got ${k}`);
  if (k === 1) return { k: 1, omega: 1, Pin: ONE };
  const S = expLower(units);
  const K = BigInt(k);
  let w = (2n * K * ONE + S + ONE) / (2n * (S + ONE));
  w = w < 1n ? 1n : w > K - 1n ? K - 1n : w;
  const Pin = (ONE * w * S) / (w * S + (K - w) * ONE);
  const num = Pin * (K - w);
  const den = (ONE - Pin) * w;
  designCheck(Pin > 0n && Pin < ONE && num * ONE <= S * den && den * ONE <= S * num, "SS", k, units);
  return { k, omega: Number(w), Pin };
});

/** C(n, r) exactly. */
export function binomial(n: number, r: number): bigint {
  if (r < 0 || r > n) return 0n;
  r = Math.min(r, n - r);
  let out = 1n;
  for (let i = 1; i <= r; i++) out = (out * BigInt(n - r + i)) / BigInt(i);
  return out;
}

export const SS: FrequencyOracle = {
  name: "ss",
  family: "oracle",
  length: (k, eps) => ssDesign(k, unitsOf(eps)).omega,
  limit: (k) => Math.max(k - 1, 0),
  privatize(item, k, eps, rng) {
    const d = ssDesign(k, unitsOf(eps));
    if (k === 1) return [0n];
    const inside = coins(rng, [d.Pin])[0];
    const t = inside ? d.omega - 1 : d.omega;
    const N = k - 1;
    const chosen = new Set<number>();
    for (let j = N - t; j < N; j++) {
      const r = Number(rng.below(BigInt(j + 1), 1)[0]);
      chosen.add(chosen.has(r) ? j : r);
    }
    const values = [...chosen].map((p) => (p < item ? p : p + 1));
    if (inside) values.push(item);
    return values.sort((a, b) => a - b).map(BigInt);
  },
  privatizeMany(items, ks, eps, rng) {
    return oneByOne(this, items, ks, eps, rng);
  },
};

/** Exact P(report | input) of SS, for the likelihood-ratio audits (never on a device's path). */
export const ssProbability: OracleProbability = (report, item, k, eps) => {
  const d = ssDesign(k, unitsOf(eps));
  const ys = report.map(Number);
  const increasing = ys.every((y, i) => i === 0 || y > ys[i - 1]);
  if (ys.length !== d.omega || !increasing || ys[0] < 0 || ys[ys.length - 1] >= k) return Ratio.ZERO;
  if (k === 1) return Ratio.ONE;
  if (ys.includes(item)) return dyadic(d.Pin).div(new Ratio(binomial(k - 1, d.omega - 1)));
  return dyadic(ONE - d.Pin).div(new Ratio(binomial(k - 1, d.omega)));
};
