/**
 * The device's privacy ledger (docs/device-protocol.md §10.1; Python: uldp.client.ledger).
 *
 * One entry per query the device accepted a task for, through a pluggable store whose `put`
 * is durable before its promise resolves. States:
 *  - `reserved`: the task passed every check and its ε is charged — atomically with the
 *    budget and one-report-per-query checks — BEFORE the data are touched;
 *  - `pending`: the report bytes are stored; they are what is sent, and re-sent;
 *  - `acknowledged` / `rejected`: the collector's answer. The spend stays either way.
 * A second, different task for a query is refused (AlreadyParticipated); a task whose units
 * would take the total above the budget is refused (BudgetExceeded). ε is counted in integer
 * units of 2^-24, the budget rounded down, with no floating-point slack.
 *
 * Operations on one ledger are serialized (check-and-charge is atomic within the process).
 * No Node-only dependency.
 */
import { floorTimesPow2, MAX_EPSILON } from "../core/noise.js";

export type EntryState = "reserved" | "pending" | "acknowledged" | "rejected";

export interface LedgerEntry {
  readonly queryId: string;
  readonly taskDigest: string;
  readonly phase: number;
  /** ε charged, in units of 2^-24. */
  readonly epsilonUnits: bigint;
  /** The report values as int64 little-endian bytes (8 per value); empty while reserved. */
  readonly report: Uint8Array;
  /** The Task message the report is for (JSON), to recompute it after a crash. */
  readonly task: string;
  readonly simulated: boolean;
  readonly state: EntryState;
  readonly createdAtMs: number;
  readonly detail: string;
}

/** Where a ledger keeps its entries. `put` inserts or replaces by queryId, durably. */
export interface LedgerStore {
  load(): Promise<LedgerEntry[]>;
  put(entry: LedgerEntry): Promise<void>;
}

export class LedgerError extends Error {}
export class BudgetExceeded extends LedgerError {
  override name = "BudgetExceeded";
}
export class AlreadyParticipated extends LedgerError {
  override name = "AlreadyParticipated";
}

export const EPS_UNITS_PER_ONE = 1n << 24n;

/** Units of a device budget: floor(budget · 2^24), for 2^-24 <= budget <= 2^20. */
export function budgetUnits(budget: number): bigint {
  if (typeof budget !== "number" || !Number.isFinite(budget) || budget <= 0 || budget > MAX_EPSILON) {
    throw new RangeError(`the device budget must be a finite number in (0, 2^20], got ${budget}`);
  }
  const u = floorTimesPow2(budget, 24);
  if (u < 1n) throw new RangeError("the device budget is below the smallest supported epsilon 2^-24");
  return u;
}

export function encodeValues(values: readonly bigint[]): Uint8Array {
  const out = new Uint8Array(8 * values.length);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => {
    if (v !== BigInt.asIntN(64, v)) throw new RangeError("report value outside int64");
    view.setBigInt64(8 * i, v, true);
  });
  return out;
}

export function decodeValues(b: Uint8Array): bigint[] {
  if (b.length % 8 !== 0) throw new RangeError("report bytes are not a multiple of 8");
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return Array.from({ length: b.length / 8 }, (_, i) => view.getBigInt64(8 * i, true));
}

export class MemoryStore implements LedgerStore {
  readonly #entries = new Map<string, LedgerEntry>();
  #identity: unknown = null;
  async load(): Promise<LedgerEntry[]> {
    return [...this.#entries.values()];
  }
  async put(entry: LedgerEntry): Promise<void> {
    this.#entries.set(entry.queryId, { ...entry, report: entry.report.slice() });
  }
  async loadIdentity<T>(): Promise<T | null> {
    return this.#identity as T | null;
  }
  async saveIdentity<T>(identity: T): Promise<void> {
    this.#identity = identity;
  }
}

export class Ledger {
  readonly totalUnits: bigint;
  readonly #store: LedgerStore;
  readonly #entries = new Map<string, LedgerEntry>();
  #queue: Promise<unknown> = Promise.resolve();
  readonly #now: () => number;

  private constructor(store: LedgerStore, totalUnits: bigint, now: () => number) {
    this.#store = store;
    this.totalUnits = totalUnits;
    this.#now = now;
  }

  /** Open a ledger over `store`; `budget` in ε (rounded down to units) or `{ units }`. */
  static async open(store: LedgerStore, budget: number | { units: bigint },
    now: () => number = Date.now): Promise<Ledger> {
    const units = typeof budget === "number" ? budgetUnits(budget) : budget.units;
    if (units < 1n) throw new RangeError("the device budget must be positive");
    const l = new Ledger(store, units, now);
    for (const e of await store.load()) l.#entries.set(e.queryId, e);
    return l;
  }

  /** Run `fn` after every earlier operation of this ledger (atomic check-and-record). */
  #serial<T>(fn: () => Promise<T> | T): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  spentUnits(): bigint {
    let s = 0n;
    for (const e of this.#entries.values()) s += e.epsilonUnits;
    return s;
  }

  remainingUnits(): bigint {
    const r = this.totalUnits - this.spentUnits();
    return r > 0n ? r : 0n;
  }

  get(queryId: string): LedgerEntry | undefined {
    return this.#entries.get(queryId);
  }

  entries(state?: EntryState): LedgerEntry[] {
    return [...this.#entries.values()]
      .filter((e) => state === undefined || e.state === state)
      .sort((a, b) => a.createdAtMs - b.createdAtMs);
  }

  /** Would `reserve` accept this task? Returns the stored entry when it is a resend. */
  check(queryId: string, taskDigest: string, epsilonUnits: bigint): LedgerEntry | null {
    const e = this.#entries.get(queryId);
    if (e !== undefined) {
      if (e.taskDigest === taskDigest) return e;
      throw new AlreadyParticipated(
        `already accepted a task for query ${queryId}; a device reports at most once per query`);
    }
    const spent = this.spentUnits();
    if (spent + epsilonUnits > this.totalUnits) {
      throw new BudgetExceeded(`task needs ${epsilonUnits} units of 2^-24 but only ` +
        `${this.totalUnits - spent} of the device budget ${this.totalUnits} remain`);
    }
    return null;
  }

  /**
   * Atomically check the rules and charge the task's ε (state `reserved`), durably, before
   * the data are touched. Returns the stored entry: the PREVIOUS one if this exact task was
   * already accepted (send its report, or compute it if it was never stored).
   */
  reserve(queryId: string, taskDigest: string, phase: number, epsilonUnits: bigint, task = "",
    simulated = false): Promise<LedgerEntry> {
    return this.#serial(async () => {
      if (epsilonUnits < 1n) throw new RangeError("a task spends at least one unit");
      const prev = this.check(queryId, taskDigest, epsilonUnits);
      if (prev) return prev;
      const entry: LedgerEntry = {
        queryId, taskDigest, phase, epsilonUnits, report: new Uint8Array(0), task, simulated,
        state: "reserved", createdAtMs: this.#now(), detail: "",
      };
      await this.#store.put(entry);
      this.#entries.set(queryId, entry);
      return entry;
    });
  }

  /** Attach the computed report to a reserved entry (state `pending`); an entry that has a
   * report keeps it (the first stored bytes are the ones sent). */
  storeReport(queryId: string, values: readonly bigint[]): Promise<LedgerEntry> {
    return this.#serial(async () => {
      const e = this.#entries.get(queryId);
      if (!e) throw new LedgerError(`no reservation for query ${queryId}`);
      if (e.state !== "reserved") return e;
      if (!values.length) throw new RangeError("a report has at least one value");
      const next: LedgerEntry = { ...e, report: encodeValues(values), state: "pending" };
      await this.#store.put(next); // durable before it is visible (and before any send)
      this.#entries.set(queryId, next);
      return next;
    });
  }

  /** reserve + storeReport (for callers whose report needs no private data, e.g. tests). */
  async record(queryId: string, taskDigest: string, phase: number, epsilonUnits: bigint,
    values: readonly bigint[], simulated = false): Promise<LedgerEntry> {
    const e = await this.reserve(queryId, taskDigest, phase, epsilonUnits, "", simulated);
    return e.state === "reserved" ? this.storeReport(queryId, values) : e;
  }

  /** Record the collector's answer; the spend stays. A reserved entry is not marked. */
  mark(queryId: string, state: "acknowledged" | "rejected", detail = ""): Promise<void> {
    return this.#serial(async () => {
      const e = this.#entries.get(queryId);
      if (!e || e.state === "reserved") return;
      const next = { ...e, state, detail: detail.slice(0, 1000) };
      await this.#store.put(next);
      this.#entries.set(queryId, next);
    });
  }
}
