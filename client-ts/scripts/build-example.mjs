#!/usr/bin/env node
// Build the example web app (examples/web/: a page that embeds the device, registers a dataset,
// polls, and shows what left the device) into examples/web/dist/ with esbuild — ES modules, no
// CDN, no other dependency — and print its size (raw and gzip): what a page without a shuffler
// loads over Connect (every chunk but those loaded on demand, each gzipped as served), and
// those: shuffle mode's sealing, a chunk of its own that a page loads only when a task asks for a
// sealed report, and the gRPC-Web framing, loaded only when the page picks gRPC-Web.
//
//   node scripts/build-example.mjs          (from client-ts/, after npm ci)
//
// The app imports the SDK as an app does (`@uldp/device/web`, ...); here those names resolve
// to this repository's sources.
import { copyFileSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import * as esbuild from "esbuild";
import { withoutOnDemand } from "./bundle-reach.mjs";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const APP = here("../../examples/web/");
const out = APP + "dist/";
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const r = await esbuild.build({
  entryPoints: [APP + "app.ts"], outdir: out, bundle: true, minify: true, format: "esm", splitting: true,
  chunkNames: "chunk-[hash]", platform: "browser", target: "es2022", legalComments: "none", logLevel: "warning",
  metafile: true, alias: { "@uldp/device": here("../src") },
});
copyFileSync(APP + "index.html", out + "index.html");
const outputs = r.metafile.outputs;
// what a device without a shuffler loads over Connect: every chunk reachable from the entry,
// static or dynamic, but shuffle mode's sealing (the chunk holding core/hpke.ts) and the gRPC-Web
// framing (web/grpcWeb.ts, loaded only when the page picks gRPC-Web)
const start = withoutOnDemand(outputs);
const holding = (re) => Object.keys(outputs).filter((o) => !start.has(o) && Object.keys(outputs[o].inputs).some((i) => re.test(i)));
const size = (files) => files.map((f) => readFileSync(f)).reduce(([m, g], b) => [m + b.length, g + gzipSync(b, { level: 9 }).length], [0, 0]);
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;
const [m, g] = size([...start]);
const [lm, lg] = size(holding(/core\/hpke\.ts$/));
const [wm, wg] = size(holding(/web\/grpcWeb\.ts$/));
console.log(`examples/web/dist/: ${kib(m)} minified, ${kib(g)} gzip without a shuffler over Connect; on demand: `
  + `the sealing (shuffle mode only) ${kib(lm)} / ${kib(lg)}, the gRPC-Web framing (gRPC-Web only) ${kib(wm)} / ${kib(wg)}`);
