/**
 * The TS Device against a scripted in-memory transport: the ledger is charged (reserved)
 * before the data are touched and the report persisted (pending) before the first send; a
 * lost acknowledgement is followed by a resend of the identical values; UNAUTHENTICATED leads
 * to exactly one re-enrolment with the previous token; refusals charge nothing and carry the
 * stable code; `simulated` is set only in simulation mode; a crash between charge and store
 * is recovered; and the messages a device sends do not depend on its data (totality).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { RandomSource, seededSource, taskDigest } from "../src/core/index.js";
import {
  Device, type DeviceTransportLike, runDevice, type ReportMessage, Status, type TaskMessage,
} from "../src/device/index.js";
import { type LedgerChange, type LedgerEntry, MemoryStore } from "../src/ledger/index.js";

class Fake implements DeviceTransportLike {
  calls: string[] = [];
  reports: ReportMessage[] = [];
  tasks: TaskMessage[] = [];
  submitErrors: number[] = []; // status codes to throw on the next submits
  tokens = 0;
  enrollReqs: { previousToken?: string; attestation?: string }[] = [];
  async enroll(req: { previousToken?: string; attestation?: string }) {
    this.calls.push("Enroll");
    this.enrollReqs.push(req);
    return { device_id: "d-1", token: `tok-${++this.tokens}`, expires_at_ms: String(Date.now() + 86_400_000) };
  }
  async getTasks() {
    this.calls.push("GetTasks");
    return { tasks: this.tasks, waiting: [] as { query_id: string; phase: number }[], retry_after_ms: 0 };
  }
  declines: { queryId: string; phase: number; taskDigest: string; reason: string }[] = [];
  declineErrors: number[] = [];
  async declineTask(_token: string, d: { queryId: string; phase: number; taskDigest: string; reason: string }) {
    this.calls.push(`DeclineTask:${d.queryId}:${d.reason}`);
    const code = this.declineErrors.shift();
    if (code !== undefined) throw Object.assign(new Error(`status ${code}`), { code });
    this.declines.push(d);
    return { duplicate: false };
  }
  async submitReport(token: string, report: ReportMessage) {
    this.calls.push(`SubmitReport:${report.queryId}:${report.values.length}`);
    this.reports.push({ ...report, values: [...report.values] });
    const code = this.submitErrors.shift();
    if (code !== undefined) throw Object.assign(new Error(`status ${code}`), { code });
    return { duplicate: false, received_at_ms: "1" };
  }
}

function taskMsg(queryId: string, o: Record<string, unknown> = {}, dataset = "data"): TaskMessage {
  const t: Record<string, unknown> = {
    bins: [], bound: 1.0, components: [0], dim: 1, eps_c: 1.0, epsilon: 1.0, extra: {}, frame_kind: "gaussian",
    frame_seed: 0, intervals: [[-1.0, 1.0]], kashin_delta: 0.5, kashin_level: 4.0, kind: "mean", m_ref: 1,
    method: "ssl", query_id: queryId, schema: "uldp.task/2", stage: 0, stat_bound: null, virtual_eps: [],
    virtual_groups: [], virtual_offset: 0, ...o,
  };
  const text = JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1))));
  return { query_id: queryId, phase: 1, dataset, task_json: text, task_digest: taskDigest(text), report_length: 1 };
}

class RecordingStore extends MemoryStore {
  puts: LedgerEntry[] = [];
  override async transact<T>(decide: (entries: readonly LedgerEntry[]) => LedgerChange<T>): Promise<T> {
    return super.transact((entries) => {
      const change = decide(entries);
      this.puts.push(...change.put);
      return change;
    });
  }
}

async function device(fake: Fake, store = new MemoryStore(), budget = 10, sim = true): Promise<Device> {
  return Device.open({ sendDelay: null, transport: fake, store, budget, simulation: sim ? { rng: seededSource("dev-test") } : undefined });
}

test("charge before the data, persist before the send, acknowledge after", async () => {
  const fake = new Fake();
  const store = new RecordingStore();
  const d = await device(fake, store);
  d.addDataset("data", [0.5, 0.25]);
  fake.tasks = [taskMsg("q1")];
  const r = await d.poll();
  assert.deepEqual(r.submitted, ["q1"]);
  assert.deepEqual(store.puts.map((e) => e.state), ["reserved", "pending", "acknowledged"]);
  assert.equal(store.puts[0].report.length, 0);
  assert.equal(store.puts[0].epsilonUnits, 1n << 24n);
  assert.deepEqual(fake.calls, ["Enroll", "GetTasks", "SubmitReport:q1:1"]);
  assert.equal(fake.reports[0].simulated, true);
});

test("a lost acknowledgement: the identical values are re-sent, never a new draw", async () => {
  const fake = new Fake();
  const d = await device(fake);
  d.addDataset("data", [0.5]);
  fake.tasks = [taskMsg("q1")];
  fake.submitErrors = [Status.UNAVAILABLE];
  const r1 = await d.poll();
  assert.equal(r1.pending, 1);
  assert.equal(d.ledger.get("q1")?.state, "pending");
  fake.tasks = [];
  const r2 = await d.poll();
  assert.deepEqual(r2.submitted, ["q1"]);
  assert.deepEqual(fake.reports[1].values, fake.reports[0].values);
  assert.equal(d.ledger.get("q1")?.state, "acknowledged");
  assert.equal(d.ledger.spentUnits(), 1n << 24n);
});

test("UNAUTHENTICATED: one re-enrolment with the previous token, then a rejection", async () => {
  const fake = new Fake();
  const d = await device(fake);
  d.addDataset("data", [0.5]);
  fake.tasks = [taskMsg("q1"), taskMsg("q2")];
  fake.submitErrors = [Status.UNAUTHENTICATED];
  const r = await d.poll();
  assert.deepEqual(r.submitted, ["q1", "q2"]);
  assert.equal(fake.enrollReqs.length, 2);
  assert.equal(fake.enrollReqs[1].previousToken, "tok-1");
  fake.tasks = [taskMsg("q3")];
  fake.submitErrors = [Status.UNAUTHENTICATED, Status.UNAUTHENTICATED];
  const r2 = await d.poll();
  assert.equal(r2.rejected.length, 1);
  assert.equal(r2.rejected[0].code, Status.UNAUTHENTICATED);
  assert.equal(fake.enrollReqs.length, 3);
  assert.equal(d.ledger.get("q3")?.state, "rejected"); // the spend stays
});

test("refusals charge nothing and carry the stable code", async () => {
  const fake = new Fake();
  const d = await device(fake, new MemoryStore(), 1.5);
  d.addDataset("data", [0.5]);
  d.addDataset("vec", [[1, 2]], null, { dim: 2 });
  fake.tasks = [
    taskMsg("q-budget", { epsilon: 2.0, eps_c: 2.0 }),
    taskMsg("q-dataset", {}, "missing"),
    { ...taskMsg("q-digest"), task_digest: "00" },
    taskMsg("q-decl", {}, "vec"),
    { ...taskMsg("q-length"), report_length: 3 },
    taskMsg("q-ok"),
    taskMsg("q-ok2", { epsilon: 1.0, eps_c: 1.0 }),
  ];
  const r = await d.poll();
  assert.deepEqual(r.refused.map((x) => [x.queryId, x.code]), [
    ["q-budget", "budget"], ["q-dataset", "dataset"], ["q-digest", "digest"], ["q-decl", "declaration"],
    ["q-length", "length"], ["q-ok2", "budget"]]);
  assert.deepEqual(r.submitted, ["q-ok"]);
  assert.equal(d.ledger.spentUnits(), 1n << 24n);
  fake.tasks = [taskMsg("q-ok", { eps_c: 0.5 })]; // another task for a query already answered
  const r2 = await d.poll();
  assert.deepEqual(r2.refused.map((x) => x.code), ["participated"]);
});

test("production mode: secure noise, reports not marked simulated", async () => {
  const fake = new Fake();
  const d = await device(fake, new MemoryStore(), 10, false);
  d.addDataset("data", [0.5]);
  fake.tasks = [taskMsg("q1")];
  await d.poll();
  assert.equal(fake.reports[0].simulated, false);
  await assert.rejects(Device.open({ sendDelay: null, transport: fake, store: new MemoryStore(), budget: 1,
    simulation: { rng: RandomSource.secure() } }), RangeError);
});

test("a crash between charge and store: the reserved task's report is computed and sent", async () => {
  const fake = new Fake();
  const store = new MemoryStore();
  const d = await device(fake, store);
  d.addDataset("data", [0.5]);
  const msg = taskMsg("q1");
  await d.ledger.reserve("q1", msg.task_digest, 1, 1n << 24n, JSON.stringify(msg), true);
  const again = await device(fake, store); // the process restarted
  again.addDataset("data", [0.5]);
  const r = await again.poll();
  assert.deepEqual(r.submitted, ["q1"]);
  assert.equal(again.ledger.get("q1")?.state, "acknowledged");
  assert.equal(again.ledger.spentUnits(), 1n << 24n);
});

test("totality: the messages do not depend on the data", async () => {
  const runWith = async (samples: unknown, vec: unknown) => {
    const fake = new Fake();
    const d = await device(fake, new MemoryStore(), 100);
    d.addDataset("data", samples);
    d.addDataset("vec", vec, [1, "x"], { dim: 2 });
    fake.tasks = [taskMsg("q1"), taskMsg("q2", { kind: "distribution", dim: 4, bound: null, components: [0, 1, 2, 3],
      eps_c: 0.25, intervals: [[-1, 1], [-1, 1], [-1, 1], [-1, 1]] }),
    { ...taskMsg("q3", { kind: "sgd", dim: 2, components: [0, 1, 2, 3], eps_c: 0.25, intervals: [[-1, 1], [-1, 1], [-1, 1], [-1, 1]],
      extra: { model: "logistic", theta: [0.5, -1.0] } }, "vec"), report_length: 4 },
    { ...taskMsg("q4", { kind: "mean-l2", dim: 2, components: [0, 1, 2, 3], eps_c: 0.25, intervals: [[-1, 1], [-1, 1], [-1, 1], [-1, 1]],
      method: "baseline-a", m_ref: 3, virtual_groups: [[0, 1], [2, 3]], virtual_eps: [0.1, 0.1] }, "vec"), report_length: 6 }];
    fake.tasks = fake.tasks.map((t) => ({ ...t, report_length: t.query_id === "q2" ? 4 : t.report_length }));
    const r = await d.poll();
    assert.deepEqual(r.refused, []);
    return fake.calls;
  };
  const empty = await runWith([], []);
  assert.deepEqual(await runWith([NaN, Infinity, 1e308, "x", null, [1], { a: 1 }, true], [[NaN, 1], [1e308, -1e308], "ab", [1, 2, 3]]), empty);
  assert.deepEqual(await runWith([0.5, 0.25], [[0.1, 0.2]]), empty);
});

test("two Devices over one store (two tabs): the budget holds, one report per query, one identity", async () => {
  // issue 17 item 2: each Device kept its own ledger and spent 2.0 of a budget of 1.0
  for (let round = 0; round < 20; round++) {
    const fake = new Fake();
    let n = 0;
    fake.enroll = async () => ({ device_id: `d-${++n}`, token: `tok-${n}`, expires_at_ms: String(Date.now() + 86_400_000) });
    fake.tasks = [taskMsg("q1"), taskMsg("q2")]; // ε = 1 each; the budget is 1
    const store = new MemoryStore();
    const [a, b] = [await device(fake, store, 1), await device(fake, store, 1)];
    a.addDataset("data", [0.5]);
    b.addDataset("data", [0.25]);
    const [ra, rb] = await Promise.all([a.poll(), b.poll()]);
    const sent = new Map<string, string>();
    for (const r of fake.reports) {
      const v = r.values.join();
      assert.ok(!sent.has(r.queryId) || sent.get(r.queryId) === v, "one query answered with two different reports");
      sent.set(r.queryId, v);
    }
    assert.equal(sent.size, 1, `answered ${[...sent.keys()]} with a budget for one`);
    assert.equal(a.deviceId, b.deviceId);
    assert.equal(a.ledger.spentUnits() <= 1n << 24n && b.ledger.spentUnits() <= 1n << 24n, true);
    assert.deepEqual([...ra.submitted, ...rb.submitted].filter((q) => q !== [...sent.keys()][0]), []);
    assert.equal((await store.load()).length, 1);
  }
});

test("the app's attestation goes with a new identity only, asked once per enrolment", async () => {
  const fake = new Fake();
  let asked = 0;
  const d = await Device.open({ sendDelay: null, transport: fake, store: new MemoryStore(), budget: 10,
    attestation: async () => `att-${++asked}` });
  await d.enroll();
  await d.enroll(true); // a renewal: the previous token, no attestation
  assert.equal(asked, 1);
  assert.deepEqual(fake.enrollReqs.map((r) => [r.previousToken, r.attestation]), [["", "att-1"], ["tok-1", ""]]);
  const plain = await Device.open({ sendDelay: null, transport: new Fake(), store: new MemoryStore(), budget: 10, attestation: "fixed" });
  await plain.enroll();
});

test("a refused task is declined (its code, public facts only); nothing is charged", async () => {
  const fake = new Fake();
  const d = await device(fake, new MemoryStore(), 1.5);
  d.addDataset("data", [0.5, 0.25]);
  fake.tasks = [taskMsg("q1"), taskMsg("q2")]; // ε 1 each: the second is over the budget
  const r = await d.poll();
  assert.deepEqual(r.submitted, ["q1"]);
  assert.deepEqual(r.refused.map((x) => [x.queryId, x.code]), [["q2", "budget"]]);
  assert.deepEqual(r.declined, ["q2"]);
  assert.deepEqual(fake.declines, [{ queryId: "q2", phase: 1, taskDigest: fake.tasks[1].task_digest, reason: "budget" }]);
  assert.equal(d.ledger.get("q2"), undefined);
  // a refusal for a dataset the device does not hold is declined the same way
  fake.tasks = [taskMsg("q3", {}, "other")];
  assert.deepEqual((await d.poll()).declined, ["q3"]);
  assert.equal(fake.declines.at(-1)!.reason, "dataset");
});

test("nothing is declined for a participated refusal; a failed decline changes nothing", async () => {
  const fake = new Fake();
  const d = await device(fake);
  d.addDataset("data", [0.5]);
  fake.tasks = [taskMsg("q1")];
  await d.poll();
  fake.tasks = [taskMsg("q1", { epsilon: 2.0, eps_c: 2.0 })]; // another task of the same query
  const r = await d.poll();
  assert.deepEqual([r.refused[0].code, r.declined, fake.declines], ["participated", [], []]);
  fake.tasks = [taskMsg("q9", {}, "other")];
  fake.declineErrors = [Status.UNAVAILABLE];
  const failed = await d.poll();
  assert.deepEqual([failed.refused.length, failed.declined], [1, []]);
  // a transport without declineTask: the refusal stands, nothing is sent
  const bare = { enroll: fake.enroll.bind(fake), getTasks: fake.getTasks.bind(fake),
    submitReport: fake.submitReport.bind(fake) };
  const b = await Device.open({ sendDelay: null, transport: bare, store: new MemoryStore(), budget: 1 });
  assert.deepEqual((await b.poll()).declined, []);
});

test("runDevice polls until nothing is waiting, merging the rounds, sleeping the collector's retry", async () => {
  class Waves extends Fake {
    waves: { tasks: TaskMessage[]; waiting: { query_id: string; phase: number }[] }[] = [];
    override async getTasks() {
      this.calls.push("GetTasks");
      const w = this.waves.shift() ?? { tasks: [], waiting: [] };
      return { tasks: w.tasks, waiting: w.waiting, retry_after_ms: w.waiting.length ? 200 : 0 };
    }
  }
  const fake = new Waves();
  const d = await device(fake);
  d.addDataset("data", [0.5]);
  fake.waves = [{ tasks: [taskMsg("q1")], waiting: [{ query_id: "q2", phase: 1 }] }, { tasks: [taskMsg("q2")], waiting: [] }];
  const slept: number[] = [];
  const r = await runDevice(d, 60_000, "", async (ms) => { slept.push(ms); });
  assert.deepEqual(r.submitted, ["q1", "q2"]);
  assert.equal(r.waiting, 0);
  assert.equal(slept.length, 1);
  assert.ok(slept[0] >= 100 && slept[0] <= 300, `slept ${slept[0]} ms for a 200 ms retry`);
  assert.equal(d.ledger.spentUnits(), 2n << 24n);
});
