/**
 * Exact likelihood-ratio audit of the per-coordinate gradient reports of the windowed SGD
 * rounds (`kind: sgd`, `frame_kind: identity`; the TS port of
 * tests/learning/test_privacy_learning.py::test_identity_sgd_report_llr_bounded). For pairs of
 * whole labelled local datasets — random, far outside the feature box, and the degenerate
 * datasets of the totality invariant (empty, one sample, NaN/±∞ features, missing and huge
 * labels) — reports are drawn from the real device function `computeReport` on windows inside,
 * at the edge of and outside the support, and P(report | D) is computed in exact rationals
 * (the grid rounding's two-point mixture, the scalar randomizer's dyadic probabilities;
 * baseline B mixes over the usable records). The ratio never exceeds the ε the task charges,
 * and the extreme pair comes close to it.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  computeReport, expLower, gridPositions, type Interval, KINDS, ONE, parseTask, RandomSource, seededSource, Ratio, AUDITED_SCALARS,
  statistics, type Task, taskRows, usable,
} from "../src/core/index.js";
import { mulberry32, pow } from "./exact-stats.js";

type Data = { x: number[][]; y: number[] };

function taskJson(o: Record<string, unknown>): string {
  const t: Record<string, unknown> = {
    schema: "uldp.task/2", query_id: "q", kind: "sgd", dim: 2, bound: 1.0, stat_bound: null, bins: [],
    frame_kind: "identity", frame_seed: 0, kashin_level: 4.0, kashin_delta: 0.5, m_ref: 1, virtual_groups: [],
    virtual_eps: [], virtual_offset: 0, components: [0, 1], stage: 0,
    extra: { model: "logistic", theta: [0.75, -1.5], l2: 0.125 }, ...o,
  };
  return JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1))));
}

function stats(t: Task, d: Data): number[] {
  const kind = KINDS[t.kind];
  const rows = taskRows(t, d.x, d.y);
  const Y = statistics(t, kind, rows, usable(t, kind, rows));
  return t.components.map((c) => Y[c]);
}

function valueProbability(t: Task, y: number[], z: bigint[]): Ratio {
  const mech = AUDITED_SCALARS.get(t.mechanism)!;
  return gridPositions(y, t.intervals as Interval[]).reduce((acc, pos, c) => {
    const fl = Math.floor(pos);
    const up = new Ratio(BigInt(Math.floor((pos - fl) * 2 ** 53)), 1n << 53n);
    const mix: [bigint, Ratio][] = up.isZero ? [[BigInt(fl), Ratio.ONE]]
      : [[BigInt(fl), Ratio.ONE.sub(up)], [BigInt(fl + 1), up]];
    return acc.mul(mix.reduce((s, [g, w]) => s.add(w.mul(mech.probability(z[c], g, t.epsC) as Ratio)), Ratio.ZERO));
  }, Ratio.ONE);
}

function probability(t: Task, d: Data, z: bigint[]): Ratio {
  if (t.method !== "baseline-b") return valueProbability(t, stats(t, d), z);
  const kind = KINDS[t.kind];
  const valid = usable(t, kind, taskRows(t, d.x, d.y));
  const one = d.x.flatMap((x, i) => (valid[i] ? [{ x: [x], y: [d.y[i]] }] : []));
  if (!one.length) return valueProbability(t, stats(t, { x: [], y: [] }), z);
  return one.reduce((s, r) => s.add(valueProbability(t, stats(t, r), z)), Ratio.ZERO).div(new Ratio(BigInt(one.length)));
}

function datasets(rand: () => number): { pairs: [Data, Data][]; extreme: [Data, Data] } {
  const m = 3;
  const random = (): Data => {
    const s = [0.5, 1, 50][Math.floor(rand() * 3)];
    return { x: Array.from({ length: m }, () => [(rand() * 2 - 1) * s, (rand() * 2 - 1) * s]),
      y: Array.from({ length: m }, () => (rand() < 0.5 ? 0 : 1)) };
  };
  const degenerate: Data[] = [
    { x: [], y: [] }, { x: [[0.3, -0.2]], y: [1] }, { x: [[NaN, 1], [Infinity, 0]], y: [1, 0] },
    { x: [[1e308, -1e308], [0.5, 0.5]], y: [1e308, NaN] }, { x: [[0.9, 0.1], [0.8, 0.2]], y: [-1e12, 1] },
  ];
  const ring = degenerate.map((d, i) => [d, degenerate[(i + 2) % degenerate.length]] as [Data, Data]);
  const extreme: [Data, Data] = [{ x: new Array(m).fill([-50, 50]), y: new Array(m).fill(1) },
    { x: new Array(m).fill([50, -50]), y: new Array(m).fill(0) }];
  return { pairs: [...Array.from({ length: 4 }, () => [random(), random()] as [Data, Data]), ...ring], extreme };
}

const WINDOWS: [number, number][] = [[-1, 1], [0.02, 0.05], [0.97, 1], [-3, -2]];

for (const method of ["ssl", "baseline-b"]) {
  for (const mech of ["duchi", "pm", "hm"]) { // exact dyadic pmfs (discrete Laplace: privacy-audit.test.ts)
    for (const eps of [0.5, 3.0]) {
      const name = `sgd identity ${method} ${mech} ε=${eps}`;
      test(`gradient report audit: ${name} never exceeds the ε it charges`, () => {
        let worst = Ratio.ONE;
        let boundAll = Ratio.ONE;
        for (const w of WINDOWS) {
          const t = parseTask(taskJson({ method, mechanism: mech, epsilon: eps, eps_c: eps / 2, intervals: [w, w] }));
          assert.equal(t.units % 2n, 0n);
          assert.ok(Number(t.units) <= eps * 2 ** 24, "the task spends more than its budget");
          const bound = pow(new Ratio(expLower(t.units / 2n), ONE), 2);
          boundAll = bound;
          const rand = mulberry32(name.length * 7919 + w[0] * 100);
          const rng = seededSource(`sgd-audit-${name}-${w[0]}`);
          const { pairs, extreme } = datasets(rand);
          for (const [D, D2] of [extreme, ...pairs]) {
            for (const src of [D, D2]) {
              const z = computeReport(t, src.x, src.y, rng);
              const p = probability(t, D, z);
              const p2 = probability(t, D2, z);
              assert.ok(!p.isZero && !p2.isZero, `${name}: a report impossible under a dataset`);
              const r = p.cmp(p2) >= 0 ? p.div(p2) : p2.div(p);
              if (r.cmp(worst) > 0) worst = r;
              assert.ok(r.cmp(bound) <= 0, `${name} ${w}: ratio e^${r.log()} > e^${bound.log()}`);
            }
          }
        }
        if (method === "ssl") assert.ok(worst.log() >= 0.3 * boundAll.log(), `${name}: worst e^${worst.log()}`);
      });
    }
  }
}
