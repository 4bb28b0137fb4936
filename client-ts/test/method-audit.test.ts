/**
 * Exact likelihood-ratio audits of every method, on whole local datasets (the TS port of
 * tests/test_privacy_audit.py): for neighbouring datasets D, D' — random ones and the
 * degenerate ones of the totality invariant (empty, NaN/±∞, ±1e308, off-alphabet) — a report
 * is drawn by the real device function (`computeReport`) on D, and the exact log-likelihood
 * of that report and of probes far in the tails is computed under D and under D':
 *   - two-stage stage I / stage II and ssl: the mechanism's pmf at the user statistic;
 *   - two-stage-sized stage I: the mixture over the rounding to the grid points (§9.6);
 *   - baseline-b: the mixture over the uniformly chosen usable sample;
 *   - baseline-a: the slots' mechanisms, mixed over the uniformly random m_ref-subset.
 * The ratio never exceeds the ε the ledger charges for the task (its units · 2^-24), and the
 * extreme pair comes close to it (a method with too little noise fails).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  alg1Params, computeReport, gridLogLikelihood, KINDS, parseTask, RandomSource, seededSource, stage1LogLikelihood,
  stage2LogLikelihood, statistics, taskRows, type Interval, type Samples, type Task, usable,
} from "../src/core/index.js";
import { taskJson } from "./task-json.js";

const FAR = 3n * (1n << 18n);
const TOL = 1e-9;

const logSumExp = (xs: number[]): number => {
  const m = Math.max(...xs);
  return m === -Infinity ? m : m + Math.log(xs.reduce((s, x) => s + Math.exp(x - m), 0));
};

function subsets(n: number, k: number): number[][] {
  if (k === 0) return [[]];
  if (n < k) return [];
  return [...subsets(n - 1, k - 1).map((s) => [...s, n - 1]), ...subsets(n - 1, k)];
}

const finiteOr = (v: number): number => (Number.isNaN(v) ? 0 : v === Infinity ? Number.MAX_VALUE
  : v === -Infinity ? -Number.MAX_VALUE : v);

/** Exact log P(report | dataset) of the task's method. */
function logLikelihood(t: Task, samples: Samples, z: bigint[]): number {
  const kind = KINDS[t.kind];
  const rows = taskRows(t, samples, null);
  const valid = usable(t, kind, rows);
  const ivs = t.intervals as Interval[];
  const vals = (Y: number[]): number[] => t.components.map((c) => Y[c]);
  if (t.method === "two-stage" && t.stage === 1) {
    const ps = t.bins.map(([D, h, B]) => alg1Params(D, h, 0, B));
    return stage1LogLikelihood(vals(statistics(t, kind, rows, valid)), z, ps, t.epsC);
  }
  if (t.method === "two-stage-sized" && t.stage === 1) {
    const ps = t.bins.map(([D, h, B]) => alg1Params(D, h, 0, B));
    return gridLogLikelihood(vals(statistics(t, kind, rows, valid)), z, ps, t.epsC);
  }
  if (t.method === "baseline-b") {
    const idx = valid.flatMap((v, i) => (v ? [i] : []));
    if (!idx.length) return stage2LogLikelihood(vals(statistics(t, kind, [], [])), z, ivs, t.epsC);
    return logSumExp(idx.map((i) => stage2LogLikelihood(vals(statistics(t, kind, [rows[i]], [true])), z, ivs, t.epsC)))
      - Math.log(idx.length);
  }
  if (t.method === "baseline-a") {
    const idx = valid.flatMap((v, i) => (v ? [i] : []));
    const choices = idx.length > t.mRef ? subsets(idx.length, t.mRef).map((s) => s.map((k) => idx[k]))
      : [Array.from({ length: t.mRef }, (_, j) => idx[j % Math.max(idx.length, 1)])];
    const lls = choices.map((src) => slotsLogLikelihood(t, src.map((i) => (idx.length ? kind.sampleMap(t, rows[i]).map(finiteOr)
      : new Array<number>(t.nComponents).fill(0))), z));
    return logSumExp(lls) - Math.log(choices.length);
  }
  return stage2LogLikelihood(vals(statistics(t, kind, rows, valid)), z, ivs, t.epsC);
}

function slotsLogLikelihood(t: Task, phi: number[][], z: bigint[]): number {
  const G = t.virtualGroups.length;
  let pos = 0;
  let ll = 0;
  phi.forEach((v, j) => {
    const g = Number((t.virtualOffset + BigInt(j)) % BigInt(G));
    const comps = t.virtualGroups[g];
    const ivs = comps.map((c) => t.intervals[t.components.indexOf(c)] as Interval);
    ll += stage2LogLikelihood(comps.map((c) => v[c]), z.slice(pos, pos + comps.length), ivs, t.virtualEps[g]);
    pos += comps.length;
  });
  return ll;
}

interface Case { name: string; task: string; datasets: Samples[]; extreme: [Samples, Samples] }

const huge = [1e308, -1e308, NaN, Infinity, -Infinity];
const CASES: Case[] = [
  { name: "two-stage-1", task: taskJson({ kind: "mean", method: "two-stage", stage: 1, epsilon: 0.7, eps_c: 0.7,
    components: [0], bins: [[1.0, 0.5, 4]] }), datasets: [[], [0.3, -0.2], huge, [0.9, 0.95]], extreme: [[-1], [1]] },
  { name: "two-stage-sized-1", task: taskJson({ kind: "mean", method: "two-stage-sized", stage: 1, epsilon: 0.7,
    eps_c: 0.7, components: [0], bins: [[1.0, 0.5, 4]] }), datasets: [[], [0.3, -0.2], huge, [0.9, 0.95]], extreme: [[-1], [1]] },
  { name: "two-stage-2", task: taskJson({ kind: "mean", method: "two-stage", stage: 2, epsilon: 0.7, eps_c: 0.7,
    components: [0], intervals: [[-0.25, 0.5]] }), datasets: [[], [0.3, -0.2], huge, [0.9]], extreme: [[-1], [1]] },
  { name: "ssl-linf", task: taskJson({ kind: "mean-linf", method: "ssl", dim: 2, epsilon: 1.0, eps_c: 0.5,
    components: [0, 1], intervals: [[-1, 1], [-1, 1]] }), datasets: [[], [[0.3, -0.2]], [[1e308, NaN]], [[0.1, 0.1], [0.5, 0.2]]],
  extreme: [[[-1, -1]], [[1, 1]]] },
  { name: "ssl-distribution", task: taskJson({ kind: "distribution", method: "ssl", dim: 3, bound: null, epsilon: 1.0,
    eps_c: 0.25, components: [0, 1, 2, 3], intervals: [[-0.5, 0.5], [-0.5, 0.5], [-0.5, 0.5], [-0.5, 0.5]] }),
  datasets: [[], [0, 1, 2], [7, -1, 0.5, NaN], [2, 2]], extreme: [[0], [1]] },
  { name: "baseline-b", task: taskJson({ kind: "mean", method: "baseline-b", epsilon: 0.8, eps_c: 0.8, components: [0],
    intervals: [[-1, 1]] }), datasets: [[], [0.3, -0.9, 0.1], huge, [0.5]], extreme: [[-1], [1]] },
  { name: "baseline-a", task: taskJson({ kind: "mean", method: "baseline-a", epsilon: 1.0, eps_c: 1.0, components: [0],
    intervals: [[-1, 1]], m_ref: 2, virtual_groups: [[0]], virtual_eps: [0.5] }),
  datasets: [[], [0.3], [0.3, -0.9, 0.1, 0.7], huge], extreme: [[-1, -1], [1, 1]] },
  { name: "baseline-a-groups", task: taskJson({ kind: "mean-linf", method: "baseline-a", dim: 2, epsilon: 2.0, eps_c: 1.0,
    components: [0, 1], intervals: [[-1, 1], [-1, 1]], m_ref: 3, virtual_groups: [[0], [1]], virtual_eps: [0.5, 0.5],
    virtual_offset: 1 }), datasets: [[], [[0.3, 0.2]], [[0.1, 0.2], [NaN, 0], [0.5, -0.5], [0.9, 0.9]]],
  extreme: [[[-1, -1], [-1, -1], [-1, -1]], [[1, 1], [1, 1], [1, 1]]] },
  // public ranges [lo, hi] (issue 29): samples centred on lo/2 + hi/2 and clamped on the device
  { name: "range-ssl", task: taskJson({ kind: "mean", method: "ssl", epsilon: 1.0, eps_c: 1.0, components: [0],
    range: [0, 120], bound: 60, intervals: [[-60, 60]] }), datasets: [[], [30, 90, 150], huge, [-1e5], [60]],
  extreme: [[0], [120]] },
  { name: "range-two-stage-1", task: taskJson({ kind: "mean", method: "two-stage", stage: 1, epsilon: 0.7, eps_c: 0.7,
    components: [0], range: [1e300, 1.5e300], bound: 2.5e299, bins: [[2.5e299, 1.25e299, 4]] }),
  datasets: [[], [1.2e300], huge, [-5]], extreme: [[1e300], [1.5e300]] },
  { name: "range-linf-baseline-b", task: taskJson({ kind: "mean-linf", method: "baseline-b", dim: 2, epsilon: 1.0,
    eps_c: 0.5, components: [0, 1], range: [-0.25, 1.75], bound: 1.0, intervals: [[-1, 1], [-1, 1]] }),
  datasets: [[], [[0.3, -0.2]], [[1e308, NaN]], [[0.1, 9], [0.5, 0.2]]], extreme: [[[-0.25, -0.25]], [[1.75, 1.75]]] },
  { name: "range-baseline-a", task: taskJson({ kind: "mean", method: "baseline-a", epsilon: 1.0, eps_c: 1.0,
    components: [0], range: [-3e5, -1e5], bound: 1e5, intervals: [[-1e5, 1e5]], m_ref: 2, virtual_groups: [[0]],
    virtual_eps: [0.5] }), datasets: [[], [-2e5], [-2e5, 0, -9e5, -1.5e5], huge], extreme: [[-3e5, -3e5], [-1e5, -1e5]] },
];

for (const c of CASES) {
  test(`method audit: ${c.name} never exceeds the ε it charges`, () => {
    const t = parseTask(c.task);
    const eps = Number(t.units) / 2 ** 24;
    const rng = seededSource(`method-audit-${c.name}`);
    const pairs: [Samples, Samples][] = [c.extreme];
    for (const a of c.datasets) for (const b of c.datasets) if (a !== b) pairs.push([a, b]);
    let worst = 0;
    for (const [D, D2] of pairs) {
      for (let k = 0; k < 3; k++) {
        const z = computeReport(t, D, null, rng);
        for (const p of [z, z.map((v) => v + FAR), z.map((v) => v - FAR)]) {
          const r = logLikelihood(t, D, p) - logLikelihood(t, D2, p);
          assert.ok(Math.abs(r) <= eps + TOL, `${c.name}: log ratio ${r} > ε = ${eps}`);
          worst = Math.max(worst, Math.abs(r));
        }
      }
    }
    const bound = (t.method === "two-stage" || t.method === "two-stage-sized") && t.stage === 1 ? eps : 0.5 * eps;
    assert.ok(worst >= 0.5 * bound, `${c.name}: the audit never approached ε (${worst} vs ${eps})`);
  });
}

test("negative control: a method drawing at twice its claimed ε is flagged", () => {
  const base = CASES.find((c) => c.name === "baseline-b")!;
  const claimed = parseTask(base.task); // baseline-b at ε = 0.8
  const leaky = parseTask(base.task.replace('"eps_c":0.8', '"eps_c":1.6').replace('"epsilon":0.8', '"epsilon":1.6'));
  const rng = seededSource("method-audit-negative");
  let worst = 0;
  for (let k = 0; k < 5; k++) {
    const z = computeReport(leaky, [1], null, rng);
    for (const p of [z, z.map((v) => v + FAR)]) worst = Math.max(worst, Math.abs(logLikelihood(leaky, [1], p) - logLikelihood(leaky, [-1], p)));
  }
  assert.ok(worst > Number(claimed.units) / 2 ** 24 + 0.3, `not flagged (${worst})`);
});

// ---- grouped means (kind mean-by, issue 29; Python: tests/test_groupby.py) ---------------------
test("method audit: mean-by — the report of a device in group A and in group B is within ε", () => {
  for (const [eps, comps] of [[0.5, [0]], [3.0, [0, 1, 2]], [60, [0, 1, 2, 3, 4, 5]]] as [number, number[]][]) {
    const t = parseTask(taskJson({ kind: "mean-by", method: "ssl", dim: 3, by: "country", epsilon: eps,
      eps_c: eps / comps.length, components: comps, range: [0, 120], bound: 60,
      intervals: comps.map((c) => (c % 2 === 0 ? [-0.5, 0.5] : [-60, 60])) }));
    const spent = Number(t.units) / 2 ** 24;
    const kind = KINDS[t.kind];
    const ll = (vals: number[], codes: number[], z: bigint[]): number => {
      const rows = taskRows(t, vals, codes);
      const Y = statistics(t, kind, rows, usable(t, kind, rows));
      return stage2LogLikelihood(t.components.map((c) => Y[c]), z, t.intervals as Interval[], t.epsC);
    };
    const vals = [10, 115, 60, 60];
    const D: [number[], number[]][] = [0, 1, 2].map((g) => [vals, [g, g, g, g]]);
    D.push([[200, 200], [0, 0]], [[-50, -50], [2, 2]], [vals, [NaN, NaN, NaN, NaN]], [[], []]);
    const rng = seededSource(`method-audit-mean-by-${eps}`);
    let worst = 0;
    for (let i = 0; i < D.length; i++) {
      for (let j = i + 1; j < D.length; j++) {
        for (const [sv, sc] of [D[i], D[j]]) {
          const z = computeReport(t, sv, sc, rng);
          for (const p of [z, z.map((v) => v + FAR), z.map((v) => v - FAR)]) {
            const r = ll(D[i][0], D[i][1], p) - ll(D[j][0], D[j][1], p);
            assert.ok(Math.abs(r) <= spent + TOL, `mean-by ε=${eps}: log ratio ${r} > ${spent}`);
            worst = Math.max(worst, Math.abs(r));
          }
        }
      }
    }
    assert.ok(worst >= 0.3 * spent, `mean-by ε=${eps}: the audit never approached ε (${worst} vs ${spent})`);
  }
});
