/** Every conformance vector of conformance/v1, byte-exact (node:test). */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { checkFile, FILE_NAMES, newNotes, type VectorFile } from "./vectors/runner.js";

export const VECTOR_DIR = fileURLToPath(new URL("../../../conformance/v1/", import.meta.url));

for (const name of FILE_NAMES) {
  test(`conformance/v1/${name}.json`, async () => {
    const file = JSON.parse(readFileSync(VECTOR_DIR + name + ".json", "utf8")) as VectorFile;
    assert.equal(file.name, name);
    assert.ok(file.cases.length > 0, "a vector file without cases");
    const notes = newNotes();
    const results = await checkFile(file, notes);
    const bad = results.filter((r) => !r.ok);
    assert.deepEqual(bad, [], `${bad.length} of ${results.length} cases differ`);
    console.log(`${name}.json: ${results.length}/${results.length} cases pass`);
    if (notes.libmDisagreements.length) {
      // measured, not (yet) part of the exact contract: see conformance/README.md
      console.log(`# ${name}: platform libm differs from the Python SDK's on ${notes.libmDisagreements.length}/${notes.libmChecked} parameter cases: ${notes.libmDisagreements.join("; ")}`);
    }
  });
}
