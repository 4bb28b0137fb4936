/**
 * The uldp example web app (README, "Devices in web and mobile apps"): a page that embeds the
 * device, registers a dataset, polls the collector, and shows the user what left the device —
 * ε spent, reports sent, per query — read from the device's own ledger.
 *
 * Built by client-ts/scripts/build-example.mjs (esbuild, no CDN) into examples/web/dist/.
 * The first run: the collector serves it itself, same origin and one CA
 * (`uldp collector serve ... --http-port 8443 --dev-example examples/web/dist`, then
 * https://127.0.0.1:8443/example/?autostart=1). Or from any web server whose origin the collector
 * allows (--cors-origin), with `?collector=https://127.0.0.1:8443&protocol=connect`.
 * URL parameters: `collector` (default: the page's own origin when served over https),
 * `protocol` (connect | grpc-web), `autostart=1` (join at once, no click).
 *
 * Before joining, the page probes the collector (`probeCollector`) and says which of the causes
 * a browser lets it tell apart stands in the way: the address, the page's origin (CORS), an
 * unreachable collector or an untrusted certificate (one case: browsers hide which), another
 * server on that port.
 */
import { Device, type PollResult } from "@uldp/device/device";
import "@uldp/device/kinds/mean"; // the page's dataset is numeric: it answers mean queries
import type { LedgerEntry } from "@uldp/device/ledger";
import { FetchTransport, type HttpProtocol, IndexedDbStore, probeCollector } from "@uldp/device/web";

const BUDGET = 4; // the most ε this device will ever spend, over every question
const DATASET = "steps";

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;

let device: Device | null = null;
let store: IndexedDbStore | null = null;
let timer: number | undefined;
let steps: number[] = [];

function log(line: string): void {
  const el = $("log");
  el.textContent = `${new Date().toLocaleTimeString()}  ${line}\n` + (el.textContent ?? "");
}

function parseSteps(): number[] {
  // anything that is not a number is kept as a missing value by the device (never an error)
  return $<HTMLTextAreaElement>("steps").value.split(/[,\s]+/).filter(Boolean).map(Number);
}

function epsilon(e: LedgerEntry): number {
  return Number(e.epsilonUnits) / 2 ** 24;
}

function render(): void {
  if (!device) return;
  const entries = device.ledger.entries();
  const spent = Number(device.ledger.spentUnits()) / 2 ** 24;
  $("spent").textContent = spent.toFixed(3);
  $("budget").textContent = String(BUDGET);
  $("bar").style.width = `${Math.min(100, (100 * spent) / BUDGET)}%`;
  $("sent").textContent = String(entries.filter((e) => e.state === "acknowledged" || e.state === "rejected").length);
  $("device").textContent = device.deviceId ?? "not enrolled";
  const body = $("entries");
  body.replaceChildren();
  if (!entries.length) {
    body.innerHTML = `<tr><td colspan="5" class="note">nothing yet</td></tr>`;
    return;
  }
  for (const e of entries) {
    const tr = document.createElement("tr");
    const values = device.ledger.get(e.queryId)?.report ?? new Uint8Array(0);
    const ints = Array.from({ length: values.length / 8 }, (_, i) =>
      new DataView(values.buffer, values.byteOffset + 8 * i, 8).getBigInt64(0, true).toString());
    const shown = ints.length > 12 ? `${ints.slice(0, 12).join(", ")}, … (${ints.length} values)` : ints.join(", ");
    for (const [text, cls] of [
      [`${e.queryId} (phase ${e.phase})`, ""], [epsilon(e).toFixed(3), ""], [e.state + (e.detail ? ` — ${e.detail}` : ""), `state-${e.state}`],
      [shown || "(computing)", "values"], [new Date(e.createdAtMs).toLocaleString(), ""],
    ] as const) {
      const td = document.createElement("td");
      td.textContent = text;
      if (cls) td.className = cls;
      tr.append(td);
    }
    body.append(tr);
  }
}

/** Show why the collector cannot be reached (or clear it); true when it can. */
async function diagnose(baseUrl: string): Promise<boolean> {
  const p = await probeCollector(baseUrl);
  const el = $("problem");
  el.textContent = p.ok ? "" : p.message;
  el.dataset.problem = p.ok ? "" : p.problem;
  el.hidden = p.ok;
  if (!p.ok) $("status").textContent = `not connected (${p.problem})`;
  return p.ok;
}

async function pollOnce(): Promise<void> {
  if (!device) return;
  let r: PollResult;
  try {
    r = await device.poll();
  } catch (e) {
    log(`collector unreachable, will retry: ${e instanceof Error ? e.message : String(e)}`);
    await diagnose(collectorUrl());
    schedule(10_000);
    return;
  }
  $("problem").hidden = true;
  await device.ledger.refresh(); // another tab of this page may have answered too
  if (r.submitted.length) log(`sent a report for ${r.submitted.join(", ")}`);
  for (const x of r.refused) log(`declined ${x.queryId}: ${x.message}`);
  for (const x of r.rejected) log(`collector refused the report for ${x.queryId}: ${x.message}`);
  $("status").textContent = r.waiting ? `${r.waiting} question(s) waiting for the next phase` : "up to date";
  render();
  schedule(r.waiting ? Math.max(r.retryAfterMs, 1000) : 30_000);
}

function schedule(ms: number): void {
  window.clearTimeout(timer);
  timer = window.setTimeout(() => void pollOnce(), ms);
}

const collectorUrl = (): string => $<HTMLInputElement>("collector").value.trim().replace(/\/+$/, "");

async function start(): Promise<void> {
  const baseUrl = collectorUrl();
  window.clearTimeout(timer);
  $("status").textContent = "checking the collector…";
  if (!(await diagnose(baseUrl))) {
    timer = window.setTimeout(() => void start(), 10_000); // try again: the collector may come up
    return;
  }
  const protocol = (document.querySelector("input[name=protocol]:checked") as HTMLInputElement).value as HttpProtocol;
  try {
    store ??= await IndexedDbStore.open("uldp-example");
    device = await Device.open({ transport: new FetchTransport({ baseUrl, protocol }), store, budget: BUDGET,
      label: "web example" });
  } catch (e) { // e.g. a PlatformError naming what this browser lacks, or no IndexedDB
    $("problem").textContent = e instanceof Error ? e.message : String(e);
    $("problem").hidden = false;
    $("status").textContent = "cannot start here";
    return;
  }
  device.addDataset(DATASET, steps, null, { values: "real" });
  $<HTMLButtonElement>("start").disabled = true;
  $<HTMLButtonElement>("stop").disabled = false;
  log(`joined ${baseUrl} over ${protocol}`);
  render();
  await pollOnce();
}

function stop(): void {
  window.clearTimeout(timer);
  $<HTMLButtonElement>("start").disabled = false;
  $<HTMLButtonElement>("stop").disabled = true;
  $("status").textContent = "stopped";
}

function main(): void {
  const q = new URLSearchParams(location.search);
  // served by the collector itself (--dev-example): the collector is this page's own origin
  $<HTMLInputElement>("collector").value = q.get("collector") ?? (location.protocol === "https:" ? location.origin : "");
  if (q.get("protocol") === "grpc-web") (document.querySelector("input[value=grpc-web]") as HTMLInputElement).checked = true;
  steps = parseSteps();
  $("save").addEventListener("click", () => {
    steps = parseSteps();
    device?.addDataset(DATASET, steps, null, { values: "real" });
    $("saved").textContent = `${steps.length} values kept in this browser`;
  });
  $("start").addEventListener("click", () => void start());
  $("stop").addEventListener("click", stop);
  if (q.get("autostart") === "1") void start();
  (window as unknown as { uldpExample: unknown }).uldpExample = { pollOnce, device: () => device };
}

main();
