/**
 * Re-enrolment failures on the TS Device (docs/device-protocol.md §10; Python:
 * tests/test_contract_rules.py): a renewal whose previous token the collector refuses
 * (UNAUTHENTICATED) enrols a new identity and goes on; any other failure of Enroll throws an
 * EnrollmentError and changes nothing (identity kept, the report stays pending and is sent by
 * the next poll).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { RandomSource, seededSource, Status } from "../src/core/index.js";
import { sslMeanTask as task } from "./fixtures.js";
import { Device, type DeviceTransportLike, EnrollmentError, type ReportMessage, type TaskMessage } from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";

class Collector implements DeviceTransportLike {
  ids = 0;
  enrolls: string[] = [];
  unauth: string[] = [];
  refusePrevious = false;
  enrollCode: number | null = null;
  tasks: TaskMessage[] = [];
  reports: string[] = [];
  async enroll(req: { previousToken?: string }) {
    const prev = req.previousToken ?? "";
    this.enrolls.push(prev);
    if (this.enrollCode !== null) throw Object.assign(new Error("injected"), { code: this.enrollCode });
    if (prev && this.refusePrevious) throw Object.assign(new Error("previous token expired too long ago"), { code: Status.UNAUTHENTICATED });
    const dev = prev ? prev.split(":")[0] : `d-${++this.ids}`;
    return { device_id: dev, token: `${dev}:${this.enrolls.length}`, expires_at_ms: String(Date.now() + 86_400_000) };
  }
  #gate(name: string): void {
    if (this.unauth[0] === name) {
      this.unauth.shift();
      throw Object.assign(new Error("token expired"), { code: Status.UNAUTHENTICATED });
    }
  }
  async getTasks() {
    this.#gate("GetTasks");
    return { tasks: this.tasks, waiting: [], retry_after_ms: 0 };
  }
  async submitReport(_t: string, r: ReportMessage) {
    this.#gate("SubmitReport");
    this.reports.push(r.queryId);
    return { duplicate: false, received_at_ms: "1" };
  }
}


async function device(c: Collector): Promise<Device> {
  const d = await Device.open({ sendDelay: null, transport: c, store: new MemoryStore(), budget: 10, simulation: { rng: seededSource(3) } });
  d.addDataset("data", [0.5]);
  return d;
}

test("a refused previous token enrols a new identity", async () => {
  const c = new Collector();
  const d = await device(c);
  assert.equal(await d.enroll(), "d-1");
  c.tasks = [task("q1")];
  c.unauth = ["GetTasks"];
  c.refusePrevious = true;
  const r = await d.poll();
  assert.deepEqual(r.submitted, ["q1"]);
  assert.equal(d.deviceId, "d-2");
  assert.deepEqual(c.enrolls, ["", "d-1:1", ""]);
});

for (const code of [Status.PERMISSION_DENIED, Status.UNAVAILABLE]) {
  test(`a failed re-enrolment (${code}) changes nothing`, async () => {
    const c = new Collector();
    const d = await device(c);
    await d.enroll();
    c.tasks = [task("q1")];
    c.unauth = ["SubmitReport"];
    c.enrollCode = code;
    await assert.rejects(d.poll(), (e: unknown) => e instanceof EnrollmentError);
    assert.equal(d.deviceId, "d-1");
    assert.equal(d.ledger.get("q1")?.state, "pending");
    c.enrollCode = null;
    c.tasks = [];
    assert.deepEqual((await d.poll()).submitted, ["q1"]);
    assert.deepEqual(c.reports, ["q1"]);
    assert.equal(d.deviceId, "d-1");
  });
}
