/**
 * A device's ledger and identity in React Native's AsyncStorage
 * (`@react-native-async-storage/async-storage`, any version: only getItem, setItem and removeItem
 * are used), meeting the ledger store contract (docs/device-protocol.md §10; the contract's
 * checks run against this store over the package's own in-memory mock in test/rn-store.test.ts).
 *
 * AsyncStorage has no transactions, so the store makes its own:
 *
 *  - **Atomic**: every `transact` / `updateIdentity` runs under one lock per key prefix that every
 *    handle of this module shares (a promise chain), so no two transactions of the app's JS
 *    runtime interleave a read and a write. Another runtime writing the same keys at the same
 *    time (two apps, a second JS context) is NOT covered: one runtime at a time per prefix.
 *  - **Crash-safe, copy-on-write**: an entry is written under a fresh key
 *    (`<prefix>:e:<generation>`), never over a committed one; a transaction commits with ONE
 *    `setItem` of the index (`<prefix>:index`: query id → entry key), so a crash before it leaves
 *    the previous state whole and one after it the new state whole. Keys the index no longer
 *    names are removed after the commit (and any left by a crash when a store opens).
 *  - **Durable** as AsyncStorage is: a transaction resolves after its `setItem`s resolved.
 *
 * Entries are JSON (bigint units as decimal strings, report bytes as hex), the identity one
 * JSON value under `<prefix>:identity`. Reads of committed entries are cached by key (a
 * committed key never changes). No Node-only API.
 *
 *   import AsyncStorage from "@react-native-async-storage/async-storage";
 *   const store = await AsyncStorageStore.open(AsyncStorage);          // prefix "uldp-device"
 */
import type { DeviceStore, EntryState, LedgerChange, LedgerEntry } from "../ledger/ledger.js";

/** The part of AsyncStorage the store uses (v1, v2 and v3's legacy and `createAsyncStorage`). */
export interface AsyncStorageLike {
  getItem(key: string): Promise<string | null>;
  setItem(key: string, value: string): Promise<void>;
  removeItem(key: string): Promise<void>;
  getAllKeys?(): Promise<readonly string[]>;
}

interface Index {
  /** The next entry generation (unique among every key ever written under the prefix). */
  next: number;
  /** Query id → the key of its committed entry. */
  entries: Record<string, string>;
}

interface EntryJson {
  query_id: string;
  task_digest: string;
  phase: number;
  epsilon_units: string;
  report_hex: string;
  task: string;
  simulated: boolean;
  state: EntryState;
  created_at_ms: number;
  detail: string;
}

/** One lock per prefix, shared by every store object of this module (every handle in the runtime). */
const LOCKS = new Map<string, Promise<unknown>>();

function serial<T>(prefix: string, fn: () => Promise<T>): Promise<T> {
  const before = LOCKS.get(prefix) ?? Promise.resolve();
  const run = before.then(fn, fn);
  const tail = run.catch(() => undefined);
  LOCKS.set(prefix, tail);
  void tail.then(() => {
    if (LOCKS.get(prefix) === tail) LOCKS.delete(prefix);
  });
  return run;
}

const HEX = "0123456789abcdef";
const toHex = (b: Uint8Array): string => Array.from(b, (x) => HEX[x >> 4] + HEX[x & 15]).join("");
function fromHex(s: string): Uint8Array {
  if (s.length % 2 || !/^[0-9a-f]*$/.test(s)) throw new Error("corrupt ledger entry: report_hex is not hex");
  return Uint8Array.from({ length: s.length / 2 }, (_, i) => parseInt(s.slice(2 * i, 2 * i + 2), 16));
}

const toJson = (e: LedgerEntry): EntryJson => ({
  query_id: e.queryId, task_digest: e.taskDigest, phase: e.phase, epsilon_units: e.epsilonUnits.toString(),
  report_hex: toHex(e.report), task: e.task, simulated: e.simulated, state: e.state, created_at_ms: e.createdAtMs,
  detail: e.detail,
});
const fromJson = (j: EntryJson): LedgerEntry => ({
  queryId: j.query_id, taskDigest: j.task_digest, phase: j.phase, epsilonUnits: BigInt(j.epsilon_units),
  report: fromHex(j.report_hex), task: j.task, simulated: j.simulated, state: j.state, createdAtMs: j.created_at_ms,
  detail: j.detail,
});

export class AsyncStorageStore implements DeviceStore {
  readonly prefix: string;
  readonly #storage: AsyncStorageLike;
  /** Committed entries by key (immutable once committed). */
  readonly #cache = new Map<string, LedgerEntry>();

  private constructor(storage: AsyncStorageLike, prefix: string) {
    this.#storage = storage;
    this.prefix = prefix;
  }

  /** A store over `storage` under the key prefix `prefix` (one prefix per device); removes the
   * keys a crash left uncommitted. */
  static async open(storage: AsyncStorageLike, prefix = "uldp-device"): Promise<AsyncStorageStore> {
    if (!storage || typeof storage.getItem !== "function" || typeof storage.setItem !== "function"
      || typeof storage.removeItem !== "function") {
      throw new TypeError("AsyncStorageStore needs an AsyncStorage (getItem, setItem, removeItem)");
    }
    if (typeof prefix !== "string" || !prefix || prefix.includes(":")) {
      throw new RangeError("the key prefix must be a non-empty string without ':'");
    }
    const store = new AsyncStorageStore(storage, prefix);
    await serial(prefix, () => store.#sweep());
    return store;
  }

  get #indexKey(): string {
    return `${this.prefix}:index`;
  }

  async #index(): Promise<Index> {
    const text = await this.#storage.getItem(this.#indexKey);
    if (text === null) return { next: 0, entries: {} };
    const ix = JSON.parse(text) as Index;
    if (!Number.isSafeInteger(ix?.next) || typeof ix.entries !== "object" || ix.entries === null) {
      throw new Error(`corrupt ledger index under ${this.#indexKey}`);
    }
    return ix;
  }

  async #entries(ix: Index): Promise<LedgerEntry[]> {
    const out: LedgerEntry[] = [];
    for (const key of Object.values(ix.entries)) {
      let e = this.#cache.get(key);
      if (e === undefined) {
        const text = await this.#storage.getItem(key);
        if (text === null) throw new Error(`ledger entry ${key} named by the index is missing`);
        e = fromJson(JSON.parse(text) as EntryJson);
        this.#cache.set(key, e);
      }
      out.push({ ...e, report: e.report.slice() });
    }
    if (this.#cache.size > out.length) { // keys another handle replaced
      const named = new Set(Object.values(ix.entries));
      for (const k of this.#cache.keys()) if (!named.has(k)) this.#cache.delete(k);
    }
    return out;
  }

  /** Remove entry keys of this prefix that the index does not name (a crash between the write
   * of an entry and the commit, or before the removal of a replaced one). Under the lock. */
  async #sweep(): Promise<void> {
    if (typeof this.#storage.getAllKeys !== "function") return;
    const named = new Set(Object.values((await this.#index()).entries));
    const mine = `${this.prefix}:e:`;
    for (const k of await this.#storage.getAllKeys()) {
      if (k.startsWith(mine) && !named.has(k)) await this.#storage.removeItem(k);
    }
  }

  load(): Promise<LedgerEntry[]> {
    return serial(this.prefix, async () => this.#entries(await this.#index()));
  }

  transact<T>(decide: (entries: readonly LedgerEntry[]) => LedgerChange<T>): Promise<T> {
    return serial(this.prefix, async () => {
      const ix = await this.#index();
      const { put, result } = decide(await this.#entries(ix));
      if (!put.length) return result;
      const next: Index = { next: ix.next, entries: { ...ix.entries } };
      const replaced: string[] = [];
      for (const e of put) {
        const key = `${this.prefix}:e:${next.next++}`;
        await this.#storage.setItem(key, JSON.stringify(toJson(e)));
        const old = next.entries[e.queryId];
        if (old !== undefined) replaced.push(old);
        next.entries[e.queryId] = key;
      }
      await this.#storage.setItem(this.#indexKey, JSON.stringify(next)); // the commit
      for (const k of replaced) {
        this.#cache.delete(k);
        await this.#storage.removeItem(k);
      }
      return result;
    });
  }

  async loadIdentity<T>(): Promise<T | null> {
    const text = await this.#storage.getItem(`${this.prefix}:identity`);
    return text === null ? null : (JSON.parse(text) as T);
  }

  updateIdentity<T>(decide: (stored: T | null) => T | null): Promise<T | null> {
    return serial(this.prefix, async () => {
      const stored = await this.loadIdentity<T>();
      const next = decide(stored);
      if (next === null) return stored;
      await this.#storage.setItem(`${this.prefix}:identity`, JSON.stringify(next));
      return this.loadIdentity<T>();
    });
  }
}
