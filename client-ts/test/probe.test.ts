/**
 * `probeCollector` (src/web/probe.ts) on a scripted fetch: each cause a page can tell apart
 * (address, origin, unreachable-or-certificate, not a collector, shutting down) from what a
 * browser's fetch does in that case. The same in a real browser against a real collector:
 * scripts/browser-first-run.mjs.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { probeCollector, type ProbeFetch } from "../src/web/index.js";

const BASE = "https://127.0.0.1:8443";
/** A fetch that answers a CORS request with `cors` and a no-cors one with `noCors` (an Error: the
 * browser's TypeError "Failed to fetch"). */
const scripted = (cors: { status: number; body?: string } | Error, noCors: "opaque" | Error = new Error("Failed to fetch")): ProbeFetch =>
  async (url, init) => {
    assert.equal(url, `${BASE}/healthz`);
    const answer = init.mode === "no-cors" ? noCors : cors;
    if (answer instanceof Error) throw new TypeError(answer.message);
    if (answer === "opaque") return { status: 0, type: "opaque", text: async () => "" };
    return { status: answer.status, text: async () => answer.body ?? "" };
  };

test("a collector that answers SERVING: ok (and whether it is this page's origin)", async () => {
  assert.deepEqual(await probeCollector(BASE, { fetch: scripted({ status: 200, body: "SERVING\n" }), origin: "http://x" }),
    { ok: true, sameOrigin: false });
  assert.deepEqual(await probeCollector(BASE + "/", { fetch: scripted({ status: 200, body: "SERVING\n" }), origin: BASE }),
    { ok: true, sameOrigin: true });
});

test("CORS refused but the connection and certificate fine: origin, naming --cors-origin", async () => {
  const r = await probeCollector(BASE, { fetch: scripted(new Error("x"), "opaque"), origin: "http://localhost:8000" });
  assert.equal(r.ok, false);
  assert.ok(!r.ok && r.problem === "origin" && r.message.includes("--cors-origin http://localhost:8000"), JSON.stringify(r));
});

test("no answer at all: unreachable, naming the certificate as the other possible cause", async () => {
  const r = await probeCollector(BASE, { fetch: scripted(new Error("x")), origin: "http://localhost:8000" });
  assert.ok(!r.ok && r.problem === "unreachable" && /certificate/.test(r.message) && r.message.includes(`${BASE}/healthz`));
  // a page the collector served itself: neither CORS nor the certificate can be the cause
  const same = await probeCollector(BASE, { fetch: scripted(new Error("x"), "opaque"), origin: BASE });
  assert.ok(!same.ok && same.problem === "unreachable" && /served this page/.test(same.message), JSON.stringify(same));
});

test("another server, a collector shutting down, a bad address", async () => {
  const other = await probeCollector(BASE, { fetch: scripted({ status: 404, body: "Not Found" }), origin: "" });
  assert.ok(!other.ok && other.problem === "not-collector" && /HTTP 404/.test(other.message));
  const down = await probeCollector(BASE, { fetch: scripted({ status: 503, body: "NOT_SERVING" }), origin: "" });
  assert.ok(!down.ok && down.problem === "shutting-down");
  for (const bad of ["http://127.0.0.1:8443", "127.0.0.1:8443", "https://h:1/path", ""]) {
    const r = await probeCollector(bad, { fetch: scripted({ status: 200, body: "SERVING" }) });
    assert.ok(!r.ok && r.problem === "address", `${bad}: ${JSON.stringify(r)}`);
  }
});

test("a fetch that never answers is cut off by the timeout: unreachable", async () => {
  const hang: ProbeFetch = (_u, init) => new Promise((_ok, fail) => {
    (init.signal as AbortSignal).addEventListener("abort", () => fail(new Error("aborted")));
  });
  const t = Date.now();
  const r = await probeCollector(BASE, { fetch: hang, origin: "http://x", timeoutMs: 50 });
  assert.ok(!r.ok && r.problem === "unreachable" && Date.now() - t < 2000);
});
