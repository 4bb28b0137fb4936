/**
 * Exact likelihood-ratio audits of the stage-I and stage-II/SSL mechanisms (the TS port of
 * tests/test_privacy_audit.py for one user): for random neighbouring statistics (y, y'),
 * including values far outside the support, a report is drawn from the real device function
 * on y, and the exact log-likelihood ratio of that report — and of probes pushed far into the
 * tails — under y and y' never exceeds ε_r, the ε the noise is calibrated to. Extreme pairs
 * must come close to ε (so a mechanism with too little noise fails), and a negative control
 * with half the noise is flagged by the same check.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  boundedParams, clampInterval, heavyTailedParams, rationalEpsilon, RandomSource, seededSource,
  stage1LogLikelihood, stage1Report, stage2LogLikelihood, stage2Report, alg1Params,
  type Alg1Params, type Interval,
} from "../src/core/index.js";
import { mulberry32 } from "./exact-stats.js";

const TOL = 1e-9;
const FAR = 3n * (1n << 18n);

function randomStats(k: number, rand: () => number): number[] {
  const scale = [0.5, 1.0, 50.0][Math.floor(rand() * 3)];
  return Array.from({ length: k }, () => scale * (2 * rand() - 1) * 2 + (4 * rand() - 2));
}

const epsR = (eps: number): number => Number(rationalEpsilon(eps)) / 2 ** 24;

function probes(z: bigint[]): bigint[][] {
  return [
    z,
    z.map((v) => v + (v >= 0n ? FAR : -FAR)),
    z.map((v) => v + FAR),
    z.map((v) => v - FAR),
  ];
}

interface Mech {
  name: string;
  k: number;
  eps: number; // the ε the mechanism claims
  draw(y: number[], rng: RandomSource): bigint[];
  ll(y: number[], z: bigint[]): number;
}

function stage1Mech(name: string, params: Alg1Params[], eps: number, drawEps = eps): Mech {
  return {
    name, k: params.length, eps,
    draw: (y, rng) => stage1Report(y, params, drawEps, rng),
    ll: (y, z) => stage1LogLikelihood(y, z, params, eps),
  };
}

function stage2Mech(name: string, ivs: Interval[], eps: number, drawEps = eps): Mech {
  return {
    name, k: ivs.length, eps,
    draw: (y, rng) => stage2Report(y, ivs, drawEps, rng),
    ll: (y, z) => stage2LogLikelihood(y, z, ivs, eps),
  };
}

/** Worst |log ratio| over the trials, or the first violation. */
function audit(m: Mech, seed: number, trials = 25): { worst: number; violation: string | null } {
  const rand = mulberry32(seed);
  const rng = seededSource(`audit-${m.name}`);
  let worst = 0;
  for (let trial = 0; trial < trials; trial++) {
    let y = randomStats(m.k, rand);
    let y2 = randomStats(m.k, rand);
    if (trial === 0) { // the extreme pair
      y = new Array(m.k).fill(-50);
      y2 = new Array(m.k).fill(50);
    }
    for (const src of [y, y2]) {
      const z = m.draw(src, rng);
      for (const p of probes(z)) {
        const r = m.ll(y, p) - m.ll(y2, p);
        worst = Math.max(worst, Math.abs(r));
        if (!(Math.abs(r) <= epsR(m.eps) * m.k + TOL)) {
          return { worst, violation: `${m.name}: log ratio ${r} > ${epsR(m.eps) * m.k}` };
        }
      }
    }
  }
  return { worst, violation: null };
}

const p6 = boundedParams(1.0, 6, 400);
const p100 = boundedParams(1.0, 100, 20000);
const heavy = heavyTailedParams(3.0, 2.0, 6, 400, 0.7);
const one = alg1Params(1.0, 2.0, 0.0, 1);

const MECHS: Mech[] = [
  stage1Mech("stage1-mean", [p6], 0.7),
  stage1Mech("stage1-three", [p6, p100, heavy], 0.25),
  stage1Mech("stage1-tiny-eps", [p100], 2 ** -24 * 3),
  stage1Mech("stage1-B1", [one], 1.0),
  stage1Mech("stage1-eps-not-dyadic", [p100], 0.1),
  stage2Mech("ssl-mean", [[-1, 1]], 0.7),
  stage2Mech("stage2-mid", [clampInterval(p100, 3)], 2.5),
  stage2Mech("stage2-khat0", [clampInterval(p6, 0)], 0.5),
  stage2Mech("stage2-khatB", [clampInterval(p100, p100.bins)], 0.5),
  stage2Mech("stage2-three", [clampInterval(p100, 1), [-1, 1], clampInterval(heavy, 2)], 1 / 3),
];

for (const [i, m] of MECHS.entries()) {
  test(`likelihood ratio never exceeds ε: ${m.name}`, () => {
    const { worst, violation } = audit(m, 1000 + i);
    assert.equal(violation, null);
    if (m.name === "stage1-B1") {
      // a single bin: the one-hot vector is [1] for every dataset, the report says nothing
      assert.equal(worst, 0);
    } else {
      // extreme pairs push every coordinate to both ends: the bound is nearly attained
      assert.ok(worst >= 0.5 * epsR(m.eps) * m.k, `${m.name}: audit never approached ε (${worst})`);
    }
  });
}

test("negative control: half the noise is flagged by the same audit", () => {
  // a device that claims ε = 1 but draws its noise at 2ε: the exact likelihood ratio of its
  // reports (under the noise it really adds) exceeds the claimed ε for the extreme pair
  for (const [m, trueMech] of [
    [stage1Mech("leaky-stage1", [p6], 1.0, 2.0), stage1Mech("true-stage1", [p6], 2.0)],
    [stage2Mech("leaky-ssl", [[-1, 1]], 1.0, 2.0), stage2Mech("true-ssl", [[-1, 1]], 2.0)],
  ] as const) {
    const rng = seededSource(m.name);
    const y = [-50];
    const y2 = [50];
    let worst = 0;
    for (let i = 0; i < 10; i++) {
      const z = m.draw(y2, rng);
      for (const p of probes(z)) worst = Math.max(worst, Math.abs(trueMech.ll(y, p) - trueMech.ll(y2, p)));
    }
    assert.ok(worst > epsR(1.0) + 0.5, `${m.name}: a 2ε mechanism was not flagged (${worst})`);
  }
});
