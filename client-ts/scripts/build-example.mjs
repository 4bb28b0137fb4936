#!/usr/bin/env node
// Build the example web app (examples/web/: a page that embeds the device, registers a dataset,
// polls, and shows what left the device) into examples/web/dist/ with esbuild — one minified
// script, no CDN, no other dependency — and print its size (raw and gzip).
//
//   node scripts/build-example.mjs          (from client-ts/, after npm ci)
//
// The app imports the SDK as an app does (`@uldp/device/web`, ...); here those names resolve
// to this repository's sources.
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import * as esbuild from "esbuild";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const APP = here("../../examples/web/");
const out = APP + "dist/";
mkdirSync(out, { recursive: true });
await esbuild.build({
  entryPoints: [APP + "app.ts"], outfile: out + "app.js", bundle: true, minify: true, format: "iife",
  platform: "browser", target: "es2020", legalComments: "none", logLevel: "warning",
  alias: { "@uldp/device": here("../src") },
});
copyFileSync(APP + "index.html", out + "index.html");
const js = readFileSync(out + "app.js");
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;
console.log(`examples/web/dist/app.js: ${kib(js.length)} minified, ${kib(gzipSync(js, { level: 9 }).length)} gzip`);
