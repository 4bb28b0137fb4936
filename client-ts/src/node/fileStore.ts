/**
 * A durable ledger and identity store on the local file system (Node).
 *
 * One JSON file per query under `<dir>/entries/`, and the device identity in
 * `<dir>/identity.json`, each written atomically: temp file, fsync, rename, fsync of the
 * directory — a `put` that resolved survives a crash or power cut.
 * A lock file (`<dir>/ledger.lock`, holding the owner's pid) keeps a second process — or a
 * second FileStore in this one — from opening the same ledger; a lock left by a dead process is
 * taken over. The one open FileStore is the only writer of its directory, so its transactions
 * (docs/device-protocol.md §10, the ledger store contract) are serialized in memory: each
 * reads the entries, lets `decide` choose, and writes durably before the next one starts.
 */
import { createHash } from "node:crypto";
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync,
  unlinkSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { DeviceStore, EntryState, LedgerChange, LedgerEntry } from "../ledger/ledger.js";

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

function fsyncDir(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

export class FileStore implements DeviceStore {
  readonly dir: string;
  readonly #entries: string;
  readonly #lock: string;
  #closed = false;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(dir: string, readonly durable = true) {
    this.dir = dir;
    this.#entries = join(dir, "entries");
    this.#lock = join(dir, "ledger.lock");
    mkdirSync(this.#entries, { recursive: true });
    this.#acquire();
  }

  #acquire(): void {
    for (let i = 0; i < 2; i++) {
      try {
        const fd = openSync(this.#lock, "wx");
        writeSync(fd, String(process.pid));
        fsyncSync(fd);
        closeSync(fd);
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
        const pid = Number(readFileSync(this.#lock, "utf8").trim());
        if (Number.isInteger(pid) && pid > 0 && alive(pid)) {
          throw new Error(`ledger ${this.dir} is in use by process ${pid}`);
        }
        unlinkSync(this.#lock); // stale lock of a dead process
      }
    }
    throw new Error(`cannot lock ledger ${this.dir}`);
  }

  close(): void {
    if (!this.#closed) {
      this.#closed = true;
      unlinkSync(this.#lock);
    }
  }

  #path(queryId: string): string {
    return join(this.#entries, createHash("sha256").update(queryId, "utf8").digest("hex") + ".json");
  }

  async load(): Promise<LedgerEntry[]> {
    return this.#readAll();
  }

  #readAll(): LedgerEntry[] {
    return readdirSync(this.#entries).filter((f) => f.endsWith(".json")).map((f) => {
      const j = JSON.parse(readFileSync(join(this.#entries, f), "utf8")) as EntryJson;
      return {
        queryId: j.query_id, taskDigest: j.task_digest, phase: j.phase,
        epsilonUnits: BigInt(j.epsilon_units), report: Uint8Array.from(Buffer.from(j.report_hex, "hex")),
        task: j.task ?? "", simulated: j.simulated, state: j.state, createdAtMs: j.created_at_ms, detail: j.detail,
      };
    });
  }

  /** Run `fn` after every earlier transaction of this store. */
  #serial<T>(fn: () => T): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  transact<T>(decide: (entries: readonly LedgerEntry[]) => LedgerChange<T>): Promise<T> {
    return this.#serial(() => {
      if (this.#closed) throw new Error("ledger store is closed");
      const { put, result } = decide(this.#readAll());
      for (const e of put) this.#put(e);
      return result;
    });
  }

  #put(e: LedgerEntry): void {
    const j: EntryJson = {
      query_id: e.queryId, task_digest: e.taskDigest, phase: e.phase,
      epsilon_units: e.epsilonUnits.toString(), report_hex: Buffer.from(e.report).toString("hex"),
      task: e.task, simulated: e.simulated, state: e.state, created_at_ms: e.createdAtMs, detail: e.detail,
    };
    this.#write(this.#path(e.queryId), JSON.stringify(j));
  }

  #write(path: string, text: string): void {
    if (this.#closed) throw new Error("ledger store is closed");
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, text);
    if (this.durable) {
      const fd = openSync(tmp, "r+");
      try {
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    renameSync(tmp, path);
    if (this.durable) fsyncDir(join(path, ".."));
  }

  async loadIdentity<T>(): Promise<T | null> {
    return this.#readIdentity<T>();
  }

  #readIdentity<T>(): T | null {
    try {
      return JSON.parse(readFileSync(join(this.dir, "identity.json"), "utf8")) as T;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw e;
    }
  }

  updateIdentity<T>(decide: (stored: T | null) => T | null): Promise<T | null> {
    return this.#serial(() => {
      const next = decide(this.#readIdentity<T>());
      if (next !== null) this.#write(join(this.dir, "identity.json"), JSON.stringify(next));
      return this.#readIdentity<T>();
    });
  }
}
