/**
 * The fetch transport (`@uldp/device/web`) against a scripted fetch: the same retry rules as the
 * Node gRPC transport (only UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED; capped exponential backoff
 * with full jitter; the identical body every time), Connect and gRPC-Web framing and statuses,
 * HTTP answers without a status, network failures and timeouts. The real collector over both
 * protocols: collector.test.ts (Node) and the browser fleet (scripts/browser-fleet.mjs).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, type FetchLike, FetchTransport, RpcError } from "../src/web/index.js";
import { parseGrpcWeb } from "../src/web/grpcWeb.js";
import { encodeDecline, encodeSubmitReport, wire } from "../src/wire/index.js";

type Answer = { status: number; headers?: Record<string, string>; body?: Uint8Array } | "network" | "hang";

function scripted(answers: Answer[]) {
  const calls: { url: string; headers: Record<string, string>; body: Uint8Array }[] = [];
  const fetch: FetchLike = (url, init) => {
    calls.push({ url, headers: init.headers, body: init.body.slice() });
    const a = answers.shift() ?? { status: 500 };
    if (a === "network") return Promise.reject(new TypeError("Failed to fetch"));
    if (a === "hang") {
      return new Promise((_, fail) => (init.signal as { addEventListener(k: string, f: () => void): void })
        .addEventListener("abort", () => fail(new Error("aborted"))));
    }
    const h = new Map(Object.entries(a.headers ?? {}));
    return Promise.resolve({ status: a.status, headers: { get: (k: string) => h.get(k) ?? null },
      arrayBuffer: async () => Uint8Array.from(a.body ?? new Uint8Array(0)).buffer });
  };
  return { fetch, calls };
}

const enc = (t: keyof typeof wire, o: Record<string, unknown>): Uint8Array => wire[t].encode(o);
const json = (o: object): Uint8Array => new TextEncoder().encode(JSON.stringify(o));
const connectError = (code: string, message: string): Answer =>
  ({ status: 503, headers: { "content-type": "application/json" }, body: json({ code, message }) });

function grpcWeb(message: Uint8Array | null, status: number, msg = ""): Uint8Array {
  const parts: number[] = [];
  const push = (flag: number, b: Uint8Array) => {
    parts.push(flag, (b.length >>> 24) & 255, (b.length >>> 16) & 255, (b.length >>> 8) & 255, b.length & 255, ...b);
  };
  if (message) push(0, message);
  push(0x80, new TextEncoder().encode(`grpc-status: ${status}\r\ngrpc-message: ${encodeURIComponent(msg)}\r\n`));
  return Uint8Array.from(parts);
}

const report = { queryId: "q", phase: 1, values: [1n, -2n, 1n << 40n], taskDigest: "ab", simulated: false };
const ack = enc("SubmitReportResponse", { duplicate: true, received_at_ms: "5" });

test("Connect: retries re-send the identical bytes with capped backoff, then the answer decodes", async () => {
  const { fetch, calls } = scripted(["network", connectError("unavailable", "busy"), { status: 502 },
    connectError("aborted", "x"), { status: 200, body: ack }]);
  const sleeps: number[] = [];
  const t = new FetchTransport({ baseUrl: "https://c.example:8443/", fetch, sleep: async (ms) => void sleeps.push(ms),
    random: () => 1, retry: { baseMs: 100, capMs: 300 } });
  const r = await t.submitReport("tok", report);
  assert.deepEqual(r, { duplicate: true, received_at_ms: "5" });
  assert.equal(calls.length, 5);
  assert.deepEqual(sleeps, [100, 200, 300, 300]);
  const want = encodeSubmitReport(report);
  for (const c of calls) {
    assert.equal(c.url, "https://c.example:8443/uldp.v1.DeviceService/SubmitReport");
    assert.deepEqual(c.body, want);
    assert.equal(c.headers.authorization, "Bearer tok");
    assert.equal(c.headers["content-type"], "application/proto");
    assert.equal(c.headers["connect-protocol-version"], "1");
  }
});

test("Connect: a definitive code is thrown at once with its message; retries stop after `attempts`", async () => {
  for (const [code, num] of [["invalid_argument", Code.INVALID_ARGUMENT], ["already_exists", Code.ALREADY_EXISTS],
    ["unauthenticated", Code.UNAUTHENTICATED], ["failed_precondition", Code.FAILED_PRECONDITION], ["canceled", Code.CANCELLED]] as const) {
    const { fetch, calls } = scripted([connectError(code, "the collector's words")]);
    const t = new FetchTransport({ baseUrl: "https://c", fetch, sleep: async () => {} });
    await assert.rejects(t.submitReport("tok", report),
      (e: unknown) => e instanceof RpcError && e.code === num && e.details === "the collector's words");
    assert.equal(calls.length, 1);
  }
  const { fetch, calls } = scripted(Array.from({ length: 9 }, () => ({ status: 503 })));
  const t = new FetchTransport({ baseUrl: "https://c", fetch, sleep: async () => {}, retry: { attempts: 3 } });
  await assert.rejects(t.enroll(), (e: unknown) => e instanceof RpcError && e.code === Code.UNAVAILABLE);
  assert.equal(calls.length, 3);
  assert.equal(calls[0].headers.authorization, undefined); // Enroll carries no token
  for (const [code, num] of [["resource_exhausted", Code.RESOURCE_EXHAUSTED], ["internal", Code.INTERNAL],
    ["aborted", Code.ABORTED]] as const) { // retried: nothing happened, or the outcome is unknown (§10)
    const s = scripted(Array.from({ length: 3 }, () => connectError(code, "busy")));
    const tt = new FetchTransport({ baseUrl: "https://c", fetch: s.fetch, sleep: async () => {}, retry: { attempts: 3 } });
    await assert.rejects(tt.submitReport("tok", report), (e: unknown) => e instanceof RpcError && e.code === num);
    assert.equal(s.calls.length, 3, code);
  }
});

test("a call that does not answer in time is DEADLINE_EXCEEDED, and retried", async () => {
  const { fetch, calls } = scripted(["hang", { status: 200, body: enc("EnrollResponse", { device_id: "d", token: "t", expires_at_ms: "9" }) }]);
  const t = new FetchTransport({ baseUrl: "https://c", fetch, sleep: async () => {}, retry: { timeoutMs: 30 } });
  assert.deepEqual(await t.enroll(), { device_id: "d", token: "t", expires_at_ms: "9" });
  assert.equal(calls.length, 2);
  assert.equal(calls[0].headers["connect-timeout-ms"], "30");
});

test("gRPC-Web: framed request, status from the trailer frame or from trailers-only headers", async () => {
  const tasks = enc("GetTasksResponse", { tasks: [{ query_id: "q", phase: 1, task_json: "{}", task_digest: "ab",
    deadline_ms: "12345678901234", max_abs_value: "1099511627776", report_length: 3 }], retry_after_ms: 7 });
  const { fetch, calls } = scripted([
    { status: 200, headers: { "grpc-status": "14", "grpc-message": "down%20for%20a%20bit" } },
    { status: 200, body: grpcWeb(null, 10, "retry me") },
    { status: 200, body: grpcWeb(tasks, 0) },
    { status: 200, body: grpcWeb(null, 9, "phase 2 of query q is not open (ünïcode)") },
  ]);
  const t = new FetchTransport({ baseUrl: "https://c", protocol: "grpc-web", fetch, sleep: async () => {} });
  const r = await t.getTasks("tok", ["steps"], "q");
  assert.equal(r.tasks[0].deadline_ms, "12345678901234");
  assert.equal(r.retry_after_ms, 7);
  assert.equal(calls.length, 3);
  const body = calls[0].body;
  assert.deepEqual([...body.subarray(0, 5)], [0, 0, 0, 0, body.length - 5]);
  assert.equal(calls[0].headers["content-type"], "application/grpc-web+proto");
  assert.equal(calls[0].headers["grpc-timeout"], "30000m");
  assert.deepEqual(calls[1].body, body);
  await assert.rejects(t.submitReport("tok", report), (e: unknown) => e instanceof RpcError &&
    e.code === Code.FAILED_PRECONDITION && e.details === "phase 2 of query q is not open (ünïcode)");
  assert.equal(parseGrpcWeb(grpcWeb(ack, 0)).trailers.get("grpc-status"), "0");
});

test("an answer without a status maps the HTTP status; an oversize answer is RESOURCE_EXHAUSTED", async () => {
  for (const [status, code] of [[401, Code.UNAUTHENTICATED], [403, Code.PERMISSION_DENIED], [404, Code.UNIMPLEMENTED], [400, Code.INTERNAL]]) {
    for (const protocol of ["connect", "grpc-web"] as const) {
      const { fetch } = scripted([{ status, headers: { "content-type": "text/plain" }, body: json({}) }]);
      const t = new FetchTransport({ baseUrl: "https://c", protocol, fetch, sleep: async () => {}, retry: { attempts: 1 } });
      await assert.rejects(t.enroll(), (e: unknown) => e instanceof RpcError && e.code === code, `${protocol} ${status}`);
    }
  }
  const { fetch } = scripted([{ status: 200, body: new Uint8Array(2000) }]);
  const t = new FetchTransport({ baseUrl: "https://c", fetch, maxMessageBytes: 10, retry: { attempts: 1 } });
  await assert.rejects(t.enroll(), (e: unknown) => e instanceof RpcError && e.code === Code.RESOURCE_EXHAUSTED);
});

test("declineTask: the DeclineTask URL, the token, the identical bytes on a retry, both protocols", async () => {
  const d = { queryId: "q", phase: 2, taskDigest: "ab", reason: "budget" };
  const want = encodeDecline(d);
  for (const protocol of ["connect", "grpc-web"] as const) {
    const ok = enc("DeclineTaskResponse", { duplicate: true });
    const { fetch, calls } = scripted([{ status: 503 }, { status: 200, body: protocol === "connect" ? ok : grpcWeb(ok, 0) }]);
    const t = new FetchTransport({ baseUrl: "https://c", protocol, fetch, sleep: async () => {} });
    assert.deepEqual(await t.declineTask("tok", d), { duplicate: true });
    assert.equal(calls.length, 2);
    for (const c of calls) {
      assert.equal(c.url, "https://c/uldp.v1.DeviceService/DeclineTask");
      assert.equal(c.headers.authorization, "Bearer tok");
      assert.deepEqual(protocol === "connect" ? c.body : c.body.subarray(5), want);
    }
  }
});
