/**
 * Exact likelihood-ratio audit of every task with a frequency oracle or a scalar randomizer
 * (the TS port of tests/test_privacy_audit_mechanisms.py). For pairs of whole local datasets —
 * random, far outside the support, and the degenerate datasets of the totality invariant
 * (empty, one sample, NaN/±∞, ±1e308, off-alphabet categories) — reports are drawn from the
 * real device function `computeReport`, and P(report | D) is computed in exact rationals: the
 * data rounding to the grid is the two-point mixture with the dyadic probability
 * ⌊frac·2^53⌋/2^53 the device draws, the mechanisms' probabilities are dyadic, baseline B mixes
 * over its usable samples and method oracle over every ordered sample of records. The ratio
 * P(z | D) / P(z | D') never exceeds S(N)/2^64 per component (composed over components and
 * records) <= e^ε for the ε the ledger charged, and the extreme pair comes close to it. Method
 * oracle with discrete Laplace (irrational pmf) is audited the same way in doubles.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  alg1Params, binIndex, computeReport, discreteLaplaceLogPmf, expLower, gridPositions, type Interval, KINDS,
  laplaceScale, laplaceScaleValue, ONE, AUDITED_ORACLES, parseTask, RandomSource, seededSource, Ratio, AUDITED_SCALARS, type Samples, statistics,
  type Task, taskRows, usable,
} from "../src/core/index.js";
import { mulberry32, pow } from "./exact-stats.js";
import { asRatio, taskJson } from "./task-json.js";

/** The statistic of the served components. */
function stats(t: Task, samples: Samples): number[] {
  const kind = KINDS[t.kind];
  const rows = taskRows(t, samples, null);
  const Y = statistics(t, kind, rows, usable(t, kind, rows));
  return t.components.map((c) => Y[c]);
}

/** The usable samples, one dataset each (baseline B's choices) and as categories (oracle). */
function usableSamples(t: Task, samples: Samples): Samples[] {
  const kind = KINDS[t.kind];
  const rows = taskRows(t, samples, null);
  const valid = usable(t, kind, rows);
  return (samples as unknown[]).flatMap((s, i) => (valid[i] ? [[s] as Samples] : []));
}

/** The device's rounding of each y_c: grid values and exact weights (⌊frac·2^53⌋/2^53 up). */
function gridMixture(y: number[], ivs: Interval[]): [bigint, Ratio][][] {
  return gridPositions(y, ivs).map((pos) => {
    const fl = Math.floor(pos);
    const up = new Ratio(BigInt(Math.floor((pos - fl) * 2 ** 53)), 1n << 53n);
    return up.isZero ? [[BigInt(fl), Ratio.ONE]] : [[BigInt(fl), Ratio.ONE.sub(up)], [BigInt(fl + 1), up]];
  });
}

function valueProbability(t: Task, y: number[], z: bigint[]): Ratio {
  const mech = AUDITED_SCALARS.get(t.mechanism)!;
  return gridMixture(y, t.intervals as Interval[]).reduce((acc, mix, c) =>
    acc.mul(mix.reduce((s, [g, w]) => s.add(w.mul(asRatio(mech.probability(z[c], g, t.epsC)))), Ratio.ZERO)), Ratio.ONE);
}

/** two-stage-sized stage I (§9.6): the rounding of each y_c to the B + 1 grid points (the
 * device's dyadic weight) through the oracle over B + 1 categories. */
function gridProbability(t: Task, y: number[], z: bigint[]): Ratio {
  const oracle = AUDITED_ORACLES.get(t.mechanism)!;
  let pos = 0;
  return t.bins.reduce((acc, [D, , B], c) => {
    const K = B + 1;
    const L = oracle.length(K, t.epsC);
    const part = z.slice(pos, pos + L);
    pos += L;
    const x = ((Math.min(Math.max(y[c], -D), D) + D) / (2 * D)) * B;
    const fl = Math.floor(x);
    const up = new Ratio(BigInt(Math.floor((x - fl) * 2 ** 53)), 1n << 53n);
    const at = (k: number): Ratio => asRatio(oracle.probability(part, k, K, t.epsC));
    return acc.mul(up.isZero ? at(fl) : Ratio.ONE.sub(up).mul(at(fl)).add(up.mul(at(fl + 1))));
  }, Ratio.ONE);
}

function binProbability(t: Task, y: number[], z: bigint[]): Ratio {
  const oracle = AUDITED_ORACLES.get(t.mechanism)!;
  let pos = 0;
  return t.bins.reduce((acc, [D, h, B], c) => {
    const L = oracle.length(B, t.epsC);
    const b = binIndex(y[c], alg1Params(D, h, 0, B)) - 1;
    const p = asRatio(oracle.probability(z.slice(pos, pos + L), b, B, t.epsC));
    pos += L;
    return acc.mul(p);
  }, Ratio.ONE);
}

/** Every injective sequence of `len` indices below n. */
function arrangements(n: number, len: number): number[][] {
  if (len === 0) return [[]];
  return arrangements(n, len - 1).flatMap((a) => Array.from({ length: n }, (_, i) => i).filter((i) => !a.includes(i)).map((i) => [...a, i]));
}

/** Method oracle: the mixture over the device's sample of records (partial Fisher–Yates, then
 * reuse); without usable records, uniform categories. `p(part, v)` is one record's likelihood. */
function recordsMixture<P>(t: Task, samples: Samples, z: bigint[], p: (part: bigint[], v: number) => P,
  mul: (a: P, b: P) => P, add: (a: P, b: P) => P, scale: (a: P, n: number) => P): P {
  const A = t.dim;
  const L = z.length / t.records;
  const parts = Array.from({ length: t.records }, (_, j) => z.slice(j * L, (j + 1) * L));
  const X = usableSamples(t, samples).map((s) => (s as number[])[0]);
  if (!X.length) {
    return parts.map((part) => scale(Array.from({ length: A }, (_, v) => p(part, v)).reduce(add), A)).reduce(mul);
  }
  const head = Math.min(t.records, X.length);
  const perms = arrangements(X.length, head);
  const terms = perms.map((perm) => parts.map((part, j) => p(part, X[perm[j % head]])).reduce(mul));
  return scale(terms.reduce(add), perms.length);
}

function probability(t: Task, samples: Samples, z: bigint[]): Ratio {
  if (t.method === "oracle") {
    const o = AUDITED_ORACLES.get(t.mechanism)!;
    return recordsMixture(t, samples, z, (part, v) => asRatio(o.probability(part, v, t.dim, t.epsC)),
      (a, b) => a.mul(b), (a, b) => a.add(b), (a, n) => a.div(new Ratio(BigInt(n))));
  }
  if (t.method === "baseline-b") {
    const one = usableSamples(t, samples);
    if (!one.length) return valueProbability(t, stats(t, []), z);
    return one.reduce((s, d) => s.add(valueProbability(t, stats(t, d), z)), Ratio.ZERO).div(new Ratio(BigInt(one.length)));
  }
  const y = stats(t, samples);
  if (t.stage === 1 && t.method === "two-stage-sized") return gridProbability(t, y, z);
  return t.stage === 1 ? binProbability(t, y, z) : valueProbability(t, y, z);
}

// ---- the tasks ------------------------------------------------------------------------------
const SHAPES = [
  { kind: "mean", dim: 1, eps: 0.7, C: 1, bins: [1.0, 0.5, 4], iv: [-0.25, 0.5] },
  { kind: "mean-linf", dim: 3, eps: 2.5, C: 3, bins: [1.0, 0.25, 8], iv: [-0.5, 0.75] },
  { kind: "distribution", dim: 5, eps: 2.5, C: 8, bins: [0.5, 0.25, 4], iv: [-0.25, 0.5] },
];

function cases(): [string, string][] {
  const out: [string, string][] = [];
  for (const s of SHAPES) {
    const comps = Array.from({ length: s.C }, (_, c) => c);
    const base = { kind: s.kind, dim: s.dim, bound: s.kind === "distribution" ? null : 1.0, epsilon: s.eps,
      eps_c: s.eps / s.C, components: comps };
    for (const m of ["grr", "oue", "ss", "olh"]) {
      out.push([`${s.kind}-bins-${m}`, taskJson({ ...base, method: "two-stage", stage: 1, mechanism: m, bins: comps.map(() => s.bins) })]);
      out.push([`${s.kind}-grid-${m}`, taskJson({ ...base, method: "two-stage-sized", stage: 1, mechanism: m,
        bins: comps.map(() => s.bins) })]);
    }
    for (const [method, stage] of [["two-stage", 2], ["ssl", 0], ["baseline-b", 0]] as const) {
      for (const m of ["duchi", "pm", "hm"]) {
        out.push([`${s.kind}-${method}-${m}`, taskJson({ ...base, method, stage, mechanism: m, intervals: comps.map(() => s.iv) })]);
      }
    }
  }
  for (const m of ["grr", "oue", "ss", "olh"]) {
    for (const r of [1, 2]) {
      out.push([`dist-oracle-${m}-r${r}`, taskJson({ kind: "distribution", dim: 5, bound: null, method: "oracle", epsilon: 3.0,
        eps_c: 3.0 / r, components: [0, 1, 2, 3, 4, 5, 6, 7], mechanism: m, records: r })]);
    }
  }
  return out;
}

const HUGE = [1e308, -1e308, NaN, Infinity, -Infinity];

function datasets(t: Task, rand: () => number): { pairs: [Samples, Samples][]; extreme: [Samples, Samples] } {
  const m = 4;
  if (t.kind === "distribution") {
    const random = (): number[] => Array.from({ length: m }, () => Math.floor(rand() * t.dim));
    const degenerate: Samples[] = [[], [2], [NaN], [7, -1, 0.5, Infinity], [0, 0, 0, 0], [4, 4, 1, 1], [1e308]];
    const extreme: [Samples, Samples] = [new Array(m).fill(0), new Array(m).fill(t.dim - 1)];
    return { pairs: [...Array.from({ length: 5 }, () => [random(), random()] as [Samples, Samples]), ...ring(degenerate)], extreme };
  }
  const row = (v: number): number | number[] => (t.kind === "mean" ? v : new Array<number>(t.dim).fill(v));
  const random = (): Samples => Array.from({ length: m }, () => row((rand() * 2 - 1) * [0.5, 1, 50][Math.floor(rand() * 3)])) as Samples;
  const degenerate: Samples[] = [[], [row(0.3)], HUGE.map(row), [row(NaN)], [row(0.9), row(0.95)], [row(1e308)]] as Samples[];
  const extreme: [Samples, Samples] = [new Array(m).fill(row(-50)), new Array(m).fill(row(50))] as [Samples, Samples];
  return { pairs: [...Array.from({ length: 5 }, () => [random(), random()] as [Samples, Samples]), ...ring(degenerate)], extreme };
}

const ring = (ds: Samples[]): [Samples, Samples][] => ds.map((d, i) => [d, ds[(i + 3) % ds.length]]);

for (const [name, text] of cases()) {
  test(`mechanism audit: ${name} never exceeds the ε it charges`, () => {
    const t = parseTask(text);
    const count = t.method === "oracle" ? t.records : t.components.length;
    assert.equal(t.units % BigInt(count), 0n);
    assert.ok(Number(t.units) <= t.epsilon * 2 ** 24, "the task spends more than its budget");
    const bound = pow(new Ratio(expLower(t.units / BigInt(count)), ONE), count);
    const rand = mulberry32(name.length * 7919 + name.charCodeAt(0));
    const rng = seededSource(`mech-audit-${name}`);
    const { pairs, extreme } = datasets(t, rand);
    let worst = Ratio.ONE;
    for (const [D, D2] of [extreme, ...pairs]) {
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
    // the extreme pair comes close to the bound: too little noise would be caught (transformed
    // kinds and baseline B's mixture over samples dilute the worst case)
    if ((t.kind === "mean" && t.method !== "baseline-b") || t.method === "oracle") {
      assert.ok(worst.log() >= 0.3 * bound.log(), `${name}: worst e^${worst.log()} vs e^${bound.log()}`);
    }
  });
}

test("negative control: Duchi reports drawn at 2ε fail the audit of ε", () => {
  const task = (eps: number): Task => parseTask(taskJson({ kind: "mean", method: "ssl", mechanism: "duchi", epsilon: eps,
    eps_c: eps, components: [0], intervals: [[-1, 1]] }));
  const leaky = task(2.0); // its reports, judged against the bound of the honest task at ε = 1
  const bound = new Ratio(expLower(task(1.0).units), ONE);
  const D = new Array(6).fill(-5);
  const D2 = new Array(6).fill(5);
  let worst = Ratio.ONE;
  for (let i = 0; i < 20; i++) {
    const z = computeReport(leaky, D2, null, seededSource(i));
    const r = probability(leaky, D2, z).div(probability(leaky, D, z));
    for (const x of [r, Ratio.ONE.div(r)]) if (x.cmp(worst) > 0) worst = x;
  }
  assert.ok(worst.cmp(bound) > 0, "a 2ε mechanism passed the audit of ε");
});

test("negative control: sampled records through an oracle at 2ε fail the audit of ε", () => {
  for (const m of ["grr", "oue", "ss", "olh"]) {
    const task = (eps: number): Task => parseTask(taskJson({ kind: "distribution", dim: 5, bound: null, method: "oracle",
      epsilon: eps, eps_c: eps, components: [0, 1, 2, 3, 4, 5, 6, 7], mechanism: m }));
    const leaky = task(2.0);
    const bound = new Ratio(expLower(task(1.0).units), ONE);
    const D = [0, 0, 0];
    const D2 = [4, 4, 4];
    let worst = Ratio.ONE;
    for (let i = 0; i < 20; i++) {
      const z = computeReport(leaky, i % 2 ? D : D2, null, seededSource(`leaky-${m}-${i}`));
      const r = probability(leaky, D2, z).div(probability(leaky, D, z));
      for (const x of [r, Ratio.ONE.div(r)]) if (x.cmp(worst) > 0) worst = x;
    }
    assert.ok(worst.cmp(bound) > 0, `${m}: a 2ε oracle passed the audit of ε`);
  }
});

test("mechanism audit: oracle with discrete Laplace (doubles) never exceeds the ε it charges", () => {
  for (const r of [1, 2]) {
    const t = parseTask(taskJson({ kind: "distribution", dim: 5, bound: null, method: "oracle", epsilon: 2.0, eps_c: 2.0 / r,
      components: [0, 1, 2, 3, 4, 5, 6, 7], records: r }));
    assert.equal(t.mechanism, "laplace");
    const eps = Number(t.units) / 2 ** 24;
    const tt = laplaceScaleValue(laplaceScale(2, t.epsC));
    const logP = (part: bigint[], v: number): number => part.reduce((s, x, j) => s + discreteLaplaceLogPmf(Number(x) - (j === v ? 1 : 0), tt), 0);
    const lse = (a: number, b: number): number => Math.max(a, b) + Math.log1p(Math.exp(-Math.abs(a - b)));
    const ll = (D: Samples, z: bigint[]): number => recordsMixture(t, D, z, logP, (a, b) => a + b, lse, (a, n) => a - Math.log(n));
    const rng = seededSource(`mech-audit-laplace-${r}`);
    const ds: Samples[] = [[0, 0, 0, 0], [4, 4, 4, 4], [], [NaN, 9], [1, 2, 3, 4], [2]];
    let worst = 0;
    for (const D of ds) {
      for (const D2 of ds) {
        if (D === D2) continue;
        const z = computeReport(t, D, null, rng);
        for (const probe of [z, z.map((x) => x + 100000n), z.map((x) => x - 100000n)]) {
          const lr = Math.abs(ll(D, probe) - ll(D2, probe));
          worst = Math.max(worst, lr);
          assert.ok(lr <= eps + 1e-9, `laplace oracle r=${r}: log ratio ${lr} > ${eps}`);
        }
      }
    }
    assert.ok(worst >= 0.5 * eps, `laplace oracle r=${r}: the audit never approached ε (${worst})`);
  }
});
