/**
 * Shuffle mode in the TS Device (docs/device-protocol.md §16): a task carrying `seal` is refused
 * without a shuffler (code `seal`, nothing charged); with one, the report is sealed, the ledger
 * stores the ciphertext (49 + 8·L bytes) and it goes to the shuffler — never to the collector —
 * with the identical bytes on a resend after a lost acknowledgement, carrying the task's shuffler
 * ticket and the app's attestation, never a token; a sealed task without a ticket is refused
 * (code `seal`, nothing charged). The ciphertext a TS device
 * made with a fresh ephemeral key opens in Python with the collector's key and `cryptography`'s
 * HPKE, to the report values (needs ULDP_PYTHON, like collector.test.ts).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { x25519 } from "@noble/curves/ed25519.js";
import { bytesToHex, keyIdOf, RandomSource, seededSource, sealInfo, taskDigest, TaskRefused } from "../src/core/index.js";
import {
  Device, type DeviceTransportLike, type ReportMessage, type SealedReportMessage, type ShufflerTransportLike,
  Status, type TaskMessage,
} from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";

const sk = x25519.utils.randomSecretKey();
const pk = x25519.getPublicKey(sk);
const seal = { aead_id: 3, kdf_id: 1, kem_id: 32, key_id: keyIdOf(pk), public_key: bytesToHex(pk) };

function sealedTask(queryId: string, ticket = "t1.ticket"): TaskMessage {
  const t: Record<string, unknown> = {
    bins: [], bound: 1.0, components: [0], dim: 1, eps_c: 1.0, epsilon: 1.0, extra: {}, frame_kind: "gaussian",
    frame_seed: 0, intervals: [[-1.0, 1.0]], kashin_delta: 0.5, kashin_level: 4.0, kind: "mean", m_ref: 1,
    method: "ssl", query_id: queryId, schema: "uldp.task/2", seal, stage: 0, stat_bound: null, virtual_eps: [],
    virtual_groups: [], virtual_offset: 0,
  };
  const text = JSON.stringify(Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : 1))));
  return { query_id: queryId, phase: 1, group: 2, stage: 0, dataset: "data", task_json: text,
    task_digest: taskDigest(text), report_length: 1, shuffle_ticket: ticket };
}

class Collector implements DeviceTransportLike {
  tasks: TaskMessage[] = [];
  clear: ReportMessage[] = [];
  async enroll() {
    return { device_id: "d-1", token: "tok", expires_at_ms: String(Date.now() + 86_400_000) };
  }
  async getTasks() {
    return { tasks: this.tasks, waiting: [], retry_after_ms: 0 };
  }
  async submitReport(_t: string, r: ReportMessage) {
    this.clear.push(r);
    return { duplicate: false, received_at_ms: "1" };
  }
}

class Shuffler implements ShufflerTransportLike {
  got: SealedReportMessage[] = [];
  errors: number[] = [];
  async submitSealed(r: SealedReportMessage, ...extra: unknown[]) {
    assert.equal(extra.length, 0); // nothing but the report: no token
    this.got.push({ ...r, sealed: r.sealed.slice() });
    const code = this.errors.shift();
    if (code !== undefined) throw Object.assign(new Error(`status ${code}`), { code });
    return { duplicate: false };
  }
}

test("a sealed task is refused without a shuffler, before any charge", async () => {
  const col = new Collector();
  col.tasks = [sealedTask("q-s")];
  const dev = await Device.open({ sendDelay: null, transport: col, store: new MemoryStore(), budget: 2 });
  dev.addDataset("data", [0.5, 0.25]);
  const r = await dev.poll();
  assert.deepEqual(r.refused.map((x) => x.code), ["seal"]);
  assert.equal(dev.ledger.get("q-s"), undefined);
});

test("a sealed task without a shuffler ticket is refused, before any charge", async () => {
  const col = new Collector();
  col.tasks = [sealedTask("q-s", "")];
  const dev = await Device.open({ sendDelay: null, transport: col, store: new MemoryStore(), budget: 2, shuffler: new Shuffler() });
  dev.addDataset("data", [0.5, 0.25]);
  const r = await dev.poll();
  assert.deepEqual(r.refused.map((x) => x.code), ["seal"]);
  assert.match(r.refused[0].message, /ticket/);
  assert.equal(dev.ledger.get("q-s"), undefined);
});

test("a shuffler's UNAUTHENTICATED keeps the report pending (no re-enrolment fixes a ticket)", async () => {
  const col = new Collector();
  col.tasks = [sealedTask("q-s")];
  const sh = new Shuffler();
  sh.errors = [Status.UNAUTHENTICATED, Status.UNAUTHENTICATED];
  let asked = 0;
  const dev = await Device.open({ sendDelay: null, transport: col, store: new MemoryStore(), budget: 2, shuffler: sh,
    shufflerAttestation: () => `v1.att-${++asked}` });
  dev.addDataset("data", [0.5, 0.25]);
  const r = await dev.poll();
  assert.deepEqual([r.submitted, r.rejected, r.pending], [[], [], 1]);
  assert.deepEqual(sh.got.map((g) => g.attestation), ["v1.att-1", "v1.att-2"]); // fresh each try
  assert.equal(dev.ledger.entries("pending").length, 1);
  col.tasks = [];
  assert.deepEqual((await dev.poll()).submitted, ["q-s"]);
});

test("the sealed report goes to the shuffler, stored and resent as identical bytes", async () => {
  const col = new Collector();
  col.tasks = [sealedTask("q-s")];
  const sh = new Shuffler();
  sh.errors = [Status.UNAVAILABLE]; // the first acknowledgement is lost
  const dev = await Device.open({ sendDelay: null, transport: col, store: new MemoryStore(), budget: 2, shuffler: sh,
    shufflerAttestation: "v1.attested", simulation: { rng: seededSource("shuffle-ts") } });
  dev.addDataset("data", [0.5, 0.25]);
  const first = await dev.poll();
  assert.equal(first.pending, 1);
  col.tasks = [];
  const second = await dev.poll();
  assert.deepEqual(second.submitted, ["q-s"]);
  assert.equal(col.clear.length, 0); // nothing in the clear to the collector
  assert.equal(sh.got.length, 2);
  assert.equal(sh.got[0].sealed.length, 49 + 8);
  assert.equal(bytesToHex(sh.got[1].sealed), bytesToHex(sh.got[0].sealed));
  assert.deepEqual([sh.got[0].group, sh.got[0].stage, sh.got[0].phase], [2, 0, 1]);
  assert.deepEqual([sh.got[0].ticket, sh.got[0].attestation], ["t1.ticket", "v1.attested"]);
  assert.equal(bytesToHex(dev.ledger.get("q-s")!.report), bytesToHex(sh.got[0].sealed));
});

const PY = process.env.ULDP_PYTHON ?? "python3";
const pyOk = (() => {
  try {
    execFileSync(PY, ["-c", "import uldp.client.sealing"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();
if (!pyOk && process.env.CI) throw new Error(`${PY} cannot import uldp.client (set ULDP_PYTHON)`);

test("a TS device's ciphertext opens in Python with the collector's key only", { skip: pyOk ? false : `${PY} has no uldp` },
  async () => {
    const col = new Collector();
    const task = sealedTask("q-py");
    col.tasks = [task];
    const sh = new Shuffler();
    const dev = await Device.open({ sendDelay: null, transport: col, store: new MemoryStore(), budget: 2, shuffler: sh });
    dev.addDataset("data", [0.5, 0.25]);
    await dev.poll();
    const info = sealInfo("q-py", 1, 2, 0, task.task_digest);
    const script = [
      "import sys, json",
      "from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey",
      "from uldp.client.sealing import open_plaintext, suite",
      "a = json.loads(sys.argv[1]); h = bytes.fromhex",
      "sk = X25519PrivateKey.from_private_bytes(h(a['sk']))",
      "vals, sim = open_plaintext(suite().decrypt(h(a['sealed']), sk, info=h(a['info'])))",
      "try:\n    suite().decrypt(h(a['sealed']), X25519PrivateKey.generate(), info=h(a['info'])); other = True",
      "except Exception:\n    other = False",
      "print(json.dumps({'n': len(vals), 'sim': sim, 'other': other}))",
    ].join("\n");
    const out = execFileSync(PY, ["-c", script, JSON.stringify({ sk: bytesToHex(sk),
      sealed: bytesToHex(sh.got[0].sealed), info: bytesToHex(info) })]).toString();
    assert.deepEqual(JSON.parse(out), { n: 1, sim: false, other: false });
  });

test("a Device loads the seal check with the sealing chunk and refuses as the vectors do, in order", async () => {
  // conformance/v1/refusals.json's seal-* cases, through Device.prepare (the core's checkTask has
  // the check built in; a Device loads it, with the sealing chunk, when a task carries "seal"):
  // with a shuffler the vector's code; without one the same, or `seal` where the vector accepts
  const text = readFileSync(new URL("../../../conformance/v1/refusals.json", import.meta.url), "utf8");
  const cases = (JSON.parse(text) as { cases: { name: string; code: string | null; shuffler?: boolean; task: TaskMessage }[] })
    .cases.filter((c) => c.name.startsWith("seal-"));
  assert.ok(cases.length >= 14);
  for (const c of cases) {
    for (const withShuffler of [true, false]) {
      if (!withShuffler && c.shuffler !== true) continue;
      const dev = await Device.open({ sendDelay: null, transport: new Collector(), store: new MemoryStore(), budget: 10,
        ...(withShuffler && c.shuffler ? { shuffler: new Shuffler() } : {}) });
      dev.addDataset("data", [0.5, 0.25]);
      const want = withShuffler || c.code !== null ? c.code : "seal";
      let got: string | null = null;
      try {
        await dev.prepare(c.task);
      } catch (e) {
        if (!(e instanceof TaskRefused)) throw e;
        got = e.code;
      }
      assert.equal(got, want, `${c.name} (shuffler: ${withShuffler && c.shuffler === true})`);
      assert.equal(dev.ledger.get(c.task.query_id) !== undefined, want === null, c.name); // charged only if accepted
    }
  }
});

test("before a Device has loaded the seal check its checkTask refuses a sealed task (code seal)", async () => {
  const dev = await Device.open({ sendDelay: null, transport: new Collector(), store: new MemoryStore(), budget: 2,
    shuffler: new Shuffler() });
  dev.addDataset("data", [0.5, 0.25]);
  assert.throws(() => dev.checkTask(sealedTask("q-s")), (e: unknown) => e instanceof TaskRefused && e.code === "seal");
  await dev.prepare(sealedTask("q-s")); // loads it: the same task is accepted, charged and sealed
  assert.equal(dev.ledger.get("q-s")?.report.length, 49 + 8);
  assert.equal(dev.checkTask(sealedTask("q-t")).task.seal?.keyId, keyIdOf(pk));
});
