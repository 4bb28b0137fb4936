/** Ledger semantics on the in-memory and the file store. */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  AlreadyParticipated, BudgetExceeded, budgetUnits, decodeValues, type DeviceStore, encodeValues, Ledger, recordReport,
  type LedgerChange, type LedgerEntry, ledgerStoreContract, MemoryStore, type LedgerStore,
} from "../src/ledger/index.js";
import { FileStore } from "../src/node/index.js";

const U = 1n << 24n; // units of one ε

async function semantics(store: LedgerStore): Promise<Ledger> {
  const l = await Ledger.open(store, 2.0);
  assert.equal(l.totalUnits, 2n * U);
  const a = await recordReport(l, "q1", "d1", 1, U, [1n, -2n, 3n], false);
  assert.equal(a.state, "pending");
  assert.deepEqual(decodeValues(a.report), [1n, -2n, 3n]);
  // the same task again: the stored entry (and its bytes) come back, nothing is spent twice
  const again = await recordReport(l, "q1", "d1", 1, U, [9n, 9n, 9n], false);
  assert.deepEqual(decodeValues(again.report), [1n, -2n, 3n]);
  assert.equal(l.spentUnits(), U);
  // another task for the same query is refused
  await assert.rejects(recordReport(l, "q1", "other", 2, 1n, [0n], false), AlreadyParticipated);
  // exactly filling the budget is allowed, one unit more is not
  await assert.rejects(recordReport(l, "q2", "d2", 1, U + 1n, [0n], false), BudgetExceeded);
  await recordReport(l, "q2", "d2", 1, U, [0n], true);
  assert.equal(l.remainingUnits(), 0n);
  await assert.rejects(recordReport(l, "q3", "d3", 1, 1n, [0n], false), BudgetExceeded);
  await l.mark("q1", "acknowledged", "");
  assert.deepEqual(l.entries("pending").map((e) => e.queryId), ["q2"]);
  return l;
}

test("memory store: one report per query, exact budget in 2^-24 units, resend returns stored bytes", async () => {
  await semantics(new MemoryStore());
});

test("concurrent records are serialized: two tasks that together exceed the budget", async () => {
  const l = await Ledger.open(new MemoryStore(), { units: 3n });
  const r = await Promise.allSettled([
    recordReport(l, "a", "da", 1, 2n, [1n], false), recordReport(l, "b", "db", 1, 2n, [1n], false),
  ]);
  assert.deepEqual(r.map((x) => x.status), ["fulfilled", "rejected"]);
  assert.ok((r[1] as PromiseRejectedResult).reason instanceof BudgetExceeded);
  assert.equal(l.spentUnits(), 2n);
});

test("the budget is rounded down to units; int64 report bytes round-trip", () => {
  assert.equal(budgetUnits(0.1), 1677721n);
  assert.equal(budgetUnits(2 ** -24), 1n);
  assert.throws(() => budgetUnits(0), RangeError);
  assert.throws(() => budgetUnits(2 ** -25), RangeError);
  assert.throws(() => budgetUnits(2 ** 20 + 1), RangeError);
  const v = [0n, -1n, (1n << 63n) - 1n, -(1n << 63n)];
  assert.deepEqual(decodeValues(encodeValues(v)), v);
  assert.deepEqual([...encodeValues([-2n])], [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
  assert.throws(() => encodeValues([1n << 63n]), RangeError);
});

test("file store: entries survive a reopen; the directory is locked while open", async () => {
  const dir = mkdtempSync(join(tmpdir(), "uldp-ledger-"));
  try {
    const store = new FileStore(dir);
    await semantics(store);
    assert.throws(() => new FileStore(dir), /in use/);
    store.close();
    const again = new FileStore(dir);
    const l = await Ledger.open(again, 2.0);
    assert.equal(l.spentUnits(), 2n * U);
    assert.equal(l.get("q1")?.state, "acknowledged");
    assert.equal(l.get("q2")?.simulated, true);
    assert.deepEqual(decodeValues(l.get("q1")!.report), [1n, -2n, 3n]);
    await assert.rejects(recordReport(l, "q1", "other", 1, 1n, [0n], false), AlreadyParticipated);
    assert.deepEqual(readdirSync(join(dir, "entries")).filter((f) => f.endsWith(".tmp")), []);
    again.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---- the ledger store contract, against every store the project ships to Node ----------------
for (const c of ledgerStoreContract({
  create: async () => new MemoryStore(),
  another: async (st) => st, // memory: one object is the storage
})) {
  test(`ledger store contract, MemoryStore: ${c.name}`, c.run);
}

const dirs = new Map<DeviceStore, string>();
for (const c of ledgerStoreContract({
  create: async () => {
    const dir = mkdtempSync(join(tmpdir(), "uldp-contract-"));
    const st = new FileStore(dir, false);
    dirs.set(st, dir);
    return st;
  },
  another: async (st) => st, // the directory is locked: one FileStore per storage
  restart: async (st) => {
    const dir = dirs.get(st)!;
    (st as FileStore).close();
    const again = new FileStore(dir, false);
    dirs.set(again, dir);
    return again;
  },
  close: (st) => {
    (st as FileStore).close();
    rmSync(dirs.get(st)!, { recursive: true, force: true });
  },
})) {
  test(`ledger store contract, FileStore: ${c.name}`, c.run);
}

test("two Ledgers over one store: the in-memory snapshot is not the authority", async () => {
  // the defect of issue 17 item 2: each ledger kept its own entries and spent 2.0 of 1.0
  const store = new MemoryStore();
  const [a, b] = [await Ledger.open(store, 1.0), await Ledger.open(store, 1.0)];
  await recordReport(a, "q1", "d1", 1, U, [1n]);
  await assert.rejects(recordReport(b, "q2", "d2", 1, U, [2n]), BudgetExceeded);
  const again = await recordReport(b, "q1", "d1", 1, U, [9n]); // the same task: a's stored bytes
  assert.deepEqual(decodeValues(again.report), [1n]);
  assert.equal(b.spentUnits(), U);
});

/** A store as a custom AsyncStorage adapter is often first written: transact reads, awaits,
 * then writes — two handles interleave. The contract must catch it. */
class SplitStepStore extends MemoryStore {
  override async transact<T>(decide: (entries: readonly LedgerEntry[]) => LedgerChange<T>): Promise<T> {
    const seen = await this.load();
    await new Promise((ok) => setTimeout(ok, 1)); // the storage round trip
    const { put, result } = decide(seen);
    await super.transact(() => ({ put, result: null }));
    return result;
  }
}

test("the contract catches a store whose transactions read and write in separate steps", async () => {
  const cases = ledgerStoreContract({ create: async () => new SplitStepStore(), another: async (st) => st });
  const failed: string[] = [];
  for (const c of cases) {
    try {
      await c.run();
    } catch (e) {
      failed.push(`${c.name}: ${(e as Error).message}`);
    }
  }
  assert.ok(failed.some((f) => f.includes("lost updates")), failed.join("\n"));
  assert.ok(failed.some((f) => f.includes("budget of 3")), failed.join("\n"));
});
