#!/usr/bin/env node
// Run the conformance vectors in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; install it with scripts/ensure-chromium.sh). The core and the vector
// runner are bundled for the browser with esbuild (platform "browser": a Node-only import
// in src/core fails the bundle), served from 127.0.0.1 with conformance/v1/*.json, and run
// in the page. Prints "N passed, M failed" and exits non-zero on any failure.
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { chromium } from "playwright-core";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const VECTORS = here("../../conformance/v1/");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const t0 = Date.now();

const built = await esbuild.build({
  entryPoints: [here("../test/browser/entry.ts")],
  bundle: true, platform: "browser", format: "iife", target: "es2022", write: false,
  logLevel: "silent",
});
const bundle = built.outputFiles[0].text;
const page = `<!doctype html><meta charset="utf-8"><title>uldp vectors</title><script src="/bundle.js"></script>`;

const server = createServer(async (req, res) => {
  try {
    if (req.url === "/") {
      res.writeHead(200, { "content-type": "text/html" }).end(page);
    } else if (req.url === "/bundle.js") {
      res.writeHead(200, { "content-type": "text/javascript" }).end(bundle);
    } else if (/^\/vectors\/[a-z0-9_]+\.json$/.test(req.url ?? "")) {
      const body = await readFile(VECTORS + req.url.slice("/vectors/".length));
      res.writeHead(200, { "content-type": "application/json" }).end(body);
    } else {
      res.writeHead(404).end();
    }
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const url = `http://127.0.0.1:${server.address().port}/`;

let result;
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const tab = await browser.newPage();
  tab.on("pageerror", (e) => console.error("page error:", e.message));
  await tab.goto(url);
  await tab.waitForFunction(() => globalThis.__uldpResult !== undefined, null, { timeout: 120_000 });
  result = await tab.evaluate(() => globalThis.__uldpResult);
} finally {
  await browser.close();
  server.close();
}

console.log(`# browser: ${result.userAgent}`);
console.log(`# in-page vector time ${result.ms.toFixed(0)} ms, total ${Date.now() - t0} ms`);
for (const [file, [ok, all]] of Object.entries(result.perFile ?? {})) console.log(`# ${file}.json: ${ok}/${all} cases pass`);
for (const l of result.libm) console.log(`# libm differs from the Python SDK's (not contract): ${l}`);
for (const f of result.failures) console.log(`# FAIL ${f}`);
if (result.error) console.log(`# ERROR ${result.error}`);
let failed = result.failed;
if (result.hasNodeProcess) { console.log("# FAIL: the page sees a Node `process` object"); failed++; }
if (result.secureWords !== 4) { console.log("# FAIL: RandomSource.secure() did not work in the page"); failed++; }
console.log(`chromium: ${result.passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
