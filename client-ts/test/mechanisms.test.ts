/**
 * The report mechanisms' device halves (src/core/mechanisms; the TS port of
 * tests/test_mechanisms.py): exact designs, exact privacy of every output, and every sampler
 * against its exact pmf (invariant 8).
 *
 *  - S(N) is a certified lower bound of e^ε (checked against the exact Taylor partial sum, a
 *    rational lower bound of e^x) and tight to 2^-50 relative below the cap (against a rational
 *    upper bound);
 *  - every design passes its integer check over a grid of (k, ε) from one unit of 2^-24 to 2^20
 *    and from one to 2^16 categories;
 *  - the largest likelihood ratio between any two inputs over every output, in exact rationals,
 *    is at most S/2^64 <= e^ε, and for extreme inputs close to it (too little noise would fail);
 *  - the samplers' frequencies match the exact probabilities (chi-square, fixed seeds), and a
 *    sampler drawn at the wrong ε is flagged by the same test.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  duchiDesign, EPS_DENOMINATOR, EXP_CAP_UNITS, expLower, GRID_STEPS, grrDesign, hashOf, HM_THRESHOLD_UNITS, hmAlpha,
  olhDesign, ONE, AUDITED_ORACLES, ORACLES, oueQ, parseTask, pmDesign, RandomSource, seededSource, Ratio, rationalEpsilon, AUDITED_SCALARS, SCALARS, ssDesign, taskDigest,
  TaskRefused,
} from "../src/core/index.js";
import { Device, type DeviceTransportLike, type ReportMessage, type TaskMessage } from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";
import { chi2z, expBounds } from "./exact-stats.js";

const U = EPS_DENOMINATOR;
const UNITS = [1n, 2n, 1000n, U / 2n, HM_THRESHOLD_UNITS - 1n, HM_THRESHOLD_UNITS, U, 3n * U, 8n * U,
  EXP_CAP_UNITS - 1n, EXP_CAP_UNITS, 1000n * U, (1n << 20n) * U];
const KS = [1, 2, 3, 5, 16, 255, 256, 1 << 16];
const G = BigInt(GRID_STEPS);

const bound = (eps: number): Ratio => new Ratio(expLower(rationalEpsilon(eps)), ONE);
const asRatio = (p: Ratio | number): Ratio => {
  if (!(p instanceof Ratio)) throw new Error("an exact mechanism returned a double");
  return p;
};

test("S(N) is a certified lower bound of e^ε, tight to 2^-50 below the cap", () => {
  assert.equal(expLower(1n << 24n), 50143449209799256675n); // §17.1
  for (const units of UNITS) {
    const S = new Ratio(expLower(units), ONE);
    const x = units < EXP_CAP_UNITS ? units : EXP_CAP_UNITS;
    const { lower, upper } = expBounds(x, 200);
    assert.ok(S.cmp(lower) <= 0, `S(${units}) above the Taylor lower bound of e^x`);
    const slack = new Ratio((1n << 50n) - 1n, 1n << 50n);
    assert.ok(S.cmp(upper.mul(slack)) >= 0, `S(${units}) is not tight`);
  }
  assert.throws(() => expLower(-1n), RangeError);
});

test("every design passes its exact check over (k, N)", () => {
  for (const units of UNITS) {
    const S = expLower(units);
    for (const k of KS) {
      const g = grrDesign(k, units); // the design functions throw when their check fails
      assert.equal(g.P + BigInt(k - 1) * g.Q, ONE);
      if (k > 1) assert.ok(g.P * ONE <= S * g.Q && g.Q <= g.P);
      const s = ssDesign(k, units);
      assert.ok(s.omega >= 1 && s.omega <= Math.max(k - 1, 1));
    }
    const Q = oueQ(units);
    assert.ok(Q > 0n && Q <= ONE / 2n && (ONE - Q) * ONE <= S * Q);
    const o = olhDesign(units);
    assert.ok(o.k >= 2 && o.k <= 1 << 16);
    const [Pmin, D] = duchiDesign(units);
    assert.equal(Pmin + D * G, ONE - Pmin);
    const p = pmDesign(units);
    assert.ok(p.W >= 1n && p.W <= G && p.cells === G + p.W);
    const A = hmAlpha(units);
    assert.equal(A === 0n, units < HM_THRESHOLD_UNITS);
    assert.ok(A >= 0n && A < ONE);
  }
  assert.throws(() => grrDesign(0, 1n), RangeError);
  assert.throws(() => ssDesign(0, 1n), RangeError);
});

/** Every report of a small oracle (OLH: every hash value under three seeds, and one value no
 * input hashes to). */
function oracleOutputs(name: string, k: number, eps: number): bigint[][] {
  if (name === "grr") return Array.from({ length: k }, (_, y) => [BigInt(y)]);
  if (name === "oue") {
    return Array.from({ length: 1 << k }, (_, m) => Array.from({ length: k }, (_, j) => BigInt((m >> j) & 1)));
  }
  if (name === "ss") {
    const w = ssDesign(k, rationalEpsilon(eps)).omega;
    const out: bigint[][] = [];
    const rec = (start: number, acc: number[]): void => {
      if (acc.length === w) { out.push(acc.map(BigInt)); return; }
      for (let v = start; v < k; v++) rec(v + 1, [...acc, v]);
    };
    rec(0, []);
    return out;
  }
  const g = olhDesign(rationalEpsilon(eps)).k;
  const out: bigint[][] = [];
  for (let s = 7n; s < 10n; s++) {
    const hashes = new Set(Array.from({ length: k }, (_, v) => hashOf(s, v, g)));
    for (const y of [...hashes].sort((a, b) => a - b)) out.push([s, BigInt(y)]);
    const miss = Array.from({ length: g }, (_, y) => y).find((y) => !hashes.has(y));
    if (miss !== undefined) out.push([s, BigInt(miss)]);
  }
  return out;
}

for (const name of ["grr", "oue", "ss", "olh"]) {
  test(`exact likelihood ratios of ${name} never exceed S/2^64, and reach it`, () => {
    const o = AUDITED_ORACLES.get(name)!;
    const k = 5;
    for (const eps of [2 ** -24, 0.3, 1.0, 2.5, 8.0, 45.0]) {
      const b = bound(eps);
      let worst = Ratio.ONE;
      const total = new Array<Ratio>(k).fill(Ratio.ZERO);
      for (const rep of oracleOutputs(name, k, eps)) {
        const probs = Array.from({ length: k }, (_, v) => asRatio(o.probability(rep, v, k, eps)));
        probs.forEach((p, v) => { total[v] = total[v].add(p); });
        const lo = probs.reduce((a, p) => (p.cmp(a) < 0 ? p : a));
        const hi = probs.reduce((a, p) => (p.cmp(a) > 0 ? p : a));
        assert.ok(!lo.isZero, `${name} ε=${eps}: an output impossible for some input`);
        const r = hi.div(lo);
        if (r.cmp(worst) > 0) worst = r;
      }
      assert.ok(worst.cmp(b) <= 0, `${name} ε=${eps}: ratio ${worst.log()} > ${b.log()}`);
      if (name !== "olh") for (const t of total) assert.equal(t.cmp(Ratio.ONE), 0, `${name}: not a pmf`);
      if (eps <= 8) assert.ok(worst.cmp(b.mul(new Ratio(999n, 1000n))) >= 0, `${name} ε=${eps}: the bound is not reached`);
    }
  });
}

const cellsOf = (g: bigint, W: bigint): bigint[] => [0n, 1n, 2n, 3n, 4000n, 4001n, 32768n, 32769n, G - 1n, G, G + 1n,
  G + W - 1n, G + W, G + W + 1n, ...[0n, 1n, 2n, 4000n, 32768n, G - 1n, G].flatMap((x) => [x - 1n, x, x + 1n, x + W - 1n, x + W, x + W + 1n]), g];

for (const name of ["duchi", "pm", "hm"]) {
  test(`exact likelihood ratios of ${name} never exceed S/2^64; its pmf sums to one`, () => {
    const s = AUDITED_SCALARS.get(name)!;
    const gs = [0n, 1n, 2n, 4000n, 32768n, G - 1n, G];
    for (const eps of [2 ** -24, 0.3, 0.7, 2.5, 8.0, 45.0]) {
      const d = pmDesign(rationalEpsilon(eps));
      const b = bound(eps);
      let worst = Ratio.ONE;
      for (const z of new Set(cellsOf(0n, d.W))) {
        const probs = gs.map((g) => asRatio(s.probability(z, g, eps)));
        if (probs.every((p) => p.isZero)) continue;
        assert.ok(probs.every((p) => !p.isZero), `${name}: z=${z} impossible for some input`);
        const lo = probs.reduce((a, p) => (p.cmp(a) < 0 ? p : a));
        const hi = probs.reduce((a, p) => (p.cmp(a) > 0 ? p : a));
        const r = hi.div(lo);
        if (r.cmp(worst) > 0) worst = r;
      }
      assert.ok(worst.cmp(b) <= 0, `${name} ε=${eps}: ratio ${worst.log()} > ${b.log()}`);
      if (eps <= 8 && (name === "duchi" || (name === "pm" && eps >= 0.3))) {
        assert.ok(worst.cmp(b.mul(new Ratio(99n, 100n))) >= 0, `${name} ε=${eps}: the bound is not reached`);
      }
      // the pmf is constant on [0, g), the window, the rest of the PM range, each Duchi value
      for (const g of [0n, 777n, G]) {
        const cuts = name === "duchi" ? [0n, 1n, 2n] : [...new Set([0n, g, g + d.W, d.cells, d.cells + 1n, d.cells + 2n])].sort((a, c) => (a < c ? -1 : 1));
        let total = Ratio.ZERO;
        for (let i = 0; i + 1 < cuts.length; i++) {
          const [a, c] = [cuts[i], cuts[i + 1]];
          const p = asRatio(s.probability(a, g, eps));
          for (const z of [a, (a + c) / 2n, c - 1n]) assert.equal(asRatio(s.probability(z, g, eps)).cmp(p), 0);
          total = total.add(p.mul(new Ratio(c - a)));
        }
        assert.equal(total.cmp(Ratio.ONE), 0, `${name} ε=${eps} g=${g}: the pmf sums to ${total}`);
        assert.ok(asRatio(s.probability(-1n, g, eps)).isZero && asRatio(s.probability(cuts[cuts.length - 1], g, eps)).isZero);
      }
    }
  });
}

/** Counts of the reports of `draws` privatizations of item 3 over k = 5. */
function oracleCounts(name: string, eps: number, n: number, seed: string): Map<string, number> {
  const o = AUDITED_ORACLES.get(name)!;
  const rng = seededSource(seed);
  const counts = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const key = o.privatize(3, 5, eps, rng).join(",");
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

function oraclePmf(name: string, eps: number): Map<string, Ratio> {
  const o = AUDITED_ORACLES.get(name)!;
  return new Map(oracleOutputs(name, 5, eps).map((r) => [r.join(","), asRatio(o.probability(r, 3, 5, eps))]));
}

for (const name of ["grr", "oue", "ss"]) {
  test(`the ${name} sampler matches its exact pmf (chi-square, 20000 draws)`, () => {
    for (const eps of [0.5, 2.0]) {
      const { z } = chi2z(oracleCounts(name, eps, 20000, `pmf-${name}-${eps}`), oraclePmf(name, eps), 20000);
      assert.ok(z < 4.75, `${name} ε=${eps}: chi-square z = ${z}`);
    }
  });
}

test("negative control: an oracle drawn at 4ε fails the chi-square of ε", () => {
  // (ss: ε pairs of the same subset size ω, so every drawn subset is a possible output)
  for (const [name, drawn, claimed] of [["grr", 2.0, 0.5], ["oue", 2.0, 0.5], ["ss", 0.8, 0.2]] as const) {
    assert.equal(oracleOutputs(name, 5, drawn).length, oracleOutputs(name, 5, claimed).length);
    const { z } = chi2z(oracleCounts(name, drawn, 20000, `pmf-neg-${name}`), oraclePmf(name, claimed), 20000);
    assert.ok(z > 10, `${name}: a 4ε sampler passed (z = ${z})`);
  }
});

test("the olh sampler: uniform seeds, GRR of the seed's hash", () => {
  for (const eps of [0.5, 3.0]) {
    const n = 20000;
    const d = olhDesign(rationalEpsilon(eps));
    const rng = seededSource(`olh-${eps}`);
    const top = new Map<string, number>();
    let hits = 0;
    for (let i = 0; i < n; i++) {
      const [s, y] = AUDITED_ORACLES.get("olh")!.privatize(4, 7, eps, rng);
      assert.ok(s >= 0n && s < 1n << 32n && y >= 0n && y < BigInt(d.k));
      const cell = String(s >> 28n);
      top.set(cell, (top.get(cell) ?? 0) + 1);
      if (Number(y) === hashOf(s, 4, d.k)) hits++;
    }
    const uniform = new Map(Array.from({ length: 16 }, (_, c) => [String(c), new Ratio(1n, 16n)] as const));
    assert.ok(chi2z(top, uniform, n).z < 4.75, "seeds are not uniform");
    const p = Number(d.P) / 2 ** 64;
    assert.ok(Math.abs(hits / n - p) < 5 * Math.sqrt((p * (1 - p)) / n), `keep rate ${hits / n} vs ${p}`);
  }
});

for (const name of ["duchi", "pm", "hm"]) {
  test(`the ${name} sampler matches its exact pmf on the cells it is constant on`, () => {
    const s = AUDITED_SCALARS.get(name)!;
    const n = 12000;
    for (const eps of [0.4, 1.5, 6.0]) {
      const d = pmDesign(rationalEpsilon(eps));
      for (const g of [0n, 40000n, G]) {
        const cuts = name === "duchi" ? [0n, 1n, 2n] : name === "pm" ? [0n, g, g + d.W, d.cells]
          : [0n, g, g + d.W, d.cells, d.cells + 1n, d.cells + 2n];
        const z = s.privatize(new Array<bigint>(n).fill(g), eps, seededSource(`${name}-${eps}-${g}`));
        const counts = new Map<string, number>();
        const probs = new Map<string, Ratio>();
        for (let c = 0; c + 1 < cuts.length; c++) {
          const [a, b] = [cuts[c], cuts[c + 1]];
          if (b <= a) continue;
          const p = asRatio(s.probability(a, g, eps)).mul(new Ratio(b - a));
          if (p.isZero) continue;
          probs.set(String(c), p);
          counts.set(String(c), z.filter((x) => x >= a && x < b).length);
        }
        assert.equal([...counts.values()].reduce((a, b) => a + b, 0), n, `${name}: an output outside the cells`);
        assert.equal([...probs.values()].reduce((a, b) => a.add(b), Ratio.ZERO).cmp(Ratio.ONE), 0);
        const { z: score } = chi2z(counts, probs, n);
        assert.ok(score < 4.75, `${name} ε=${eps} g=${g}: chi-square z = ${score}`);
      }
    }
  });
}

// ---- ε accounting -------------------------------------------------------------------------
function taskText(o: Record<string, unknown>): string {
  const t: Record<string, unknown> = {
    schema: "uldp.task/2", query_id: "q", stage: 0, dim: 3, bound: 1.0, stat_bound: null, bins: [], intervals: [],
    frame_kind: "gaussian", frame_seed: 0, kashin_level: 4.0, kashin_delta: 0.5, m_ref: 1, virtual_groups: [],
    virtual_eps: [], virtual_offset: 0, extra: {}, kind: "mean-linf", epsilon: 1.0, eps_c: 0.3, components: [0, 2], ...o,
  };
  return JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1))));
}

class Collector implements DeviceTransportLike {
  reports: ReportMessage[] = [];
  tasks: TaskMessage[] = [];
  async enroll() { return { device_id: "d", token: "t", expires_at_ms: String(Date.now() + 86_400_000) }; }
  async getTasks() { return { tasks: this.tasks, waiting: [], retry_after_ms: 0 }; }
  async submitReport(_token: string, report: ReportMessage) {
    this.reports.push(report);
    return { duplicate: false, received_at_ms: "1" };
  }
}

test("ε accounting: every mechanism spends |components|·N(eps_c) (oracle: records·N), and the ledger charges it", async () => {
  const N = rationalEpsilon(0.3); // 0.3 is not dyadic: N = ⌊0.3·2^24⌋
  assert.equal(N, 5033164n);
  const bins = [[1.0, 0.25, 8], [1.0, 0.5, 4]];
  const cases: [string, string, bigint, number][] = [];
  for (const m of ORACLES.keys()) {
    const lengths = { laplace: 12, grr: 2, oue: 12, olh: 4, ss: ssDesign(8, N).omega + ssDesign(4, N).omega }[m]!;
    cases.push([`bins-${m}`, taskText({ method: "two-stage", stage: 1, mechanism: m, bins }), 2n * N, lengths]);
    for (const r of [1, 3]) {
      const len = { laplace: 5, grr: 1, oue: 5, olh: 2, ss: ssDesign(5, N).omega }[m]!;
      cases.push([`oracle-${m}-r${r}`, taskText({ kind: "distribution", dim: 5, bound: null, method: "oracle", records: r,
        mechanism: m, components: [0, 1, 2, 3, 4, 5, 6, 7] }), BigInt(r) * N, r * len]);
    }
  }
  for (const m of SCALARS.keys()) {
    for (const [method, stage] of [["two-stage", 2], ["ssl", 0], ["baseline-b", 0]] as const) {
      cases.push([`${method}-${m}`, taskText({ method, stage, mechanism: m, intervals: [[-1, 1], [0, 0.5]] }), 2n * N, 2]);
    }
  }
  for (const [name, text, units, length] of cases) {
    const t = parseTask(text);
    assert.deepEqual([t.units, t.reportLength], [units, length], name);
    const fake = new Collector();
    const d = await Device.open({ sendDelay: null, transport: fake, store: new MemoryStore(), budget: 1.0,
      simulation: { rng: seededSource(name) } });
    d.addDataset("data", t.kind === "distribution" ? [0, 3, 3] : [[0.5, 9, -0.25]], undefined,
      t.kind === "distribution" ? { values: "categorical", alphabet: 5 } : { dim: 3 });
    fake.tasks = [{ query_id: "q", phase: 1, dataset: "data", task_json: text, task_digest: taskDigest(text), report_length: length }];
    const r = await d.poll();
    assert.deepEqual([r.submitted, d.ledger.spentUnits(), fake.reports[0].values.length], [["q"], units, length], name);
  }
  // one unit more than the budget allows is refused before anything is charged
  const over = taskText({ kind: "distribution", dim: 5, bound: null, method: "oracle", records: 4, eps_c: 0.25 + 2 ** -24,
    mechanism: "oue", components: [0, 1, 2, 3, 4, 5, 6, 7] });
  assert.throws(() => parseTask(over), (e: unknown) => e instanceof TaskRefused && e.code === "over-budget");
});
