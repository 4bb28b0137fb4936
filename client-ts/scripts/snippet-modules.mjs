#!/usr/bin/env node
// What each module of @uldp/device adds to the README's web snippet: the snippet (README.md,
// "Devices in web and mobile apps") bundled as scripts/package-check.mjs bundles it (esbuild's
// default minify, code splitting, ES2022, browser), but against this checkout's build/src (run
// `npx tsc -p tsconfig.json` first) instead of the packed tarball; every chunk a device without
// a shuffler loads, static or dynamic; per module its minified bytes in those chunks (esbuild's
// metafile) and, as a rough guide to its gzip share, its own minified text gzipped alone.
//
//   node scripts/snippet-modules.mjs            (from client-ts/; ~2 s; BYTES=1 also prints the
//                                                exact totals: minified bytes, gzip bytes)
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import * as esbuild from "esbuild";
import { readmeSnippet, withoutOnDemand } from "./bundle-reach.mjs";

const here = fileURLToPath(new URL("..", import.meta.url));
const app = mkdtempSync(join(tmpdir(), "uldp-snippet-"));
try {
  mkdirSync(join(app, "node_modules/@uldp"), { recursive: true });
  symlinkSync(here, join(app, "node_modules/@uldp/device"));
  const readme = readFileSync(join(here, "../README.md"), "utf8");
  const snippet = readmeSnippet(readme);
  writeFileSync(join(app, "snippet.ts"), "declare const mySamples: number[];\n" + snippet);
  const r = await esbuild.build({ entryPoints: [join(app, "snippet.ts")], absWorkingDir: app, bundle: true, minify: true,
    format: "esm", splitting: true, outdir: join(app, "dist"), platform: "browser", target: "es2022",
    legalComments: "none", metafile: true, logLevel: "error" });
  const outputs = r.metafile.outputs;
  const start = withoutOnDemand(outputs);
  const per = new Map();
  for (const o of start) {
    for (const [i, v] of Object.entries(outputs[o].inputs)) {
      const name = i.replace(/^.*build\/src\//, "");
      per.set(name, (per.get(name) ?? 0) + v.bytesInOutput);
    }
  }
  const rows = [];
  for (const [name, min] of per) {
    let gz = "";
    if (name.endsWith(".js") && min > 0) {
      const t = await esbuild.transform(readFileSync(join(here, "build/src", name), "utf8"), { minify: true, target: "es2022" });
      gz = gzipSync(Buffer.from(t.code), { level: 9 }).length;
    }
    rows.push([name, min, gz]);
  }
  rows.sort((a, b) => b[1] - a[1]);
  console.log("| module | minified bytes in the snippet | its minified text gzipped alone |\n|---|---:|---:|");
  for (const [name, min, gz] of rows) if (min > 0) console.log(`| ${name} | ${min} | ${gz} |`);
  const bytes = [...start].map((f) => readFileSync(join(app, f)));
  const min = bytes.reduce((n, b) => n + b.length, 0);
  const gz = bytes.reduce((n, b) => n + gzipSync(b, { level: 9 }).length, 0);
  if (process.env.BYTES) console.log(min, gz);
  console.log(`| **total** (${start.size} files, each gzipped as served) | ${(min / 1024).toFixed(1)} KiB | ${(gz / 1024).toFixed(1)} KiB gzip |`);
} finally {
  rmSync(app, { recursive: true, force: true });
}
