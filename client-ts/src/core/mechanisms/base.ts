/**
 * The two families of report mechanisms, device half (docs/device-protocol.md §17; Python:
 * uldp.client.mechanisms.base).
 *
 *  - A frequency oracle privatizes one categorical value v ∈ {0, …, k−1} (a sampled record's
 *    category, a stage-I bin) into a short integer report. It is pure ε-LDP between any two
 *    inputs, so a report over several components composes, and a report of a dataset's sampled
 *    record is ε-LDP for the whole dataset (a mixture of ε-LDP outputs).
 *  - A scalar randomizer privatizes one clamped value, already mapped to the public grid
 *    g ∈ {0, …, 2^16} by unbiased randomized rounding (§6), into one integer.
 *
 * Every mechanism derives its probabilities itself from the public (k, ε) (invariant 1) as
 * dyadic numerators checked against the certified lower bound of e^ε (./exact.ts). Beside its
 * sampler each module exports the exact probability of a report (`…Probability`: a Ratio;
 * discrete Laplace: a double) for the likelihood-ratio audits — a function of its own, so a
 * device's bundle, which never calls it, leaves it out (`AUDITED_ORACLES` / `AUDITED_SCALARS`
 * in ./index.ts pair them). One device at a time: the draws are the canonical ones of §17.
 */
import type { RandomSource } from "../random.js";
import type { Ratio } from "./exact.js";

export interface FrequencyOracle {
  readonly name: string;
  readonly family: "oracle";
  /** Integers in one report over k categories. */
  length(k: number, eps: number): number;
  /** Largest absolute report integer. */
  limit(k: number, eps: number): number;
  /** The report of one value `item` ∈ [0, k). */
  privatize(item: number, k: number, eps: number, rng: RandomSource): bigint[];
  /** The reports of several values (value c over ks[c] categories), concatenated (§17.11). */
  privatizeMany(items: readonly number[], ks: readonly number[], eps: number, rng: RandomSource): bigint[];
}

/** Exact P(report | item) of a frequency oracle (a Ratio; discrete Laplace: a double). */
export type OracleProbability = (report: readonly bigint[], item: number, k: number, eps: number) => Ratio | number;

export interface ScalarMechanism {
  readonly name: string;
  readonly family: "scalar";
  /** Largest absolute report integer. */
  limit(eps: number): number;
  /** One report integer per grid value g ∈ {0, …, 2^16}, drawn as a list (§17.7–§17.9). */
  privatize(g: readonly bigint[], eps: number, rng: RandomSource): bigint[];
}

/** Exact P(z | g) of a scalar randomizer (a Ratio; discrete Laplace: a double). */
export type ScalarProbability = (z: bigint, g: bigint, eps: number) => Ratio | number;

/** The component-by-component report of several values (every oracle but discrete Laplace,
 * which draws its noise for all entries in one call, §9.1). */
export function oneByOne(o: Pick<FrequencyOracle, "privatize">, items: readonly number[], ks: readonly number[],
  eps: number, rng: RandomSource): bigint[] {
  return items.flatMap((v, c) => o.privatize(v, ks[c], eps, rng));
}
