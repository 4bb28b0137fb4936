/**
 * The device's privacy ledger (docs/device-protocol.md §10; Python: uldp.client.ledger).
 *
 * One entry per query the device has computed a report for, written — with the exact report
 * bytes — through a pluggable store BEFORE the report leaves the device:
 *  - a second, different task for a query is refused (AlreadyParticipated);
 *  - a task whose ε would push the total spent above the device budget is refused
 *    (BudgetExceeded);
 *  - after a crash or a lost acknowledgement the stored bytes are re-sent, never a new draw.
 *
 * ε is counted exactly, in integer units of 2^-24 (the resolution of ε_r): the budget is
 * floor(budget · 2^24) units and a task spends what the task module computes for it
 * (an integer number of units). No floating-point slack.
 *
 * Operations on one ledger are serialized (check-and-record is atomic within the process);
 * a store must make `put` durable before its promise resolves. No Node-only dependency.
 */
import { floorTimesPow2 } from "../core/noise.js";

export type EntryState = "pending" | "acked" | "rejected";

export interface LedgerEntry {
  readonly queryId: string;
  readonly taskDigest: string;
  readonly phase: number;
  /** ε spent, in units of 2^-24. */
  readonly epsilonUnits: bigint;
  /** The report values as int64 little-endian bytes (8 per value). */
  readonly report: Uint8Array;
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

/** Budget units of a (float) budget: floor(budget · 2^24), never more than asked. */
export function budgetUnits(budget: number): bigint {
  if (typeof budget !== "number" || !Number.isFinite(budget) || budget <= 0) {
    throw new RangeError(`the device budget must be a finite positive number, got ${budget}`);
  }
  return floorTimesPow2(budget, 24);
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
  async load(): Promise<LedgerEntry[]> {
    return [...this.#entries.values()];
  }
  async put(entry: LedgerEntry): Promise<void> {
    this.#entries.set(entry.queryId, { ...entry, report: entry.report.slice() });
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

  /** Would `record` accept this task? Returns the stored entry when it is a resend. */
  check(queryId: string, taskDigest: string, epsilonUnits: bigint): LedgerEntry | null {
    const e = this.#entries.get(queryId);
    if (e !== undefined) {
      if (e.taskDigest === taskDigest) return e;
      throw new AlreadyParticipated(
        `already computed a report for query ${queryId}; a device reports at most once per query`);
    }
    if (epsilonUnits < 0n) throw new RangeError("a task cannot spend a negative ε");
    const spent = this.spentUnits();
    if (spent + epsilonUnits > this.totalUnits) {
      throw new BudgetExceeded(`task needs ${epsilonUnits} units of 2^-24 but only ` +
        `${this.totalUnits - spent} of the device budget ${this.totalUnits} remain`);
    }
    return null;
  }

  /**
   * Atomically check and persist the spend together with the report bytes (before sending).
   * Returns the stored entry — the PREVIOUS one if this exact task was already recorded:
   * the caller must then send those bytes, not the new ones.
   */
  record(queryId: string, taskDigest: string, phase: number, epsilonUnits: bigint,
    values: readonly bigint[], simulated: boolean): Promise<LedgerEntry> {
    return this.#serial(async () => {
      const prev = this.check(queryId, taskDigest, epsilonUnits);
      if (prev) return prev;
      const entry: LedgerEntry = {
        queryId, taskDigest, phase, epsilonUnits, report: encodeValues(values), simulated,
        state: "pending", createdAtMs: this.#now(), detail: "",
      };
      await this.#store.put(entry); // durable before it is visible (and before any send)
      this.#entries.set(queryId, entry);
      return entry;
    });
  }

  /** Record the collector's answer ("acked" or "rejected"); the spend stays. */
  mark(queryId: string, state: EntryState, detail = ""): Promise<void> {
    return this.#serial(async () => {
      const e = this.#entries.get(queryId);
      if (!e) throw new LedgerError(`no ledger entry for query ${queryId}`);
      const next = { ...e, state, detail: detail.slice(0, 1000) };
      await this.#store.put(next);
      this.#entries.set(queryId, next);
    });
  }
}
