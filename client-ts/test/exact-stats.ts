/**
 * Test helpers of the audits (no test of their own): a chi-square goodness-of-fit check of
 * sampled frequencies against exact probabilities, certified bounds of e^x in exact
 * rationals, and a small deterministic PRNG for datasets.
 */
import { EPS_DENOMINATOR, Ratio } from "../src/core/index.js";

/**
 * The Wilson–Hilferty z-score of a chi-square test of `counts` against exact `probs` (cells with
 * an expected count below 20 are pooled, smallest first, as tests/test_mechanisms.py does).
 * z > 4.75 is a p-value below ~1e-6: the tests use fixed seeds, so a pass is deterministic.
 */
export function chi2z(counts: Map<string, number>, probs: Map<string, Ratio>, n: number): { z: number; df: number } {
  const keys = [...probs.keys()].sort((a, b) => probs.get(a)!.cmp(probs.get(b)!));
  const obs: number[] = [];
  const exp: number[] = [];
  let o = 0;
  let e = 0;
  for (const k of keys) {
    o += counts.get(k) ?? 0;
    e += Math.exp(probs.get(k)!.log()) * n;
    if (e >= 20) {
      obs.push(o);
      exp.push(e);
      o = 0;
      e = 0;
    }
  }
  if (e > 0 || o > 0) {
    obs[obs.length - 1] += o;
    exp[exp.length - 1] += e;
  }
  const seen = [...counts.values()].reduce((a, b) => a + b, 0);
  if (obs.reduce((a, b) => a + b, 0) !== seen) throw new Error("a sampled value has probability 0");
  const stat = obs.reduce((s, x, i) => s + (x - exp[i]) ** 2 / exp[i], 0);
  const df = Math.max(obs.length - 1, 1);
  const z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / Math.sqrt(2 / (9 * df));
  return { z, df };
}

/** Σ_{j<=J} x^j/j! for x = units/2^24 (every term positive: a lower bound of e^x) and the
 * remainder bound x^{J+1}/(J+1)! · (J+2)/(J+2−x) (so partial + remainder is an upper bound),
 * over the common denominator 2^{24J}·J! (integers only). */
export function expBounds(units: bigint, J: number): { lower: Ratio; upper: Ratio } {
  const a = units;
  const s = EPS_DENOMINATOR;
  const pows = [1n];
  for (let j = 1; j <= J + 1; j++) pows.push(pows[j - 1] * a);
  let jFact = 1n;
  for (let j = 2; j <= J; j++) jFact *= BigInt(j);
  let fact = 1n; // J!/j!, from j = J down
  let num = 0n;
  for (let j = J; j >= 0; j--) {
    num += pows[j] * s ** BigInt(J - j) * fact;
    fact *= BigInt(j);
  }
  const den = s ** BigInt(J) * jFact;
  const J2 = BigInt(J + 2);
  if (J2 * s <= a) throw new Error("J too small for the remainder bound");
  // x^{J+1}/(J+1)! · (J+2)/(J+2−x) = a^{J+1}·(J+2) / (s^J · (J+1)! · ((J+2)·s − a))
  const rem = new Ratio(pows[J + 1] * J2, s ** BigInt(J) * jFact * BigInt(J + 1) * (J2 * s - a));
  const lower = new Ratio(num, den);
  return { lower, upper: lower.add(rem) };
}

/** r^n for a Ratio and a small integer n >= 0. */
export function pow(r: Ratio, n: number): Ratio {
  let out = Ratio.ONE;
  for (let i = 0; i < n; i++) out = out.mul(r);
  return out;
}

/** A small deterministic PRNG for datasets and choices (never for noise). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
