/**
 * Pay for what you use (src/core/registry.ts): an app build answers only the kinds it imports.
 * This file imports the lean modules and `kinds/mean` only — never src/core/index.ts, which
 * registers every kind — and `node --test` runs each test file in a process of its own, so here
 * the registry holds `mean` alone: the README web snippet's build. Its mean reports are the
 * conformance vectors byte for byte; a task of any other kind, or of the comparison methods
 * baseline-a / baseline-b, is declined with the stable code `unregistered` and charges nothing; a Device with no kind at all refuses to open; and the
 * full entry registers every kind (what the vectors and audits run against).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { taskDigest } from "../src/core/check.js";
import { hexToBytes } from "../src/core/encoding.js";
import { RandomSource, seededSource } from "../src/core/random.js";
import { KINDS } from "../src/core/registry.js";
import { computeReport } from "../src/core/report.js";
import { KIND_NAMES, parseTask, TaskRefused } from "../src/core/task.js";
import { Device, type DeviceTransportLike, type ReportMessage } from "../src/device/index.js";
import "../src/kinds/mean.js";
import { MemoryStore } from "../src/ledger/index.js";

const VECTORS = fileURLToPath(new URL("../../../conformance/v1/", import.meta.url));
const BUILD_SRC = fileURLToPath(new URL("../src/", import.meta.url));
/* eslint-disable @typescript-eslint/no-explicit-any */
const cases: Record<string, any>[] = JSON.parse(readFileSync(VECTORS + "tasks.json", "utf8")).cases;
const kindOfCase = (c: Record<string, any>): string => JSON.parse(c.task).kind;
const dec = (v: any): any => (Array.isArray(v) ? v.map(dec) : v === "nan" ? NaN : v === "inf" ? Infinity : v === "-inf" ? -Infinity : v);

test("this process registers only kind mean (the README snippet's build)", () => {
  assert.deepEqual(Object.keys(KINDS), ["mean"]);
});

const methodOfCase = (c: Record<string, any>): string => JSON.parse(c.task).method;
const isBaseline = (c: Record<string, any>): boolean => methodOfCase(c).startsWith("baseline-");

test("with kinds/mean alone, every mean vector's report is byte-exact (but the baselines')", () => {
  const mean = cases.filter((c) => kindOfCase(c) === "mean" && !isBaseline(c));
  assert.ok(mean.length > 100, `${mean.length} mean vectors`);
  for (const c of mean) {
    const task = parseTask(c.task);
    assert.equal(task.units.toString(), c.units, c.name);
    const rng = RandomSource.keyed(hexToBytes(c.key));
    const report = computeReport(task, dec(c.samples), c.labels === null ? null : dec(c.labels), rng);
    assert.deepEqual(report.map(Number), c.report, c.name);
    assert.equal(rng.words(1)[0].toString(), c.next_word, c.name);
  }
});

test("every other kind's task, and a baseline method's, is refused with code unregistered", () => {
  const others = cases.filter((c) => kindOfCase(c) !== "mean");
  assert.deepEqual(new Set(others.map(kindOfCase)), new Set(KIND_NAMES.filter((k) => k !== "mean")));
  for (const c of others) {
    assert.throws(() => parseTask(c.task), (e: unknown) => e instanceof TaskRefused && e.code === "unregistered"
      && e.message.includes(`kind ${kindOfCase(c)} is not registered`), c.name);
  }
  // the comparison baselines need @uldp/device/methods/baselines
  const baselines = cases.filter((c) => kindOfCase(c) === "mean" && isBaseline(c));
  assert.deepEqual(new Set(baselines.map(methodOfCase)), new Set(["baseline-a", "baseline-b"]));
  for (const c of baselines) {
    assert.throws(() => parseTask(c.task), (e: unknown) => e instanceof TaskRefused && e.code === "unregistered"
      && e.message.includes(`method ${methodOfCase(c)} is not registered`), c.name);
  }
  // an unknown kind keeps its own code (the check before)
  const unknown = JSON.parse(cases[0].task);
  unknown.kind = "median";
  assert.throws(() => parseTask(JSON.stringify(unknown)), (e: unknown) => e instanceof TaskRefused && e.code === "kind");
});

class Fake implements DeviceTransportLike {
  tasks: { query_id: string; phase: number; dataset: string; task_json: string; task_digest: string; report_length: number }[] = [];
  declines: { queryId: string; reason: string }[] = [];
  reports: ReportMessage[] = [];
  async enroll() {
    return { device_id: "d-1", token: "tok", expires_at_ms: String(Date.now() + 86_400_000) };
  }
  async getTasks() {
    return { tasks: this.tasks, waiting: [], retry_after_ms: 0 };
  }
  async declineTask(_token: string, d: { queryId: string; reason: string }) {
    this.declines.push({ queryId: d.queryId, reason: d.reason });
    return { duplicate: false };
  }
  async submitReport(_token: string, report: ReportMessage) {
    this.reports.push(report);
    return { duplicate: false, received_at_ms: "1" };
  }
}

test("a Device of this build answers a mean task and declines a distribution task (unregistered), charging nothing for it", async () => {
  const fake = new Fake();
  const d = await Device.open({ sendDelay: null, transport: fake, store: new MemoryStore(), budget: 10,
    simulation: { rng: seededSource("registry-test") } });
  d.addDataset("steps", [0.5, 0.25]);
  d.addDataset("colour", [1, 2, 2], null, { values: "categorical", alphabet: 4 });
  const msg = (queryId: string, dataset: string, o: Record<string, unknown>) => {
    const t: Record<string, unknown> = {
      bins: [], bound: 1.0, components: [0], dim: 1, eps_c: 1.0, epsilon: 1.0, extra: {}, frame_kind: "gaussian",
      frame_seed: 0, intervals: [[-1.0, 1.0]], kashin_delta: 0.5, kashin_level: 4.0, kind: "mean", m_ref: 1,
      method: "ssl", query_id: queryId, schema: "uldp.task/2", stage: 0, stat_bound: null, virtual_eps: [],
      virtual_groups: [], virtual_offset: 0, ...o,
    };
    const text = JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1))));
    return { query_id: queryId, phase: 1, dataset, task_json: text, task_digest: taskDigest(text), report_length: 1 };
  };
  fake.tasks = [msg("q-mean", "steps", {}), msg("q-dist", "colour", {
    kind: "distribution", dim: 4, bound: null, components: [0, 1, 2, 3], intervals: [[-1, 1], [-1, 1], [-1, 1], [-1, 1]],
    eps_c: 0.25 })];
  const r = await d.poll();
  assert.deepEqual(r.submitted, ["q-mean"]);
  assert.deepEqual(r.refused.map((x) => [x.queryId, x.code]), [["q-dist", "unregistered"]]);
  assert.deepEqual(fake.declines, [{ queryId: "q-dist", reason: "unregistered" }]);
  assert.equal(d.ledger.get("q-dist"), undefined);
  assert.equal(d.ledger.spentUnits(), 1n << 24n);
});

test("a Device with no kind registered refuses to open, naming the import; the full entry registers every kind", () => {
  const run = (code: string): string => execFileSync(process.execPath, ["--input-type=module", "-e", code],
    { encoding: "utf8", cwd: BUILD_SRC });
  const none = run(`
    const { Device } = await import("./device/index.js");
    const { MemoryStore } = await import("./ledger/index.js");
    try { await Device.open({ transport: {}, store: new MemoryStore(), budget: 1 }); console.log("opened"); }
    catch (e) { console.log(e.message); }`);
  assert.match(none, /no query kind is registered: import the app.s kinds \(e\.g\. "@uldp\/device\/kinds\/mean", or "@uldp\/device\/kinds\/all"\)/);
  const full = run(`const core = await import("./core/index.js"); console.log(JSON.stringify(Object.keys(core.KINDS).sort()));`);
  assert.deepEqual(JSON.parse(full), [...KIND_NAMES].sort());
  const node = run(`await import("./node/index.js"); const r = await import("./core/registry.js");
    console.log(JSON.stringify([Object.keys(r.KINDS).sort(), Object.keys(r.METHODS).sort()]));`);
  assert.deepEqual(JSON.parse(node), [[...KIND_NAMES].sort(), ["baseline-a", "baseline-b", "hadamard", "oracle"]]);
});
