/**
 * The Node transport against an in-process grpc-js TLS server on loopback: retries re-send
 * the identical request bytes with backoff, the bearer token travels as metadata, definitive
 * errors are not retried, responses are decoded.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { DeviceTransport, encodeSubmitReport, grpc, RpcError, wire } from "../src/node/index.js";

const dir = mkdtempSync(join(tmpdir(), "uldp-tls-"));
let server: grpc.Server;
let port = 0;
const seen: { method: string; body: Buffer; auth: string }[] = [];
let failNext: { code: grpc.status; times: number } = { code: grpc.status.OK, times: 0 };

const ident = (b: Buffer): Buffer => b;
const enc = (t: keyof typeof wire, o: Record<string, unknown>): Buffer => Buffer.from(wire[t].encode(o));

function method(name: string, reply: () => Buffer) {
  return {
    def: {
      path: `/uldp.v1.DeviceService/${name}`, requestStream: false, responseStream: false,
      requestSerialize: ident, requestDeserialize: ident, responseSerialize: ident, responseDeserialize: ident,
    },
    impl: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      seen.push({ method: name, body: call.request, auth: String(call.metadata.get("authorization")[0] ?? "") });
      if (failNext.times > 0) {
        failNext.times--;
        cb({ code: failNext.code, details: "injected" } as grpc.ServiceError);
        return;
      }
      cb(null, reply());
    },
  };
}

before(async () => {
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
    "-nodes", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1",
    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], { stdio: "ignore" });
  const methods = {
    Enroll: method("Enroll", () => enc("EnrollResponse", { device_id: "dev-1", token: "tok", expires_at_ms: "1700000000000" })),
    GetTasks: method("GetTasks", () => enc("GetTasksResponse", {
      tasks: [{ query_id: "q", phase: 1, stage: 1, dataset: "steps", task_json: "{}", report_length: 3,
        task_digest: "ab", deadline_ms: "12345678901234", max_abs_value: "1099511627776" }],
      retry_after_ms: 250,
    })),
    SubmitReport: method("SubmitReport", () => enc("SubmitReportResponse", { duplicate: true, received_at_ms: "5" })),
  };
  server = new grpc.Server();
  server.addService(
    Object.fromEntries(Object.entries(methods).map(([k, v]) => [k, v.def])) as unknown as grpc.ServiceDefinition,
    Object.fromEntries(Object.entries(methods).map(([k, v]) => [k, v.impl])) as grpc.UntypedServiceImplementation,
  );
  const creds = grpc.ServerCredentials.createSsl(null, [{
    private_key: readFileSync(join(dir, "key.pem")), cert_chain: readFileSync(join(dir, "cert.pem")),
  }], false);
  port = await new Promise<number>((ok, fail) =>
    server.bindAsync("127.0.0.1:0", creds, (e, p) => (e ? fail(e) : ok(p))));
});

after(() => {
  server.forceShutdown();
  rmSync(dir, { recursive: true, force: true });
});

function transport(sleeps: number[]): DeviceTransport {
  return new DeviceTransport({
    target: `127.0.0.1:${port}`, caFile: join(dir, "cert.pem"),
    retry: { attempts: 4, baseMs: 100, capMs: 150, timeoutMs: 5000 },
    sleep: async (ms) => { sleeps.push(ms); }, random: () => 0.999,
  });
}

test("enroll and get tasks over TLS; int64 fields decode as decimal strings", async () => {
  const sleeps: number[] = [];
  const t = transport(sleeps);
  try {
    const e = await t.enroll({ label: "ts" });
    assert.deepEqual(e, { device_id: "dev-1", token: "tok", expires_at_ms: "1700000000000" });
    const r = await t.getTasks("tok", ["steps"]);
    assert.equal(r.tasks.length, 1);
    assert.equal(r.tasks[0].deadline_ms, "12345678901234");
    assert.equal(r.tasks[0].report_length, 3);
    assert.equal(r.retry_after_ms, 250);
    assert.equal(seen.at(-1)?.auth, "Bearer tok");
    const req = wire.GetTasksRequest.decode(seen.at(-1)!.body);
    assert.deepEqual(req.datasets, ["steps"]);
  } finally {
    t.close();
  }
});

test("a retried report is re-sent byte for byte, with capped exponential backoff", async () => {
  const sleeps: number[] = [];
  const t = transport(sleeps);
  try {
    const report = { queryId: "q", phase: 1, values: [5n, -(1n << 40n), 0n], taskDigest: "ab", simulated: true };
    const bytes = encodeSubmitReport(report);
    assert.deepEqual(encodeSubmitReport({ ...report, values: [...report.values] }), bytes); // deterministic
    seen.length = 0;
    failNext = { code: grpc.status.UNAVAILABLE, times: 3 };
    const r = await t.submitReport("tok", report);
    assert.equal(r.duplicate, true);
    assert.equal(seen.length, 4);
    for (const s of seen) assert.deepEqual(s.body, bytes);
    assert.deepEqual(sleeps.map((s) => Math.round(s)), [100, 150, 150].map((x) => Math.round(x * 0.999)));
    const got = wire.SubmitReportRequest.decode(seen[0].body).report as { values: string[]; simulated: boolean };
    assert.deepEqual(got.values, ["5", "-1099511627776", "0"]);
    assert.equal(got.simulated, true);
  } finally {
    t.close();
  }
});

test("definitive errors are thrown at once; retries give up after `attempts` calls", async () => {
  const sleeps: number[] = [];
  const t = transport(sleeps);
  try {
    seen.length = 0;
    failNext = { code: grpc.status.ALREADY_EXISTS, times: 1 };
    await assert.rejects(t.submitReport("tok", { queryId: "q", phase: 1, values: [1n], taskDigest: "ab", simulated: false }),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.ALREADY_EXISTS);
    assert.equal(seen.length, 1);
    failNext = { code: grpc.status.UNAVAILABLE, times: 10 };
    await assert.rejects(t.enroll(), (e: unknown) => e instanceof RpcError && e.code === grpc.status.UNAVAILABLE);
    assert.equal(seen.length, 1 + 4);
    failNext = { code: grpc.status.OK, times: 0 };
  } finally {
    t.close();
  }
});

test("every status code is retried or not as conformance/v1/transport.json says", async () => {
  const vectors = JSON.parse(readFileSync(new URL("../../../conformance/v1/transport.json", import.meta.url), "utf8")) as
    { cases: { code: number; name: string; retried: boolean }[] };
  const t = transport([]);
  try {
    for (const c of vectors.cases.filter((v) => v.code !== grpc.status.OK)) {
      seen.length = 0;
      failNext = { code: c.code, times: 1 };
      let code = grpc.status.OK;
      try {
        await t.getTasks("tok", ["steps"]);
      } catch (e) {
        assert.ok(e instanceof RpcError, String(e));
        code = e.code;
      }
      assert.deepEqual([c.name, seen.length, code], c.retried ? [c.name, 2, grpc.status.OK] : [c.name, 1, c.code]);
    }
  } finally {
    failNext = { code: grpc.status.OK, times: 0 };
    t.close();
  }
});
