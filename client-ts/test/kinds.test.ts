/** The mechanism dispatcher derives stage-II intervals from k̂ and SSL intervals from D. */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  boundedParams, clampInterval, KindRegistry, privatize, RandomSource, stage1Report, stage2Report,
} from "../src/core/index.js";

const p = boundedParams(1.0, 100, 20000);

test("privatize = the stage functions with the derived intervals (same keystream words)", () => {
  const y = [0.3];
  const key = new Uint8Array(32).fill(7);
  const s1 = privatize(y, { method: "two-stage", stage: 1, params: [p], epsC: 0.5 }, RandomSource.keyed(key));
  assert.deepEqual(s1, stage1Report(y, [p], 0.5, RandomSource.keyed(key)));
  assert.equal(s1.length, p.bins);
  const s2 = privatize(y, { method: "two-stage", stage: 2, params: [p], khat: [3], epsC: 0.5 }, RandomSource.keyed(key));
  assert.deepEqual(s2, stage2Report(y, [clampInterval(p, 3)], 0.5, RandomSource.keyed(key)));
  const ssl = privatize(y, { method: "ssl", params: [p], epsC: 0.5 }, RandomSource.keyed(key));
  assert.deepEqual(ssl, stage2Report(y, [[-1, 1]], 0.5, RandomSource.keyed(key)));
  assert.throws(() => privatize(y, { method: "two-stage", stage: 2, params: [p], khat: [p.bins + 1], epsC: 0.5 },
    RandomSource.keyed(key)), RangeError);
});

test("kinds register once by name", () => {
  const r = new KindRegistry<{ bound: number }>();
  const mean = { name: "mean", params: () => [p], statistics: () => [0] };
  r.register(mean);
  assert.equal(r.get("mean"), mean);
  assert.deepEqual(r.names(), ["mean"]);
  assert.throws(() => r.register(mean), /already registered/);
});
