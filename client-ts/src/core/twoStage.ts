/**
 * Device half of Algorithm 1 for ONE user (docs/device-protocol.md §9; Python:
 * uldp.client.mechanisms.two_stage with a single row).
 *
 * Input is the statistics vector y of one user (one entry per served component).
 *  - Stage I: concatenated one-hot bin vectors (B_c entries per component) + iid DLap(2/ε_c).
 *  - Stage II / SSL: clamp to the public interval, grid-encode to {0..2^16} with unbiased
 *    randomized rounding, + iid DLap(2^16/ε_c).
 * The noise scale is computed here from ε_c, never received.
 *
 * binReports and valueReports are the same two layouts with any mechanism of ./mechanisms
 * (§17.11): a frequency oracle on the 0-based bin index of each component, a scalar randomizer
 * on each grid value. With the default mechanism, discrete Laplace, they draw exactly what
 * stage1Report and stage2Report draw.
 */
import { discreteLaplace, discreteLaplaceLogPmf, laplaceScale, laplaceScaleValue, randomizedRound } from "./noise.js";
import { type Alg1Params, binIndex, clip, GRID_STEPS } from "./params.js";
import type { FrequencyOracle, ScalarMechanism } from "./mechanisms/base.js";
import type { RandomSource } from "./random.js";
import { recordRounding, recordStatistic } from "./trace.js";

export type Interval = readonly [number, number];

function checkStats(y: readonly number[], k: number): void {
  if (y.length !== k) throw new RangeError(`user statistics must have ${k} entries, got ${y.length}`);
  for (const v of y) {
    if (typeof v !== "number" || !Number.isFinite(v)) {
      throw new RangeError("user statistics contain NaN or infinity");
    }
  }
}

/** Concatenated one-hot vectors of the clamped statistics (length ΣB_c). */
export function oneHotBins(y: readonly number[], params: readonly Alg1Params[]): number[] {
  checkStats(y, params.length);
  const out: number[] = [];
  params.forEach((p, c) => {
    const k = binIndex(y[c], p);
    for (let i = 1; i <= p.bins; i++) out.push(i === k ? 1 : 0);
  });
  return out;
}

/** Stage-I report: one-hot bins + DLap(2/ε_c) per entry (noise drawn in entry order). */
export function stage1Report(y: readonly number[], params: readonly Alg1Params[], epsC: number,
  rng: RandomSource): bigint[] {
  checkStats(y, params.length);
  recordStatistic(y);
  const onehot = oneHotBins(y, params);
  const noise = discreteLaplace(laplaceScale(2, epsC), onehot.length, rng);
  return onehot.map((v, i) => BigInt(v) + noise[i]);
}

/** Grid positions ((clip(y, lo, hi) - lo) / (hi - lo)) · 2^16 of each component. */
export function gridPositions(y: readonly number[], intervals: readonly Interval[]): number[] {
  for (const [lo, hi] of intervals) {
    if (!(hi > lo)) throw new RangeError("clamp intervals must have hi > lo");
  }
  return y.map((v, c) => {
    const [lo, hi] = intervals[c];
    return ((clip(v, lo, hi) - lo) / (hi - lo)) * GRID_STEPS;
  });
}

/** Clamp and round unbiasedly to {0..2^16} (one keystream word per component). */
export function gridEncode(y: readonly number[], intervals: readonly Interval[], rng: RandomSource): bigint[] {
  const pos = gridPositions(y, intervals);
  const r = randomizedRound(pos, rng);
  recordRounding(pos, r);
  const G = BigInt(GRID_STEPS);
  return r.map((v) => (v < 0n ? 0n : v > G ? G : v));
}

/** Stage-II / SSL report: grid-encode all components, then DLap(2^16/ε_c) per component. */
export function stage2Report(y: readonly number[], intervals: readonly Interval[], epsC: number,
  rng: RandomSource): bigint[] {
  checkStats(y, intervals.length);
  recordStatistic(y);
  const enc = gridEncode(y, intervals, rng);
  const noise = discreteLaplace(laplaceScale(GRID_STEPS, epsC), enc.length, rng);
  return enc.map((v, i) => v + noise[i]);
}

/** Stage I with a frequency oracle: each component's 0-based bin bin(clamp(y_c)) − 1
 * privatized over its B_c bins at ε_c, the components' reports concatenated (§17.11). */
export function binReports(y: readonly number[], params: readonly Alg1Params[], oracle: FrequencyOracle, epsC: number,
  rng: RandomSource): bigint[] {
  checkStats(y, params.length);
  recordStatistic(y);
  const items = params.map((p, c) => binIndex(y[c], p) - 1);
  return oracle.privatizeMany(items, params.map((p) => p.bins), epsC, rng);
}

/** two-stage-sized stage I (§9.3): each component's statistic clamped to [−D, D] and rounded
 * unbiasedly to one of the B + 1 grid points −D + k·2D/B — position ((clamp(y) + D)/(2D))·B in
 * that order of double operations, one keystream word per component (randomizedRound) — the
 * 0-based categories k ∈ [0, B]. */
export function gridCategories(y: readonly number[], params: readonly Alg1Params[], rng: RandomSource): number[] {
  checkStats(y, params.length);
  const pos = params.map((p, c) => ((clip(y[c], -p.bound, p.bound) + p.bound) / (2 * p.bound)) * p.bins);
  const r = randomizedRound(pos, rng);
  recordRounding(pos, r);
  return r.map((v, c) => {
    const B = BigInt(params[c].bins);
    return Number(v < 0n ? 0n : v > B ? B : v);
  });
}

/** Stage I of two-stage-sized: the grid categories (all rounding words first), then the
 * oracle over B_c + 1 categories per component, the reports concatenated (§9.3). */
export function gridReports(y: readonly number[], params: readonly Alg1Params[], oracle: FrequencyOracle, epsC: number,
  rng: RandomSource): bigint[] {
  checkStats(y, params.length);
  recordStatistic(y);
  const items = gridCategories(y, params, rng);
  return oracle.privatizeMany(items, params.map((p) => p.bins + 1), epsC, rng);
}

/** Values with a scalar randomizer: clamp, grid-encode (the rounding words of every entry
 * first), then the mechanism's draws over the list of grid values (§17.11). */
export function valueReports(y: readonly number[], intervals: readonly Interval[], mechanism: ScalarMechanism,
  epsC: number, rng: RandomSource): bigint[] {
  checkStats(y, intervals.length);
  recordStatistic(y);
  return mechanism.privatize(gridEncode(y, intervals, rng), epsC, rng);
}

// ---- exact likelihoods (privacy audits) ---------------------------------------------------

/** log P(report | y) of a stage-I report. */
export function stage1LogLikelihood(y: readonly number[], report: readonly bigint[],
  params: readonly Alg1Params[], epsC: number): number {
  const onehot = oneHotBins(y, params);
  const t = laplaceScaleValue(laplaceScale(2, epsC));
  let s = 0;
  for (let i = 0; i < onehot.length; i++) s += discreteLaplaceLogPmf(Number(report[i]) - onehot[i], t);
  return s;
}

function logAddExp(a: number, b: number): number {
  if (a === -Infinity) return b;
  if (b === -Infinity) return a;
  const m = Math.max(a, b);
  return m + Math.log(Math.exp(a - m) + Math.exp(b - m));
}

/** log P(report | y) of a two-stage-sized stage-I report with discrete Laplace (§9.6): per
 * component the mixture (1−f)·P(z | e_k) + f·P(z | e_{k+1}) over the rounding to the B + 1 grid
 * points, each P the one-hot vector plus DLap(2/ε_c) per entry. */
export function gridLogLikelihood(y: readonly number[], report: readonly bigint[], params: readonly Alg1Params[],
  epsC: number): number {
  const t = laplaceScaleValue(laplaceScale(2, epsC));
  let pos = 0;
  let s = 0;
  params.forEach((p, c) => {
    const K = p.bins + 1;
    const x = ((clip(y[c], -p.bound, p.bound) + p.bound) / (2 * p.bound)) * p.bins;
    const k = Math.min(Math.floor(x), p.bins);
    const f = x - k;
    const at = (j: number): number => {
      let l = 0;
      for (let i = 0; i < K; i++) l += discreteLaplaceLogPmf(Number(report[pos + i]) - (i === j ? 1 : 0), t);
      return l;
    };
    const a = at(k);
    s += f > 0 ? logAddExp(Math.log1p(-f) + a, Math.log(f) + at(Math.min(k + 1, p.bins))) : a;
    pos += K;
  });
  return s;
}

/** log P(report | y) of a stage-II/SSL report: each coordinate is the two-point mixture
 * (1-f)·DLap(z - ⌊pos⌋) + f·DLap(z - ⌊pos⌋ - 1), f = pos - ⌊pos⌋. */
export function stage2LogLikelihood(y: readonly number[], report: readonly bigint[],
  intervals: readonly Interval[], epsC: number): number {
  const pos = gridPositions(y, intervals);
  const t = laplaceScaleValue(laplaceScale(GRID_STEPS, epsC));
  let s = 0;
  pos.forEach((p, c) => {
    const fl = Math.floor(p);
    const f = p - fl;
    const z = Number(report[c]);
    const a = discreteLaplaceLogPmf(z - fl, t);
    const b = discreteLaplaceLogPmf(z - fl - 1, t);
    s += logAddExp(Math.log1p(-f) + a, f > 0 ? Math.log(f) + b : -Infinity);
  });
  return s;
}
