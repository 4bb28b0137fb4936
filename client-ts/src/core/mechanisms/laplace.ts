/**
 * Discrete Laplace, the default mechanism of both families, as registry entries —
 * docs/device-protocol.md §9 (the reports), §5 (the sampler); Python:
 * uldp.client.mechanisms.laplace.
 *
 * The reports are those of ../twoStage.ts (every method before the other mechanisms existed):
 * stage-I bins are the one-hot vector of the bin plus DLap(2/ε_c) per entry; values are the
 * grid integer plus DLap(2^16/ε_c). A task without a `mechanism` field uses them, byte for
 * byte as before. Their probabilities are doubles (the pmf of DLap has irrational weights).
 */
import { discreteLaplace, discreteLaplaceLogPmf, laplaceScale, laplaceScaleValue } from "../noise.js";
import { GRID_STEPS } from "../params.js";
import type { RandomSource } from "../random.js";
import type { FrequencyOracle, OracleProbability, ScalarMechanism, ScalarProbability } from "./base.js";

const oneHot = (items: readonly number[], ks: readonly number[]): bigint[] =>
  items.flatMap((v, c) => Array.from({ length: ks[c] }, (_, j) => (j === v ? 1n : 0n)));

function plusNoise(x: readonly bigint[], sensitivity: number, eps: number, rng: RandomSource): bigint[] {
  const noise = discreteLaplace(laplaceScale(sensitivity, eps), x.length, rng);
  return x.map((v, i) => v + noise[i]);
}

/** Stage-I bins: one-hot of the bin plus DLap(2/ε_c) per entry (§9.1). */
export const LaplaceBins: FrequencyOracle = {
  name: "laplace",
  family: "oracle",
  length: (k) => k,
  limit: (_k, eps) => Math.floor(1 + (60 * 2) / eps) + 1,
  privatize(item, k, eps, rng) {
    return plusNoise(oneHot([item], [k]), 2, eps, rng);
  },
  /** One-hot vectors concatenated, then one noise call for all entries (§9.1). */
  privatizeMany(items, ks, eps, rng) {
    return plusNoise(oneHot(items, ks), 2, eps, rng);
  },
};

/** Exact P(report | input) of LaplaceBins, for the likelihood-ratio audits (never on a device's path). */
export const laplaceBinsProbability: OracleProbability = (report, item, k, eps) => {
  const t = laplaceScaleValue(laplaceScale(2, eps));
  let s = 0;
  for (let j = 0; j < k; j++) s += discreteLaplaceLogPmf(Number(report[j]) - (j === item ? 1 : 0), t);
  return Math.exp(s);
};

/** Values: the grid integer plus DLap(2^16/ε_c) (§9.2). */
export const LaplaceValues: ScalarMechanism = {
  name: "laplace",
  family: "scalar",
  limit: (eps) => Math.floor(GRID_STEPS * (1 + 60 / eps)) + 1,
  privatize(g, eps, rng) {
    return plusNoise(g, GRID_STEPS, eps, rng);
  },
};

/** Exact P(report | input) of LaplaceValues, for the likelihood-ratio audits (never on a device's path). */
export const laplaceValuesProbability: ScalarProbability = (z, g, eps) => {
  const t = laplaceScaleValue(laplaceScale(GRID_STEPS, eps));
  return Math.exp(discreteLaplaceLogPmf(Number(z - g), t));
};
