/**
 * The query kinds, device half: the user statistic of one local dataset
 * (docs/device-protocol.md §12–13; Python: uldp.client.kinds). One user at a time, in the
 * canonical order of uldp.client.numerics.
 *
 * A user's data are rows: the sample's d values (1 for the scalar kinds), plus the label as a
 * last column for the labelled kinds. A row is *usable* iff every entry is finite (and, for
 * `distribution`, the value is an integer in [0, A)). Unusable rows are ignored: a statistic
 * sees them as rows of zeros that do not count.
 */
import { fwht, nextPow2 } from "./hadamard.js";
import { type JInt, type JValue, toDouble } from "./json.js";
import { type FrameKind, kashinCoefficients, kashinFrame } from "./kashin.js";
import { clip, exp, guard, HEAVY_GUARD, radial, seqSum } from "./numerics.js";
import { extraNumbers, gridSpec, type KindName, type Task } from "./task.js";

export type Row = Float64Array;

export interface KindImpl {
  readonly name: KindName;
  readonly vector: boolean;
  readonly usesLabels: boolean;
  /** The kind's own validity rule on a row with finite entries. */
  validValue?(task: Task, row: Row): boolean;
  /** φ(sample): the component values of one sample (baseline A; the mean of the kinds
   * without their own userStats). */
  sampleMap(task: Task, row: Row): number[];
  /** The user statistic from the rows (unusable rows zeroed) and the usability mask. */
  userStats?(task: Task, rows: Row[], valid: boolean[]): number[];
  /** Kind.check, the kind's own rules on the task's fields (after the rules every kind shares,
   * task.ts: kindComponents); returns C, the number of components. `no` refuses naming the kind. */
  components(f: ReadonlyMap<string, JValue>, dim: number, no: (what: string) => never): number;
}

/** Sequential mean over the usable rows of the vectors f(row): Σ / m_i (0 if none). */
export function maskedMean(rows: Row[], valid: boolean[], f: (r: Row) => ArrayLike<number>, C: number): number[] {
  const acc = new Array<number>(C).fill(0);
  let m = 0;
  rows.forEach((r, i) => {
    if (!valid[i]) return;
    m++;
    const v = f(r);
    for (let c = 0; c < C; c++) acc[c] = acc[c] + v[c];
  });
  const div = Math.max(m, 1);
  return acc.map((s) => s / div);
}

const supportBound = (t: Task): number => (t.bound === null ? HEAVY_GUARD : t.bound);
/** The centre lo/2 + hi/2 of the task's range (0 without one; §12.3). */
export const rangeCentre = (t: Task): number => (t.range === null ? 0 : t.range[0] / 2 + t.range[1] / 2);
/** clip(x - c, -B, B): the sample centred on the task's range, clamped to the support. */
export const clampSupport = (t: Task, r: ArrayLike<number>, d: number): number[] => {
  const c = rangeCentre(t);
  return Array.from({ length: d }, (_, j) => clip(c === 0 ? r[j] : r[j] - c, -supportBound(t), supportBound(t)));
};

/** How many finite entries of the rows a ranged kind clamps into the task's range (a device
 * logs it locally, never sends it). */
export function clampedValues(t: Task, rows: readonly Row[], d: number): number {
  if (t.bound === null || (t.kind !== "mean" && t.kind !== "mean-linf" && t.kind !== "mean-by")) return 0;
  const [lo, hi] = t.range ?? [-t.bound, t.bound];
  let n = 0;
  for (const r of rows) for (let j = 0; j < d; j++) if (Number.isFinite(r[j]) && (r[j] < lo || r[j] > hi)) n++;
  return n;
}

/** Zero-pad to K, FWHT, divide by √K. */
export function hadamardRows(v: readonly number[], K: number): number[] {
  const pad = new Array<number>(K).fill(0);
  for (let i = 0; i < v.length; i++) pad[i] = v[i];
  const root = Math.sqrt(K);
  return fwht(pad).map((x) => x / root);
}

const frameOf = (t: Task) => kashinFrame(t.dim, t.frameSeed, t.frameKind as FrameKind);

function kashinBound(t: Task, bound: number): number {
  return t.kashinLevel * bound / Math.sqrt(frameOf(t).N);
}

export function kashinMap(t: Task, x: readonly number[], bound: number | null): number[] {
  const f = frameOf(t);
  const { a } = kashinCoefficients(f, radial(x, bound === null ? HEAVY_GUARD : bound, 2), t.kashinDelta);
  if (bound === null) return Array.from(a);
  const Dp = kashinBound(t, bound);
  return Array.from(a, (v) => clip(v, -Dp, Dp));
}

// ---- gradients (sgd) ---------------------------------------------------------------------
const dot = (x: ArrayLike<number>, theta: readonly number[]): number => {
  let s = 0;
  for (let j = 0; j < theta.length; j++) s = s + x[j] * theta[j];
  return s;
};

const THETA = new WeakMap<Task, number[]>();

/** One sample's gradient of the task's model at θ (labels in the last column). */
export function gradient(t: Task, row: Row): number[] {
  const d = t.dim;
  let theta = THETA.get(t);
  if (theta === undefined) {
    theta = extraNumbers(t.extra, "theta", d);
    THETA.set(t, theta);
  }
  const model = t.extra.get("model") as string;
  const y = row[d];
  const l2 = t.extra.has("l2") ? toDouble(t.extra.get("l2") as JInt | number) : 0.0;
  if (model === "quadratic") return theta.map((th, j) => th - row[j]);
  let w: number;
  if (model === "logistic") {
    const s = y > 0 ? 1.0 : -1.0;
    let z = -s * dot(row, theta);
    if (Number.isNaN(z)) z = 0.0;
    z = clip(z, -500.0, 500.0);
    w = -s / (1.0 + exp(-z));
  } else { // least_squares, ridge
    w = dot(row, theta) - y;
  }
  return theta.map((th, j) => w * row[j] + l2 * th);
}

export function sgdMap(t: Task, row: Row): number[] {
  let g = gradient(t, row);
  if (!g.every(Number.isFinite)) g = g.map(() => 0.0);
  const D = t.bound as number;
  if (t.frameKind === "identity") return radial(g, D, 2).map((v) => clip(v, -D, D));
  return kashinMap(t, radial(g, D, 2), t.bound);
}

// ---- grid + Hadamard features (classify, regress) -----------------------------------------
function gridBin(t: Task, g: { M: number; lo: number[]; hi: number[] }, row: Row): number {
  const { M, lo, hi } = g;
  let bin = 0;
  let w = 1;
  for (let s = 0; s < t.dim; s++) {
    const u = clip((row[s] - lo[s]) / (hi[s] - lo[s]), 0.0, 1.0);
    bin += Math.min(Math.floor(u * M), M - 1) * w;
    w *= M;
  }
  return bin;
}

export type Weight = (t: Task, row: Row) => number;
export const labelSign: Weight = (t, r) => (r[t.dim] > 0 ? 1.0 : -1.0);
export const clampedLabel: Weight = (t, r) => {
  const T = toDouble(t.extra.get("label_bound") as JInt | number);
  return clip(r[t.dim], -T, T);
};
export const one: Weight = () => 1.0;

function hadamardFeatures(t: Task, rows: Row[], valid: boolean[], weights: Weight[]): number[] {
  const g = gridSpec(t.extra, t.dim);
  const { K } = g;
  const m = valid.filter(Boolean).length;
  const out: number[] = [];
  for (const w of weights) {
    const sums = new Array<number>(K).fill(0);
    rows.forEach((r, i) => {
      if (valid[i]) {
        const b = gridBin(t, g, r);
        sums[b] = sums[b] + w(t, r);
      }
    });
    const div = Math.max(m, 1);
    out.push(...fwht(sums.map((s) => s / div)));
  }
  return out;
}

export function features(weights: Weight[]): Pick<KindImpl, "sampleMap" | "userStats"> {
  return {
    sampleMap: (t, row) => hadamardFeatures(t, [row], [true], weights),
    userStats: (t, rows, valid) => (rows.length ? hadamardFeatures(t, rows, valid, weights)
      : new Array<number>(gridSpec(t.extra, t.dim).K * weights.length).fill(0)),
  };
}

// ---- grouped means (kind mean-by, §12.3; Python: uldp.client.kinds.grouped) ----------------
/** A device's group from its categorical dataset: the most frequent usable code (an integer in
 * [0, G); ties to the smallest), or NaN when it has none. */
export function groupOf(categories: readonly number[], G: number): number {
  const counts = new Array<number>(G).fill(0);
  for (const x of categories) if (Number.isFinite(x) && x === Math.floor(x) && x >= 0 && x < G) counts[x]++;
  let group = NaN;
  let best = 0;
  for (let g = 0; g < G; g++) if (counts[g] > best) [best, group] = [counts[g], g];
  return group;
}

/** The 2G components of rows (value, code): for each group g, 1{group = g} - 1/2 and
 * 1{group = g} · mean clip(x - c, -D, D) over the usable rows of the user's group (the most
 * frequent code of its usable rows, ties to the smallest). */
export function groupedStats(t: Task, rows: Row[], valid: boolean[]): number[] {
  const G = t.dim;
  const Y: number[] = [];
  for (let g = 0; g < G; g++) Y.push(-0.5, 0);
  const codes = rows.flatMap((r, i) => (valid[i] ? [r[1]] : []));
  const group = groupOf(codes, G);
  if (Number.isNaN(group)) return Y;
  const c = rangeCentre(t);
  const D = t.bound as number;
  let s = 0;
  let m = 0;
  rows.forEach((r, i) => {
    if (!valid[i] || r[1] !== group) return;
    m++;
    s = s + clip(c === 0 ? r[0] : r[0] - c, -D, D);
  });
  Y[2 * group] = 0.5;
  Y[2 * group + 1] = s / Math.max(m, 1);
  return Y;
}

/** Whether x is a category of the task's alphabet [0, dim). */
export const inAlphabet = (t: Task, x: number): boolean => x === Math.floor(x) && x >= 0 && x < t.dim;

/** Usability of every row (every entry finite, plus the kind's own rule). */
export function usable(t: Task, kind: KindImpl, rows: Row[]): boolean[] {
  return rows.map((r) => r.every(Number.isFinite) && (kind.validValue === undefined || kind.validValue(t, r)));
}

/** The user statistic (C values), finite for every input: NaN → 0, ±∞ → ±2^500, then the
 * heavy-tail clamp to [−stat_bound, stat_bound]. */
export function statistics(t: Task, kind: KindImpl, rows: Row[], valid: boolean[]): number[] {
  const zeroed = rows.map((r, i) => (valid[i] ? r : new Float64Array(r.length)));
  let Y: number[];
  if (kind.userStats) Y = kind.userStats(t, zeroed, valid);
  else if (!rows.length) Y = new Array<number>(t.nComponents).fill(0);
  else {
    const maps = zeroed.map((r, i) => (valid[i] ? kind.sampleMap(t, r) : null));
    const acc = new Array<number>(t.nComponents).fill(0);
    let m = 0;
    for (const v of maps) {
      if (v === null) continue;
      m++;
      for (let c = 0; c < acc.length; c++) acc[c] = acc[c] + v[c];
    }
    Y = acc.map((s) => s / Math.max(m, 1));
  }
  Y = Y.map(guard);
  if (t.statBound !== null) Y = Y.map((v) => clip(v, -t.statBound!, t.statBound!));
  return Y;
}
