/**
 * Browser entry of the device tests in headless Chromium (driven by scripts/browser-fleet.mjs):
 * production Devices (OS-keyed noise from crypto.getRandomValues) with the fetch transport
 * (Connect or gRPC-Web) and one IndexedDB store each, against a real collector on loopback.
 * The driver calls the functions published on `globalThis.uldp` with `page.evaluate`.
 */
import { Device, type PollResult } from "../../src/device/index.js";
import "../../src/kinds/all.js";
import { type DeviceStore, ledgerStoreContract } from "../../src/ledger/index.js";
import { FetchTransport, type HttpProtocol, IndexedDbStore } from "../../src/web/index.js";
import { A, population } from "../fleet/population.js";

interface FleetArgs {
  baseUrl: string;
  protocol: HttpProtocol;
  from: number;
  to: number;
  /** keep polling (through collector restarts) until this long has passed */
  deadlineMs: number;
  concurrency: number;
}

interface FleetOutcome {
  devices: number;
  acknowledged: number; // ledger entries acknowledged
  entriesNotAcked: string[];
  refused: string[];
  rejected: string[];
  pollErrors: number; // polls that failed (collector unreachable), then retried
  epsilonSpent: number; // over every device
  ms: number;
}

const sleep = (ms: number): Promise<void> => new Promise((ok) => setTimeout(ok, ms));

/** Poll until nothing is waiting; a failing poll (the collector restarting) is retried later. */
async function runDevice(d: Device, end: number, out: FleetOutcome): Promise<void> {
  for (;;) {
    let r: PollResult;
    try {
      r = await d.poll();
    } catch {
      out.pollErrors++;
      if (Date.now() > end) return;
      await sleep(500 + 500 * Math.random());
      continue;
    }
    out.refused.push(...r.refused.map((x) => `${x.queryId}: ${x.code} ${x.message}`));
    out.rejected.push(...r.rejected.map((x) => `${x.queryId}: ${x.code} ${x.message}`));
    if ((!r.waiting && !r.pending) || Date.now() > end) return;
    await sleep(Math.max(r.retryAfterMs, 100) * (0.5 + Math.random()));
  }
}

async function fleet(a: FleetArgs): Promise<FleetOutcome> {
  const t0 = Date.now();
  const out: FleetOutcome = { devices: 0, acknowledged: 0, entriesNotAcked: [], refused: [], rejected: [], pollErrors: 0,
    epsilonSpent: 0, ms: 0 };
  const transport = new FetchTransport({ baseUrl: a.baseUrl, protocol: a.protocol });
  const ids = Array.from({ length: a.to - a.from }, (_, k) => a.from + k);
  // open every device (at most `concurrency` at once), then run them all: a stage-II device
  // waits for the stage-I devices, so every device of the page polls until the end
  const opened: { i: number; d: Device; store: IndexedDbStore }[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: a.concurrency }, async () => {
    while (next < ids.length) {
      const i = ids[next++];
      const store = await IndexedDbStore.open(`uldp-fleet-${i}`);
      const d = await Device.open({ sendDelay: null, transport, store, budget: 20, label: `browser-${i}` });
      const { steps, cats } = population(i);
      d.addDataset("steps", steps, null, { values: "real" });
      d.addDataset("cats", cats, null, { values: "categorical", alphabet: A });
      opened.push({ i, d, store });
    }
  }));
  await Promise.all(opened.map(async ({ i, d, store }) => {
    await sleep(Math.random() * 1000); // devices do not all wake at once
    await runDevice(d, t0 + a.deadlineMs, out);
    await d.ledger.refresh();
    for (const e of d.ledger.entries()) {
      if (e.state === "acknowledged") out.acknowledged++;
      else out.entriesNotAcked.push(`${i}/${e.queryId}: ${e.state} ${e.detail}`);
    }
    out.epsilonSpent += Number(d.ledger.spentUnits()) / 2 ** 24;
    store.close();
  }));
  const devices = opened;
  out.devices = devices.length;
  out.ms = Date.now() - t0;
  return out;
}

/** The ledger store contract against IndexedDbStore; "another" handle is a second connection to
 * the same database, as another tab or worker holds. */
async function contract(): Promise<{ passed: string[]; failed: string[] }> {
  let n = 0;
  const names = new Map<DeviceStore, string>();
  const open = async (name: string) => {
    const st = await IndexedDbStore.open(name);
    names.set(st, name);
    return st;
  };
  const cases = ledgerStoreContract({
    create: () => open(`uldp-contract-${Date.now()}-${n++}`),
    another: (st) => open(names.get(st)!),
    restart: async (st) => {
      (st as IndexedDbStore).close();
      return open(names.get(st)!);
    },
    close: (st) => (st as IndexedDbStore).close(),
  });
  const passed: string[] = [];
  const failed: string[] = [];
  for (const c of cases) {
    try {
      await c.run();
      passed.push(c.name);
    } catch (e) {
      failed.push(`${c.name}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  return { passed, failed };
}

/** One tab's Device over the shared database `db`: poll once; what it sent and spent. */
async function tab(a: { baseUrl: string; protocol: HttpProtocol; db: string; budget: number; dataset: string })
  : Promise<{ submitted: string[]; refused: string[]; spentUnits: string; deviceId: string | null }> {
  const store = await IndexedDbStore.open(a.db);
  const d = await Device.open({ sendDelay: null, transport: new FetchTransport({ baseUrl: a.baseUrl, protocol: a.protocol }), store,
    budget: a.budget });
  d.addDataset(a.dataset, [0.25, 0.5], null, { values: "real" });
  const r = await d.poll();
  await d.ledger.refresh();
  store.close();
  return { submitted: r.submitted, refused: r.refused.map((x) => x.code), spentUnits: String(d.ledger.spentUnits()),
    deviceId: d.deviceId };
}

/** A raw Connect call from this page's origin: "ok", or how it failed. */
async function rawEnroll(baseUrl: string): Promise<string> {
  try {
    const r = await fetch(`${baseUrl}/uldp.v1.DeviceService/Enroll`, {
      method: "POST", headers: { "content-type": "application/proto" }, body: new Uint8Array(0),
    });
    return r.status === 200 ? "ok" : `HTTP ${r.status}`;
  } catch (e) {
    return `refused: ${e instanceof Error ? e.name : String(e)}`;
  }
}

declare function setTimeout(f: () => void, ms: number): unknown;
declare function fetch(url: string, init: { method: string; headers: Record<string, string>; body: Uint8Array })
  : Promise<{ status: number }>;

(globalThis as { uldp?: unknown }).uldp = { fleet, contract, tab, rawEnroll };
