/**
 * Duchi et al.'s one-bit randomizer of a bounded value, device half —
 * docs/device-protocol.md §17.7, docs/mechanisms.md (Duchi); Python:
 * uldp.client.mechanisms.duchi.
 *
 * Duchi, Jordan, Wainwright, JASA 113 (2018), §4.2.3 (the form of Wang et al., ICDE 2019,
 * §3.1): for t ∈ [−1, 1] report +C with probability 1/2 + t(e^ε − 1)/(2(e^ε + 1)), else −C.
 *
 * On the grid: the value is the grid integer g ∈ {0, …, 2^16}; the report is one bit
 * b = [w < P_min + D·g] (one word) with P_min = 2^15·⌈2^113 / (S + 2^64)⌉ (so
 * (2^64 − P_min)/P_min <= S/2^64 <= e^ε) and D = (2^64 − 2·P_min) / 2^16 (an integer).
 */
import { GRID_STEPS } from "../params.js";
import type { ScalarMechanism, ScalarProbability } from "./base.js";
import { ceilDiv, coins, designCheck, dyadic, expLower, memo, ONE, Ratio, unitsOf } from "./exact.js";

const STEPS = BigInt(GRID_STEPS);

/** [P_min, D]: P(b = 1 | g) = (P_min + D·g) / 2^64. */
export const duchiDesign = memo((units: bigint): readonly [bigint, bigint] => {
  const S = expLower(units);
  const Pmin = (1n << 15n) * ceilDiv(1n << 113n, S + ONE);
  const D = (ONE - 2n * Pmin) / STEPS;
  designCheck(Pmin > 0n && Pmin <= ONE / 2n && (ONE - Pmin) * ONE <= S * Pmin && Pmin + D * STEPS === ONE - Pmin,
    "Duchi", units);
  return [Pmin, D] as const;
});

export const Duchi: ScalarMechanism = {
  name: "duchi",
  family: "scalar",
  limit: () => 1,
  privatize(g, eps, rng) {
    const [Pmin, D] = duchiDesign(unitsOf(eps));
    return coins(rng, g.map((x) => Pmin + D * x)).map((b) => (b ? 1n : 0n));
  },
};

/** Exact P(report | input) of Duchi, for the likelihood-ratio audits (never on a device's path). */
export const duchiProbability: ScalarProbability = (z, g, eps) => {
  const [Pmin, D] = duchiDesign(unitsOf(eps));
  const p1 = dyadic(Pmin + D * g);
  return z === 1n ? p1 : z === 0n ? Ratio.ONE.sub(p1) : Ratio.ZERO;
};
