/**
 * The device's privacy ledger (docs/device-protocol.md §10.1; Python: uldp.client.ledger).
 *
 * One entry per query the device accepted a task for, kept in a pluggable `LedgerStore`.
 * States:
 *  - `reserved`: the task passed every check and its ε is charged — atomically with the
 *    budget and one-report-per-query checks — BEFORE the data are touched;
 *  - `pending`: the report bytes are stored; they are what is sent, and re-sent;
 *  - `acknowledged` / `rejected`: the collector's answer. The spend stays either way.
 * A second, different task for a query is refused (AlreadyParticipated); a task whose units
 * would take the total above the budget is refused (BudgetExceeded). ε is counted in integer
 * units of 2^-24, the budget rounded down, with no floating-point slack.
 *
 * Every check-and-charge re-reads the ledger and writes in ONE atomic store transaction
 * (`LedgerStore.transact`), so any number of `Ledger`s over one store — two tabs, a page and
 * a worker, an app that opens its device twice — never spend more than the budget nor accept
 * two tasks for one query. The ledger's own copy of the entries is a snapshot (refreshed by
 * every transaction and by `refresh()`), used only for reads and advisory checks.
 * No Node-only dependency.
 */
import { rationalEpsilon } from "../core/noise.js";

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

/** What a transaction's `decide` returns: the entries to write (insert or replace by
 * queryId) and the transaction's result. */
export interface LedgerChange<T> {
  readonly put: readonly LedgerEntry[];
  readonly result: T;
}

/**
 * Where a ledger keeps its entries — the contract every store meets (docs/device-protocol.md
 * §10, "The ledger store contract"; run `ledgerStoreContract` from `@uldp/device/ledger`
 * against a custom store):
 *
 * 1. `load()` resolves with every entry as stored now, each field exactly as written
 *    (bigint units, report bytes, strings).
 * 2. `transact(decide)` is ONE atomic read-modify-write: it reads every entry as stored now,
 *    calls `decide` with them (synchronously; it may call it again if it retries an
 *    optimistic transaction, so `decide` is pure), durably writes `put` (insert or replace by
 *    queryId), and only then resolves with `result`. No other `transact` on the same storage
 *    — through this object, another object, another tab, worker or process — reads or writes
 *    between its read and its write. If `decide` throws, nothing is written and the promise
 *    rejects with that error.
 * 3. Durable: a `transact` that resolved survives a crash of the app (and of the machine,
 *    where the platform allows it).
 */
export interface LedgerStore {
  load(): Promise<LedgerEntry[]>;
  transact<T>(decide: (entries: readonly LedgerEntry[]) => LedgerChange<T>): Promise<T>;
}

/** A ledger store that also keeps the device identity, with the same atomicity: what
 * `updateIdentity`'s `decide` returns (unless null) replaces the stored identity in one
 * atomic step with the read it was computed from; resolves with the identity stored after. */
export interface DeviceStore extends LedgerStore {
  loadIdentity<T>(): Promise<T | null>;
  updateIdentity<T>(decide: (stored: T | null) => T | null): Promise<T | null>;
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
export const budgetUnits = (budget: number): bigint => rationalEpsilon(budget, "the device budget");

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

/** Entries and identity in this object's memory (tests, simulations, or behind a custom
 * persistence layer). JavaScript runs one callback at a time and `decide` is synchronous,
 * so every transaction is atomic; nothing survives the object. */
export class MemoryStore implements DeviceStore {
  readonly #entries = new Map<string, LedgerEntry>();
  #identity: unknown = null;
  async load(): Promise<LedgerEntry[]> {
    return [...this.#entries.values()].map(copyEntry);
  }
  async transact<T>(decide: (entries: readonly LedgerEntry[]) => LedgerChange<T>): Promise<T> {
    const { put, result } = decide([...this.#entries.values()].map(copyEntry));
    for (const e of put) this.#entries.set(e.queryId, copyEntry(e));
    return result;
  }
  async loadIdentity<T>(): Promise<T | null> {
    return structuredCopy(this.#identity) as T | null;
  }
  async updateIdentity<T>(decide: (stored: T | null) => T | null): Promise<T | null> {
    const next = decide(structuredCopy(this.#identity) as T | null);
    if (next !== null) this.#identity = structuredCopy(next);
    return structuredCopy(this.#identity) as T | null;
  }
}

function copyEntry(e: LedgerEntry): LedgerEntry {
  return { ...e, report: e.report.slice() };
}

function structuredCopy(v: unknown): unknown {
  return v === null || v === undefined ? null : JSON.parse(JSON.stringify(v));
}

export class Ledger {
  readonly totalUnits: bigint;
  readonly #store: LedgerStore;
  #entries = new Map<string, LedgerEntry>();
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
    await l.refresh();
    return l;
  }

  /** Re-read the snapshot from the store (another ledger over it may have written). */
  async refresh(): Promise<void> {
    this.#snapshot(await this.#store.load(), []);
  }

  #snapshot(seen: readonly LedgerEntry[], put: readonly LedgerEntry[]): void {
    const m = new Map<string, LedgerEntry>();
    for (const e of seen) m.set(e.queryId, e);
    for (const e of put) m.set(e.queryId, e);
    this.#entries = m;
  }

  /** One atomic store transaction over the entries as stored now; the snapshot follows. */
  async #transact<T>(decide: (entries: Map<string, LedgerEntry>) => LedgerChange<T>): Promise<T> {
    let seen: readonly LedgerEntry[] | null = null;
    let put: readonly LedgerEntry[] = [];
    try {
      return await this.#store.transact((entries) => {
        seen = entries;
        put = [];
        const change = decide(new Map(entries.map((e) => [e.queryId, e])));
        put = change.put;
        return change;
      });
    } finally {
      // what the store held, and what it wrote (if it did); nothing if it never read
      if (seen !== null) this.#snapshot(seen, put);
    }
  }

  spentUnits(): bigint {
    return spent(this.#entries);
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

  /** Would `reserve` accept this task (on the snapshot; `reserve` decides on the store)?
   * Returns the stored entry when it is a resend. */
  check(queryId: string, taskDigest: string, epsilonUnits: bigint): LedgerEntry | null {
    return admit(this.#entries, this.totalUnits, queryId, taskDigest, epsilonUnits);
  }

  /**
   * Atomically (one store transaction) check the rules and charge the task's ε (state
   * `reserved`), durably, before the data are touched. Returns the stored entry: the PREVIOUS
   * one if this exact task was already accepted (send its report, or compute it if it was
   * never stored).
   */
  reserve(queryId: string, taskDigest: string, phase: number, epsilonUnits: bigint, task = "",
    simulated = false): Promise<LedgerEntry> {
    if (epsilonUnits < 1n) return Promise.reject(new RangeError("a task spends at least one unit"));
    const createdAtMs = this.#now();
    return this.#transact((m) => {
      const prev = admit(m, this.totalUnits, queryId, taskDigest, epsilonUnits);
      if (prev) return { put: [], result: prev };
      const entry: LedgerEntry = {
        queryId, taskDigest, phase, epsilonUnits, report: new Uint8Array(0), task, simulated,
        state: "reserved", createdAtMs, detail: "",
      };
      return { put: [entry], result: entry };
    });
  }

  /** Attach the computed report to a reserved entry (state `pending`); an entry that has a
   * report keeps it (the first stored bytes are the ones sent, by every ledger over the store). */
  storeReport(queryId: string, values: readonly bigint[] | Uint8Array): Promise<LedgerEntry> {
    if (!values.length) return Promise.reject(new RangeError("a report has at least one value"));
    // a sealed report (shuffle mode, protocol §16) is stored as its ciphertext
    const report = values instanceof Uint8Array ? values.slice() : encodeValues(values);
    return this.#transact((m) => {
      const e = m.get(queryId);
      if (!e) throw new LedgerError(`no reservation for query ${queryId}`);
      if (e.state !== "reserved") return { put: [], result: e };
      const next: LedgerEntry = { ...e, report, state: "pending" };
      return { put: [next], result: next }; // durable before it is visible (and before any send)
    });
  }

  /** Record the collector's answer; the spend stays. A reserved entry is not marked. */
  async mark(queryId: string, state: "acknowledged" | "rejected", detail = ""): Promise<void> {
    await this.#transact((m) => {
      const e = m.get(queryId);
      if (!e || e.state === "reserved") return { put: [], result: undefined };
      return { put: [{ ...e, state, detail: detail.slice(0, 1000) }], result: undefined };
    });
  }
}

function spent(entries: ReadonlyMap<string, LedgerEntry>): bigint {
  let s = 0n;
  for (const e of entries.values()) s += e.epsilonUnits;
  return s;
}

/** The ledger's rules: the stored entry for a resend, a refusal, or null (accept). */
function admit(entries: ReadonlyMap<string, LedgerEntry>, totalUnits: bigint, queryId: string,
  taskDigest: string, epsilonUnits: bigint): LedgerEntry | null {
  const e = entries.get(queryId);
  if (e !== undefined) {
    if (e.taskDigest === taskDigest) return e;
    throw new AlreadyParticipated(`a task of query ${queryId} was already accepted (one report per query)`);
  }
  const used = spent(entries);
  if (used + epsilonUnits > totalUnits) {
    throw new BudgetExceeded(`the task needs ${epsilonUnits} units of 2^-24; ${totalUnits - used} of ${totalUnits} remain`);
  }
  return null;
}

/** reserve + storeReport (for callers whose report needs no private data, e.g. tests). A free
 * function, not a method, so a bundle that never calls it leaves it out. */
export async function recordReport(ledger: Ledger, queryId: string, taskDigest: string, phase: number,
  epsilonUnits: bigint, values: readonly bigint[], simulated = false): Promise<LedgerEntry> {
  const e = await ledger.reserve(queryId, taskDigest, phase, epsilonUnits, "", simulated);
  return e.state === "reserved" ? ledger.storeReport(queryId, values) : e;
}
