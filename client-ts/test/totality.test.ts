/**
 * Totality under hostile public parameters (docs/device-protocol.md §13–§14; Python:
 * tests/test_totality.py, the same generator design): extreme but well-typed tasks — huge and
 * tiny D, h and B, intervals of every width, ε at its limits, huge frame seeds and offsets,
 * counts of components — are either refused (TaskRefused) or accepted, and an accepted task
 * yields exactly `reportLength` integers within the collector's range for every dataset,
 * without its backstop, and so does the backstop itself (emptyReport). Tasks built to satisfy
 * every rule must be accepted. Deterministic: a seeded generator on the ChaCha20 stream.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  computeReport, emptyReport, fallbacks, MAX_RECORDS, ORACLES, oracleOf, parseTask, RandomSource, seededSource, scalarOf, SCALARS, type Task,
  TaskRefused,
} from "../src/core/index.js";

const TINY = [5e-324, 1e-310, 2 ** -1022, 1e-300, 2 ** -63, 1e-9, 2 ** -24];
const HUGE = [1e9, 2 ** 63, 2 ** 64, 1e20, 1e300, 8.98e307, 1.7976931348623157e308];
const POSITIVE = [...TINY, ...HUGE, 0.25, 1.0, 3.0];
const EPS_C = [2 ** -24, 2 ** -24 * (1 + 2 ** -52), 2 ** -23, 1e-3, 0.5, 1.0, 60.0, 2 ** 18];
const REALS = [-1.7976931348623157e308, -1e300, -(2 ** 64), -1.0, -5e-324, -0, 0, 5e-324, 1e-300, 0.5, 1.0,
  2 ** 53, 1e300, 8.98e307];
const SPECIAL = [0, -0, 1e308, -1e308, 5e-324, NaN, Infinity, -Infinity, 1, -1, 0.5, 4, 2 ** 53 + 2, 7, -3];
const SHAPES: [string, number, Record<string, unknown>][] = [
  ["mean", 1, {}], ["mean-linf", 3, {}], ["mean-l2", 2, {}], ["mean-l1", 3, {}], ["distribution", 5, {}],
  ["sgd", 2, { model: "logistic", theta: [1e308, -1e308] }],
  ["sgd", 2, { model: "ridge", theta: [5e-324, 0.0], l2: 1e300 }],
  ["classify", 2, { grid: 3, lo: [-1e300, 0.0], hi: [1e300, 5e-324] }],
  ["regress", 1, { grid: 1024, label_bound: 1e-300 }],
];
const METHODS = ["two-stage", "two-stage-sized", "ssl", "baseline-a", "baseline-b", "oracle"];
const ORACLE_NAMES = [...ORACLES.keys()];
const SCALAR_NAMES = [...SCALARS.keys()];
/** Mechanism names a hostile collector may send: both families, unknown ones, prototype keys. */
const ANY_MECHANISM = [...ORACLE_NAMES, ...SCALAR_NAMES, "bogus", "LAPLACE", "", "__proto__", "toString", "constructor"];
const RECORDS = [0, 1, 2, 7, MAX_RECORDS, MAX_RECORDS + 1, -1];

class Gen {
  readonly #rng: RandomSource;
  constructor(seed: string) { this.#rng = seededSource(seed); }
  int(n: number): number { return Number(this.#rng.belowEach([BigInt(n)])[0]); }
  pick<T>(xs: readonly T[]): T { return xs[this.int(xs.length)]; }
  bool(): boolean { return this.int(2) === 1; }
  readonly #turns = new Map<string, number>();
  /** xs in turn, one list per key: every entry comes up (mechanisms in every place). */
  turn<T>(key: string, xs: readonly T[]): T {
    const n = this.#turns.get(key) ?? 0;
    this.#turns.set(key, n + 1);
    return xs[n % xs.length];
  }
  positive(): number { // a listed extreme, or any positive double
    if (this.bool()) return this.pick(POSITIVE);
    const x = (1 + this.int(1 << 20) / (1 << 20)) * 2 ** (this.int(2046) - 1022);
    return Number.isFinite(x) ? x : 1.7976931348623157e308;
  }
}

const supportBins = (D: number, h: number): number | null => {
  const r = (2.0 * D) / h;
  return Number.isFinite(r) ? Math.max(1, Math.ceil(r - 1e-9)) : null;
};

function binsRow(g: Gen, accepted: boolean, most = 1 << 16): [number, number, number] {
  let D = g.positive();
  let h = g.positive();
  if (D >= 2 ** 1023) D /= 4; // 2D must be finite: a larger D is refused
  if (!accepted && g.bool()) return [D, h, g.pick([1, 2, 4, 1 << 16])];
  let want = supportBins(D, h);
  if (want === null || want > most) {
    h = D * 2 ** -(g.int(76) - 60); // 2D/h in [2^-59, 2^16]
    if (!(h > 0 && h < Infinity)) h = D;
    want = supportBins(D, h);
    if (want === null || want > most) [h, want] = [D, 2]; // two-stage-sized: at most 2^16 − 1 bins
  }
  return [D, h, want!];
}

/** A task's range and its bound hi/2 - lo/2; not accepted: possibly lo >= hi, an
 * overflowing width or another bound (Python: tests/test_totality.py _range). */
function range(g: Gen, accepted: boolean): { range: [number, number]; bound: number } {
  let [lo, hi] = interval(g);
  if (!accepted && g.int(2) === 0) [lo, hi] = [g.pick(REALS), g.pick(REALS)];
  let D = hi / 2 - lo / 2;
  if (accepted && !(D > 0)) [lo, hi, D] = [-1, 1, 1];
  if (!accepted && g.int(2) === 0) D = g.positive();
  return { range: [lo, hi], bound: D };
}

function interval(g: Gen): [number, number] {
  let a = g.pick(REALS);
  let b = g.pick(REALS);
  while (b === a) b = g.pick(REALS);
  let [lo, hi] = a < b ? [a, b] : [b, a];
  if (!Number.isFinite(hi - lo)) [lo, hi] = [Math.max(lo, -8.98e307), Math.min(hi, 8.98e307)];
  return [lo, hi];
}

const BIG = "1180591620717411303424"; // 2^70: written as an exact integer

/** A hostile task text (sorted keys); `accepted`: every public rule holds. */
function hostileTask(g: Gen, accepted: boolean): string {
  const method = g.pick(METHODS);
  if (method === "oracle") return oracleTask(g, accepted);
  const [kind, dim, extra] = g.pick(SHAPES);
  const stage = method === "two-stage" || method === "two-stage-sized" ? 1 + g.int(2) : 0;
  // sgd also reports the gradient's own coordinates (the windowed rounds)
  const frame = g.pick(kind === "sgd" ? ["gaussian", "hadamard", "identity"] : ["gaussian", "hadamard"]);
  const heavy = ["mean", "mean-linf", "mean-l2"].includes(kind) && g.bool();
  const bound = heavy || kind === "distribution" ? null : g.positive();
  const probe = parseTask(text({ kind, dim, extra, bound, stat_bound: heavy ? 1 : null, frame_kind: frame, method: "ssl", stage: 0,
    components: [0], intervals: [[-1, 1]], eps_c: 1, epsilon: 1 }));
  const C = probe.nComponents;
  const comps = [...new Set(Array.from({ length: 1 + g.int(Math.min(C, 4)) }, () => g.int(C)))];
  const t: Record<string, unknown> = {
    kind, dim, extra, bound, frame_kind: frame, method, stage, components: comps, eps_c: g.pick(EPS_C),
    epsilon: 2 ** 20, stat_bound: heavy ? g.positive() : null, frame_seed: g.pick([0, -1, BIG]),
    kashin_level: g.positive(), kashin_delta: g.pick([5e-324, 1.0, 0.5]),
  };
  if (stage === 1) t.bins = comps.map(() => binsRow(g, accepted, method === "two-stage-sized" ? (1 << 16) - 1 : 1 << 16));
  else t.intervals = comps.map(() => interval(g));
  if (method === "baseline-a") {
    const groups = comps.length === 1 ? [comps] : [comps.slice(0, 1), comps.slice(1)];
    Object.assign(t, { virtual_groups: groups, m_ref: g.pick([1, 2, 7, 64]), virtual_offset: g.pick([0, 1, BIG]),
      virtual_eps: groups.map(() => g.pick(EPS_C.slice(0, 5))) });
  }
  const family = stage === 1 ? ORACLE_NAMES : method === "baseline-a" ? ["laplace"] : SCALAR_NAMES;
  const mechanism = g.turn(`${method}-${stage}`, [...family, null]);
  if (mechanism !== null) t.mechanism = mechanism; // else omitted: the default, laplace
  if ((kind === "mean" || kind === "mean-linf") && bound !== null && g.int(2) === 0) {
    Object.assign(t, range(g, accepted)); // a public range [lo, hi] (issue 29)
  }
  if (!accepted) {
    Object.assign(t, g.pick([{}, { eps_c: 2 ** 20 }, { epsilon: 2 ** -24 }, { bound: 5e-324 },
      { stat_bound: 1.7976931348623157e308 }, { kashin_delta: 1.0 }, { m_ref: 1 << 20 },
      { mechanism: g.pick(ANY_MECHANISM) }, { records: g.pick(RECORDS) }]));
  }
  return text(t);
}

/** A method-oracle task over a distribution (hostile: any kind, mechanism, records, layout). */
function oracleTask(g: Gen, accepted: boolean): string {
  const records = accepted ? g.pick([1, 2, 7, MAX_RECORDS]) : g.pick(RECORDS);
  const dim = records >= MAX_RECORDS ? g.pick([1, 2, 5]) : g.pick([1, 2, 5, 255, 256]); // (keeps the test fast)
  const C = 1 << Math.ceil(Math.log2(dim));
  const t: Record<string, unknown> = {
    kind: "distribution", dim, method: "oracle", stage: 0, epsilon: 2 ** 20, records, components: Array.from({ length: C }, (_, c) => c),
    eps_c: g.pick(EPS_C.filter((e) => e * Math.max(records, 1) <= 2 ** 20)), mechanism: g.turn("oracle", ORACLE_NAMES),
  };
  if (!accepted) {
    Object.assign(t, g.pick([{}, { mechanism: g.pick(ANY_MECHANISM) }, { components: [0] }, { intervals: [[0, 1]] },
      { bins: [[1, 0.5, 4]] }, { kind: "mean", dim: 1, components: [0] }, { eps_c: 2 ** 20, records: 2 }, { epsilon: 2 ** -24 }]));
  }
  return text(t);
}

function text(o: Record<string, unknown>): string {
  const t: Record<string, unknown> = {
    bins: [], bound: null, components: [0], dim: 1, eps_c: 1, epsilon: 1, extra: {}, frame_kind: "gaussian",
    frame_seed: 0, intervals: [], kashin_delta: 0.5, kashin_level: 4.0, kind: "mean", m_ref: 1, method: "ssl",
    query_id: "q", schema: "uldp.task/2", stage: 0, stat_bound: null, virtual_eps: [], virtual_groups: [],
    virtual_offset: 0, ...o,
  };
  const sorted = Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1)));
  return JSON.stringify(sorted).replaceAll(`"${BIG}"`, BIG);
}

/** The collector's range of the task's report integers: the mechanism's limit (§14.2, §17). */
const maxAbs = (t: Task): number => {
  if (t.method === "baseline-a") return scalarOf("laplace").limit(Math.min(...t.virtualEps));
  if (t.method === "oracle") return oracleOf(t.mechanism).limit(t.dim, t.epsC);
  if (t.method === "two-stage" && t.stage === 1) return Math.max(...t.bins.map(([, , B]) => oracleOf(t.mechanism).limit(B, t.epsC)));
  if (t.method === "two-stage-sized" && t.stage === 1) {
    return Math.max(...t.bins.map(([, , B]) => oracleOf(t.mechanism).limit(B + 1, t.epsC)));
  }
  return scalarOf(t.mechanism).limit(t.epsC);
};

function dataset(g: Gen, t: Task): [number[] | number[][], number[] | null] {
  const values = g.pick([0, 1, 5]) === 5 ? Array.from({ length: 5 }, () => g.pick(SPECIAL))
    : Array.from({ length: g.int(7) }, () => g.pick(SPECIAL));
  const vector = ["mean-linf", "mean-l2", "mean-l1", "sgd", "classify", "regress"].includes(t.kind);
  const labelled = ["sgd", "classify", "regress"].includes(t.kind);
  return [vector ? values.map((v) => new Array<number>(t.dim).fill(v)) : values, labelled ? values : null];
}

function assertTotal(t: Task, g: Gen, label: string): void {
  const before = fallbacks.count;
  const [samples, labels] = dataset(g, t);
  const reports = [computeReport(t, samples, labels, seededSource(label)),
    emptyReport(t, seededSource(label))];
  assert.equal(fallbacks.count, before, `${label}: the computation threw on ${t.text}`);
  const lim = BigInt(maxAbs(t));
  for (const r of reports) {
    assert.equal(r.length, t.reportLength, label);
    assert.ok(r.every((v) => typeof v === "bigint" && v <= lim && -v <= lim), `${label}: out of range`);
  }
}

test("hostile but valid parameters are accepted, and then total", () => {
  const g = new Gen("hostile-accepted");
  const seen = new Set<string>();
  for (let i = 0; i < 300; i++) {
    const tt = hostileTask(g, true);
    let t: Task;
    try {
      t = parseTask(tt);
    } catch (e) {
      assert.fail(`case ${i} was refused (${(e as Error).message}): ${tt}`);
    }
    assertTotal(t, g, `accepted-${i}`);
    seen.add(`${t.method === "oracle" ? "oracle" : t.stage === 1 ? "bins" : "values"}:${t.mechanism}`);
  }
  // every mechanism was exercised in every place it may be used
  const want = [...ORACLE_NAMES.flatMap((m) => [`bins:${m}`, `oracle:${m}`]), ...SCALAR_NAMES.map((m) => `values:${m}`)];
  assert.deepEqual(want.filter((w) => !seen.has(w)), []);
});

test("hostile parameters are refused or total", () => {
  const g = new Gen("hostile-any");
  let refused = 0;
  for (let i = 0; i < 300; i++) {
    let t: Task;
    try {
      t = parseTask(hostileTask(g, false));
    } catch (e) {
      assert.ok(e instanceof TaskRefused, String(e));
      refused++;
      continue;
    }
    assertTotal(t, g, `any-${i}`);
  }
  assert.ok(refused > 30 && refused < 270, `refused ${refused}/300: the generator must mix both`);
});
