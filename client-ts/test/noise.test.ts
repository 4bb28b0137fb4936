/** Distribution checks of the TS samplers against their exact pmfs, and mode/refusal rules. */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  discreteLaplace, laplaceScale, randomizedRound, RandomSource, seededSource, rationalEpsilon,
} from "../src/core/index.js";

test("DLap(t) frequencies match the exact pmf (t = 2/0.7, 40000 draws, 5 sigma)", () => {
  const s = laplaceScale(2, 0.7);
  const t = Number(s.num) / Number(s.den);
  const q = Math.exp(-1 / t);
  const n = 40000;
  const z = discreteLaplace(s, n, seededSource("dlap-pmf")).map(Number);
  for (const v of [-3, -1, 0, 1, 2, 5]) {
    const p = ((1 - q) / (1 + q)) * q ** Math.abs(v);
    const k = z.filter((x) => x === v).length;
    const sd = Math.sqrt(n * p * (1 - p));
    assert.ok(Math.abs(k - n * p) < 5 * sd, `P(Z=${v}): ${k} vs ${n * p}`);
  }
  const mean = z.reduce((a, b) => a + b, 0) / n;
  const variance = (2 * q) / (1 - q) ** 2;
  assert.ok(Math.abs(mean) < 5 * Math.sqrt(variance / n), `mean ${mean}`);
});

test("randomized rounding is unbiased (x = 0.3 and 7.8125, 20000 draws, 5 sigma)", () => {
  for (const x of [0.3, 7.8125]) {
    const n = 20000;
    const r = randomizedRound(new Array(n).fill(x), seededSource(`round-${x}`)).map(Number);
    const f = x - Math.floor(x);
    assert.ok(r.every((v) => v === Math.floor(x) || v === Math.floor(x) + 1));
    const mean = r.reduce((a, b) => a + b, 0) / n;
    assert.ok(Math.abs(mean - x) < 5 * Math.sqrt((f * (1 - f)) / n), `mean ${mean} vs ${x}`);
  }
});

test("ε is rounded down to a multiple of 2^-24; bad ε are refused", () => {
  assert.equal(rationalEpsilon(1), 1n << 24n);
  assert.equal(rationalEpsilon(0.1), 1677721n); // floor(0.1 · 2^24), 0.1 is slightly above 1/10
  assert.equal(rationalEpsilon(2 ** -24), 1n);
  assert.equal(rationalEpsilon(2 ** 20), 1n << 44n); // the largest supported ε
  for (const bad of [0, -1, 2 ** -25, 2 ** 20 + 2 ** -24, 1e300, Number.NaN,
    Number.POSITIVE_INFINITY]) {
    assert.throws(() => rationalEpsilon(bad), RangeError);
  }
  assert.throws(() => laplaceScale(1n << 40n, 2 ** -24), RangeError); // t >= 2^56
  assert.throws(() => laplaceScale(0, 1), RangeError);
});

test("secure sources are keyed from the platform CSPRNG and are not simulation sources", () => {
  const a = RandomSource.secure();
  const b = RandomSource.secure();
  assert.equal(a.simulation, false);
  assert.equal(a.spawn("x").simulation, false);
  assert.notDeepEqual(a.words(4), b.words(4));
  assert.equal(seededSource(1).simulation, true);
  assert.equal(seededSource(1).spawn("report").simulation, true);
  assert.throws(() => RandomSource.secure({} as never), /getRandomValues/);
});

test("ε above 2^20 is refused before any sampler runs (the exact samplers' ranges hold)", () => {
  assert.throws(() => laplaceScale(2, 1e300), RangeError);
  assert.equal(discreteLaplace(laplaceScale(2, 2 ** 20), 3, seededSource(0)).length, 3);
});
