/**
 * The hybrid mechanism (HM), device half — docs/device-protocol.md §17.9,
 * docs/mechanisms.md (HM); Python: uldp.client.mechanisms.hm.
 *
 * Wang et al., ICDE 2019, §3.3 (Algorithm 3): with probability α run the piecewise mechanism,
 * otherwise Duchi et al.'s; α = 1 − e^{−ε/2} for ε > ε* ≈ 0.61 and α = 0 below. The branch is
 * chosen independently of the data, so the mixture (the branch visible in the report) is ε-LDP.
 *
 * Exact design: α = A/2^64 with A = 0 when N_ε < 10234102 (ε < 0.61), else
 * A = 2^64 − ⌈2^128 / S_½⌉ (α rounded down); the branches are ./pm.ts and ./duchi.ts at the
 * full ε. Report: j ∈ [0, N) for the PM branch, N + b for the Duchi branch (N = 2^16 + W).
 * Draws: one branch word per entry (w < A: PM); then the Duchi entries' words (in order); then
 * PM's draws over the PM entries (in order, §17.8).
 */
import type { ScalarMechanism, ScalarProbability } from "./base.js";
import { Duchi, duchiProbability } from "./duchi.js";
import { ceilDiv, coins, dyadic, expLower, memo, ONE, Ratio, unitsOf, where } from "./exact.js";
import { pmDesign, pmProbability, pmValues } from "./pm.js";

/** ε* = 0.61 in units of 2^-24 (⌈0.61 · 2^24⌉): below it HM is Duchi's mechanism. */
export const HM_THRESHOLD_UNITS = 10234102n;

/** A: the PM branch is taken with probability A/2^64. */
export const hmAlpha = memo((units: bigint): bigint =>
  (units < HM_THRESHOLD_UNITS ? 0n : ONE - ceilDiv(ONE * ONE, expLower(units / 2n))));

export const HM: ScalarMechanism = {
  name: "hm",
  family: "scalar",
  limit: (eps) => Number(pmDesign(unitsOf(eps)).cells + 1n),
  privatize(g, eps, rng) {
    const units = unitsOf(eps);
    const d = pmDesign(units);
    const pmBranch = coins(rng, g.map(() => hmAlpha(units)));
    const out = [...g];
    const du = where(pmBranch, false);
    const bits = Duchi.privatize(du.map((i) => g[i]), eps, rng);
    du.forEach((i, j) => { out[i] = d.cells + bits[j]; });
    const pm = where(pmBranch, true);
    const js = pmValues(pm.map((i) => g[i]), d, rng);
    pm.forEach((i, j) => { out[i] = js[j]; });
    return out;
  },
};

/** Exact P(report | input) of HM, for the likelihood-ratio audits (never on a device's path). */
export const hmProbability: ScalarProbability = (z, g, eps) => {
  const units = unitsOf(eps);
  const alpha = dyadic(hmAlpha(units));
  const N = pmDesign(units).cells;
  if (z >= N) return Ratio.ONE.sub(alpha).mul(duchiProbability(z - N, g, eps) as Ratio);
  return alpha.mul(pmProbability(z, g, eps) as Ratio);
};
