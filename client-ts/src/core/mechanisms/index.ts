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
 * Adding a mechanism: one module here (design, sampler, exact probability), its twin in the
 * Python SDK (uldp.client.mechanisms) and the collector (uldp.collector.mechanisms), one line
 * in each registry, and its vectors (scripts/conformance_mechanisms.py).
 */
import type { FrequencyOracle, ScalarMechanism } from "./base.js";
import { Duchi } from "./duchi.js";
import { GRR } from "./grr.js";
import { HM } from "./hm.js";
import { LaplaceBins, LaplaceValues } from "./laplace.js";
import { OLH } from "./olh.js";
import { OUE } from "./oue.js";
import { PM } from "./pm.js";
import { SS } from "./ss.js";

export type { FrequencyOracle, ScalarMechanism } from "./base.js";
export { ceilDiv, coins, dyadic, EXP_CAP_UNITS, expLower, ONE, Ratio, ratioAtMost, unitsOf } from "./exact.js";
export { duchiDesign } from "./duchi.js";
export { grrDesign, grrValues, type GRRDesign } from "./grr.js";
export { HM_THRESHOLD_UNITS, hmAlpha } from "./hm.js";
export { hashKey, hashOf, olhDesign, SEED_BITS } from "./olh.js";
export { HALF, oueQ } from "./oue.js";
export { pmDesign, pmValues, type PMDesign } from "./pm.js";
export { binomial, ssDesign, type SSDesign } from "./ss.js";
export { Duchi, GRR, HM, LaplaceBins, LaplaceValues, OLH, OUE, PM, SS };

/** The mechanism of a task without a `mechanism` field. */
export const DEFAULT_MECHANISM = "laplace";

export const ORACLES: ReadonlyMap<string, FrequencyOracle> = new Map(
  [LaplaceBins, GRR, OUE, SS, OLH].map((m) => [m.name, m]));
export const SCALARS: ReadonlyMap<string, ScalarMechanism> = new Map(
  [LaplaceValues, Duchi, PM, HM].map((m) => [m.name, m]));

/** Every mechanism name, sorted. */
export const MECHANISM_NAMES: readonly string[] = [...new Set([...ORACLES.keys(), ...SCALARS.keys()])].sort();
