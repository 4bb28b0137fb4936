/**
 * The piecewise mechanism (PM) on a fixed-point grid, device half — docs/device-protocol.md
 * §17.8, docs/mechanisms.md (PM); Python: uldp.client.mechanisms.pm.
 *
 * Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, ICDE 2019, §3.2 (Algorithm 2): the output is
 * uniform on [−C, C] with a higher density on a window that covers a share 1/(e^{ε/2} + 1) of
 * the range and slides linearly with the input.
 *
 * Discretized exactly: the input is the grid integer g ∈ {0, …, 2^16}; the output an integer
 * j ∈ [0, N), N = 2^16 + W, window [g, g + W):
 *  - W = max(1, ⌊2^80 / S_½⌋) (⌊2^16 / e^{ε/2}⌋), S_½ = S(⌊N_ε/2⌋);
 *  - the window holds the output with probability P_w/2^64, P_w = ⌊2^64·S·W / (S·W + 2^80)⌋;
 *    each window cell has P_w/(2^64·W), each of the 2^16 other cells (2^64 − P_w)/2^80, and
 *    the design checks their ratio (both ways) against S/2^64 exactly.
 *
 * Draws, for the entries of a report in order: one word each (w < P_w: in the window); then
 * one below(W) call over the entries in the window (j = g + u); then one below(2^16) call over
 * the others (r; j = r if r < g else r + W).
 */
import { GRID_STEPS } from "../params.js";
import type { RandomSource } from "../random.js";
import type { ScalarMechanism, ScalarProbability } from "./base.js";
import { coins, designCheck, expLower, memo, ONE, Ratio, unitsOf, where } from "./exact.js";

const STEPS = BigInt(GRID_STEPS);
const TWO80 = 1n << 80n;

export interface PMDesign {
  /** window cells */
  readonly W: bigint;
  /** P(output in the window) = P_w / 2^64 */
  readonly Pw: bigint;
  /** N = 2^16 + W output cells */
  readonly cells: bigint;
}

export const pmDesign = memo((units: bigint): PMDesign => {
  const S = expLower(units);
  const Shalf = expLower(units / 2n);
  let W = TWO80 / Shalf;
  if (W < 1n) W = 1n;
  const Pw = (ONE * S * W) / (S * W + TWO80);
  const inside = Pw * STEPS;
  const outside = W * (ONE - Pw);
  designCheck(Pw > 0n && Pw < ONE && W >= 1n && W <= STEPS && inside * ONE <= S * outside && outside * ONE <= S * inside,
    "PM", units);
  return { W, Pw, cells: STEPS + W };
});

/** PM outputs of the grid values g (a list, §17.8): the window words of every entry, then the
 * in-window draws, then the others. */
export function pmValues(g: readonly bigint[], d: PMDesign, rng: RandomSource): bigint[] {
  const inside = coins(rng, g.map(() => d.Pw));
  const out = [...g];
  const ins = where(inside, true);
  const outs = where(inside, false);
  const u = rng.below(d.W, ins.length);
  ins.forEach((i, j) => { out[i] = g[i] + u[j]; });
  const r = rng.below(STEPS, outs.length);
  outs.forEach((i, j) => { out[i] = r[j] < g[i] ? r[j] : r[j] + d.W; });
  return out;
}

export const PM: ScalarMechanism = {
  name: "pm",
  family: "scalar",
  limit: (eps) => Number(pmDesign(unitsOf(eps)).cells - 1n),
  privatize(g, eps, rng) {
    return pmValues(g, pmDesign(unitsOf(eps)), rng);
  },
};

/** Exact P(report | input) of PM, for the likelihood-ratio audits (never on a device's path). */
export const pmProbability: ScalarProbability = (z, g, eps) => {
  const d = pmDesign(unitsOf(eps));
  if (!(z >= 0n && z < d.cells)) return Ratio.ZERO;
  if (g <= z && z < g + d.W) return new Ratio(d.Pw, ONE * d.W);
  return new Ratio(ONE - d.Pw, ONE * STEPS);
};
