/**
 * The public task (schema uldp.task/2): parsing and every refusal rule, in the order of the
 * Python SDK's `TaskSpec.from_json` + `validate_task` (docs/device-protocol.md §11, §14).
 * A refusal is a `TaskRefused` with a stable `code`; the same task gets the same code in every
 * SDK (conformance/v1/refusals.json).
 */
import { isJInt, isJNum, isJObject, JInt, JsonError, type JObject, type JValue, parseJson, toDouble } from "./json.js";
import { nextPow2 } from "./hadamard.js";
import { rationalEpsilon } from "./noise.js";
import type { SealKey } from "./sealFormat.js";
import { supportBins } from "./params.js";
import { KINDS, kindOf, METHODS } from "./registry.js";
import {
  DEFAULT_MECHANISM, type FrequencyOracle, MECHANISM_NAMES, ORACLES, SCALARS, type ScalarMechanism,
} from "./mechanisms/index.js";

export const SCHEMA = "uldp.task/2";
export const MAX_REPORT_VALUES = 1 << 18;
export const MAX_DIM = 1 << 16;
export const MAX_GAUSSIAN_FRAME_DIM = 1024;
export const MAX_BINS = 1 << 16;
export const MAX_GRID_CELLS = 1 << 20;
export const MAX_M_REF = 1 << 20;
/** Records a device samples for one report (method oracle, §17.10). */
export const MAX_RECORDS = 1 << 10;

export type RefusalCode =
  | "digest" | "json" | "schema" | "field" | "query" | "kind" | "unregistered" | "method" | "stage" | "epsilon"
  | "limit" | "param" | "over-budget" | "seal" | "dataset" | "declaration" | "length" | "budget"
  | "participated";

export class TaskRefused extends Error {
  override name = "TaskRefused";
  constructor(message: string, readonly code: RefusalCode = "param") {
    super(message);
  }
}

export const refuse = (code: RefusalCode, message: string): never => {
  throw new TaskRefused(message, code);
};

export type Method = "two-stage" | "two-stage-sized" | "ssl" | "baseline-a" | "baseline-b" | "oracle" | "hadamard";
export const KIND_NAMES = ["classify", "distribution", "mean", "mean-by", "mean-l1", "mean-l2", "mean-linf", "regress", "sgd"] as const;
/** Groups a grouped mean (kind mean-by) may have: 2·G components (Python: MAX_GROUPS). */
export const MAX_GROUPS = 1 << 10;
export type KindName = (typeof KIND_NAMES)[number];
const METHOD_STAGES: Record<Method, readonly number[]> = {
  "two-stage": [1, 2], "two-stage-sized": [1, 2], ssl: [0], "baseline-a": [0], "baseline-b": [0],
  oracle: [0], hadamard: [1, 2, 3],
};
/** The kinds whose components are Hadamard coefficients (method hadamard, §17.13). */
export const HADAMARD_KINDS: readonly KindName[] = ["distribution", "mean-l1"];

/** Method hadamard's stage 1 of a categorical kind is the report of method oracle (§17.13). */
export function centreByRecords(method: Method, stage: number, kind: KindName, dim: number): boolean {
  return method === "hadamard" && stage === 1 && kindCategories(kind, dim) !== null;
}
export const GRADIENT_MODELS = ["least_squares", "logistic", "quadratic", "ridge"] as const;

/** A validated task, with every number as the double (or exact integer) the device uses. */
export interface Task {
  readonly text: string;
  readonly queryId: string;
  readonly kind: KindName;
  readonly method: Method;
  readonly stage: number;
  readonly epsilon: number;
  readonly epsC: number;
  readonly components: readonly number[];
  readonly dim: number;
  readonly bound: number | null;
  readonly statBound: number | null;
  readonly bins: readonly (readonly [number, number, number])[];
  readonly intervals: readonly (readonly [number, number])[];
  readonly frameKind: string;
  readonly frameSeed: bigint;
  readonly kashinLevel: number;
  readonly kashinDelta: number;
  readonly mRef: number;
  readonly virtualGroups: readonly (readonly number[])[];
  readonly virtualEps: readonly number[];
  readonly virtualOffset: bigint;
  readonly extra: JObject;
  /** The report mechanism (§17): a frequency oracle (stage I, oracle) or a scalar randomizer. */
  readonly mechanism: string;
  /** Method oracle: records sampled per report (1 for every other method). */
  readonly records: number;
  /** Shuffle mode: the collector's HPKE key the report is sealed to (§16); null otherwise. */
  readonly seal: SealKey | null;
  /** The public range [lo, hi] of one value (kinds mean, mean-linf; §11.2), or null: the
   * range is [-bound, bound]. */
  readonly range: readonly [number, number] | null;
  /** Kind mean-by: the device's categorical dataset of its group (§12.3); null otherwise. */
  readonly by: string | null;
  /** Number of components of the kind (C). */
  readonly nComponents: number;
  /** ε units the report spends and its length. */
  readonly units: bigint;
  readonly reportLength: number;
}

// ---- parsing (TaskSpec.from_dict) --------------------------------------------------------
const DEFAULTS: Record<string, JValue> = {
  dim: new JInt(1n), bound: null, stat_bound: null, bins: [], intervals: [], frame_kind: "gaussian",
  frame_seed: new JInt(0n), kashin_level: 4.0, kashin_delta: 0.5, m_ref: new JInt(1n),
  virtual_groups: [], virtual_eps: [], virtual_offset: new JInt(0n), extra: new Map(),
  mechanism: DEFAULT_MECHANISM, records: new JInt(1n),
};
const REQUIRED = ["query_id", "kind", "method", "stage", "epsilon", "eps_c", "components"];
const KNOWN = new Set([...REQUIRED, ...Object.keys(DEFAULTS), "seal", "range", "by"]);

/** The raw fields of a task text (parse, schema tag, known fields, list shapes). */
export function parseTaskFields(text: string): Map<string, JValue> {
  let v: JValue;
  try {
    v = parseJson(text);
  } catch (e) {
    if (e instanceof JsonError) refuse("json", `task is not JSON: ${e.message}`);
    throw e;
  }
  if (!isJObject(v)) refuse("json", "a task is a JSON object");
  const d = new Map(v as JObject);
  const schema = d.get("schema");
  d.delete("schema");
  if (schema !== SCHEMA) refuse("schema", `task schema ${String(schema)} is not ${SCHEMA}`);
  const unknown = [...d.keys()].filter((k) => !KNOWN.has(k)).sort();
  if (unknown.length) refuse("field", `unknown task fields: ${unknown.join(", ")}`);
  for (const [k, t] of SHAPES) if (d.has(k) && !isType(d.get(k), t)) refuse("field", `${k} must be ${typeName(t)}`);
  for (const k of REQUIRED) if (!d.has(k)) refuse("field", `task lacks ${k}`);
  for (const [k, def] of Object.entries(DEFAULTS)) if (!d.has(k)) d.set(k, def);
  return d;
}

// ---- validation (validate_task) ------------------------------------------------------------
/** Each field's JSON type (§11), one table: s string, i integer, n number, n? number or null,
 * [i] / [n] list of integers / numbers, [[i]] / [[n]] list of lists, o object. */
const FIELD_TYPES: [string, string][] = [
  ["query_id", "s"], ["kind", "s"], ["method", "s"], ["frame_kind", "s"], ["mechanism", "s"],
  ["dim", "i"], ["stage", "i"], ["frame_seed", "i"], ["virtual_offset", "i"], ["m_ref", "i"], ["records", "i"],
  ["epsilon", "n"], ["eps_c", "n"], ["kashin_level", "n"], ["kashin_delta", "n"],
  ["bound", "n?"], ["stat_bound", "n?"], ["components", "[i]"], ["bins", "[[n]]"], ["intervals", "[[n]]"],
  ["virtual_eps", "[n]"], ["virtual_groups", "[[i]]"], ["extra", "o"],
];
/** The shapes checked while parsing, before the query's id is compared (* = any value). */
const SHAPES: [string, string][] = [
  ["seal", "o"], ["by", "s"], ["components", "[*]"], ["virtual_eps", "[*]"], ["range", "[*]"], ["bins", "[[*]]"],
  ["intervals", "[[*]]"], ["virtual_groups", "[[*]]"],
];
const NAMES: Record<string, string> = { s: "string", i: "integer", n: "number", o: "object", "*": "" };
/** "a list of lists of numbers" for "[[n]]", "a number or null" for "n?". */
const typeName = (t: string): string => t[0] === "["
  ? `a list${t[1] === "*" ? "" : ` of ${typeName(t.slice(1, -1)).replace(/^an? (\w+)/, "$1s")}`}`
  : `${t[0] === "i" || t[0] === "o" ? "an" : "a"} ${NAMES[t[0]]}${t[1] ? " or null" : ""}`;
const isType = (v: JValue | undefined, t: string): boolean => {
  if (t[0] === "[") return Array.isArray(v) && v.every((x) => isType(x, t.slice(1, -1)));
  return t === "*" || (t === "s" ? typeof v === "string" : t === "i" ? isJInt(v) : t === "o" ? isJObject(v)
    : v === null ? t === "n?" : isJNum(v));
};

function checkTypes(f: Map<string, JValue>): void {
  for (const [k, t] of FIELD_TYPES) if (!isType(f.get(k), t)) refuse("field", `${k} must be ${typeName(t)}`);
  const range = f.get("range") as JValue[] | undefined;
  if (range !== undefined && (range.length !== 2 || !range.every(isJNum))) refuse("field", "range must be [lo, hi]");
}

export const big = (v: JValue | undefined): bigint => (v as JInt).value;
export const dbl = (v: JValue | undefined): number => toDouble(v as JInt | number);

/** ε units: floor(ε·2^24) for 2^-24 <= ε <= 2^20 (Python: budget.epsilon_units). */
export function epsilonUnits(v: JInt | number, name: string): bigint {
  try {
    return rationalEpsilon(toDouble(v), name);
  } catch (e) {
    return refuse("epsilon", (e as Error).message);
  }
}

/** A finite number > 0 (>= 0 with `zero`), else a refusal naming the field. */
export function finitePositive(name: string, v: JValue, zero = false): number {
  const x = isJNum(v) ? toDouble(v) : NaN;
  if (!Number.isFinite(x) || x < 0 || (x === 0 && !zero)) refuse("param", `${name} must be a finite number ${zero ? ">=" : ">"} 0`);
  return x;
}

/** extra[key]: a list of exactly dim finite numbers. */
export function extraNumbers(extra: JObject, key: string, dim: number, dflt?: number): number[] {
  const raw = extra.has(key) ? extra.get(key) : dflt === undefined ? undefined : new Array(dim).fill(dflt);
  const out = Array.isArray(raw) && raw.every(isJNum) ? raw.map(toDouble) : [];
  if (out.length !== dim || !out.every(Number.isFinite)) refuse("param", `extra['${key}'] must be ${dim} finite numbers`);
  return out;
}

/** (M, lo, hi, K_H) of a classify/regress task. */
export function gridSpec(extra: JObject, dim: number): { M: number; lo: number[]; hi: number[]; K: number } {
  const M = extra.get("grid");
  if (!isJInt(M) || M.value < 1n) refuse("param", "extra['grid'] (cells per axis) must be an integer >= 1");
  let cells = 1n;
  for (let s = 0; s < dim; s++) {
    cells *= (M as JInt).value;
    if (cells > BigInt(MAX_GRID_CELLS)) refuse("limit", `grid M^d is over ${MAX_GRID_CELLS}`);
  }
  const lo = extraNumbers(extra, "lo", dim, 0.0);
  const hi = extraNumbers(extra, "hi", dim, 1.0);
  for (let s = 0; s < dim; s++) {
    if (!(hi[s] > lo[s]) || !Number.isFinite(hi[s] - lo[s])) refuse("param", "the feature box needs lo < hi on every axis");
  }
  return { M: Number((M as JInt).value), lo, hi, K: nextPow2(Number(cells)) };
}

export function checkFrame(f: ReadonlyMap<string, JValue>, identity = false): void {
  finitePositive("kashin_level", f.get("kashin_level")!);
  const delta = dbl(f.get("kashin_delta"));
  if (!(delta > 0 && delta <= 1)) refuse("param", "kashin_delta must be in (0, 1]");
  const fk = f.get("frame_kind");
  if (identity && fk === "identity") return;
  if (fk !== "gaussian" && fk !== "hadamard") refuse("param", `frame_kind must be gaussian, hadamard${identity ? " or identity" : ""}`);
}

const HEAVY_FORM = new Set(["mean", "mean-linf", "mean-l2"]);
/** Kinds whose values may have a public range [lo, hi] (Python: Kind.ranged). */
const RANGED = new Set(["mean", "mean-linf", "mean-by"]);

/** check_range (§11.2): a ranged kind, a bound, finite lo < hi, bound = hi/2 - lo/2 exactly. */
function checkRange(kind: KindName, f: Map<string, JValue>): void {
  const range = f.get("range") as JValue[];
  if (!RANGED.has(kind)) refuse("param", `kind ${kind} has no range`);
  const [lo, hi] = range.map(dbl);
  if (!(lo < hi) || !Number.isFinite(hi - lo)) refuse("param", "range needs finite lo < hi");
  if (f.get("bound") === null || dbl(f.get("bound")) !== hi / 2 - lo / 2) refuse("param", `bound must be hi/2 - lo/2 = ${hi / 2 - lo / 2}`);
}
const NEEDS_BOUND = new Set(["mean", "mean-linf", "mean-l2", "mean-l1"]);

/** Kind.check: the kind's public values; returns C. */
function kindComponents(kind: KindName, f: Map<string, JValue>, dim: number): number {
  const no = (what: string): never => refuse("param", `kind ${kind} ${what}`);
  if (kind === "mean-by" && f.get("method") !== "ssl") no("runs with method ssl only");
  if (f.has("by") !== (kind === "mean-by")) no(kind === "mean-by" ? "needs by (its groups' dataset)" : "takes no by");
  if (f.get("stat_bound") !== null && !HEAVY_FORM.has(kind)) no("takes no stat_bound");
  if (f.get("bound") === null && f.get("stat_bound") === null && NEEDS_BOUND.has(kind)) no("needs a bound");
  for (const k of ["bound", "stat_bound"]) if (f.get(k) !== null) finitePositive(k, f.get(k)!);
  if (f.has("range")) checkRange(kind, f);
  return kindOf(kind).components(f, dim, no);
}

const finite = (v: JValue): boolean => isJNum(v) && Number.isFinite(toDouble(v));

function checkBins(f: Map<string, JValue>, nComps: number): void {
  const bins = f.get("bins") as JValue[][];
  if ((f.get("intervals") as JValue[]).length || bins.length !== nComps) refuse("param", `a stage-I task needs ${nComps} bins, no intervals`);
  for (const row of bins) {
    const [D, h, B] = row;
    if (row.length !== 3 || !(finite(D) && finite(h) && dbl(D) > 0 && dbl(h) > 0) || !isJInt(B) || B.value < 1n) {
      refuse("param", "bins are [D, h, B]: D, h > 0, B >= 1");
    }
    if ((B as JInt).value > BigInt(MAX_BINS)) refuse("limit", `a component has at most ${MAX_BINS} bins`);
    const want = supportBins(dbl(D), dbl(h));
    if (want === null || BigInt(want) !== (B as JInt).value) refuse("param", `B must be max(1, ceil(2D/h - 1e-9)) = ${want}`);
  }
}

export function checkIntervals(f: ReadonlyMap<string, JValue>, nComps: number): void {
  const ivs = f.get("intervals") as JValue[][];
  if ((f.get("bins") as JValue[]).length || ivs.length !== nComps) refuse("param", `the task needs ${nComps} intervals, no bins`);
  for (const row of ivs) {
    const [lo, hi] = row;
    if (row.length !== 2 || !(finite(lo) && finite(hi) && dbl(lo) < dbl(hi) && Number.isFinite(dbl(hi) - dbl(lo)))) {
      refuse("param", "intervals are [lo, hi] with finite lo < hi");
    }
  }
}

/** The number of categories A of a categorical kind's sample (only `distribution`: dim), or
 * null (Python: Kind.categories). Method oracle samples records of such a kind. */
export function kindCategories(kind: KindName, dim: number): number | null {
  return kind === "distribution" ? dim : null;
}

/** Only method oracle samples several records. */
export function singleRecord(f: ReadonlyMap<string, JValue>): void {
  if (big(f.get("records")) !== 1n) refuse("param", `method ${String(f.get("method"))} takes records = 1 only`);
}

/** The task's mechanism from a registry (a refusal naming the registry's when it is not there). */
function mechanismOf<M>(registry: ReadonlyMap<string, M>, name: string, what: string): M {
  return registry.get(name) ?? refuse("param", `this task reports ${what}: mechanism ${[...registry.keys()].sort().join(", ")}, not ${name}`);
}
/** The task's frequency oracle (a refusal when its mechanism is not one). */
export const oracleOf = (name: string): FrequencyOracle => mechanismOf(ORACLES, name, "categories");
/** The task's scalar randomizer (a refusal when its mechanism is not one). */
export const scalarOf = (name: string): ScalarMechanism => mechanismOf(SCALARS, name, "values");

/** Step 10 of §14.1: the method's own rules, in the Python SDK's order. */
function checkMethod(f: Map<string, JValue>, m: Method, stage: number, kind: KindName, dim: number, C: number,
  comps: bigint[]): void {
  if ((m === "two-stage" || m === "two-stage-sized") && stage === 1) {
    singleRecord(f);
    oracleOf(f.get("mechanism") as string);
    checkBins(f, comps.length);
    if (m === "two-stage-sized" && (f.get("bins") as JInt[][]).some((r) => r[2].value > BigInt(MAX_BINS - 1))) {
      refuse("limit", `two-stage-sized has at most ${MAX_BINS - 1} bins`);
    }
  } else if (m === "baseline-a") {
    METHODS[m]!.check(f, stage, kind, dim, C, comps);
  } else if (m === "oracle" || m === "hadamard") {
    // their rules come with the kinds that take them (../kinds/distribution.ts, vector.ts): a
    // build without such a kind refuses the method here (with every kind: the method's own rule)
    (METHODS[m] ?? refuse("param", `method ${m} takes no kind of this build's, not ${kind}`)).check(f, stage, kind, dim, C, comps);
  } else {
    singleRecord(f);
    scalarOf(f.get("mechanism") as string);
    checkIntervals(f, comps.length);
  }
}

/** Slot j of a baseline-A report serves virtual group (offset + j) mod G. */
export function slotGroup(offset: bigint, j: number, G: number): number {
  return Number((offset + BigInt(j)) % BigInt(G));
}

function spendAndLength(f: Map<string, JValue>, method: Method, stage: number, dim: number): [bigint, number] {
  const comps = (f.get("components") as JValue[]).length;
  const epsC = f.get("eps_c") as JInt | number;
  if (method === "oracle" || centreByRecords(method, stage, f.get("kind") as KindName, dim)) {
    const records = Number(big(f.get("records")));
    const oracle = oracleOf(f.get("mechanism") as string);
    return [BigInt(records) * epsilonUnits(epsC, "eps_c"), records * oracle.length(dim, toDouble(epsC))];
  }
  if (method !== "baseline-a") {
    const units = BigInt(comps) * epsilonUnits(epsC, "eps_c");
    if ((method === "two-stage" || method === "two-stage-sized") && stage === 1) {
      // two-stage-sized: B_c + 1 grid points per component (§9.3)
      const extra = method === "two-stage-sized" ? 1 : 0;
      const oracle = oracleOf(f.get("mechanism") as string);
      const n = (f.get("bins") as JInt[][]).reduce((s, r) => s + oracle.length(Number(r[2].value) + extra, toDouble(epsC)), 0);
      return [units, n];
    }
    if (method === "hadamard" && stage === 2) {
      return [units, comps * oracleOf(f.get("mechanism") as string).length(2, toDouble(epsC))];
    }
    return [units, comps];
  }
  return METHODS["baseline-a"]!.spend!(f);
}

/**
 * How a task's "seal" object is checked: the key, or why it is refused (code `seal`) —
 * ./sealFormat.ts's `parseSeal`, passed in so that a device that cannot seal carries none of
 * it (the core's entry points, ./index.ts, pass it; a Device loads it with the sealing chunk).
 * Without it a sealed task is refused, code `seal`.
 */
export type SealCheck = (v: JValue) => SealKey | string;
const cannotSeal: SealCheck = () => "this device has not loaded shuffle mode's seal check";

/** validate_task: every public rule, in order; returns the typed task. */
export function validateFields(text: string, f: Map<string, JValue>, sealCheck: SealCheck = cannotSeal): Task {
  checkTypes(f);
  const kind = f.get("kind") as string;
  if (!(KIND_NAMES as readonly string[]).includes(kind)) refuse("kind", `unknown kind ${kind}`);
  if (!KINDS[kind as KindName]) refuse("unregistered", `kind ${kind} is not registered in this app build (import @uldp/device/kinds/…)`);
  const method = f.get("method") as string;
  if (!(method in METHOD_STAGES)) refuse("method", `unknown method ${method}`);
  const m = method as Method;
  const stageBig = big(f.get("stage"));
  if (!METHOD_STAGES[m].some((s) => BigInt(s) === stageBig)) refuse("stage", `method ${m} has no stage ${stageBig}`);
  const stage = Number(stageBig);
  if ((m === "baseline-a" || m === "baseline-b") && !METHODS[m]) {
    refuse("unregistered", `method ${m} is not registered in this app build (import @uldp/device/methods/baselines)`);
  }
  const mech = f.get("mechanism") as string;
  if (!ORACLES.has(mech) && !SCALARS.has(mech)) {
    refuse("method", `unknown mechanism ${mech} (not ${MECHANISM_NAMES.join(", ")})`);
  }
  const budget = epsilonUnits(f.get("epsilon") as JInt | number, "epsilon");
  epsilonUnits(f.get("eps_c") as JInt | number, "eps_c");
  const dimBig = big(f.get("dim"));
  if (dimBig < 1n) refuse("param", "dim must be >= 1");
  if (dimBig > BigInt(MAX_DIM)) refuse("limit", `dim must be <= ${MAX_DIM}`);
  const dim = Number(dimBig);
  if (big(f.get("virtual_offset")) < 0n || big(f.get("m_ref")) < 1n || big(f.get("records")) < 1n) {
    refuse("param", "virtual_offset must be >= 0, m_ref and records >= 1");
  }
  if (big(f.get("records")) > BigInt(MAX_RECORDS)) refuse("limit", `records must be <= ${MAX_RECORDS}`);
  if (f.get("frame_kind") === "gaussian" && (kind === "mean-l2" || kind === "sgd") && dim > MAX_GAUSSIAN_FRAME_DIM) {
    refuse("limit", `a gaussian frame needs dim <= ${MAX_GAUSSIAN_FRAME_DIM}`);
  }
  const C = kindComponents(kind as KindName, f, dim);
  const comps = (f.get("components") as JInt[]).map((c) => c.value);
  if (!comps.length || new Set(comps).size !== comps.length || comps.some((c) => c < 0n || c >= BigInt(C))) {
    refuse("param", `components must be distinct, at least one, in [0, ${C})`);
  }
  checkMethod(f, m, stage, kind as KindName, dim, C, comps);
  const [units, length] = spendAndLength(f, m, stage, dim);
  if (units > budget) refuse("over-budget", `the task spends ${units} units of 2^-24, over its query's ${budget}`);
  if (length > MAX_REPORT_VALUES) refuse("limit", `a report of ${length} values is over the limit ${MAX_REPORT_VALUES}`);
  const seal = f.has("seal") ? sealCheck(f.get("seal")!) : null;
  if (typeof seal === "string") return refuse("seal", seal);
  const range = f.has("range") ? (f.get("range") as JValue[]).map((v) => dbl(v)) as [number, number] : null;
  const by = f.has("by") ? (f.get("by") as string) : null;
  return { ...typed(text, f, kind as KindName, m, stage, dim, C, units, length), seal, range, by };
}

function typed(text: string, f: Map<string, JValue>, kind: KindName, method: Method, stage: number,
  dim: number, C: number, units: bigint, reportLength: number): Omit<Task, "seal" | "range" | "by"> {
  const num = (k: string): number | null => (f.get(k) === null ? null : dbl(f.get(k)));
  return {
    text, queryId: f.get("query_id") as string, kind, method, stage,
    epsilon: dbl(f.get("epsilon")), epsC: dbl(f.get("eps_c")),
    components: (f.get("components") as JInt[]).map((c) => Number(c.value)), dim,
    bound: num("bound"), statBound: num("stat_bound"),
    bins: (f.get("bins") as JValue[][]).map((r) => [dbl(r[0]), dbl(r[1]), Number(big(r[2]))] as const),
    intervals: (f.get("intervals") as JValue[][]).map((r) => [dbl(r[0]), dbl(r[1])] as const),
    frameKind: f.get("frame_kind") as string, frameSeed: big(f.get("frame_seed")),
    kashinLevel: dbl(f.get("kashin_level")), kashinDelta: dbl(f.get("kashin_delta")),
    mRef: Number(big(f.get("m_ref"))), mechanism: f.get("mechanism") as string, records: Number(big(f.get("records"))),
    virtualGroups: (f.get("virtual_groups") as JInt[][]).map((g) => g.map((c) => Number(c.value))),
    virtualEps: (f.get("virtual_eps") as (JInt | number)[]).map(toDouble),
    virtualOffset: big(f.get("virtual_offset")), extra: f.get("extra") as JObject,
    nComponents: C, units, reportLength,
  };
}

/** Parse and validate a task text (TaskSpec.from_json + validate_task). */
export function parseTask(text: string, sealCheck?: SealCheck): Task {
  return validateFields(text, parseTaskFields(text), sealCheck);
}
