/**
 * The send time of a report does not depend on the computation (issue 17, item 4;
 * docs/privacy.md §2, "Timing"; Python: tests/test_send_delay.py): with `poll(q, { sendDelay })`
 * a device sends each report at `accepted + U`, U uniform over the public window, whatever its
 * dataset. Deterministic: an injected clock, and a statistic whose (simulated) duration grows
 * with the dataset — 1 µs per sample, as if m = 10^6 took a second.
 */
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { KINDS, RandomSource, seededSource } from "../src/core/index.js";
import { sslMeanTask as task } from "./fixtures.js";
import { DEFAULT_SEND_DELAY, Device, type DeviceTransportLike, drawDelayMs, type ReportMessage } from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";

const LOW = 2000;
const HIGH = 3000;


const honest = KINDS.mean.userStats!;
afterEach(() => { KINDS.mean.userStats = honest; });

/** Send offsets (fake ms) of `n` reports of a device whose statistic costs `usPerSample` µs of
 * fake time per sample, over `m` samples. */
async function offsets(m: number, usPerSample: number, seed: number, n: number, delay: boolean) {
  let now = 1_000_000;
  const clock = () => now;
  const sleep = async (ms: number) => { assert.ok(ms >= 0); now += ms; };
  KINDS.mean.userStats = (t, rows, valid) => { now += (rows.length * usPerSample) / 1000; return honest(t, rows, valid); };
  const sent: number[] = [];
  const transport: DeviceTransportLike = {
    enroll: async () => ({ device_id: "d", token: "t", expires_at_ms: String(Date.now() + 86_400_000) }),
    getTasks: async () => ({ tasks: Array.from({ length: n }, (_, i) => task(`q${i}`)), waiting: [], retry_after_ms: 0 }),
    submitReport: async (_t: string, r: ReportMessage) => { sent.push(clock()); void r; return { duplicate: false, received_at_ms: "1" }; },
  };
  const d = await Device.open({ sendDelay: null, transport, store: new MemoryStore(), budget: 1e6, simulation: { rng: seededSource(seed) } });
  d.addDataset("data", new Array<number>(m).fill(0.25));
  const r = await d.poll("", delay ? { sendDelay: { lowMs: LOW, highMs: HIGH }, clock, sleep } : { clock, sleep });
  assert.equal(r.submitted.length, n);
  return { offsets: sent.map((t, i) => t - (i ? sent[i - 1] : 1_000_000)), late: r.late };
}

test("the send time does not depend on the dataset size", async () => {
  const small = await offsets(0, 1, 5, 3, true);
  const big = await offsets(1_000_000, 1, 5, 3, true); // m = 10^6: a second of computation
  assert.deepEqual(small, big);
  assert.ok(small.offsets.every((x) => x >= LOW && x <= HIGH) && small.late === 0);
  const plain0 = await offsets(0, 1, 5, 3, false);
  const plain1 = await offsets(1_000_000, 1, 5, 3, false);
  assert.notDeepEqual(plain0.offsets, plain1.offsets); // without the option the size shows
});

function ks(a: number[], b: number[]): number {
  const sa = [...a].sort((x, y) => x - y);
  const sb = [...b].sort((x, y) => x - y);
  const cdf = (s: number[], x: number) => { let k = 0; while (k < s.length && s[k] <= x) k++; return k / s.length; };
  return Math.max(...[...sa, ...sb].map((x) => Math.abs(cdf(sa, x) - cdf(sb, x))));
}

test("send offsets have one distribution, uniform over the window", async () => {
  const n = 150;
  const a = (await offsets(0, 1, 11, n, true)).offsets;
  const b = (await offsets(1000, 1000, 12, n, true)).offsets; // 1 ms per sample: 1 s
  assert.ok(ks(a, b) < 1.95 * Math.sqrt(2 / n), `two-sample KS ${ks(a, b)}`);
  const u = Array.from({ length: 10_001 }, (_, i) => LOW + ((HIGH - LOW) * i) / 10_000);
  for (const x of [a, b]) {
    assert.ok(x.every((v) => v >= LOW && v <= HIGH));
    assert.ok(ks(x, u) < 1.95 / Math.sqrt(n), `uniform KS ${ks(x, u)}`);
  }
});

test("an overrun is sent at once and counted", async () => {
  const r = await offsets(10, 500_000, 3, 2, true); // 5 s of computation, window [2, 3] s
  assert.equal(r.late, 2);
  assert.deepEqual(r.offsets, [5000, 5000]);
});

test("a window must be public and sane; a delay is exact on its grid", async () => {
  const d = await Device.open({ sendDelay: null, transport: { enroll: async () => ({ device_id: "d", token: "t", expires_at_ms: "0" }),
    getTasks: async () => ({ tasks: [], waiting: [], retry_after_ms: 0 }),
    submitReport: async () => ({ duplicate: false, received_at_ms: "1" }) }, store: new MemoryStore(), budget: 1 });
  for (const [lowMs, highMs] of [[-1, 1], [2, 1], [0, Infinity], [NaN, 1], [0, 1e12]]) {
    await assert.rejects(d.poll("", { sendDelay: { lowMs, highMs } }), /send window/);
  }
  assert.equal(drawDelayMs({ lowMs: 7, highMs: 7 }, seededSource(1)), 7);
});

test("a device sends at a drawn deadline by default; sendDelay: null opts out; never past the task's deadline",
  async () => {
    assert.deepEqual({ ...DEFAULT_SEND_DELAY }, { lowMs: 2000, highMs: 8000 }); // as in Python
    let now = 1_000_000;
    const clock = () => now;
    const sleep = async (ms: number) => { now += ms; };
    const sent: number[] = [];
    let tasks = [task("qa"), task("qb")];
    const transport: DeviceTransportLike = {
      enroll: async () => ({ device_id: "d", token: "t", expires_at_ms: String(Date.now() + 86_400_000) }),
      getTasks: async () => ({ tasks, waiting: [], retry_after_ms: 0 }),
      submitReport: async () => { sent.push(clock()); return { duplicate: false, received_at_ms: "1" }; },
    };
    const open = (o: { sendDelay?: null | { lowMs: number; highMs: number } }) =>
      Device.open({ transport, store: new MemoryStore(), budget: 100, simulation: { rng: seededSource("def") }, ...o });
    const d = await open({}); // no sendDelay: the default window
    d.addDataset("data", [0.25]);
    const t0 = now;
    assert.deepEqual((await d.poll("", { clock, sleep })).submitted, ["qa", "qb"]);
    const offs = sent.map((t, i) => t - (i ? sent[i - 1] : t0));
    assert.ok(offs.every((x) => x >= 2000 && x <= 8000), `offsets ${offs}`);
    tasks = [task("qc")];
    sent.length = 0;
    const off = await open({ sendDelay: null });
    off.addDataset("data", [0.25]);
    const t1 = now;
    assert.deepEqual((await off.poll("", { clock, sleep })).submitted, ["qc"]);
    assert.deepEqual(sent, [t1]); // at once
    const near = { ...task("qd"), deadline_ms: String(Date.now() + 3000) }; // 3 s left
    tasks = [near];
    sent.length = 0;
    const capped = await open({ sendDelay: { lowMs: 30_000, highMs: 40_000 } });
    capped.addDataset("data", [0.25]);
    const t2 = now;
    assert.deepEqual((await capped.poll("", { clock, sleep })).submitted, ["qd"]);
    assert.ok(sent[0] - t2 <= 2000 + 5, `held ${sent[0] - t2} ms: past the deadline's margin`);
    await assert.rejects(open({ sendDelay: { lowMs: 5, highMs: 1 } }), /send window/);
  });
