/**
 * Method `hadamard`, device half: one Hadamard coefficient of the whole dataset, clamped to a
 * window sized from what the earlier stages measured of the users' spread
 * (docs/device-protocol.md §17.13, docs/algorithms.md "Hadamard windows"; Python:
 * uldp.client.methods.hadamard, collector half uldp.collector.methods.hadamard).
 *
 * Kinds `distribution` and `mean-l1`. Stage 1 (centre): for a categorical kind the report of
 * method oracle (./oracle.ts, dispatched by report.ts), otherwise the served components' values
 * on the task's intervals (the ssl report). Stage 2 (spread): per served component, category 1
 * if its statistic lies outside the task's interval [lo, hi] and 0 inside, through the task's
 * frequency oracle over k = 2 (privatizeMany, as a stage-I report). Stage 3 (window): the
 * values on the task's intervals (the ssl report). The statistic is the kind's, except that a
 * distribution user without usable records takes the coefficients of the uniform
 * distribution over the alphabet, hadamardRows(u, K) with u_j = 1/A.
 */
import { nextPow2 } from "../hadamard.js";
import { hadamardRows, type KindImpl, type Row, statistics, usable } from "../kinds.js";
import type { FrequencyOracle } from "../mechanisms/base.js";
import type { RandomSource } from "../random.js";
import type { JValue } from "../json.js";
import type { MethodRules } from "../registry.js";
import {
  centreByRecords, checkIntervals, HADAMARD_KINDS, kindCategories, type KindName, oracleOf, refuse, scalarOf, singleRecord, type Task,
} from "../task.js";
import { checkOracle } from "./oracle.js";
import { recordStatistic } from "../trace.js";
import { type Interval, valueReports } from "../twoStage.js";

/** The coefficients of the uniform distribution over the A = dim categories. */
export function uniformStatistic(task: Task): number[] {
  return hadamardRows(new Array<number>(task.dim).fill(1 / task.dim), nextPow2(task.dim));
}

/** Stage 2: the outside bit of every served component through the oracle over two categories. */
export function outsideReports(y: readonly number[], intervals: readonly Interval[], oracle: FrequencyOracle,
  epsC: number, rng: RandomSource): bigint[] {
  recordStatistic(y);
  const items = intervals.map(([lo, hi], c) => (y[c] < lo || y[c] > hi ? 1 : 0));
  return oracle.privatizeMany(items, intervals.map(() => 2), epsC, rng);
}

/** The report of stages 2 and 3 (stage 1 of a categorical kind is method oracle's). */
export function hadamardReport(task: Task, kind: KindImpl, rows: Row[], rng: RandomSource): bigint[] {
  const valid = usable(task, kind, rows);
  let Y = statistics(task, kind, rows, valid);
  if (kindCategories(task.kind, task.dim) !== null && !valid.some(Boolean)) Y = uniformStatistic(task);
  const y = task.components.map((c) => Y[c]);
  const ivs = task.intervals as Interval[];
  if (task.stage === 2) return outsideReports(y, ivs, oracleOf(task.mechanism), task.epsC, rng);
  return valueReports(y, ivs, scalarOf(task.mechanism), task.epsC, rng);
}

/** Method hadamard's rules (§17.13, step 10 of §14.1): a kind of Hadamard coefficients; stage 1
 * of a categorical kind is method oracle's rules (a record-level oracle), else one record, the
 * stage's mechanism (a frequency oracle at stage 2, a scalar one at stage 1), intervals. */
export function checkHadamard(f: ReadonlyMap<string, JValue>, stage: number, kind: KindName, dim: number, C: number,
  comps: bigint[]): void {
  if (!HADAMARD_KINDS.includes(kind)) refuse("param", `method hadamard takes kind ${HADAMARD_KINDS.join(", ")}, not ${kind}`);
  if (centreByRecords("hadamard", stage, kind, dim)) {
    checkOracle(f, kind, dim, C, comps);
    return;
  }
  singleRecord(f);
  if (stage === 2) oracleOf(f.get("mechanism") as string);
  else scalarOf(f.get("mechanism") as string);
  checkIntervals(f, comps.length);
}

/** Method hadamard, as the kinds that take it register it (../registry.ts). */
export const HADAMARD_METHOD: MethodRules = { report: hadamardReport, check: checkHadamard };
