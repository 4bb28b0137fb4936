/**
 * Report mechanisms, device half, registered by name (docs/device-protocol.md §17,
 * docs/mechanisms.md; Python: uldp.client.mechanisms).
 *
 * A task's `mechanism` field (default `laplace`) names how its statistic becomes integers; the
 * device validates it and derives every probability itself (invariant 1):
 *  - frequency oracles (ORACLES) for categorical values — stage-I bins of every kind, a sampled
 *    record's category (method `oracle`): laplace, grr, oue, ss, olh;
 *  - scalar randomizers (SCALARS) for clamped values on the grid — stage II, SSL, baseline B:
 *    laplace, duchi, pm, hm.
 *
 * Adding a mechanism: one module here (design, sampler, exact probability), one line in each
 * registry below (the device's, and the audits' pairing it with its probability), its twin in
 * the Python SDK (uldp.client.mechanisms) and the collector (uldp.collector.mechanisms), and its
 * vectors (scripts/conformance_mechanisms.py).
 */
import type { FrequencyOracle, OracleProbability, ScalarMechanism, ScalarProbability } from "./base.js";
import { Duchi, duchiProbability } from "./duchi.js";
import { GRR, grrProbability } from "./grr.js";
import { HM, hmProbability } from "./hm.js";
import { LaplaceBins, laplaceBinsProbability, LaplaceValues, laplaceValuesProbability } from "./laplace.js";
import { OLH, olhProbability } from "./olh.js";
import { OUE, oueProbability } from "./oue.js";
import { PM, pmProbability } from "./pm.js";
import { SS, ssProbability } from "./ss.js";

export type { FrequencyOracle, OracleProbability, ScalarMechanism, ScalarProbability } from "./base.js";
export { ceilDiv, coins, dyadic, EXP_CAP_UNITS, expLower, ONE, Ratio, ratioAtMost, unitsOf } from "./exact.js";
export { duchiDesign } from "./duchi.js";
export { grrDesign, grrValues, type GRRDesign } from "./grr.js";
export { HM_THRESHOLD_UNITS, hmAlpha } from "./hm.js";
export { hashKey, hashOf, olhDesign, SEED_BITS } from "./olh.js";
export { HALF, oueQ } from "./oue.js";
export { pmDesign, pmValues, type PMDesign } from "./pm.js";
export { binomial, ssDesign, type SSDesign } from "./ss.js";
export { Duchi, GRR, HM, LaplaceBins, LaplaceValues, OLH, OUE, PM, SS };
export {
  duchiProbability, grrProbability, hmProbability, laplaceBinsProbability, laplaceValuesProbability, olhProbability,
  oueProbability, pmProbability, ssProbability,
};

/** The mechanism of a task without a `mechanism` field. */
export const DEFAULT_MECHANISM = "laplace";

export const ORACLES: ReadonlyMap<string, FrequencyOracle> = new Map(
  [LaplaceBins, GRR, OUE, SS, OLH].map((m) => [m.name, m]));
export const SCALARS: ReadonlyMap<string, ScalarMechanism> = new Map(
  [LaplaceValues, Duchi, PM, HM].map((m) => [m.name, m]));

/** Every mechanism name, sorted. */
export const MECHANISM_NAMES: readonly string[] = [...new Set([...ORACLES.keys(), ...SCALARS.keys()])].sort();

/** A mechanism with its exact pmf: what the likelihood-ratio audits use (tests only). */
export type AuditedOracle = FrequencyOracle & { readonly probability: OracleProbability };
export type AuditedScalar = ScalarMechanism & { readonly probability: ScalarProbability };

/** ORACLES and SCALARS, each paired with its exact probability (the audits' registries; no
 * device code reads them, so a bundle of a device leaves the pmfs out). */
export const AUDITED_ORACLES: ReadonlyMap<string, AuditedOracle> = /* @__PURE__ */ (() => new Map(([
  [LaplaceBins, laplaceBinsProbability], [GRR, grrProbability], [OUE, oueProbability], [SS, ssProbability],
  [OLH, olhProbability],
] as const).map(([m, probability]) => [m.name, { ...m, probability }])))();
export const AUDITED_SCALARS: ReadonlyMap<string, AuditedScalar> = /* @__PURE__ */ (() => new Map(([
  [LaplaceValues, laplaceValuesProbability], [Duchi, duchiProbability], [PM, pmProbability], [HM, hmProbability],
] as const).map(([m, probability]) => [m.name, { ...m, probability }])))();
