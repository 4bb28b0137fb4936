#!/usr/bin/env node
// What `npm test` runs first (the "pretest" script): compile src/ and test/ into build/ with
// tsc, then delete every compiled file of build/src and build/test whose source is gone (a
// renamed or removed test would otherwise still run from its stale .js), so `npm test` always
// runs the current sources. ci.sh compiles into a fresh build/ itself.
//
//   node scripts/build-tests.mjs [--prune-only DIR]   (DIR: a package root holding src/, test/, build/)
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const argv = process.argv.slice(2);
const pruneOnly = argv[0] === "--prune-only";
const root = pruneOnly ? argv[1] : fileURLToPath(new URL("..", import.meta.url));

if (!pruneOnly) {
  const tsc = join(root, "node_modules/typescript/bin/tsc");
  execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.json")], { stdio: "inherit" });
}

const walk = (dir) => (existsSync(dir) ? readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
  d.isDirectory() ? walk(join(dir, d.name)) : [join(dir, d.name)]) : []);
// build/<part>/x.js, .js.map, .d.ts, .d.ts.map come from <part>/x.ts
const sourceOf = (f) => f.replace(/\.(js\.map|js|d\.ts\.map|d\.ts)$/, ".ts");
let removed = 0;
for (const part of ["src", "test"]) {
  for (const f of walk(join(root, "build", part))) {
    const rel = relative(join(root, "build"), f);
    if (!/\.(js|js\.map|d\.ts|d\.ts\.map)$/.test(rel)) continue;
    if (existsSync(join(root, sourceOf(rel)))) continue;
    rmSync(f);
    removed++;
  }
}
if (removed) console.log(`build/: removed ${removed} files whose source is gone`);
