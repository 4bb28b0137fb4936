#!/usr/bin/env node
// Build the CommonJS half of the @uldp/device package, beside the ES modules `tsc -p
// tsconfig.json` writes to build/src/ (run that first; `npm pack` runs both, see "prepack"):
//
//   build/src/**  ES modules + .d.ts (tsc)            -> the "import" condition, "module"
//   build/cjs/**  CommonJS (esbuild, one file per     -> the "require" and "react-native"
//                 source file, the same module graph)    conditions, "main", "types", typesVersions
//
// The CommonJS files need no ES module at all: `import()` becomes `require()` (Jest, Metro and
// Node without require(esm) load them), and shuffle mode's sealing (core/hpke.js, the only
// module with dependencies: @noble/curves, @noble/ciphers, @noble/hashes, ES modules only) is
// bundled with those dependencies into one CommonJS file (their MIT notices kept). The .d.ts
// files are copied beside, under a package.json {"type": "commonjs"}, so TypeScript reads them as
// CommonJS declarations (node16/nodenext) and node10 finds them through typesVersions.
//
//   node scripts/build-package.mjs        (from client-ts/, after tsc)
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = fileURLToPath(new URL("..", import.meta.url));
const src = join(root, "src");
const esm = join(root, "build/src");
const cjs = join(root, "build/cjs");
if (!existsSync(join(esm, "core/index.d.ts"))) {
  console.error("build/src is missing: run `npx tsc -p tsconfig.json` first");
  process.exit(1);
}

const walk = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
  d.isDirectory() ? walk(join(dir, d.name)) : [join(dir, d.name)]);

rmSync(cjs, { recursive: true, force: true });
const SEAL = join(src, "core/hpke.ts");
const common = { format: "cjs", platform: "neutral", target: "es2022", logLevel: "warning",
  supported: { "dynamic-import": false } };

// 1. every source file but the sealing, one CommonJS file each (relative requires kept)
await esbuild.build({ ...common, entryPoints: walk(src).filter((f) => f.endsWith(".ts") && f !== SEAL),
  outbase: src, outdir: cjs, bundle: false });
// 2. the sealing with its @noble dependencies inlined; its relative imports stay requires of the
//    CommonJS siblings (one copy of the core)
await esbuild.build({ ...common, entryPoints: [SEAL], outfile: join(cjs, "core/hpke.js"), bundle: true,
  legalComments: "inline", mainFields: ["module", "main"], conditions: ["import"],
  plugins: [{ name: "siblings-external", setup(b) {
    b.onResolve({ filter: /^\.\.?\// }, (a) => (a.importer === SEAL ? { path: a.path, external: true } : undefined));
  } }] });
// 3. data files, declarations, and the CommonJS marker
for (const f of walk(src).filter((f) => f.endsWith(".json"))) cpSync(f, join(cjs, relative(src, f)));
for (const f of walk(esm).filter((f) => f.endsWith(".d.ts"))) {
  const to = join(cjs, relative(esm, f));
  mkdirSync(dirname(to), { recursive: true });
  cpSync(f, to);
}
writeFileSync(join(cjs, "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
console.log(`build/cjs: ${walk(cjs).filter((f) => f.endsWith(".js")).length} CommonJS modules`);
