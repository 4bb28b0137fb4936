/**
 * Checks of the task-level conformance files (tasks, refusals, ledger, registration,
 * numerics, frames, kashin). Pure: no Node API (runs in node:test and headless Chromium).
 */
import { sha256 } from "@noble/hashes/sha2.js";
import {
  alignLabels, bytesToHex, checkTask, coerceValues, computeReport, datasetSchema, exp,
  f64FromHex, f64ToHex, type FrameKind, groupOf, hexToBytes, kashinCoefficients, kashinFrame, ln, norm,
  parseTask, radial, RandomSource, RETRYABLE, seqSum, TaskRefused, tracing, uniformPm1, type DatasetSchema,
} from "../../src/core/index.js";
import { AlreadyParticipated, Ledger, recordReport, LedgerError, MemoryStore } from "../../src/ledger/index.js";
import { mechanismCase } from "./mechanisms.js";
import { eq, Mismatch } from "./util.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Case = Record<string, any>;

export const FILES_V2 = ["numerics", "frames", "kashin", "registration", "tasks", "refusals", "ledger", "transport"] as const;
/** The report mechanisms (§17): primitives, and whole tasks with refusals (op "refusal"). */
export const FILES_MECHANISMS = ["mechanisms", "mech_tasks"] as const;

/** A double of the JSON encoding: a number, or "nan" / "inf" / "-inf". */
export function dec(v: unknown): number {
  if (v === "nan") return NaN;
  if (v === "inf") return Infinity;
  if (v === "-inf") return -Infinity;
  if (typeof v !== "number") throw new Mismatch(`bad encoded double ${String(v)}`);
  return v;
}

export function enc(x: number): number | string {
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  return x;
}

const decAll = (v: any): any => (Array.isArray(v) ? v.map(decAll) : dec(v));
const encAll = (v: any): any => (Array.isArray(v) ? v.map(encAll) : enc(v));
const hexes = (xs: ArrayLike<number>): string[] => Array.from(xs, f64ToHex);
const fromHex = (xs: string[]): number[] => xs.map(f64FromHex);

function numericsCase(c: Case): void {
  const x = c.x ? fromHex(c.x) : [];
  switch (c.op) {
    case "ln": return eq("ln", hexes(x.map(ln)), c.y);
    case "exp": return eq("exp", hexes(x.map(exp)), c.y);
    case "sqrt": return eq("sqrt", hexes(x.map(Math.sqrt)), c.y);
    case "uniform_pm1": return eq("uniform", hexes((c.words as string[]).map((w) => uniformPm1(BigInt(w)))), c.y);
    case "seq_sum": return eq("seq_sum", hexes([seqSum(x)]), c.y);
    case "norm": return eq("norm", hexes([norm(x, c.ord)]), c.y);
    case "radial": return eq("radial", hexes(radial(x, f64FromHex(c.radius), c.ord)), c.y);
    default: throw new Mismatch(`unknown numerics op ${c.op}`);
  }
}

function frameCase(c: Case): void {
  const f = kashinFrame(c.d, BigInt(c.seed), c.kind as FrameKind);
  eq("N", f.N, c.N);
  eq("frame_id", f.frameId, c.frame_id);
  const U = new Uint8Array(8 * f.N * f.d);
  const view = new DataView(U.buffer);
  for (let r = 0; r < f.N; r++) {
    for (let j = 0; j < f.d; j++) {
      let v: number;
      if (f.U) v = f.U[r * f.d + j];
      else {
        const k = f.cols![j];
        let parity = 0;
        for (let b = r & k; b; b >>= 1) parity ^= b & 1;
        v = f.signs![r] * ((parity ? -1 : 1) / Math.sqrt(f.N));
      }
      view.setFloat64(8 * (r * f.d + j), v, true);
    }
  }
  if (c.signs) {
    eq("signs", Array.from(f.signs!), c.signs);
    eq("cols", Array.from(f.cols!), c.cols);
  } else {
    if (c.u) eq("U", hexes(f.U!), c.u);
    eq("U sha256", bytesToHex(sha256(U)), c.u_sha256);
  }
}

function kashinCase(c: Case): void {
  const f = kashinFrame(c.d, BigInt(c.seed), c.kind as FrameKind);
  const r = kashinCoefficients(f, fromHex(c.x), f64FromHex(c.delta), f64FromHex(c.tol), c.max_iter);
  eq("iterations", r.iterations, c.iterations);
  eq("coefficients", hexes(r.a), c.a);
}

function registrationCase(c: Case): void {
  if (c.op === "group_of") return eq("group", enc(groupOf(decAll(c.samples), c.groups)), c.group);
  const x = coerceValues(c.samples, c.dim);
  eq("samples", encAll(x), c.out_samples);
  if (c.labels !== null) eq("labels", encAll(alignLabels(c.labels, x.length)), c.out_labels);
}

export function taskCase(c: Case): void {
  const task = parseTask(c.task);
  eq("units", task.units.toString(), c.units);
  eq("report length", task.reportLength, c.report_length);
  const rng = RandomSource.keyed(hexToBytes(c.key));
  const labels = c.labels === null ? null : decAll(c.labels);
  const [rep, trace] = tracing(() => computeReport(task, decAll(c.samples), labels, rng));
  eq("report", rep.map(Number), c.report);
  eq("next word", rng.words(1)[0].toString(), c.next_word);
  eq("statistic", hexes(trace.statistic), c.statistic); // the pre-noise statistic, exactly
  eq("rounding", trace.rounding, c.rounding); // the randomized-rounding draws
  eq("items", trace.items, c.items ?? []); // method oracle: the sampled records
}

/** The device checks, with the prior ledger entries on the real TS Ledger. */
export async function refusalCase(c: Case): Promise<void> {
  const datasets = new Map<string, DatasetSchema>(
    (c.datasets as Case[]).map((d) => [d.name, datasetSchema(d.name, { dim: d.dim, values: d.values,
      labelled: d.labelled, alphabet: d.alphabet })]));
  const led = await Ledger.open(new MemoryStore(), c.budget);
  for (const e of c.ledger as Case[]) await recordReport(led, e.query_id, e.task_digest, 1, BigInt(e.units), [0n]);
  const ledger = (q: string, d: string, u: bigint): void => {
    try {
      led.check(q, d, u);
    } catch (e) {
      if (e instanceof LedgerError) throw new TaskRefused(e.message, e instanceof AlreadyParticipated ? "participated" : "budget");
      throw e;
    }
  };
  let code: string | null = null;
  let units: string | null = null;
  try {
    units = checkTask(c.task, datasets, ledger, { shuffler: c.shuffler === true }).units.toString();
  } catch (e) {
    if (!(e instanceof TaskRefused)) throw e;
    code = e.code;
  }
  eq("refusal code", code, c.code);
  eq("units", units, c.units);
}

/** The ledger scripts, on the real TS Ledger (MemoryStore). */
export async function ledgerCase(c: Case): Promise<void> {
  let led: Ledger;
  try {
    led = await Ledger.open(new MemoryStore(), dec(c.budget));
  } catch (e) {
    if (e instanceof RangeError) return eq("refused budget", true, c.error === true);
    throw e;
  }
  eq("refused budget", false, c.error === true);
  eq("budget units", led.totalUnits.toString(), c.budget_units);
  for (const op of c.ops as Case[]) {
    let result = "ok";
    try {
      if (op.op === "reserve" || op.op === "check") {
        const before = led.get(op.query_id);
        if (op.op === "reserve") await led.reserve(op.query_id, op.task_digest, 1, BigInt(op.units));
        else led.check(op.query_id, op.task_digest, BigInt(op.units));
        result = before ? "resend" : "ok";
      } else if (op.op === "store") {
        await led.storeReport(op.query_id, [0x0101010101010101n]);
      } else {
        await led.mark(op.query_id, op.state);
      }
    } catch (e) {
      if (!(e instanceof LedgerError)) throw e;
      result = e instanceof AlreadyParticipated ? "participated" : "budget";
    }
    eq(`${op.op} ${op.query_id} result`, result, op.result);
    eq(`${op.op} ${op.query_id} state`, led.get(op.query_id)?.state ?? null, op.entry_state);
    eq(`${op.op} ${op.query_id} spent`, led.spentUnits().toString(), op.spent_units);
  }
}

/** Check one case of a task-level file; false if the file is not one of them. */
export function checkTaskCase(file: string, c: Case): boolean {
  switch (file) {
    case "numerics": numericsCase(c); return true;
    case "frames": frameCase(c); return true;
    case "kashin": kashinCase(c); return true;
    case "registration": registrationCase(c); return true;
    case "tasks": taskCase(c); return true;
    case "mechanisms": mechanismCase(c); return true;
    case "transport": eq(`retried ${c.name}`, RETRYABLE.has(c.code), c.retried); return true;
    default: return false;
  }
}
