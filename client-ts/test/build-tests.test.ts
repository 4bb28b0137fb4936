/**
 * `npm test` runs the current sources (issue 29: it used to run a stale build/ without
 * compiling): the "pretest" script compiles with tsc and prunes every compiled file whose source
 * is gone (scripts/build-tests.mjs), checked here on a scratch package root.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

test("npm test compiles first: pretest runs scripts/build-tests.mjs, which runs tsc", () => {
  const scripts = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).scripts;
  assert.equal(scripts.pretest, "node scripts/build-tests.mjs");
  assert.match(scripts.test, /^node --test build\/test\//);
  assert.match(readFileSync(join(pkg, "scripts/build-tests.mjs"), "utf8"), /typescript\/bin\/tsc/);
});

test("the compiled files of removed sources are pruned, the others kept", () => {
  const root = mkdtempSync(join(tmpdir(), "uldp-build-"));
  try {
    const files = ["src/a.ts", "test/t.test.ts", "build/src/a.js", "build/src/a.d.ts", "build/src/gone.js",
      "build/src/gone.d.ts", "build/src/gone.js.map", "build/test/t.test.js", "build/test/old.test.js",
      "build/test/old.test.js.map", "build/src/wire/data.json"];
    for (const f of files) {
      mkdirSync(dirname(join(root, f)), { recursive: true });
      writeFileSync(join(root, f), "");
    }
    execFileSync(process.execPath, [join(pkg, "scripts/build-tests.mjs"), "--prune-only", root], { stdio: "pipe" });
    const left = files.filter((f) => existsSync(join(root, f)));
    assert.deepEqual(left, ["src/a.ts", "test/t.test.ts", "build/src/a.js", "build/src/a.d.ts", "build/test/t.test.js",
      "build/src/wire/data.json"]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
