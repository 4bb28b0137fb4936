/**
 * The ledger store contract as runnable checks (docs/device-protocol.md §10, "The ledger store
 * contract"). A store author runs them against their store — React Native AsyncStorage, SQLite,
 * a server-side table — with any test runner:
 *
 *   import { ledgerStoreContract } from "@uldp/device/ledger";
 *   for (const c of ledgerStoreContract(myStoreUnderTest)) test(c.name, c.run);
 *
 * The project runs them against every store it ships: MemoryStore and FileStore (node:test),
 * IndexedDbStore (headless Chromium). A case throws on a violation. The decisive ones: two
 * handles on one storage (two tabs, two Device instances) race read-modify-write transactions
 * and two ledgers race reserves; a store that reads and writes in separate steps loses updates
 * and lets two ledgers spend the budget twice, and fails here.
 * No Node-only dependency (it runs in browsers and React Native).
 */
import {
  AlreadyParticipated, BudgetExceeded, decodeValues, type DeviceStore, Ledger, type LedgerEntry,
} from "./ledger.js";

/** How the contract cases get at a store. */
export interface StoreUnderTest {
  /** A handle on new, empty storage. */
  create(): Promise<DeviceStore>;
  /** Another handle on the storage of `store`, usable at the same time — what another tab,
   * worker or Device instance would hold. A store that admits one handle per storage (like
   * FileStore, which locks its directory) returns `store` itself. */
  another(store: DeviceStore): Promise<DeviceStore>;
  /** Close `store` and open the same storage again (a restart of the app): the durability
   * case. Omit it for a store that keeps nothing (MemoryStore). */
  restart?(store: DeviceStore): Promise<DeviceStore>;
  /** Release a handle at the end of a case (optional). */
  close?(store: DeviceStore): Promise<void> | void;
}

export interface ContractCase {
  readonly name: string;
  run(): Promise<void>;
}

class ContractViolation extends Error {
  override name = "ContractViolation";
}

function check(ok: boolean, what: string): void {
  if (!ok) throw new ContractViolation(what);
}

const U = 1n << 24n;

function entry(queryId: string, o: Partial<LedgerEntry> = {}): LedgerEntry {
  return {
    queryId, taskDigest: "d-" + queryId, phase: 1, epsilonUnits: 3n, report: new Uint8Array(0), task: "",
    simulated: false, state: "reserved", createdAtMs: 1_700_000_000_000, detail: "", ...o,
  };
}

function same(a: LedgerEntry | undefined, b: LedgerEntry): boolean {
  return a !== undefined && a.queryId === b.queryId && a.taskDigest === b.taskDigest && a.phase === b.phase &&
    a.epsilonUnits === b.epsilonUnits && typeof a.epsilonUnits === "bigint" && a.task === b.task &&
    a.simulated === b.simulated && a.state === b.state && a.createdAtMs === b.createdAtMs && a.detail === b.detail &&
    a.report instanceof Uint8Array && a.report.length === b.report.length && a.report.every((x, i) => x === b.report[i]);
}

async function within<T>(s: StoreUnderTest, fn: (store: DeviceStore) => Promise<T>): Promise<T> {
  const store = await s.create();
  try {
    return await fn(store);
  } finally {
    await s.close?.(store);
  }
}

/** Every case of the contract, for `s`. */
export function ledgerStoreContract(s: StoreUnderTest): ContractCase[] {
  const cases: ContractCase[] = [
    { name: "a new store is empty", run: () => within(s, async (st) => {
      check((await st.load()).length === 0, "load() of new storage is not empty");
      check((await st.loadIdentity()) === null, "loadIdentity() of new storage is not null");
    }) },
    { name: "entries round-trip exactly and put replaces by queryId", run: () => within(s, async (st) => {
      const odd = entry("q/ü 1", { epsilonUnits: (1n << 44n) + 1n, report: Uint8Array.from([0, 255, 7, 128, 1, 2, 3, 4]),
        task: "{\"ü\":\"\\u0000\"}", simulated: true, state: "pending", createdAtMs: 1_700_000_000_123, detail: "x".repeat(1000) });
      const r = await st.transact(() => ({ put: [odd, entry("b")], result: 42 }));
      check(r === 42, "transact did not resolve with decide's result");
      let got = await st.load();
      check(got.length === 2 && same(got.find((e) => e.queryId === odd.queryId), odd), "an entry did not round-trip exactly");
      const acked: LedgerEntry = { ...odd, state: "acknowledged", detail: "duplicate" };
      await st.transact((seen) => {
        check(seen.length === 2 && same(seen.find((e) => e.queryId === odd.queryId), odd), "decide did not see the stored entries");
        return { put: [acked], result: null };
      });
      got = await st.load();
      check(got.length === 2 && same(got.find((e) => e.queryId === odd.queryId), acked), "put did not replace by queryId");
    }) },
    { name: "a throwing decide writes nothing and rejects with its error", run: () => within(s, async (st) => {
      const boom = new Error("decide refused");
      let caught: unknown = null;
      try {
        await st.transact(() => {
          throw boom;
        });
      } catch (e) {
        caught = e;
      }
      check(caught === boom, "transact did not reject with decide's error");
      check((await st.load()).length === 0, "a transaction whose decide threw wrote something");
    }) },
    { name: "read-modify-write transactions from two handles never interleave", run: () => within(s, async (st) => {
      const other = await s.another(st);
      try {
        const n = 40;
        // each transaction writes the entry named after how many it saw: a lost update (two
        // transactions reading the same state) writes one name twice and leaves fewer than n
        const step = (h: DeviceStore) => h.transact((seen) => ({ put: [entry(`n${seen.length}`)], result: seen.length }));
        const seen = await Promise.all(Array.from({ length: n }, (_, i) => step(i % 2 ? other : st)));
        const names = new Set((await st.load()).map((e) => e.queryId));
        check(names.size === n, `lost updates: ${n} transactions left ${names.size} entries`);
        check(new Set(seen).size === n, "two transactions saw the same state");
      } finally {
        if (other !== st) await s.close?.(other);
      }
    }) },
    { name: "two ledgers over two handles never exceed the budget nor answer a query twice", run: () => within(s, async (st) => {
      const other = await s.another(st);
      try {
        const [a, b] = await Promise.all([Ledger.open(st, { units: 3n * U }), Ledger.open(other, { units: 3n * U })]);
        // 8 distinct queries of ε = 1 against a budget of 3, raced from both ledgers
        const r = await Promise.allSettled(Array.from({ length: 8 }, (_, i) =>
          (i % 2 ? b : a).reserve(`q${i}`, `d${i}`, 1, U)));
        const ok = r.filter((x) => x.status === "fulfilled").length;
        check(ok === 3, `${ok} reserves of ε = 1 succeeded against a budget of 3`);
        check(r.every((x) => x.status === "fulfilled" || (x.reason as Error) instanceof BudgetExceeded), "a refusal was not BudgetExceeded");
        // one query, two different tasks: one wins, the other is AlreadyParticipated
        const [x, y] = await Promise.all([Ledger.open(st, { units: 9n * U }), Ledger.open(other, { units: 9n * U })]);
        const two = await Promise.allSettled([x.reserve("z", "one", 1, U), y.reserve("z", "two", 1, U)]);
        check(two.filter((t) => t.status === "fulfilled").length === 1, "one query accepted two different tasks");
        check(two.some((t) => t.status === "rejected" && t.reason instanceof AlreadyParticipated), "the loser was not AlreadyParticipated");
        // the same task from both: the same entry; the first stored report is the one kept
        const [p, q] = await Promise.all([x.reserve("w", "same", 1, U), y.reserve("w", "same", 1, U)]);
        check(p.createdAtMs === q.createdAtMs && p.taskDigest === "same", "the same task was charged twice");
        const [r1, r2] = await Promise.all([x.storeReport("w", [1n, 2n]), y.storeReport("w", [7n, 8n])]);
        check(decodeValues(r1.report).join() === decodeValues(r2.report).join(), "two ledgers hold different reports for one query");
        const total = (await st.load()).reduce((acc, e) => acc + e.epsilonUnits, 0n);
        check(total === 3n * U + 2n * U, `the store holds ${total} units, expected ${5n * U}`);
      } finally {
        if (other !== st) await s.close?.(other);
      }
    }) },
    { name: "identity: compare-and-set from two handles keeps one identity", run: () => within(s, async (st) => {
      const other = await s.another(st);
      try {
        const mine = (id: string) => (stored: { id: string } | null) => (stored ? null : { id });
        const [a, b] = await Promise.all([st.updateIdentity(mine("A")), other.updateIdentity(mine("B"))]);
        check(a !== null && b !== null && a.id === b.id, "two handles ended with two identities");
        const seen = await st.loadIdentity<{ id: string }>();
        check(seen?.id === a?.id, "loadIdentity does not return the stored identity");
        const renewed = await st.updateIdentity<{ id: string; t: number }>(() => ({ id: a!.id, t: 2 }));
        check(renewed?.t === 2, "updateIdentity did not replace the identity");
      } finally {
        if (other !== st) await s.close?.(other);
      }
    }) },
  ];
  if (s.restart) {
    const restart = s.restart.bind(s);
    cases.push({ name: "durable: entries and identity survive a restart", run: async () => {
      let st = await s.create();
      try {
        const e = entry("kept", { state: "pending", report: Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]) });
        await st.transact(() => ({ put: [e], result: null }));
        await st.updateIdentity(() => ({ device_id: "d-1", token: "t", expires_at_ms: 5 }));
        st = await restart(st);
        const got = await st.load();
        check(got.length === 1 && same(got[0], e), "an entry did not survive a restart");
        check((await st.loadIdentity<{ device_id: string }>())?.device_id === "d-1", "the identity did not survive a restart");
      } finally {
        await s.close?.(st);
      }
    } });
  }
  return cases;
}
