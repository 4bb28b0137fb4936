/**
 * A device's ledger and identity in IndexedDB (browsers, web workers), meeting the ledger store
 * contract (docs/device-protocol.md §10): every `transact` is ONE IndexedDB `readwrite`
 * transaction that reads every entry, lets `decide` choose and writes in the same transaction.
 * Browsers run `readwrite` transactions over the same object store one at a time, in every tab
 * and worker of the origin, so two Devices over one database — two tabs, a page and a worker —
 * can neither interleave a read and a write nor spend the budget twice. Transactions ask for
 * `durability: "strict"` (the write is flushed before the transaction completes).
 *
 * Entries are stored by the structured clone algorithm (bigint units and report bytes exactly).
 * One database per device: `IndexedDbStore.open("uldp-device")`.
 * No Node-only dependency; the IndexedDB types it needs are declared here (no DOM lib).
 */
import type { DeviceStore, LedgerChange, LedgerEntry } from "../ledger/ledger.js";

interface IdbRequest<T> {
  result: T;
  error: unknown;
  onsuccess: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}
interface IdbObjectStore {
  getAll(): IdbRequest<unknown[]>;
  get(key: string): IdbRequest<unknown>;
  put(value: unknown, key?: string): IdbRequest<unknown>;
}
interface IdbTransaction {
  objectStore(name: string): IdbObjectStore;
  abort(): void;
  error: unknown;
  oncomplete: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onabort: ((ev: unknown) => void) | null;
}
interface IdbDatabase {
  objectStoreNames: { contains(name: string): boolean };
  createObjectStore(name: string, o?: { keyPath?: string }): unknown;
  transaction(stores: string[], mode: "readonly" | "readwrite", o?: { durability?: string }): IdbTransaction;
  close(): void;
  onversionchange: ((ev: unknown) => void) | null;
}
interface IdbOpenRequest extends IdbRequest<IdbDatabase> {
  onupgradeneeded: ((ev: unknown) => void) | null;
  onblocked: ((ev: unknown) => void) | null;
}
/** The part of `indexedDB` (IDBFactory) the store uses. */
export interface IdbFactoryLike {
  open(name: string, version?: number): IdbOpenRequest;
}

const ENTRIES = "entries";
const META = "meta";
const IDENTITY = "identity";

function request<T>(r: IdbRequest<T>): Promise<T> {
  return new Promise((ok, fail) => {
    r.onsuccess = () => ok(r.result);
    r.onerror = () => fail(r.error);
  });
}

export class IndexedDbStore implements DeviceStore {
  readonly name: string;
  #db: IdbDatabase | null;

  private constructor(name: string, db: IdbDatabase) {
    this.name = name;
    this.#db = db;
    db.onversionchange = () => this.close(); // never block another tab's upgrade
  }

  /** Open (creating if needed) the database `name` of this origin. */
  static async open(name = "uldp-device", factory?: IdbFactoryLike): Promise<IndexedDbStore> {
    const idb = factory ?? (globalThis as { indexedDB?: IdbFactoryLike }).indexedDB;
    if (!idb) throw new TypeError("IndexedDB is not available here: pass a factory or use another store");
    const req = idb.open(name, 1);
    req.onupgradeneeded = () => {
      const db = req.result;
      if (!db.objectStoreNames.contains(ENTRIES)) db.createObjectStore(ENTRIES, { keyPath: "queryId" });
      if (!db.objectStoreNames.contains(META)) db.createObjectStore(META);
    };
    req.onblocked = () => undefined; // an old connection closes on versionchange
    return new IndexedDbStore(name, await request(req));
  }

  close(): void {
    this.#db?.close();
    this.#db = null;
  }

  #tx(stores: string[], mode: "readonly" | "readwrite"): IdbTransaction {
    if (!this.#db) throw new Error(`ledger store ${this.name} is closed`);
    return this.#db.transaction(stores, mode, { durability: "strict" });
  }

  /** Run `body` inside one transaction; resolve with its value once the transaction completed
   * (durably), reject with `body`'s error (the transaction aborted: nothing written). */
  #run<T>(stores: string[], mode: "readonly" | "readwrite",
    body: (tx: IdbTransaction, done: (v: T) => void, abort: (e: unknown) => void) => void): Promise<T> {
    return new Promise((ok, fail) => {
      let tx: IdbTransaction;
      try {
        tx = this.#tx(stores, mode);
      } catch (e) {
        fail(e);
        return;
      }
      let value: T;
      let failure: unknown = null;
      tx.oncomplete = () => ok(value);
      tx.onabort = () => fail(failure ?? tx.error ?? new Error("IndexedDB transaction aborted"));
      tx.onerror = () => undefined; // onabort follows
      const abort = (e: unknown) => {
        failure = e;
        tx.abort();
      };
      try {
        body(tx, (v) => (value = v), abort);
      } catch (e) {
        abort(e);
      }
    });
  }

  load(): Promise<LedgerEntry[]> {
    return this.#run<LedgerEntry[]>([ENTRIES], "readonly", (tx, done) => {
      const r = tx.objectStore(ENTRIES).getAll();
      r.onsuccess = () => done(r.result as LedgerEntry[]);
    });
  }

  transact<T>(decide: (entries: readonly LedgerEntry[]) => LedgerChange<T>): Promise<T> {
    return this.#run<T>([ENTRIES], "readwrite", (tx, done, abort) => {
      const store = tx.objectStore(ENTRIES);
      const r = store.getAll();
      r.onsuccess = () => {
        let change: LedgerChange<T>;
        try {
          change = decide(r.result as LedgerEntry[]);
        } catch (e) {
          abort(e);
          return;
        }
        for (const e of change.put) store.put({ ...e });
        done(change.result);
      };
    });
  }

  loadIdentity<T>(): Promise<T | null> {
    return this.#run<T | null>([META], "readonly", (tx, done) => {
      const r = tx.objectStore(META).get(IDENTITY);
      r.onsuccess = () => done((r.result ?? null) as T | null);
    });
  }

  updateIdentity<T>(decide: (stored: T | null) => T | null): Promise<T | null> {
    return this.#run<T | null>([META], "readwrite", (tx, done, abort) => {
      const store = tx.objectStore(META);
      const r = store.get(IDENTITY);
      r.onsuccess = () => {
        const stored = (r.result ?? null) as T | null;
        let next: T | null;
        try {
          next = decide(stored);
        } catch (e) {
          abort(e);
          return;
        }
        if (next !== null) store.put(next, IDENTITY);
        done(next ?? stored);
      };
    });
  }
}
