/**
 * The report of one device (docs/device-protocol.md §9, §12–13; Python:
 * uldp.client.tasks.compute_report and uldp.client.methods): the user statistic of the local
 * dataset, then the task's method — two-stage (stage-I bins, stage-II values), ssl,
 * baseline-a (m_ref item-level slots) or baseline-b (one sample: both ./methods/baselines.ts),
 * oracle (sampled records, ./methods/oracle.ts) or hadamard (./methods/hadamard.ts; each
 * registered by what takes it, ./registry.ts) — on the keystream `rng`,
 * through the task's mechanism (§17).
 * Total: a well-formed report for every dataset of the declared structure.
 */
import { type Row, statistics, usable } from "./kinds.js";
import { alg1Params } from "./params.js";
import type { RandomSource } from "./random.js";
import { kindOf, METHODS } from "./registry.js";
import { centreByRecords, oracleOf, scalarOf, type Task } from "./task.js";
import { binReports, gridReports, type Interval, valueReports } from "./twoStage.js";

/** A dataset whose structure contradicts the task (an app bug, never a value problem). */
export class DataError extends Error {
  override name = "DataError";
}

export type Samples = readonly number[] | readonly (readonly number[])[];

/** The task's rows: sample values (d of them, 1 for scalar kinds) plus the label column. */
export function taskRows(task: Task, samples: Samples, labels: readonly number[] | null | undefined): Row[] {
  const kind = kindOf(task.kind);
  const width = kind.vector ? task.dim : 1;
  const rows = samples.map((s) => {
    const vals = typeof s === "number" ? [s] : s;
    if (vals.length !== width) throw new DataError(`samples have dimension ${vals.length}, the task needs ${width}`);
    const r = new Float64Array(width + (kind.usesLabels ? 1 : 0));
    r.set(vals);
    return r;
  });
  if (kind.usesLabels) {
    rows.forEach((r, i) => {
      const y = labels && i < labels.length ? labels[i] : NaN;
      r[width] = typeof y === "number" ? y : NaN;
    });
  }
  return rows;
}

function compute(task: Task, rows: Row[], rng: RandomSource): bigint[] {
  const kind = kindOf(task.kind);
  if (task.method === "oracle" || centreByRecords(task.method, task.stage, task.kind, task.dim)) {
    return METHODS.oracle!.report(task, kind, rows, rng);
  }
  if (task.method === "hadamard") return METHODS.hadamard!.report(task, kind, rows, rng);
  if (task.method === "baseline-a" || task.method === "baseline-b") return METHODS[task.method]!.report(task, kind, rows, rng);
  const y = componentsOf(task, statistics(task, kind, rows, usable(task, kind, rows)));
  if (task.method === "two-stage" && task.stage === 1) {
    return binReports(y, task.bins.map(([D, h, B]) => alg1Params(D, h, 0, B)), oracleOf(task.mechanism), task.epsC, rng);
  }
  if (task.method === "two-stage-sized" && task.stage === 1) {
    return gridReports(y, task.bins.map(([D, h, B]) => alg1Params(D, h, 0, B)), oracleOf(task.mechanism), task.epsC, rng);
  }
  return valueReports(y, task.intervals as Interval[], scalarOf(task.mechanism), task.epsC, rng);
}

/** The served components of a user statistic. */
export const componentsOf = (task: Task, Y: readonly number[]): number[] => task.components.map((c) => Y[c]);

/** How often computeReport fell back to its backstop (a bug if ever > 0). */
export const fallbacks = { count: 0 };

/** The report of the empty dataset: the backstop of §13.2, a function of the public task and
 * the keystream only. A Device computes it before it charges the ledger (a task whose backstop
 * fails is refused, code `param`), so the report owed after the charge always exists. */
export function emptyReport(task: Task, rng: RandomSource): bigint[] {
  return compute(task, [], rng);
}

/**
 * The report of one device for a validated task over its (sanitized) local dataset:
 * `samples` are numbers (scalar kinds) or rows of `task.dim` numbers; NaN/±∞ and other
 * unusable values are ignored by the kind's rules; `labels` (labelled kinds) are aligned to
 * the samples, missing ones NaN. Returns `task.reportLength` integers. Should the computation
 * on the data throw (a bug), the result is `fallback` (the Device's precomputed emptyReport) or
 * else the empty dataset's report continuing the same keystream.
 */
export function computeReport(task: Task, samples: Samples, labels: readonly number[] | null | undefined,
  rng: RandomSource, fallback?: readonly bigint[]): bigint[] {
  const rows = taskRows(task, samples, labels);
  try {
    return compute(task, rows, rng);
  } catch (e) {
    if (e instanceof DataError) throw e;
    fallbacks.count++; // totality backstop
    return fallback !== undefined ? [...fallback] : emptyReport(task, rng);
  }
}
