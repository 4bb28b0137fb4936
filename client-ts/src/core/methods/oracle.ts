/**
 * Method `oracle`, device half: sampled records through a frequency oracle
 * (docs/device-protocol.md §17.10, docs/algorithms.md "Frequency oracles"; Python:
 * uldp.client.methods.oracle, collector half uldp.collector.methods.oracle).
 *
 * For a categorical kind (`distribution`) the user statistic is the frequency vector of the
 * user's usable records. The device rounds it, without bias, to `records` vertices of the
 * simplex by sampling that many of its records uniformly (without replacement while it has
 * enough) and privatizes each sampled category with the task's frequency oracle at eps_c.
 * Every record's report is eps_c-LDP whatever the dataset (a mixture of ε-LDP outputs), so the
 * report spends records · eps_c. A user without usable records reports uniformly random
 * categories (a public fallback).
 *
 * Draws (m_u usable records): for j = 0 … records − 1 with j < m_u, one belowEach([m_u − j])
 * (§3.2) — a partial Fisher–Yates shuffle of the usable records' indices (record j takes
 * position j + r, swapped); records j >= m_u reuse the shuffled record j mod m_u; with
 * m_u = 0, below(A, records) (§3.1, one call). Then the oracle's draws, record by record.
 */
import { type KindImpl, type Row, usable } from "../kinds.js";
import type { RandomSource } from "../random.js";
import type { JValue } from "../json.js";
import type { MethodRules } from "../registry.js";
import { kindCategories, type KindName, oracleOf, refuse, type Task } from "../task.js";
import { recordItems } from "../trace.js";

/** The `records` sampled categories of one device's usable categories `xs` (in index order). */
export function sampleRecords(xs: readonly number[], records: number, categories: number, rng: RandomSource): number[] {
  const m = xs.length;
  if (m === 0) return rng.below(BigInt(categories), records).map(Number);
  const perm = new Map<number, number>(); // the partial shuffle, sparse: position -> index
  const at = (i: number): number => perm.get(i) ?? i;
  for (let j = 0; j < records && j < m; j++) {
    const t = j + Number(rng.belowEach([BigInt(m - j)])[0]);
    const a = at(j);
    perm.set(j, at(t));
    perm.set(t, a);
  }
  return Array.from({ length: records }, (_, j) => xs[at(j < m ? j : j % m)]);
}

/** The report of method oracle: the oracle's report of every sampled record, in order. */
export function oracleReport(task: Task, kind: KindImpl, rows: Row[], rng: RandomSource): bigint[] {
  const A = kindCategories(task.kind, task.dim);
  if (A === null) throw new RangeError(`method oracle needs a categorical kind, not ${task.kind}`);
  const oracle = oracleOf(task.mechanism);
  const valid = usable(task, kind, rows);
  const xs = rows.flatMap((r, i) => (valid[i] ? [r[0]] : []));
  const items = sampleRecords(xs, task.records, A, rng);
  recordItems(items);
  return items.flatMap((v) => oracle.privatize(v, A, task.epsC, rng));
}

/** Method oracle's rules (§17.10, step 10 of §14.1): a categorical kind, a frequency oracle, no
 * bins or intervals, every component in order. */
export function checkOracle(f: ReadonlyMap<string, JValue>, kind: KindName, dim: number, C: number, comps: bigint[]): void {
  if (kindCategories(kind, dim) === null) refuse("param", `method oracle needs a categorical kind, not ${kind}`);
  oracleOf(f.get("mechanism") as string);
  if ((f.get("bins") as JValue[]).length || (f.get("intervals") as JValue[]).length
    || comps.length !== C || comps.some((c, i) => c !== BigInt(i))) {
    refuse("param", "an oracle task serves every component in order, without bins or intervals");
  }
}

/** Method oracle, as the kinds that take it register it (../registry.ts). */
export const ORACLE_METHOD: MethodRules = {
  report: oracleReport,
  check: (f, _stage, kind, dim, C, comps) => checkOracle(f, kind, dim, C, comps),
};
