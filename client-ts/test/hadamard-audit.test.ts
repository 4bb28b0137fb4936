/**
 * Exact likelihood-ratio audit of method hadamard (the TS port of
 * tests/test_privacy_audit_hadamard.py): every stage of both kinds with every exact mechanism
 * it takes. For pairs of whole local datasets — one inside the window and one outside it,
 * random ones, and the degenerate datasets of the totality invariant (empty, NaN/±∞,
 * off-alphabet) — reports come from the real `computeReport`, and P(report | D) is exact: the
 * sampled-records mixture of stage 1, the outside bit of stage 2 through the oracle over two
 * categories, the grid mixture of the window values of stage 3; a distribution user without
 * usable records has the uniform distribution's coefficients. The ratio never exceeds
 * S(N)/2^64 per component, composed.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  computeReport, expLower, gridPositions, type Interval, KINDS, ONE, AUDITED_ORACLES, parseTask, RandomSource, seededSource, Ratio, AUDITED_SCALARS,
  type Samples, statistics, type Task, taskRows, uniformStatistic, usable,
} from "../src/core/index.js";
import { mulberry32, pow } from "./exact-stats.js";
import { asRatio, taskJson } from "./task-json.js";

const hadamardTask = (o: Record<string, unknown>): string => taskJson({ method: "hadamard", ...o });

function stats(t: Task, samples: Samples): number[] {
  const kind = KINDS[t.kind];
  const rows = taskRows(t, samples, null);
  const valid = usable(t, kind, rows);
  let Y = statistics(t, kind, rows, valid);
  if (t.kind === "distribution" && !valid.some(Boolean)) Y = uniformStatistic(t);
  return t.components.map((c) => Y[c]);
}

function valueProbability(t: Task, y: number[], z: bigint[]): Ratio {
  const mech = AUDITED_SCALARS.get(t.mechanism)!;
  return gridPositions(y, t.intervals as Interval[]).reduce((acc, pos, c) => {
    const fl = Math.floor(pos);
    const up = new Ratio(BigInt(Math.floor((pos - fl) * 2 ** 53)), 1n << 53n);
    const mix: [bigint, Ratio][] = up.isZero ? [[BigInt(fl), Ratio.ONE]] : [[BigInt(fl), Ratio.ONE.sub(up)], [BigInt(fl + 1), up]];
    return acc.mul(mix.reduce((s, [g, w]) => s.add(w.mul(asRatio(mech.probability(z[c], g, t.epsC)))), Ratio.ZERO));
  }, Ratio.ONE);
}

function probability(t: Task, samples: Samples, z: bigint[]): Ratio {
  if (t.stage === 1 && t.kind === "distribution") {  // one sampled record (records = 1)
    const o = AUDITED_ORACLES.get(t.mechanism)!;
    const kind = KINDS[t.kind];
    const rows = taskRows(t, samples, null);
    const valid = usable(t, kind, rows);
    const X = rows.flatMap((r, i) => (valid[i] ? [r[0]] : []));
    const cats = X.length ? X : Array.from({ length: t.dim }, (_, v) => v);
    return cats.reduce((s, v) => s.add(asRatio(o.probability(z, v, t.dim, t.epsC))), Ratio.ZERO).div(new Ratio(BigInt(cats.length)));
  }
  const y = stats(t, samples);
  if (t.stage !== 2) return valueProbability(t, y, z);
  const o = AUDITED_ORACLES.get(t.mechanism)!;
  const L = o.length(2, t.epsC);
  return (t.intervals as Interval[]).reduce((acc, [lo, hi], c) =>
    acc.mul(asRatio(o.probability(z.slice(c * L, (c + 1) * L), y[c] < lo || y[c] > hi ? 1 : 0, 2, t.epsC))), Ratio.ONE);
}

const DIST = { kind: "distribution", dim: 5, bound: null, epsilon: 1.5, eps_c: 1.5, components: [3], intervals: [[-0.05, 0.12]] };
const L1 = { kind: "mean-l1", dim: 3, bound: 2.0, epsilon: 2.0, eps_c: 1.0, components: [0, 2], intervals: [[-0.2, 0.4], [-0.01, 0.01]] };

function cases(): [string, string][] {
  const out: [string, string][] = [];
  for (const [name, base] of [["dist", DIST], ["l1", L1]] as const) {
    for (const m of ["duchi", "pm", "hm"]) out.push([`${name}-window-${m}`, hadamardTask({ ...base, stage: 3, mechanism: m })]);
    for (const m of ["grr", "oue", "ss", "olh"]) out.push([`${name}-spread-${m}`, hadamardTask({ ...base, stage: 2, mechanism: m })]);
  }
  out.push(["l1-centre-hm", hadamardTask({ ...L1, stage: 1, mechanism: "hm", intervals: [[-1.2, 1.2], [-1.2, 1.2]] })]);
  for (const m of ["grr", "oue", "ss", "olh"]) {
    out.push([`dist-centre-${m}`, hadamardTask({ ...DIST, stage: 1, mechanism: m, components: [0, 1, 2, 3, 4, 5, 6, 7], intervals: [] })]);
  }
  return out;
}

function datasets(t: Task, rand: () => number): [Samples, Samples][] {
  const m = 4;
  if (t.kind === "distribution") {
    const random = (): number[] => Array.from({ length: m }, () => Math.floor(rand() * t.dim));
    const degenerate: Samples[] = [[], [2], [NaN], [7, -1, 0.5, Infinity], [0, 0, 0, 0], [4, 4, 1, 1], [1e308]];
    const far: [Samples, Samples] = [[0, 0, 0, 0], [0, 3, 1, 2]];
    return [far, ...Array.from({ length: 4 }, () => [random(), random()] as [Samples, Samples]),
      ...degenerate.map((d, i) => [d, degenerate[(i + 3) % degenerate.length]] as [Samples, Samples])];
  }
  const row = (v: number): number[] => new Array<number>(t.dim).fill(v);
  const random = (): Samples => Array.from({ length: m }, () => row((rand() * 2 - 1) * 3));
  const degenerate: Samples[] = [[], [row(0.3)], [row(NaN)], [row(Infinity), row(-1e308)], [row(1e308)]];
  const far: [Samples, Samples] = [[row(0)], [[2, 0, 0]]];
  return [far, ...Array.from({ length: 4 }, () => [random(), random()] as [Samples, Samples]),
    ...degenerate.map((d, i) => [d, degenerate[(i + 2) % degenerate.length]] as [Samples, Samples])];
}

for (const [name, text] of cases()) {
  test(`hadamard audit: ${name} never exceeds the ε it charges`, () => {
    const t = parseTask(text);
    const count = t.stage === 1 && t.kind === "distribution" ? t.records : t.components.length;
    assert.ok(Number(t.units) <= t.epsilon * 2 ** 24, "the task spends more than its budget");
    const bound = pow(new Ratio(expLower(t.units / BigInt(count)), ONE), count);
    const rand = mulberry32(name.length * 7919 + name.charCodeAt(0));
    const rng = seededSource(`hadamard-audit-${name}`);
    let worst = Ratio.ONE;
    for (const [D, D2] of datasets(t, rand)) {
      for (const src of [D, D2]) {
        const z = computeReport(t, src, null, rng);
        const p = probability(t, D, z);
        const p2 = probability(t, D2, z);
        assert.ok(!p.isZero && !p2.isZero, `${name}: a report impossible under a dataset`);
        const r = p.cmp(p2) >= 0 ? p.div(p2) : p2.div(p);
        if (r.cmp(worst) > 0) worst = r;
        assert.ok(r.cmp(bound) <= 0, `${name}: ratio e^${r.log()} > e^${bound.log()}`);
      }
    }
    if (t.stage === 2 && t.mechanism !== "olh") {
      assert.ok(worst.log() >= 0.3 * bound.log() / count, `${name}: worst e^${worst.log()} vs e^${bound.log()}`);
    }
  });
}

test("hadamard: an empty distribution dataset reports the uniform distribution's coefficients", () => {
  const t = parseTask(hadamardTask({ ...DIST, epsilon: 2.0, eps_c: 1.0, components: [1, 2], intervals: [[-0.3, 0.3], [-0.3, 0.3]], stage: 3, mechanism: "pm" }));
  const a = computeReport(t, [], null, seededSource(3));
  const b = computeReport(t, [9, Infinity], null, seededSource(3));
  assert.deepEqual(a, b);
  assert.deepEqual(stats(t, []), [1, 2].map((c) => uniformStatistic(t)[c]));
});
