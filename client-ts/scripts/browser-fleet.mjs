#!/usr/bin/env node
// Devices in a real browser against a real collector on loopback (issue 18): Debian's headless
// Chromium driven by playwright-core, the Python collector (`uldp collector serve --http-port`,
// TLS, SQLite) in a subprocess, pages served from http://127.0.0.1:<port> (allowed by
// --cors-origin) and from http://localhost:<port> (a foreign origin). Checks, each printed as
// "# ok" or "# FAIL", then "chromium fleet: N passed, M failed":
//  1. the ledger store contract against IndexedDbStore (a second connection = another tab);
//  2. ULDP_BROWSER_FLEET (default 1000) production devices — several pages, many devices per
//     page, one IndexedDB store each, half over Connect and half over gRPC-Web — complete a
//     two-stage mean and a two-stage distribution query; the collector is killed (SIGKILL) and
//     restarted on the same ports and database while stage I runs, and nothing is lost: every
//     device's two reports are acknowledged, every phase received every report, and the exact
//     truth of the population lies in every interval (confidence 1 - 1e-5);
//  3. two tabs with one Device each over ONE IndexedDB store (budget 1, two queries of ε = 1)
//     race: one identity, one report in all, ε spent 1;
//  4. a page of a foreign origin is refused by CORS; the allowed origin is served;
//  5. the example web app (examples/web/dist, built by scripts/build-example.mjs) joins, sends
//     its report and shows it (ULDP_SCREENSHOT=file.png keeps a screenshot).
// ULDP_PYTHON: a Python with uldp installed. CHROMIUM: the browser (default /usr/bin/chromium).
import { spawn, execFileSync } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, openSync } from "node:fs";
import { createServer } from "node:http";
import { request as httpsRequest } from "node:https";
import { createServer as netServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { chromium } from "playwright-core";
import { truth } from "../build/test/fleet/population.js";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const PY = process.env.ULDP_PYTHON ?? "python3";
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const FLEET = Number(process.env.ULDP_BROWSER_FLEET ?? 1000);
const PAGES = Number(process.env.ULDP_BROWSER_PAGES ?? 4);
const CLI = "import sys; from uldp.collector.cli.service import main; sys.exit(main())";
const t0 = Date.now();
const dir = mkdtempSync(join(tmpdir(), "uldp-browser-"));
let passed = 0;
let failed = 0;
const ok = (cond, what) => {
  console.log(`# ${cond ? "ok" : "FAIL"} ${what}`);
  if (cond) passed++;
  else failed++;
  return cond;
};
const since = () => `${((Date.now() - t0) / 1000).toFixed(1)} s`;

const freePort = () => new Promise((done) => {
  const s = netServer().listen(0, "127.0.0.1", () => {
    const { port } = s.address();
    s.close(() => done(port));
  });
});

// ---- the collector ------------------------------------------------------------------------------
execFileSync(PY, ["-c", CLI, "collector", "certs", "--out", dir], { stdio: "ignore" });
const grpcPort = await freePort();
const httpPort = await freePort();
const pagePort = await freePort();
const ORIGIN = `http://127.0.0.1:${pagePort}`;
const FOREIGN = `http://localhost:${pagePort}`;
const BASE = `https://127.0.0.1:${httpPort}`;
const CA = readFileSync(join(dir, "ca.pem"));
const ADMIN = readFileSync(join(dir, "admin.token"), "utf8").trim();
let collector = null;

function startCollector() {
  const log = openSync(join(dir, "collector.log"), "a");
  collector = spawn(PY, ["-c", CLI, "collector", "serve", "--db", join(dir, "db.sqlite"), "--tls-dir", dir,
    "--host", "127.0.0.1", "--port", String(grpcPort), "--http-port", String(httpPort), "--cors-origin", ORIGIN,
    "--log-level", "warning"], { stdio: ["ignore", log, log] });
}

/** A unary call of the AnalystService over Connect (JSON), from Node. */
function analyst(method, body) {
  return new Promise((done, fail) => {
    const req = httpsRequest(`${BASE}/uldp.v1.AnalystService/${method}`, {
      method: "POST", ca: CA, servername: "localhost", timeout: 30_000,
      headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN}` },
    }, (res) => {
      let text = "";
      res.on("data", (c) => (text += c));
      res.on("end", () => (res.statusCode === 200 ? done(JSON.parse(text))
        : fail(new Error(`${method}: HTTP ${res.statusCode} ${text}`))));
    });
    req.on("error", fail);
    req.end(JSON.stringify(body));
  });
}

async function waitServing(limitMs = 120_000) {
  const end = Date.now() + limitMs;
  for (;;) {
    try {
      await analyst("ListQueries", {});
      return;
    } catch (e) {
      if (Date.now() > end || collector.exitCode !== null) throw new Error(`collector did not start: ${e.message}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

// ---- the pages ----------------------------------------------------------------------------------
const built = await esbuild.build({
  entryPoints: [here("../test/browser/fleet.ts")], bundle: true, platform: "browser", format: "iife",
  target: "es2022", write: false, logLevel: "silent",
});
const bundle = built.outputFiles[0].text;
const html = `<!doctype html><meta charset="utf-8"><title>uldp browser devices</title><script src="/fleet.js"></script>`;
const EXAMPLE = here("../../examples/web/dist/");
const pages = createServer((req, res) => {
  const path = (req.url ?? "").split("?")[0];
  if (path === "/") res.writeHead(200, { "content-type": "text/html" }).end(html);
  else if (path === "/fleet.js") res.writeHead(200, { "content-type": "text/javascript" }).end(bundle);
  else if (path === "/example/" || /^\/example\/[\w-]+\.js$/.test(path)) { // app.js and its chunks
    try {
      const js = path.endsWith(".js");
      res.writeHead(200, { "content-type": js ? "text/javascript" : "text/html" })
        .end(readFileSync(EXAMPLE + (js ? path.slice("/example/".length) : "index.html")));
    } catch {
      res.writeHead(404).end();
    }
  } else res.writeHead(404).end();
});
await new Promise((r) => pages.listen(pagePort, "127.0.0.1", r));

// trust exactly the collector's certificate (its public key), nothing else
const spki = new X509Certificate(readFileSync(join(dir, "server.pem"))).publicKey.export({ type: "spki", format: "der" });
const spkiHash = createHash("sha256").update(spki).digest("base64");
const browser = await chromium.launch({
  executablePath: CHROMIUM, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", `--ignore-certificate-errors-spki-list=${spkiHash}`],
});
const context = await browser.newContext();
async function openPage(origin = ORIGIN) {
  const p = await context.newPage();
  p.on("pageerror", (e) => console.error("page error:", e.message));
  await p.goto(origin + "/");
  await p.waitForFunction(() => globalThis.uldp !== undefined);
  return p;
}

const queryOf = (id) => analyst("GetQuery", { query_id: id });
const received = (q) => (q.phases ?? []).map((p) => Number(p.received ?? 0));

try {
  startCollector();
  await waitServing();
  console.log(`# collector up (${since()}); ${FLEET} devices on ${PAGES} pages`);

  // 1. the ledger store contract against IndexedDB
  const first = await openPage();
  const c = await first.evaluate(() => globalThis.uldp.contract());
  for (const f of c.failed) console.log(`#   ${f}`);
  ok(c.failed.length === 0 && c.passed.length >= 7, `ledger store contract, IndexedDbStore: ${c.passed.length} cases passed`);

  // 2. the fleet, through a collector restart
  const common = { epsilon: 8, users: FLEET, samples: 20, bound: 1, method: "two-stage", phase_timeout_seconds: 300,
    params_json: JSON.stringify({ confidence: 0.99999 }) };
  await analyst("CreateQuery", { ...common, kind: "mean", dataset: "steps", dim: 1, query_id: "web-mean" });
  await analyst("CreateQuery", { ...common, kind: "distribution", dataset: "cats", dim: 8, query_id: "web-dist" });
  const fleetPages = [first, ...(await Promise.all(Array.from({ length: PAGES - 1 }, () => openPage())))];
  const per = Math.ceil(FLEET / PAGES);
  const runs = fleetPages.map((p, k) => p.evaluate((a) => globalThis.uldp.fleet(a), {
    baseUrl: BASE, protocol: k % 2 ? "grpc-web" : "connect", from: k * per, to: Math.min(FLEET, (k + 1) * per),
    deadlineMs: 400_000, concurrency: 64,
  }));
  // kill -9 the collector while stage I is being reported, then restart it
  let restartedAt = null;
  for (let i = 0; i < 600 && restartedAt === null; i++) {
    const got = received(await queryOf("web-mean").catch(() => ({ phases: [] })));
    if ((got[0] ?? 0) >= FLEET / 8) {
      collector.kill("SIGKILL");
      await new Promise((r) => collector.once("exit", r));
      restartedAt = { received: got[0], at: since() };
      startCollector();
      await waitServing();
    } else await new Promise((r) => setTimeout(r, 200));
  }
  ok(restartedAt !== null, `collector killed (SIGKILL) at ${restartedAt?.received} stage-I reports (${restartedAt?.at}) and restarted`);
  const outs = await Promise.all(runs);
  const sum = (k) => outs.reduce((a, o) => a + o[k], 0);
  const list = (k) => outs.flatMap((o) => o[k]);
  console.log(`# fleet: ${sum("devices")} devices, ${sum("acknowledged")} reports acknowledged, ` +
    `${sum("pollErrors")} failed polls retried, ε spent ${sum("epsilonSpent").toFixed(1)}, ` +
    `pages ${outs.map((o) => (o.ms / 1000).toFixed(1)).join(" / ")} s (${since()})`);
  for (const x of [...list("refused"), ...list("rejected"), ...list("entriesNotAcked")].slice(0, 10)) console.log(`#   ${x}`);
  ok(sum("devices") === FLEET && sum("acknowledged") === 2 * FLEET && !list("entriesNotAcked").length,
    `every device's two reports acknowledged (Connect and gRPC-Web)`);
  ok(!list("refused").length && !list("rejected").length, "no refusal, no rejection");
  const tr = truth(FLEET);
  for (const [id, want] of [["web-mean", [tr.mean]], ["web-dist", tr.freq]]) {
    let r = null;
    for (let i = 0; i < 300 && r === null; i++) {
      r = await analyst("GetResult", { query_id: id }).catch(() => null);
      if (r === null) await new Promise((res) => setTimeout(res, 200));
    }
    const q = await queryOf(id);
    ok(JSON.stringify(received(q)) === JSON.stringify(q.phases.map((p) => Number(p.quota ?? 0))) &&
      received(q).reduce((a, b) => a + b, 0) === FLEET, `${id}: every phase received all its reports ${JSON.stringify(received(q))}`);
    if (!ok(r !== null, `${id}: result`)) continue;
    want.forEach((t, j) => {
      const inside = r.ciLow[j] <= t && t <= r.ciHigh[j];
      ok(inside, `${id}[${j}]: truth ${t.toFixed(4)} in [${r.ciLow[j].toFixed(4)}, ${r.ciHigh[j].toFixed(4)}] (estimate ${r.values[j].toFixed(4)})`);
    });
  }

  // 3. two tabs, one IndexedDB store: budget 1, two queries of ε = 1
  for (const id of ["tab-a", "tab-b"]) {
    await analyst("CreateQuery", { kind: "mean", epsilon: 1, dataset: "tabs", bound: 1, dim: 1, samples: 2, users: 10,
      method: "ssl", phase_timeout_seconds: 300, query_id: id });
  }
  await new Promise((r) => setTimeout(r, 300));
  const [t1, t2] = [await openPage(), await openPage()];
  const tabs = await Promise.all([t1, t2].map((p, k) => p.evaluate((a) => globalThis.uldp.tab(a), {
    baseUrl: BASE, protocol: k ? "grpc-web" : "connect", db: "uldp-shared-tab-store", budget: 1, dataset: "tabs",
  })));
  const got = (await Promise.all(["tab-a", "tab-b"].map(queryOf))).map((q) => received(q)[0] ?? 0);
  console.log(`# two tabs: ${JSON.stringify(tabs)}; collector received ${JSON.stringify(got)}`);
  ok(tabs[0].deviceId === tabs[1].deviceId, "two tabs over one store: one device identity");
  ok(got[0] + got[1] === 1, "two tabs over one store: one report in all (the budget holds one)");
  ok(tabs.every((t) => t.spentUnits === String(1n << 24n)), "two tabs over one store: ε spent 1 of 1, seen from both");

  // 4. CORS
  const foreign = await openPage(FOREIGN);
  const f = await foreign.evaluate((b) => globalThis.uldp.rawEnroll(b), BASE);
  const own = await t1.evaluate((b) => globalThis.uldp.rawEnroll(b), BASE);
  ok(f.startsWith("refused"), `a page of the foreign origin ${FOREIGN} is refused by CORS (${f})`);
  ok(own === "ok", `a page of the allowed origin ${ORIGIN} is served (${own})`);

  // 5. the example web app
  await analyst("CreateQuery", { kind: "mean", epsilon: 0.5, dataset: "steps", bound: 20, dim: 1, samples: 7, users: 5,
    method: "ssl", phase_timeout_seconds: 300, query_id: "example-q" });
  await new Promise((r) => setTimeout(r, 300));
  const ex = await context.newPage();
  ex.on("pageerror", (e) => console.error("example page error:", e.message));
  await ex.goto(`${ORIGIN}/example/?collector=${encodeURIComponent(BASE)}&autostart=1`);
  await ex.waitForFunction(() => document.querySelector("#entries")?.textContent?.includes("acknowledged"), null,
    { timeout: 60_000 }).catch(() => undefined);
  const shown = await ex.evaluate(() => ({ sent: document.querySelector("#sent")?.textContent,
    spent: document.querySelector("#spent")?.textContent, rows: document.querySelector("#entries")?.textContent ?? "" }));
  if (process.env.ULDP_SCREENSHOT) await ex.screenshot({ path: process.env.ULDP_SCREENSHOT, fullPage: true });
  ok(shown.sent === "1" && shown.spent === "0.500" && shown.rows.includes("example-q") && shown.rows.includes("acknowledged"),
    `the example app sent its report and shows it (reports sent ${shown.sent}, ε spent ${shown.spent})`);
} catch (e) {
  ok(false, `error: ${e.stack ?? e}`);
} finally {
  await browser.close();
  pages.close();
  if (collector && collector.exitCode === null) collector.kill("SIGTERM");
  if (failed) {
    try {
      console.log(readFileSync(join(dir, "collector.log"), "utf8").split("\n").slice(-30).join("\n"));
    } catch { /* no log */ }
  }
  rmSync(dir, { recursive: true, force: true });
}
console.log(`# browser fleet: ${since()}`);
console.log(`chromium fleet: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
