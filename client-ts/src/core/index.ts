/** @uldp/device core: the exact device computation, no Node-only dependency. */
export { ChaCha20Stream, RandomSource } from "./random.js";
export {
  discreteLaplace, discreteLaplaceLogPmf, EPS_DENOMINATOR, floorTimesPow2, laplaceScale,
  laplaceScaleValue, rationalEpsilon, randomizedRound, type LaplaceScale,
} from "./noise.js";
export {
  alg1Params, binIndex, binsFor, boundedParams, boundedParamsWithLog, clampInterval, clip,
  GRID_STEPS, heavyTailedParams, heavyTailedParamsWithLibm, type Alg1Params, type HeavyTailLibm,
} from "./params.js";
export { fwht, isPow2, nextPow2 } from "./hadamard.js";
export {
  gridEncode, gridPositions, oneHotBins, stage1LogLikelihood, stage1Report,
  stage2LogLikelihood, stage2Report, type Interval,
} from "./twoStage.js";
export { bytesToHex, f64FromHex, f64ToHex, hexToBytes } from "./encoding.js";
export { intervalsOf, KindRegistry, privatize, type Dataset, type Kind, type Mechanism } from "./kinds.js";
