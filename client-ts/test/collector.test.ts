/**
 * The TS transport against the real Python collector on loopback (TLS, dev PKI): enrol, fetch
 * an SSL mean task, send a report computed by the TS core, resend the identical bytes
 * (duplicate), and get the collector's refusals for a different report, a wrong length and a
 * missing token. Needs the Python package (`ULDP_PYTHON`, default `python3`); outside CI the
 * test is skipped when `uldp.collector` cannot be imported, in CI it fails.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { boundedParams, RandomSource, stage2Report } from "../src/core/index.js";
import { DeviceTransport, grpc, RpcError } from "../src/node/index.js";

const PY = process.env.ULDP_PYTHON ?? "python3";
const CLI = "import sys; from uldp.collector.cli import main; sys.exit(main())";

function pythonReady(): boolean {
  try {
    execFileSync(PY, ["-c", "import uldp.collector.cli"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
const ready = pythonReady();
if (!ready && process.env.CI) throw new Error(`${PY} cannot import uldp.collector (set ULDP_PYTHON)`);
const skip = ready ? false : `${PY} cannot import uldp.collector`;

const dir = mkdtempSync(join(tmpdir(), "uldp-collector-"));
let proc: ChildProcess | undefined;
let target = "";

function cli(...args: string[]): string {
  return execFileSync(PY, ["-c", CLI, ...args], { encoding: "utf8" });
}

before(async () => {
  if (!ready) return;
  cli("collector", "certs", "--out", dir);
  proc = spawn(PY, ["-c", CLI, "collector", "serve", "--db", join(dir, "db.sqlite"), "--tls-dir", dir,
    "--port", "0", "--port-file", join(dir, "port")], { stdio: "ignore" });
  const t0 = Date.now();
  while (!existsSync(join(dir, "port")) || !readFileSync(join(dir, "port"), "utf8").trim()) {
    if (Date.now() - t0 > 90_000 || proc.exitCode !== null) throw new Error("collector did not start");
    await new Promise((ok) => setTimeout(ok, 100));
  }
  target = `127.0.0.1:${readFileSync(join(dir, "port"), "utf8").trim()}`;
  cli("query", "create", "--target", target, "--ca", join(dir, "ca.pem"), "--admin-token-file",
    join(dir, "admin.token"), "--kind", "mean", "--epsilon", "1", "--dataset", "steps", "--users", "4",
    "--samples", "10", "--bound", "1", "--method", "ssl", "--id", "q-ts");
});

after(() => {
  if (proc && proc.exitCode === null) proc.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

test("TS transport against the Python collector: enrol, task, report, duplicate, refusals", { skip, timeout: 120_000 }, async () => {
  const t = new DeviceTransport({ target, caFile: join(dir, "ca.pem"), serverName: "localhost" });
  try {
    const { token } = await t.enroll({ label: "client-ts test" });
    const { tasks } = await t.getTasks(token, ["steps"]);
    assert.equal(tasks.length, 1);
    const task = tasks[0];
    assert.equal(createHash("sha256").update(task.task_json, "utf8").digest("hex"), task.task_digest);
    const spec = JSON.parse(task.task_json);
    assert.equal(spec.method, "ssl");
    // SSL: one component, interval [-D, D] (the per-kind statistic is step 2; 0.25 stands in)
    const p = boundedParams(spec.bound, spec.m_ref, spec.n_delta);
    assert.equal(task.report_length, 1);
    const values = stage2Report([0.25], [[-p.bound, p.bound]], spec.eps_c, RandomSource.secure());
    const report = { queryId: task.query_id, phase: task.phase, values, taskDigest: task.task_digest, simulated: false };
    assert.equal((await t.submitReport(token, report)).duplicate, false);
    assert.equal((await t.submitReport(token, report)).duplicate, true); // identical resend
    await assert.rejects(t.submitReport(token, { ...report, values: [values[0] + 1n] }),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.ALREADY_EXISTS);
    await assert.rejects(t.submitReport("not-a-token", report),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.UNAUTHENTICATED);
    const other = await t.enroll({ label: "second device" });
    const t2 = (await t.getTasks(other.token, ["steps"])).tasks[0];
    await assert.rejects(t.submitReport(other.token, { ...report, phase: t2.phase, taskDigest: t2.task_digest, values: [1n, 2n] }),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.INVALID_ARGUMENT);
  } finally {
    t.close();
  }
});
