/** @uldp/device core: the exact device computation, no Node-only dependency. */
export { bernoulliRational, ChaCha20Stream, RandomSource, seededSource, utf8 } from "./random.js";
export {
  discreteLaplace, discreteLaplaceLogPmf, EPS_DENOMINATOR, floorTimesPow2, laplaceScale,
  laplaceScaleValue, MAX_EPSILON, rationalEpsilon, randomizedRound, type LaplaceScale,
} from "./noise.js";
export {
  alg1Params, binIndex, binsFor, supportBins, boundedParams, boundedParamsWithLog, clampInterval, clip,
  GRID_STEPS, heavyTailedParams, heavyTailedParamsWithLibm, type Alg1Params, type HeavyTailLibm,
} from "./params.js";
export { fwht, isPow2, nextPow2 } from "./hadamard.js";
export {
  binReports, gridCategories, gridEncode, gridLogLikelihood, gridPositions, gridReports, oneHotBins, valueReports, stage1LogLikelihood, stage1Report,
  stage2LogLikelihood, stage2Report, type Interval,
} from "./twoStage.js";
export { bytesToHex, f64FromHex, f64ToHex, hexToBytes } from "./encoding.js";
export { isJInt, isJNum, JInt, JsonError, parseJson, type JObject, type JValue } from "./json.js";
export { exp, frexp, guard, HEAVY_GUARD, ldexp, ln, norm, pow2, radial, scaledNorm, seqSum, uniformPm1 } from "./numerics.js";
export {
  analysis, FRAME_VERSION, frameDigest, frameSize, kashinCoefficients, kashinFrame, synthesis,
  type FrameKind, type KashinFrame,
} from "./kashin.js";
export {
  epsilonUnits, GRADIENT_MODELS, KIND_NAMES, kindCategories, MAX_BINS, MAX_DIM, MAX_GAUSSIAN_FRAME_DIM, MAX_GRID_CELLS,
  MAX_M_REF, MAX_RECORDS, MAX_REPORT_VALUES, oracleOf, parseTask, scalarOf, parseTaskFields, SCHEMA, TaskRefused, validateFields,
  type KindName, type Method, type RefusalCode, type Task,
} from "./task.js";
export { gradient, groupOf, hadamardRows, type KindImpl, statistics, usable } from "./kinds.js";
// the full entry answers every kind (an app that wants less imports @uldp/device/kinds/<family>)
export { ALL_KINDS, KINDS } from "../kinds/all.js";
export { type MethodReport, type MethodRules, registerKinds } from "./registry.js";
export * from "./mechanisms/index.js";
export { hadamardReport, outsideReports, uniformStatistic } from "./methods/hadamard.js";
export { oracleReport, sampleRecords } from "./methods/oracle.js";
export { computeReport, DataError, emptyReport, fallbacks, taskRows, type Samples } from "./report.js";
export { slotSources } from "./methods/baselines.js";
export {
  alignLabels, coerceValues, datasetSchema, type DatasetSchema, localDataset, type LocalDataset,
  parsePythonFloat, toFloat, type ValueKind,
} from "./dataset.js";
export { RETRYABLE, Status } from "./status.js";
export { type Trace, tracing } from "./trace.js";
export { checkDeclaration, checkTask, type LedgerCheck, taskDigest, type TaskMessageLike } from "./check.js";
// shuffle mode's formats and checks; the HPKE sealing itself (hpkeSeal, sealReport: the only
// curve code) is the entry @uldp/device/seal (./seal.ts), loaded by a Device only when it seals
export { isLowOrder, keyIdOf, parseSeal, sealedLength, type SealKey } from "./sealFormat.js";
export { sealInfo, sealPlaintext } from "./sealPayload.js";
