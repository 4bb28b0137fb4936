/**
 * What a failed fetch reveals, kept apart (issue 29, web first run): the fetch transport's
 * NetworkError says "certificate" (an untrusted certificate: not retried), "unreachable" (a
 * closed port, an unknown host) or, where a browser hides the reason, "network" naming
 * probeCollector; an exception that is no network failure (an invalid header, a bug in a passed
 * fetch) surfaces unchanged and is not retried. Against Node's real fetch on loopback: a closed
 * port and a TLS server with a self-signed certificate (openssl).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer as createHttps } from "node:https";
import { createServer as createTcp } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { Code, type FetchLike, FetchTransport, NetworkError, networkFailure, RpcError } from "../src/web/index.js";

const nodeFetch = globalThis.fetch as unknown as FetchLike;

function transport(baseUrl: string, fetch: FetchLike = nodeFetch) {
  const sleeps: number[] = [];
  const t = new FetchTransport({ baseUrl, fetch, sleep: async (ms) => void sleeps.push(ms), random: () => 0,
    retry: { attempts: 3, timeoutMs: 10_000 } });
  return { t, sleeps };
}

async function closedPort(): Promise<number> {
  const srv = createTcp();
  await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
  const port = (srv.address() as { port: number }).port;
  await new Promise((ok) => srv.close(ok));
  return port;
}

test("a closed port is 'unreachable' (UNAVAILABLE, retried), naming the address", async () => {
  const base = `https://127.0.0.1:${await closedPort()}`;
  const { t, sleeps } = transport(base);
  await assert.rejects(t.enroll(), (e: unknown) => e instanceof NetworkError && e.problem === "unreachable"
    && e.code === Code.UNAVAILABLE && e.message.includes(base) && /ECONNREFUSED/.test(e.message));
  assert.equal(sleeps.length, 2); // 3 attempts
});

test("a self-signed certificate is 'certificate', not retried, with the CA recipe", async () => {
  const dir = mkdtempSync(join(tmpdir(), "uldp-cert-"));
  try {
    execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
      "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1", "-subj", "/CN=localhost",
      "-addext", "subjectAltName=IP:127.0.0.1"], { stdio: "ignore" });
    const srv = createHttps({ key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")) },
      (_, res) => res.end("x"));
    await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
    try {
      const { t, sleeps } = transport(`https://127.0.0.1:${(srv.address() as { port: number }).port}`);
      await assert.rejects(t.enroll(), (e: unknown) => e instanceof NetworkError && e.problem === "certificate"
        && e.code === Code.UNAVAILABLE && /SELF_SIGNED/.test(e.message) && /CA recipe/.test(e.message));
      assert.deepEqual(sleeps, []);
    } finally {
      srv.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a browser's bare 'Failed to fetch' is 'network' and names probeCollector", async () => {
  for (const said of ["Failed to fetch", "NetworkError when attempting to fetch resource.", "Load failed",
    "Network request failed"]) {
    const { t, sleeps } = transport("https://c.example:8443", () => Promise.reject(new TypeError(said)));
    await assert.rejects(t.enroll(), (e: unknown) => e instanceof NetworkError && e.problem === "network"
      && e.message.includes(said) && /probeCollector/.test(e.message) && /origin/.test(e.message));
    assert.equal(sleeps.length, 2, said);
  }
  // undici's codes inside an AggregateError (several addresses of one host)
  const agg = new TypeError("fetch failed", { cause: new AggregateError([Object.assign(new Error("x"), { code: "ECONNREFUSED" })]) });
  assert.equal(networkFailure(agg, "https://h")?.problem, "unreachable");
  const tls = new TypeError("fetch failed", { cause: Object.assign(new Error("x"), { code: "ERR_TLS_CERT_ALTNAME_INVALID" }) });
  assert.equal(networkFailure(tls, "https://h")?.problem, "certificate");
});

test("an exception that is no network failure surfaces unchanged, once", async () => {
  // a token that cannot be a header: Node's fetch refuses it before any connection
  let calls = 0;
  const counting: FetchLike = (url, init) => (calls++, nodeFetch(url, init));
  const { t, sleeps } = transport("https://127.0.0.1:9", counting);
  await assert.rejects(t.getTasks("bad\ntoken", []), (e: unknown) => e instanceof TypeError && !(e instanceof RpcError)
    && /header/i.test((e as Error).message));
  assert.deepEqual([calls, sleeps.length], [1, 0]);
  const bug = new ReferenceError("oops is not defined");
  const { t: t2 } = transport("https://c.example:8443", () => { throw bug; });
  await assert.rejects(t2.enroll(), (e: unknown) => e === bug);
  assert.equal(networkFailure(new RangeError("x"), "https://h"), null);
});
