/**
 * AsyncStorageStore (`@uldp/device/react-native`) against the ledger store contract, over the
 * in-memory AsyncStorage that @react-native-async-storage/async-storage ships for tests (its
 * `jest` entry, from npm: the same get/set/remove semantics as the native module), plus what
 * the contract cannot see: a crash between an entry's write and the commit, a Device through
 * the store, and a negative control — two JS runtimes (two instances of the module, so two
 * locks) over one storage lose updates, which is why the store documents "one runtime".
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { createAsyncStorage } from "@react-native-async-storage/async-storage/jest";
import { type DeviceStore, ledgerStoreContract, type LedgerEntry } from "../src/ledger/index.js";
import { type AsyncStorageLike, AsyncStorageStore } from "../src/react-native/index.js";

let n = 0;
const fresh = (): AsyncStorageLike => createAsyncStorage(`uldp-test-${n++}`);
const storages = new Map<DeviceStore, AsyncStorageLike>();

for (const c of ledgerStoreContract({
  create: async () => {
    const storage = fresh();
    const st = await AsyncStorageStore.open(storage);
    storages.set(st, storage);
    return st;
  },
  another: async (st) => { // another Device instance of the app over the same AsyncStorage
    const other = await AsyncStorageStore.open(storages.get(st)!);
    storages.set(other, storages.get(st)!);
    return other;
  },
  restart: async (st) => { // the app restarted: a new store object reads what is stored
    const again = await AsyncStorageStore.open(storages.get(st)!);
    storages.set(again, storages.get(st)!);
    return again;
  },
})) {
  test(`ledger store contract, AsyncStorageStore: ${c.name}`, c.run);
}

const entry = (queryId: string, state: LedgerEntry["state"] = "reserved"): LedgerEntry => ({
  queryId, taskDigest: "d", phase: 1, epsilonUnits: 5n, report: new Uint8Array(0), task: "", simulated: false,
  state, createdAtMs: 1, detail: "",
});

test("a crash before the commit leaves the previous state whole, and its keys are swept", async () => {
  const storage = fresh();
  const st = await AsyncStorageStore.open(storage);
  await st.transact(() => ({ put: [entry("a"), entry("b")], result: null }));
  // the app dies after writing the new entries, before the index (the commit) is written
  const dying: AsyncStorageLike = {
    getItem: (k) => storage.getItem(k),
    removeItem: (k) => storage.removeItem(k),
    setItem: async (k, v) => {
      if (k.endsWith(":index")) throw new Error("killed");
      await storage.setItem(k, v);
    },
    getAllKeys: () => storage.getAllKeys!(),
  };
  const crashing = await AsyncStorageStore.open(dying);
  await assert.rejects(crashing.transact(() => ({ put: [entry("a", "pending"), entry("c")], result: null })), /killed/);
  const before = (await storage.getAllKeys!()).filter((k) => k.includes(":e:")).length;
  assert.equal(before, 4, "the uncommitted entries were written");
  const again = await AsyncStorageStore.open(storage); // restart: the old state, whole
  const got = (await again.load()).map((e) => `${e.queryId}:${e.state}`).sort();
  assert.deepEqual(got, ["a:reserved", "b:reserved"]);
  assert.equal((await storage.getAllKeys!()).filter((k) => k.includes(":e:")).length, 2, "orphans not swept");
  // and a replaced entry's old key is removed after the commit
  await again.transact(() => ({ put: [entry("a", "acknowledged")], result: null }));
  assert.equal((await storage.getAllKeys!()).filter((k) => k.includes(":e:")).length, 2);
  assert.deepEqual((await st.load()).map((e) => `${e.queryId}:${e.state}`).sort(), ["a:acknowledged", "b:reserved"]);
});

test("open refuses what is not an AsyncStorage and a prefix with ':'", async () => {
  await assert.rejects(AsyncStorageStore.open({} as AsyncStorageLike), /getItem, setItem, removeItem/);
  await assert.rejects(AsyncStorageStore.open(fresh(), "a:b"), /prefix/);
  await assert.rejects(AsyncStorageStore.open(fresh(), ""), /prefix/);
});

test("negative control: two runtimes (two module instances, two locks) over one storage fail the contract", async () => {
  type Mod = typeof import("../src/react-native/index.js");
  const second = (await import(new URL("../src/react-native/asyncStorageStore.js?runtime=2", import.meta.url).href)) as Mod;
  const cases = ledgerStoreContract({
    create: async () => {
      const storage = fresh();
      const st = await AsyncStorageStore.open(storage);
      storages.set(st, storage);
      return st;
    },
    another: async (st) => second.AsyncStorageStore.open(storages.get(st)!),
  });
  const failed: string[] = [];
  for (const c of cases) {
    try {
      await c.run();
    } catch (e) {
      failed.push(`${c.name}: ${(e as Error).message}`);
    }
  }
  assert.ok(failed.some((f) => f.includes("lost updates") || f.includes("budget of 3")), failed.join("\n") || "no case failed");
});
