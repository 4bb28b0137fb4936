/**
 * Methods baseline-a (m_ref item-level slots, each a virtual group's values) and baseline-b (one
 * sampled record), device half (docs/device-protocol.md §9, §14.1; Python: uldp.client.methods):
 * the papers' comparison baselines, which `auto` never picks. Their rules and reports are here,
 * registered by `@uldp/device/methods/baselines` (../../methods/baselines.ts; `kinds/all`, the
 * full and the Node entries include it), so an app that answers only the deployed methods carries
 * none of this.
 */
import type { JInt, JValue } from "../json.js";
import type { KindImpl, Row } from "../kinds.js";
import { statistics, usable } from "../kinds.js";
import { DEFAULT_MECHANISM } from "../mechanisms/index.js";
import type { RandomSource } from "../random.js";
import type { MethodRules } from "../registry.js";
import { componentsOf } from "../report.js";
import {
  big, checkIntervals, epsilonUnits, MAX_M_REF, refuse, scalarOf, singleRecord, slotGroup, type Task,
} from "../task.js";
import { type Interval, stage2Report, valueReports } from "../twoStage.js";

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

/** Baseline A's rules (step 10 of §14.1): virtual groups of served components, one ε each. */
export function checkBaselineA(f: ReadonlyMap<string, JValue>, comps: bigint[]): void {
  const groups = f.get("virtual_groups") as JInt[][];
  const veps = f.get("virtual_eps") as JValue[];
  if (!groups.length || veps.length !== groups.length) refuse("param", "baseline-a needs virtual_groups, one virtual_eps each");
  const served = new Set(comps);
  for (const g of groups) {
    const ids = g.map((c) => c.value);
    if (!ids.length || new Set(ids).size !== ids.length || !ids.every((c) => served.has(c))) {
      refuse("param", "a virtual group is a non-empty set of served components");
    }
  }
  if (big(f.get("m_ref")) > BigInt(MAX_M_REF)) refuse("limit", "m_ref must be at most 2^20");
  singleRecord(f);
  if (f.get("mechanism") !== DEFAULT_MECHANISM) refuse("param", "baseline-a reports with laplace only");
  checkIntervals(f, comps.length);
}

/** Baseline A's spend and report length: its m_ref slots, each its virtual group's ε and values. */
function spendBaselineA(f: ReadonlyMap<string, JValue>): [bigint, number] {
  const groups = f.get("virtual_groups") as JValue[][];
  const per = (f.get("virtual_eps") as (JInt | number)[]).map((e, g) => BigInt(groups[g].length) * epsilonUnits(e, "virtual_eps"));
  const mRef = Number(big(f.get("m_ref")));
  const offset = big(f.get("virtual_offset"));
  let units = 0n;
  let n = 0;
  for (let j = 0; j < mRef; j++) {
    const g = slotGroup(offset, j, groups.length);
    units += per[g];
    n += groups[g].length;
  }
  return [units, n];
}


/** Baseline B: the statistic of one record sampled among the usable ones, through the values'
 * mechanism (its rules are the value methods', task.ts). */
function baselineB(task: Task, kind: KindImpl, rows: Row[], rng: RandomSource): bigint[] {
  const [r1, v1] = pickOne(rows, usable(task, kind, rows), rng);
  return valueReports(componentsOf(task, statistics(task, kind, r1, v1)), task.intervals as Interval[],
    scalarOf(task.mechanism), task.epsC, rng);
}

export const BASELINE_A: MethodRules = {
  report: (task, kind, rows, rng) => baselineA(task, kind, rows, usable(task, kind, rows), rng),
  check: (f, _stage, _kind, _dim, _C, comps) => checkBaselineA(f, comps),
  spend: spendBaselineA,
};
export const BASELINE_B: MethodRules = { report: baselineB, check: () => undefined };
