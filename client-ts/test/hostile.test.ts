/**
 * Hostile stage-I grids and failing computations on the TS Device (issue 17, items 1 and 3;
 * Python: tests/test_device_hostile.py): a grid whose B bins do not cover [-D, D] is refused
 * (code param) before any charge, whatever the data; the backstop report is computed before the
 * charge, so a task whose backstop fails is refused and one whose data fail sends it; a charged
 * entry that cannot be recomputed never stops the other tasks; no data is an empty dataset.
 */
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import {
  alg1Params, binIndex, fallbacks, JInt, JsonError, KINDS, parseJson, parseTask, RandomSource, seededSource, stage1Report, statistics,
  taskDigest, TaskRefused, usable,
} from "../src/core/index.js";
import { Device, type DeviceTransportLike, type ReportMessage, type TaskMessage } from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";

class Recorder implements DeviceTransportLike {
  calls: string[] = [];
  reports: ReportMessage[] = [];
  tasks: TaskMessage[] = [];
  async enroll() {
    this.calls.push("Enroll");
    return { device_id: "d-1", token: "tok", expires_at_ms: String(Date.now() + 86_400_000) };
  }
  async getTasks() {
    this.calls.push("GetTasks");
    return { tasks: this.tasks, waiting: [], retry_after_ms: 0 };
  }
  async submitReport(_token: string, report: ReportMessage) {
    this.calls.push(`SubmitReport:${report.queryId}:${report.values.length}`);
    this.reports.push(report);
    return { duplicate: false, received_at_ms: "1" };
  }
}

const BASE: Record<string, unknown> = {
  bins: [[1.0, 0.5, 4]], bound: 1.0, components: [0], dim: 1, eps_c: 1.0, epsilon: 1.0, extra: {},
  frame_kind: "gaussian", frame_seed: 0, intervals: [], kashin_delta: 0.5, kashin_level: 4.0, kind: "mean",
  m_ref: 1, method: "two-stage", query_id: "q", schema: "uldp.task/2", stage: 1, stat_bound: null,
  virtual_eps: [], virtual_groups: [], virtual_offset: 0,
};
const HOSTILE = { bins: [[1.0, 2 ** -63, 4]] };

function text(o: Record<string, unknown> = {}, queryId = "q"): string {
  const t = { ...BASE, ...o, query_id: queryId };
  return JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1))));
}

function msg(queryId: string, o: Record<string, unknown> = {}, length = 4): TaskMessage {
  const tt = text(o, queryId);
  return { query_id: queryId, phase: 1, dataset: "data", task_json: tt, task_digest: taskDigest(tt), report_length: length };
}

const open = (fake: Recorder, store = new MemoryStore()): Promise<Device> =>
  Device.open({ sendDelay: null, transport: fake, store, budget: 100, simulation: { rng: seededSource("hostile") } });

const saved = { userStats: KINDS.mean.userStats };
afterEach(() => Object.assign(KINDS.mean, saved));

test("a grid whose bins do not cover the support is refused (param)", () => {
  for (const bins of [[[1.0, 2 ** -63, 4]], [[1.0, 0.5, 5]], [[1.0, 0.5, 3]], [[1.0, 1e-300, 1]], [[1e308, 1e-9, 4]]]) {
    assert.throws(() => parseTask(text({ bins })), (e: unknown) => e instanceof TaskRefused && e.code === "param");
  }
  assert.equal(parseTask(text({ bins: [[1.0, 2 ** -15, 65536]] })).reportLength, 65536);
});

test("the bin index is capped before any integer conversion", () => {
  const p = alg1Params(1.0, 2 ** -63, 0, 4);
  assert.deepEqual([0.5, 1.0, 1e308, -1.0, 0.0, -0.75].map((y) => binIndex(y, p)), [4, 4, 4, 1, 4, 4]);
  assert.equal(stage1Report([0.5], [p], 1.0, seededSource(1)).length, 4);
});

test("whether the device reports does not depend on its data", async () => {
  const outcomes = [];
  for (const values of [[-0.5, -0.25], [0.5, 0.25], [], undefined]) {
    const fake = new Recorder();
    const d = await open(fake);
    d.addDataset("data", values);
    fake.tasks = [msg("qh", HOSTILE), msg("qb")];
    const r = await d.poll();
    fake.tasks = [msg("qh", HOSTILE)];
    const r2 = await d.poll();
    outcomes.push([r.refused.map((x) => `${x.queryId}:${x.code}`), r.submitted, r.failed, r2.refused.length,
      fake.calls, d.ledger.get("qh")]);
  }
  assert.deepEqual(outcomes[0], [["qh:param"], ["qb"], [], 1,
    ["Enroll", "GetTasks", "SubmitReport:qb:4", "GetTasks"], undefined]);
  for (const o of outcomes) assert.deepEqual(o, outcomes[0]);
});

test("a failed computation sends the precomputed backstop; the others go on", async () => {
  KINDS.mean.userStats = (t, rows, valid) => { // a bug on data only
    if (rows.length) throw new Error("a bug in the statistic");
    return saved.userStats!(t, rows, valid);
  };
  const fake = new Recorder();
  const d = await open(fake);
  d.addDataset("data", [0.5, 0.25]);
  fake.tasks = [msg("q1"), msg("q2")];
  const before = fallbacks.count;
  const r = await d.poll();
  assert.deepEqual(r.submitted, ["q1", "q2"]);
  assert.equal(fallbacks.count, before + 2);
  assert.equal(d.ledger.get("q1")?.state, "acknowledged");
});

test("a task whose backstop fails is refused before the charge, for every dataset", async () => {
  KINDS.mean.userStats = () => { throw new Error("a bug on every input"); };
  const outcomes = [];
  for (const values of [[0.5], [-0.5], []]) {
    const fake = new Recorder();
    const d = await open(fake);
    d.addDataset("data", values);
    fake.tasks = [msg("q1"), msg("q2")];
    const r = await d.poll();
    outcomes.push([r.refused.map((x) => `${x.queryId}:${x.code}`), r.submitted, fake.reports.length, d.ledger.spentUnits()]);
  }
  for (const o of outcomes) assert.deepEqual(o, [["q1:param", "q2:param"], [], 0, 0n]);
});

test("a charged entry that cannot be recomputed never stops the other tasks", async () => {
  const store = new MemoryStore();
  const fake = new Recorder();
  const d = await open(fake, store);
  d.addDataset("data", [0.5]);
  const bad = msg("qh", HOSTILE);
  await d.ledger.reserve("qh", bad.task_digest, 1, 1n << 24n, JSON.stringify(bad));
  for (const q of ["q1", "q2"]) {
    fake.tasks = [msg(q)];
    const r = await d.poll();
    assert.deepEqual(r.submitted, [q]);
    assert.deepEqual(r.failed.map((f) => f.queryId), ["qh"]);
  }
  assert.equal(d.ledger.get("qh")?.state, "reserved");
});

test("no data registers an empty dataset (undefined and null)", async () => {
  const sent = [];
  for (const samples of [undefined, null, []]) {
    const fake = new Recorder();
    const d = await open(fake);
    const schema = d.addDataset("data", samples);
    assert.equal(schema.name, "data");
    assert.deepEqual(d.datasets, ["data"]);
    fake.tasks = [msg("q")];
    const r = await d.poll();
    sent.push([r.submitted, fake.calls, fake.reports.map((x) => x.values)]);
  }
  assert.deepEqual(sent[0], sent[2]);
  assert.deepEqual(sent[1], sent[2]);
});

/** A method-oracle task text over a distribution of 5 categories. */
function oracleText(o: Record<string, unknown> = {}, queryId = "q"): string {
  return text({ kind: "distribution", dim: 5, bound: null, method: "oracle", stage: 0, bins: [], eps_c: 0.5,
    components: [0, 1, 2, 3, 4, 5, 6, 7], mechanism: "grr", records: 2, ...o }, queryId);
}

test("hostile mechanism parameters are refused with stable codes (§14.1), never a crash", () => {
  const ssl = { method: "ssl", stage: 0, bins: [], intervals: [[-1.0, 1.0]] };
  const bad: [string, string][] = [
    [text({ mechanism: "bogus" }), "method"], [text({ mechanism: "__proto__" }), "method"],
    [text({ mechanism: "toString" }), "method"], [text({ mechanism: "LAPLACE" }), "method"], [text({ mechanism: "" }), "method"],
    [text({ mechanism: 3 }), "field"], [text({ mechanism: null }), "field"], [text({ mechanism: ["grr"] }), "field"],
    [text({ mechanism: "duchi" }), "param"], [text({ ...ssl, mechanism: "oue" }), "param"],
    [text({ ...ssl, records: 2 }), "param"], [text({ ...ssl, records: 1 }).replace('"records":1', '"records":1.0'), "field"], [text({ ...ssl, records: true }), "field"],
    [oracleText({ records: 0 }), "param"], [oracleText({ records: -1 }), "param"], [oracleText({ records: 1025 }), "limit"],
    [oracleText({ records: 2 ** 70 }).replace("1.1805916207174113e+21", "1180591620717411303424"), "limit"],
    [oracleText({ mechanism: "hm" }), "param"], [oracleText({ components: [0] }), "param"],
    [oracleText({ components: [1, 0, 2, 3, 4, 5, 6, 7] }), "param"], [oracleText({ kind: "mean", dim: 1, components: [0] }), "param"],
    [oracleText({ records: 2, eps_c: 0.75 }), "over-budget"],
    [oracleText({ intervals: [[0.0, 1.0]] }), "param"], [oracleText({ bins: [[1.0, 0.5, 4]] }), "param"],
    [oracleText({ mechanism: "oue", dim: 65536, components: Array.from({ length: 65536 }, (_, c) => c), records: 5, epsilon: 4.0 }), "limit"],
    [text({ method: "baseline-a", stage: 0, bins: [], intervals: [[-1.0, 1.0]], virtual_groups: [[0]], virtual_eps: [1.0],
      mechanism: "pm" }), "param"],
    [text({ method: "baseline-a", stage: 0, bins: [], intervals: [[-1.0, 1.0]], virtual_groups: [[0]], virtual_eps: [1.0],
      mechanism: "pm", m_ref: 2 ** 21 }), "limit"],
  ];
  for (const [tt, code] of bad) {
    assert.throws(() => parseTask(tt), (e: unknown) => e instanceof TaskRefused && e.code === code, `${code}: ${tt}`);
  }
  // accepted: an explicit default, and records within the budget
  assert.equal(parseTask(text({ ...ssl, mechanism: "laplace" })).mechanism, "laplace");
  const t = parseTask(oracleText({ records: 2, eps_c: 0.5 }));
  assert.deepEqual([t.units, t.reportLength, t.records], [1n << 24n, 2, 2]);
});

test("an oracle task: charged before the data, one report of the same shape for every dataset", async () => {
  const outcomes = [];
  for (const values of [[], [0, 1, 4], [NaN, 7, -1, 0.5], [2], undefined]) {
    const fake = new Recorder();
    const d = await open(fake);
    d.addDataset("data", values, undefined, { values: "categorical", alphabet: 5 });
    const good = oracleText({}, "qo");
    const hostile = oracleText({ mechanism: "pm" }, "qx");
    fake.tasks = [hostile, good].map((tt, i) => ({ query_id: i ? "qo" : "qx", phase: 1, dataset: "data", task_json: tt,
      task_digest: taskDigest(tt), report_length: 2 }));
    const r = await d.poll();
    outcomes.push([r.refused.map((x) => `${x.queryId}:${x.code}`), r.submitted, fake.calls, fake.reports.map((x) => x.values.length),
      d.ledger.spentUnits(), d.ledger.get("qx")]);
    assert.ok(fake.reports[0].values.every((v) => v >= 0n && v < 5n), "a grr report outside the categories");
  }
  assert.deepEqual(outcomes[0], [["qx:param"], ["qo"], ["Enroll", "GetTasks", "SubmitReport:qo:2"], [2], 1n << 24n, undefined]);
  for (const o of outcomes) assert.deepEqual(o, outcomes[0]);
});

// ---- public ranges [lo, hi] (issue 29; Python: tests/test_device_hostile.py) -----------------
const RANGED = { method: "ssl", stage: 0, bins: [], bound: 60, range: [0, 120], intervals: [[-60, 60]] };
const HOSTILE_RANGES: [number[], number | null][] = [
  [[5, 5], 0], [[5, 5], 1], // lo = hi
  [[120, 0], 60], // inverted
  [[-1.7e308, 1.7e308], 1.7e308], // wider than the largest double
  [[0, 5e-324], 5e-324], // tiny: hi/2 - lo/2 is 0
  [[0, 120], 60.000000000000014], // bound off by a few ulps
  [[0, 120], null], // no bound
];

test("hostile ranges are refused before any charge, whatever the data; clamping is counted locally", async () => {
  const outcomes = [];
  for (const values of [[30, 150], [-1e308, NaN], []]) {
    const fake = new Recorder();
    const logs: string[] = [];
    const d = await Device.open({ transport: fake, store: new MemoryStore(), budget: 100,
      simulation: { rng: seededSource("hostile-range") }, log: (l) => logs.push(l) });
    d.addDataset("data", values);
    fake.tasks = [...HOSTILE_RANGES.map(([range, bound], i) => msg(`h${i}`, { ...RANGED, range, bound }, 1)), msg("ok", RANGED, 1)];
    const r = await d.poll();
    outcomes.push([r.refused.map((x) => `${x.queryId}:${x.code}`), r.submitted, d.ledger.spentUnits(),
      HOSTILE_RANGES.map((_, i) => d.ledger.get(`h${i}`))]);
    const clamped = values.filter((v) => Number.isFinite(v) && (v < 0 || v > 120)).length;
    assert.equal(d.clamped.get("ok"), clamped);
    assert.equal(logs.length, clamped ? 1 : 0);
    assert.ok(!JSON.stringify(fake.reports, (_k, v) => (typeof v === "bigint" ? String(v) : v)).includes("clamp"));
  }
  for (const o of outcomes) {
    assert.deepEqual(o, [HOSTILE_RANGES.map((_, i) => `h${i}:param`), ["ok"], 1n << 24n, HOSTILE_RANGES.map(() => undefined)]);
  }
});

// ---- grouped means (kind mean-by, issue 29; Python: tests/test_groupby.py) ---------------------
test("a grouped task: the group comes from the by dataset; without it the task is declined before any charge", async () => {
  const GROUPED = { kind: "mean-by", method: "ssl", stage: 0, bins: [], dim: 3, by: "country", bound: 60, range: [0, 120],
    epsilon: 1, eps_c: 1 / 6, components: [0, 1, 2, 3, 4, 5],
    intervals: [[-0.5, 0.5], [-60, 60], [-0.5, 0.5], [-60, 60], [-0.5, 0.5], [-60, 60]] };
  const outcomes = [];
  for (const country of [[2, 2, 0], undefined]) {
    const fake = new Recorder();
    const d = await open(fake);
    d.addDataset("data", [150, 30, 60]);
    if (country) d.addDataset("country", country, undefined, { values: "categorical" });
    fake.tasks = [msg("qg", GROUPED, 6)];
    const r = await d.poll();
    outcomes.push([r.refused.map((x) => `${x.queryId}:${x.code}`), r.submitted, fake.reports.length, d.ledger.spentUnits() > 0n,
      d.clamped.get("qg")]);
  }
  assert.deepEqual(outcomes, [[[], ["qg"], 1, true, 1], [["qg:dataset"], [], 0, false, undefined]]);
  const t = parseTask(text(GROUPED));
  const rows = [[150, 2], [30, 2], [60, 2]].map((r) => Float64Array.from(r));
  assert.deepEqual(statistics(t, KINDS["mean-by"], rows, usable(t, KINDS["mean-by"], rows)), [-0.5, 0, -0.5, 0, 0.5, 10]);
});

test("the task JSON parser: huge strings and arrays parse (no regex recursion), depth and digits are limited", () => {
  const long = "a\\n".repeat(5_000_000); // 15 MB of text, 5 M escapes
  assert.equal((parseJson(`{"k": "${long}"}`) as Map<string, unknown>).get("k"), "a\n".repeat(5_000_000));
  assert.equal((parseJson(`[${"1.5,".repeat(100_000)}7]`) as unknown[]).length, 100_001);
  assert.ok((parseJson(`[${"9".repeat(4300)}]`) as JInt[])[0] instanceof JInt);
  const bads = [`[${"9".repeat(4301)}]`, "[".repeat(65) + "]".repeat(65), '"\\x"', '"\u0001"', '"abc', "[1,]", "{\"a\" 1}", "01", "1 2"];
  for (const bad of bads) {
    assert.throws(() => parseJson(bad), JsonError, bad.slice(0, 20));
  }
  assert.deepEqual(parseJson(" [-Infinity, NaN, -0, 1e400, {\"a\": 1, \"a\": 2}] ") as unknown[],
    [-Infinity, NaN, new JInt(0n), Infinity, new Map([["a", new JInt(2n)]])]);
});
