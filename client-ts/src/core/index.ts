/** @uldp/device core: the exact device computation, no Node-only dependency. */
import { checkTask as rawCheckTask, type LedgerCheck, type TaskMessageLike } from "./check.js";
import type { DatasetSchema } from "./dataset.js";
import type { JValue } from "./json.js";
import { keyIdWith, sealCheckWith, type SealKey } from "./sealFormat.js";
import { sha256 } from "./sha256.js";
import { parseTask as rawParseTask, type Task, validateFields as rawValidateFields } from "./task.js";
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
  MAX_M_REF, MAX_RECORDS, MAX_REPORT_VALUES, oracleOf, scalarOf, parseTaskFields, SCHEMA, TaskRefused,
  type KindName, type SealCheck, type Method, type RefusalCode, type Task,
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
export { checkDeclaration, type LedgerCheck, taskDigest, type TaskMessageLike } from "./check.js";
// shuffle mode's formats and checks; the HPKE sealing itself (hpkeSeal, sealReport: the only
// curve code) is the entry @uldp/device/seal (./seal.ts), loaded by a Device only when it seals
export { isLowOrder, sealedLength, type SealKey } from "./sealFormat.js";
/** A task's "seal" object checked: the key, or the reason it is refused (code `seal`). */
export const parseSeal: (v: JValue) => SealKey | string = sealCheckWith(sha256);
/** The key id of a raw X25519 public key: the first 16 hex digits of its SHA-256. */
export const keyIdOf = (publicKey: Uint8Array): string => keyIdWith(sha256, publicKey);

// the task rules with shuffle mode's seal check (./task.ts and ./check.ts take it as a parameter,
// so that a Device that never seals carries none of it; here it is always passed)
/** Parse and validate a task text (TaskSpec.from_json + validate_task), a "seal" object checked. */
export const parseTask = (text: string): Task => rawParseTask(text, parseSeal);
/** validate_task: every public rule, in order, a "seal" object checked; returns the typed task. */
export const validateFields = (text: string, f: Map<string, JValue>): Task => rawValidateFields(text, f, parseSeal);
/** Every check, in order (a "seal" object checked); returns the validated task and its ε units. */
export const checkTask = (msg: TaskMessageLike, datasets: ReadonlyMap<string, DatasetSchema>, ledger: LedgerCheck,
  opts: { shuffler?: boolean } = {}): { task: Task; units: bigint } => rawCheckTask(msg, datasets, ledger, { ...opts, sealCheck: parseSeal });
export { sealInfo, sealPlaintext } from "./sealPayload.js";
