#!/usr/bin/env node
// Drives the analyst console (collector/http/console) in headless Chromium — Debian's
// /usr/bin/chromium through playwright-core from client-ts/node_modules, as
// client-ts/scripts/browser-vectors.mjs does — against a running collector. Run by
// tests/service/test_console_browser.py, which starts the collector and the fleet:
//
//  1. signs in with the admin token; a wrong token is refused;
//  2. on "Before you run" fills the form, reads the predicted interval and the curves,
//     then creates the query from that page (prints "CREATED <query id>");
//  3. watches the queries page while the fleet reports (a phase part-way), then the new
//     query's page until its result is plotted;
//  4. reads the plotted intervals (data-* numbers and SVG geometry, checked against the
//     chart's recorded scales) and prints "PLOT <json>";
//  5. opens every other query's result and the budgets page;
// taking a screenshot of each page (PNG) into ULDP_SHOTS. Prints "# ok ..." / "# FAIL ..."
// and exits non-zero on any failure.
//
// Environment: ULDP_CONSOLE_URL (https://127.0.0.1:PORT), ULDP_ADMIN_TOKEN, ULDP_SERVER_PEM
// (the collector's certificate: trusted by its public key), ULDP_SHOTS, ULDP_QUERY (the
// form's values as JSON), ULDP_OTHERS (ids of queries to show), CHROMIUM.
import { createHash, X509Certificate } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(new URL("../client-ts/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const BASE = process.env.ULDP_CONSOLE_URL;
const TOKEN = process.env.ULDP_ADMIN_TOKEN;
const SHOTS = process.env.ULDP_SHOTS;
const FORM = JSON.parse(process.env.ULDP_QUERY);
const OTHERS = JSON.parse(process.env.ULDP_OTHERS || "[]");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const LIMIT = Number(process.env.ULDP_CONSOLE_TIMEOUT_MS ?? 300_000);
let failed = 0;
const ok = (cond, what) => { console.log(`# ${cond ? "ok" : "FAIL"} ${what}`); if (!cond) failed++; return cond; };
mkdirSync(SHOTS, { recursive: true });

const spki = new X509Certificate(readFileSync(process.env.ULDP_SERVER_PEM)).publicKey.export({ type: "spki", format: "der" });
const browser = await chromium.launch({
  executablePath: CHROMIUM, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", `--ignore-certificate-errors-spki-list=${createHash("sha256").update(spki).digest("base64")}`],
});
const external = [];
const context = await browser.newContext({ viewport: { width: 1240, height: 900 }, deviceScaleFactor: 1 });
const page = await context.newPage();
page.on("pageerror", (e) => ok(false, `page error: ${e.message}`));
page.on("console", (m) => { if (m.type() === "error") console.log(`# console error: ${m.text()}`); });
page.on("request", (r) => { if (!r.url().startsWith(BASE)) external.push(r.url()); });
const shot = async (name) => { await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true }); console.log(`# screenshot ${name}.png`); };

// the numbers and geometry of every plotted interval of #result-chart (checked here)
async function plotted() {
  return page.evaluate(() => {
    const chart = document.getElementById("result-chart");
    const sc = (n) => {
      const d = chart.getAttribute(`data-${n}-domain`).split(",").map(Number), r = chart.getAttribute(`data-${n}-range`).split(",").map(Number);
      return (v) => r[0] + (v - d[0]) / (d[1] - d[0]) * (r[1] - r[0]);
    };
    const kind = chart.getAttribute("data-plot");
    const out = [];
    for (const e of chart.querySelectorAll("[data-interval]")) {
      const v = Number(e.dataset.value), lo = Number(e.dataset.low), hi = Number(e.dataset.high);
      let geometry;
      if (kind === "points") geometry = [Number(e.getAttribute("x1")) - sc("x")(lo), Number(e.getAttribute("x2")) - sc("x")(hi)];
      else if (kind === "bars") geometry = [Number(e.getAttribute("y1")) - sc("y")(lo), Number(e.getAttribute("y2")) - sc("y")(hi)];
      else geometry = [Number(e.getAttribute("y")) - sc("y")(hi), Number(e.getAttribute("y")) + Number(e.getAttribute("height")) - sc("y")(lo)];
      out.push({ component: Number(e.dataset.component), value: v, low: lo, high: hi, offset: Math.max(...geometry.map(Math.abs)) });
    }
    return { kind, intervals: out };
  });
}
async function waitResult(id) {
  await page.goto(`${BASE}/console/#/query/${encodeURIComponent(id)}`);
  await page.waitForSelector("#result-chart [data-interval]", { timeout: LIMIT, state: "attached" });
  await page.waitForTimeout(200);
}

try {
  // 1. sign in (a wrong token first)
  await page.goto(`${BASE}/console/`);
  await page.fill("#token", "not-the-admin-token-0000");
  await page.click("#signin");
  await page.waitForSelector("form.login .error:not([hidden])");
  ok((await page.textContent("form.login .error")).includes("unauthenticated"), "a wrong token is refused (unauthenticated)");
  await page.fill("#token", TOKEN);
  await page.click("#signin");
  await page.waitForSelector("#queries");
  ok(true, "signed in with the admin token");

  // 2. before you run: the form, the prediction, the curves; then create from this page
  await page.goto(`${BASE}/console/#/new`);
  await page.waitForSelector("#preview");
  for (const [k, v] of Object.entries(FORM)) {
    if (k === "kind" || k === "method") await page.selectOption(`#f-${k}`, v);
    else await page.fill(`#f-${k}`, String(v));
  }
  await page.waitForFunction((eps) => {
    const cur = document.querySelector("#preview-curves [data-current]");
    return cur && Number(cur.getAttribute("data-x")) === eps;
  }, Number(FORM.epsilon), { timeout: 60_000 });
  const half = Number(await page.getAttribute("#preview", "data-half-width"));
  const method = await page.getAttribute("#preview", "data-method");
  const curve = await page.$$eval("#preview-curves svg:first-child circle.point", (cs) => cs.map((c) => [Number(c.dataset.x), Number(c.dataset.width)]));
  ok(half > 0 && curve.length >= 6, `preview: likely ±${half.toFixed(4)} with ${method}; ${curve.length} points on the ε curve`);
  ok(curve.every((p, i) => i === 0 || p[1] <= curve[i - 1][1] + 1e-12), "preview: the width falls as ε grows");
  // the curves plot what the figure says (issue 24: within 10 %; they are the same prediction)
  const here = curve.find((p) => p[0] === Number(FORM.epsilon));
  ok(here && Math.abs(here[1] / (2 * half) - 1) <= 0.1, `preview: the ε curve at ε = ${FORM.epsilon} (${here && here[1].toFixed(4)}) is the likely width ${(2 * half).toFixed(4)}`);
  console.log(`PREVIEW ${JSON.stringify({ half_width: half, method, curve })}`);
  // issue 29 item 7: the KPI states the full width the curves plot; no axis label is cut;
  // a distribution's form has no support bound
  const kpi = await page.textContent("#likely");
  ok(kpi.startsWith((2 * half).toFixed(4)), `preview: the KPI shows the full width (${kpi}), as the curves`);
  // (4000 users: the users axis ends at 16 000, a long label at the chart's right edge)
  await page.fill("#f-users", "4000");
  await page.waitForFunction(() => [...document.querySelectorAll("#preview-curves svg:nth-child(2) circle.point")]
    .some((c) => Number(c.dataset.x) === 16000), null, { timeout: 60_000 });
  const cut = await page.$$eval("#preview-curves svg", (svgs) => svgs.flatMap((s) => [...s.querySelectorAll(".axis text")].map((t) => {
    const b = t.getBBox(), vb = s.viewBox.baseVal;
    return b.x < vb.x - 0.5 || b.x + b.width > vb.x + vb.width + 0.5 ? t.textContent : null;
  })).filter(Boolean));
  ok(cut.length === 0, `preview: no axis label is cut by its chart (${cut.join(", ") || "none"})`);
  await page.fill("#f-users", String(FORM.users));
  await page.selectOption("#f-kind", "distribution");
  ok(await page.isHidden("#f-bound") && await page.isHidden("#f-lo"), "form: no support bound or range for a distribution");
  await page.selectOption("#f-kind", FORM.kind);
  ok(await page.isVisible("#f-bound") && await page.isVisible("#f-lo"), "form: the bound and the range are back for a mean");
  await page.waitForFunction((h) => Number(document.querySelector("#preview")?.getAttribute("data-half-width")) === h, half,
    { timeout: 60_000 });
  await shot("console-preview");
  await page.click("#create");
  await page.waitForURL(/#\/query\//, { timeout: 60_000 });
  const id = decodeURIComponent(page.url().split("#/query/")[1]);
  console.log(`CREATED ${id}`);

  // 3. the queries page while the fleet reports: a phase part-way
  await page.goto(`${BASE}/console/#/queries`);
  await page.waitForFunction(() => [...document.querySelectorAll("#queries .bar > span")].some((s) => {
    const w = parseFloat(s.style.width); return w > 0 && w < 100;
  }), null, { timeout: LIMIT });
  ok(true, "queries page: a phase shown part-way while the fleet reports");
  await shot("console-queries");
  await page.goto(`${BASE}/console/#/query/${encodeURIComponent(id)}`);
  await page.waitForSelector("#phases [data-phase]", { timeout: 60_000 });
  const seen = new Set();
  const t0 = Date.now();
  while (!(await page.$("#result-chart")) && Date.now() - t0 < LIMIT) {
    for (const p of await page.$$eval("#phases [data-phase]", (ps) => ps.map((p) => `${p.dataset.phase}:${p.dataset.received}`))) seen.add(p);
    await page.waitForTimeout(150);
  }
  ok(seen.size >= 2, `query page: progress updated live (${seen.size} distinct phase counts seen)`);
  await waitResult(id);
  ok((await page.textContent("#estimand")).length > 10, "result: the estimand is stated");
  const plot = await plotted();
  ok(plot.intervals.length > 0 && plot.intervals.every((i) => i.offset < 0.01), `result: ${plot.intervals.length} interval(s) drawn where the chart's scale puts them`);
  console.log(`PLOT ${JSON.stringify({ id, method: await page.textContent("#method"), ...plot })}`);
  await shot("console-result");

  // 5. the other queries' results, and the budgets
  for (const [other, name] of OTHERS) {
    await waitResult(other);
    const p = await plotted();
    ok(p.intervals.every((i) => i.offset < 0.01), `${other}: ${p.kind} plot, ${p.intervals.length} interval(s) in place`);
    console.log(`OTHER ${JSON.stringify({ id: other, ...p })}`);
    await shot(name);
  }
  await page.goto(`${BASE}/console/#/budget`);
  await page.waitForSelector("#budget-table tbody tr");
  const budget = await page.$$eval("#budget-table tbody tr", (rs) => rs.map((r) => [r.dataset.dataset, Number(r.dataset.total)]));
  console.log(`BUDGET ${JSON.stringify(budget)}`);
  await shot("console-budgets");
  ok(external.length === 0, `nothing loaded from outside the collector (${external.length} requests)`);
} catch (e) {
  ok(false, `error: ${e.stack ?? e}`);
  await shot("console-failure").catch(() => {});
} finally {
  await browser.close();
}
console.log(`console browser: ${failed ? "FAILED" : "passed"}`);
process.exit(failed ? 1 : 0);
