#!/usr/bin/env node
// The web first run (README, "Devices in web and mobile apps"), in Debian's headless Chromium
// against a real collector: `uldp collector serve --http-port P --dev-example
// examples/web/dist` (no --cors-origin), the browser trusting the development CA the way the
// README says (certutil into the NSS database Chromium reads on Linux; the SPKI pin of the
// other browser scripts when certutil is missing). Checks, each "# ok" or "# FAIL", then
// "chromium first run: N passed, M failed":
//  1. https://127.0.0.1:P/example/?autostart=1 — the page of the collector's own origin joins
//     without a click, sends its report and shows it;
//  2. the errors a page can tell apart, each shown at once — after the probe's GET /healthz only,
//     no transport call (so none of its retries; counted, not timed, so load cannot fail it):
//     a page of another origin -> "origin" (CORS); a collector port with nothing behind it ->
//     "unreachable"; a browser that does not trust the CA -> "unreachable", its message naming
//     the certificate (a page cannot tell the two apart; the browser's own navigation to the
//     collector names it: net::ERR_CERT_AUTHORITY_INVALID);
//  3. the fetch transport's own error in those three pages (FetchTransport.enroll, one
//     attempt): a NetworkError "network" naming the three causes and probeCollector — never a
//     bare "network error", never an exception that escapes as something else.
// Needs examples/web/dist (node scripts/build-example.mjs). ULDP_PYTHON: a Python with uldp.
import { execFileSync, spawn } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { request as httpsRequest } from "node:https";
import { createServer as netServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { chromium } from "playwright-core";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const PY = process.env.ULDP_PYTHON ?? "python3";
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const CLI = "import sys; from uldp.collector.cli.service import main; sys.exit(main())";
const EXAMPLE = here("../../examples/web/dist/");
const t0 = Date.now();
const dir = mkdtempSync(join(tmpdir(), "uldp-first-run-"));
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
const hasCertutil = (() => {
  try {
    execFileSync("certutil", ["-H"], { stdio: "ignore" });
    return true;
  } catch (e) {
    return e.code !== "ENOENT"; // `certutil -H` exits non-zero, but it is there
  }
})();

// ---- the collector, serving the example page itself --------------------------------------------
const pki = join(dir, "pki");
execFileSync(PY, ["-c", CLI, "collector", "certs", "--out", pki], { stdio: "ignore" });
const [grpcPort, httpPort, pagePort, closedPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
const BASE = `https://127.0.0.1:${httpPort}`;
const CA = readFileSync(join(pki, "ca.pem"));
const ADMIN = readFileSync(join(pki, "admin.token"), "utf8").trim();
const log = openSync(join(dir, "collector.log"), "a");
const collector = spawn(PY, ["-c", CLI, "collector", "serve", "--db", join(dir, "db.sqlite"), "--tls-dir", pki,
  "--host", "127.0.0.1", "--port", String(grpcPort), "--http-port", String(httpPort), "--dev-example", EXAMPLE,
  "--log-level", "warning"], { stdio: ["ignore", log, log] });

function analyst(method, body) {
  return new Promise((done, fail) => {
    const req = httpsRequest(`${BASE}/uldp.v1.AnalystService/${method}`, {
      method: "POST", ca: CA, servername: "localhost", timeout: 30_000,
      headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN}` },
    }, (res) => {
      let text = "";
      res.on("data", (c) => (text += c));
      res.on("end", () => (res.statusCode === 200 ? done(JSON.parse(text)) : fail(new Error(`${method}: HTTP ${res.statusCode} ${text}`))));
    });
    req.on("error", fail);
    req.end(JSON.stringify(body));
  });
}

// another origin: the same built page from a plain web server (what `python3 -m http.server` does)
const pages = createServer((req, res) => {
  const name = (req.url ?? "").split("?")[0].replace(/^\/example\//, "") || "index.html";
  try {
    if (!/^[\w-]+\.(js|html)$/.test(name)) throw new Error("no");
    res.writeHead(200, { "content-type": name.endsWith(".js") ? "text/javascript" : "text/html" })
      .end(readFileSync(EXAMPLE + name));
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise((r) => pages.listen(pagePort, "127.0.0.1", r));
const OTHER = `http://127.0.0.1:${pagePort}/example/`;

/** A headless Chromium with its own HOME (its own NSS database); `trust`: how it trusts the CA. */
async function browserWith(trust) {
  const home = join(dir, `home-${trust}`);
  mkdirSync(home);
  const args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"];
  if (trust === "recipe") { // the README's recipe for Chromium on Linux
    const db = `sql:${join(home, ".pki/nssdb")}`;
    mkdirSync(join(home, ".pki/nssdb"), { recursive: true });
    execFileSync("certutil", ["-d", db, "-N", "--empty-password"], { stdio: "ignore" });
    execFileSync("certutil", ["-d", db, "-A", "-t", "C,,", "-n", "uldp development CA", "-i", join(pki, "ca.pem")],
      { stdio: "ignore" });
  } else if (trust === "pin") {
    const spki = new X509Certificate(readFileSync(join(pki, "server.pem"))).publicKey.export({ type: "spki", format: "der" });
    args.push(`--ignore-certificate-errors-spki-list=${createHash("sha256").update(spki).digest("base64")}`);
  }
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args, env: { ...process.env, HOME: home } });
}

/** Open the example at `url`; wait for the problem line (or the report); what it shows, when, and
 * `calls`: the requests the page had made to `target` (the collector it was given) by then. */
async function visit(browser, url, until, target = "") {
  const page = await (await browser.newContext()).newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  const seen = [];
  page.on("request", (r) => {
    if (target && r.url().startsWith(target)) seen.push(`${r.method()} ${new URL(r.url()).pathname}`);
  });
  const start = Date.now();
  await page.goto(url);
  await page.waitForFunction(until, null, { timeout: 60_000 }).catch(() => undefined);
  const ms = Date.now() - start;
  const calls = [...seen];
  const shown = await page.evaluate(() => ({
    problem: document.querySelector("#problem")?.hidden ? "" : document.querySelector("#problem")?.dataset.problem ?? "",
    message: document.querySelector("#problem")?.textContent ?? "",
    status: document.querySelector("#status")?.textContent ?? "",
    sent: document.querySelector("#sent")?.textContent, rows: document.querySelector("#entries")?.textContent ?? "",
  }));
  if (process.env.ULDP_SCREENSHOT) await page.screenshot({ path: process.env.ULDP_SCREENSHOT.replace(/\.png$/, `-${passed + failed}.png`), fullPage: true });
  await page.context().close();
  return { ...shown, ms, calls };
}
const problemShown = () => !document.querySelector("#problem")?.hidden;
// "at once": shown after the probe's one or two GET /healthz and nothing else — no transport
// call, so none of its retries (counted, not timed: a loaded machine stretches the time, never this)
const atOnce = (v) => v.calls.length >= 1 && v.calls.length <= 2 && v.calls.every((c) => c === "GET /healthz");
const when = (v) => `in ${v.ms} ms, after ${v.calls.join(" + ") || "no request"}`;

const browsers = [];
try {
  for (let i = 0; ; i++) { // the collector answers
    try {
      await analyst("ListQueries", {});
      break;
    } catch (e) {
      if (i > 600 || collector.exitCode !== null) throw new Error(`collector did not start: ${e.message}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  await analyst("CreateQuery", { kind: "mean", epsilon: 0.5, dataset: "steps", bound: 20, dim: 1, samples: 7, users: 5,
    method: "ssl", phase_timeout_seconds: 300, query_id: "first-run" });
  console.log(`# collector up with --dev-example (${since()}); the CA trusted by ${hasCertutil ? "the README's certutil recipe" : "an SPKI pin (certutil missing)"}`);
  const trusted = await browserWith(hasCertutil ? "recipe" : "pin");
  const untrusted = await browserWith("none");
  browsers.push(trusted, untrusted);

  // 1. the first run: one origin, one CA, no click
  const run = await visit(trusted, `${BASE}/example/?autostart=1`,
    () => document.querySelector("#entries")?.textContent?.includes("acknowledged"), BASE);
  const rpcs = run.calls.filter((c) => c.startsWith("POST /uldp.v1.DeviceService/")); // what atOnce would see
  ok(run.sent === "1" && run.rows.includes("first-run") && run.rows.includes("acknowledged") && !run.problem && rpcs.length > 0,
    `the page served by the collector (${BASE}/example/?autostart=1) joined its own origin and sent its report (${(run.ms / 1000).toFixed(1)} s; sent ${run.sent}; ${rpcs.length} device calls seen)`);

  // 2. the errors a page can tell apart
  const origin = await visit(trusted, `${OTHER}?collector=${encodeURIComponent(BASE)}&autostart=1`, problemShown, BASE);
  ok(origin.problem === "origin" && origin.message.includes(`--cors-origin http://127.0.0.1:${pagePort}`) && atOnce(origin),
    `a page of another origin: "origin", naming the flag, ${when(origin)} (${origin.message.slice(0, 90)}…)`);
  const closed = `https://127.0.0.1:${closedPort}`;
  const down = await visit(trusted, `${OTHER}?collector=${encodeURIComponent(closed)}&autostart=1`, problemShown, closed);
  ok(down.problem === "unreachable" && atOnce(down), `nothing listening: "unreachable" ${when(down)}`);
  const cert = await visit(untrusted, `${OTHER}?collector=${encodeURIComponent(BASE)}&autostart=1`, problemShown, BASE);
  ok(cert.problem === "unreachable" && cert.message.includes("certificate") && cert.message.includes(`${BASE}/healthz`) && atOnce(cert),
    `a browser without the CA: "unreachable", the message naming the certificate and ${BASE}/healthz, ${when(cert)}`);
  // 3. what FetchTransport itself says in those pages (a one-attempt enroll)
  const probe = (await esbuild.build({ stdin: { contents: `import { FetchTransport } from "./src/web/index.ts";
    globalThis.tryEnroll = async (baseUrl) => { try { await new FetchTransport({ baseUrl, retry: { attempts: 1 } }).enroll(); return "answered"; }
      catch (e) { return { name: e.name, problem: e.problem, code: e.code, message: e.message }; } };`, resolveDir: here(".."), loader: "ts" },
  bundle: true, write: false, format: "iife", platform: "browser", logLevel: "error" })).outputFiles[0].text;
  for (const [what, browser, target] of [["another origin", trusted, BASE], ["nothing listening", trusted, `https://127.0.0.1:${closedPort}`],
    ["no CA", untrusted, BASE]]) {
    const page = await (await browser.newContext()).newPage();
    await page.goto(OTHER);
    await page.addScriptTag({ content: probe });
    const e = await page.evaluate((u) => globalThis.tryEnroll(u), target);
    ok(e.name === "NetworkError" && e.problem === "network" && e.code === 14 && e.message.includes("probeCollector")
      && e.message.includes("certificate") && e.message.includes("origin"),
      `FetchTransport, ${what}: ${e.name} ${e.problem} (${String(e.message).slice(0, 70)}…)`);
  }
  let navigation = "";
  const p = await untrusted.newPage();
  await p.goto(`${BASE}/healthz`).catch((e) => (navigation = String(e.message)));
  ok(/ERR_CERT_AUTHORITY_INVALID/.test(navigation), `that browser's own navigation to ${BASE}/healthz names it: ${navigation.split("\n")[0].slice(0, 80)}`);
} catch (e) {
  ok(false, `error: ${e.stack ?? e}`);
} finally {
  for (const b of browsers) await b.close();
  pages.close();
  if (collector.exitCode === null) collector.kill("SIGTERM");
  await new Promise((r) => (collector.exitCode === null ? collector.once("exit", r) : r()));
  if (failed) {
    try {
      console.log(readFileSync(join(dir, "collector.log"), "utf8").split("\n").slice(-30).join("\n"));
    } catch { /* no log */ }
  }
  rmSync(dir, { recursive: true, force: true });
}
console.log(`# browser first run: ${since()}`);
console.log(`chromium first run: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
