/**
 * The report of one device (docs/device-protocol.md §9, §12–13; Python:
 * uldp.client.tasks.compute_report and uldp.client.methods): the user statistic of the local
 * dataset, then the task's method — two-stage (stage-I bins, stage-II values), ssl,
 * baseline-a (m_ref item-level slots), baseline-b (one sample), oracle (sampled records,
 * ./methods/oracle.ts) or hadamard (./methods/hadamard.ts; both registered by the kinds that
 * take them, ./registry.ts) — on the keystream `rng`,
 * through the task's mechanism (§17).
 * Total: a well-formed report for every dataset of the declared structure.
 */
import { type KindImpl, type Row, statistics, usable } from "./kinds.js";
import { alg1Params } from "./params.js";
import type { RandomSource } from "./random.js";
import { kindOf, METHODS } from "./registry.js";
import { centreByRecords, oracleOf, scalarOf, slotGroup, type Task } from "./task.js";
import { binReports, gridReports, type Interval, stage2Report, valueReports } from "./twoStage.js";

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

function pickOne(rows: Row[], valid: boolean[], rng: RandomSource): [Row[], boolean[]] {
  if (!rows.length) return [[], []];
  const count = valid.filter(Boolean).length;
  const r = Number(rng.belowEach([BigInt(Math.max(count, 1))])[0]);
  let pick = 0;
  for (let i = 0, seen = 0; i < rows.length; i++) {
    if (valid[i] && seen++ === r) {
      pick = i;
      break;
    }
  }
  return [[rows[pick]], [valid[pick] && count > 0]];
}

const TOP = (1n << 64n) - 1n;

/** Which sample fills each of the m_ref slots, and whether any does (baseline A). */
export function slotSources(valid: boolean[], mRef: number, rng: RandomSource): [number[], boolean] {
  const m = valid.length;
  const count = valid.filter(Boolean).length;
  if (m === 0) return [new Array<number>(mRef).fill(0), false];
  const inOrder = [...valid.keys()].filter((i) => valid[i]).concat([...valid.keys()].filter((i) => !valid[i]));
  let src = Array.from({ length: mRef }, (_, j) => inOrder[j % Math.max(count, 1)]);
  if (count > mRef) {
    const keys = rng.words(m).map((w, i) => (valid[i] ? w : TOP));
    const order = [...keys.keys()].sort((a, b) => (keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : a - b));
    src = order.slice(0, mRef).sort((a, b) => a - b);
  }
  return [src, count > 0];
}

const finiteOr = (v: number): number => (Number.isNaN(v) ? 0 : v === Infinity ? Number.MAX_VALUE
  : v === -Infinity ? -Number.MAX_VALUE : v);

function baselineA(task: Task, kind: KindImpl, rows: Row[], valid: boolean[], rng: RandomSource): bigint[] {
  const [src, filled] = slotSources(valid, task.mRef, rng);
  const width = rows.length ? rows[0].length : (kind.vector ? task.dim : 1) + (kind.usesLabels ? 1 : 0);
  const phi = src.map((i) => {
    if (!filled) return new Array<number>(task.nComponents).fill(0);
    let v = kind.sampleMap(task, rows.length ? rows[i] : new Float64Array(width)).map(finiteOr);
    if (task.statBound !== null) v = v.map((x) => Math.min(Math.max(x, -task.statBound!), task.statBound!));
    return v;
  });
  const G = task.virtualGroups.length;
  const groupOf = src.map((_, j) => slotGroup(task.virtualOffset, j, G));
  const pos: number[] = [];
  let total = 0;
  for (const g of groupOf) {
    pos.push(total);
    total += task.virtualGroups[g].length;
  }
  const interval = new Map(task.components.map((c, i) => [c, task.intervals[i] as Interval]));
  const out = new Array<bigint>(total).fill(0n);
  task.virtualGroups.forEach((comps, g) => {
    const slots = groupOf.flatMap((gg, j) => (gg === g ? [j] : []));
    if (!slots.length) return;
    const y = slots.flatMap((j) => comps.map((c) => phi[j][c]));
    const ivs = slots.flatMap(() => comps.map((c) => interval.get(c)!));
    const enc = stage2Report(y, ivs, task.virtualEps[g], rng);
    slots.forEach((j, s) => comps.forEach((_, k) => { out[pos[j] + k] = enc[s * comps.length + k]; }));
  });
  return out;
}

function compute(task: Task, rows: Row[], rng: RandomSource): bigint[] {
  const kind = kindOf(task.kind);
  if (task.method === "oracle" || centreByRecords(task.method, task.stage, task.kind, task.dim)) {
    return METHODS.oracle!.report(task, kind, rows, rng);
  }
  if (task.method === "hadamard") return METHODS.hadamard!.report(task, kind, rows, rng);
  const valid = usable(task, kind, rows);
  if (task.method === "baseline-a") return baselineA(task, kind, rows, valid, rng);
  let Y: number[];
  if (task.method === "baseline-b") {
    const [r1, v1] = pickOne(rows, valid, rng);
    Y = statistics(task, kind, r1, v1);
  } else {
    Y = statistics(task, kind, rows, valid);
  }
  const y = task.components.map((c) => Y[c]);
  if (task.method === "two-stage" && task.stage === 1) {
    return binReports(y, task.bins.map(([D, h, B]) => alg1Params(D, h, 0, B)), oracleOf(task.mechanism), task.epsC, rng);
  }
  if (task.method === "two-stage-sized" && task.stage === 1) {
    return gridReports(y, task.bins.map(([D, h, B]) => alg1Params(D, h, 0, B)), oracleOf(task.mechanism), task.epsC, rng);
  }
  return valueReports(y, task.intervals as Interval[], scalarOf(task.mechanism), task.epsC, rng);
}

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
