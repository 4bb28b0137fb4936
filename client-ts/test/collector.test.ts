/**
 * The TS SDK against the real Python collector on loopback (TLS, dev PKI, `uldp collector
 * serve` in a subprocess):
 *  1. the transport alone: enrol, an SSL task, a report from the TS core, the identical
 *     resend (duplicate), and the collector's refusals (different report, missing token,
 *     wrong length);
 *  2. a fleet of 1000 TS `Device`s in simulation mode (seeded noise, reports marked
 *     `simulated`; the queries allow them) completes a two-stage `mean` and a two-stage
 *     `distribution` query, and the truth of the population — the mean of the user means,
 *     the mean of the users' category frequencies, computed here exactly — lies inside every
 *     reported interval (confidence 1 − 1e-5: a miss is a bug, not bad luck).
 * Needs a Python with uldp (`ULDP_PYTHON`); skipped when missing outside CI, fails in CI.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { computeReport, parseTask, RandomSource, seededSource } from "../src/core/index.js";
import { Device } from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";
import { DeviceTransport, grpc, RpcError } from "../src/node/index.js";
import { type FetchLike, FetchTransport, type HttpProtocol } from "../src/web/index.js";
import { A, M, population } from "./fleet/population.js";
import { caFetch } from "./ca-fetch.js";
import { createServer } from "node:net";

const PY = process.env.ULDP_PYTHON ?? "python3";
const CLI = "import sys; from uldp.collector.cli.service import main; sys.exit(main())";
const FLEET = Number(process.env.ULDP_TS_FLEET ?? 1000);

function pythonReady(): boolean {
  try {
    execFileSync(PY, ["-c", "import uldp.collector.cli.service"], { stdio: "ignore" });
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
let httpPort = 0;

function cli(...args: string[]): string {
  return execFileSync(PY, ["-c", CLI, ...args], { encoding: "utf8" });
}
const conn = (): string[] => ["--target", target, "--ca", join(dir, "ca.pem"), "--admin-token-file", join(dir, "admin.token")];

before(async () => {
  if (!ready) return;
  cli("collector", "certs", "--out", dir);
  httpPort = await freePort();
  proc = spawn(PY, ["-c", CLI, "collector", "serve", "--db", join(dir, "db.sqlite"), "--tls-dir", dir,
    "--host", "127.0.0.1", "--port", "0", "--port-file", join(dir, "port"), "--log-level", "warning",
    "--http-port", String(httpPort)], { stdio: "ignore" });
  const t0 = Date.now();
  while (!existsSync(join(dir, "port")) || !readFileSync(join(dir, "port"), "utf8").trim()) {
    if (Date.now() - t0 > 90_000 || proc.exitCode !== null) throw new Error("collector did not start");
    await new Promise((ok) => setTimeout(ok, 100));
  }
  target = `127.0.0.1:${readFileSync(join(dir, "port"), "utf8").trim()}`;
});

after(() => {
  if (proc && proc.exitCode === null) proc.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

const transport = (): DeviceTransport => new DeviceTransport({ target, caFile: join(dir, "ca.pem"), serverName: "localhost" });

function freePort(): Promise<number> {
  return new Promise((ok) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => ok(port));
    });
  });
}

/** fetch over node:https trusting the dev CA. */
const nodeFetch: FetchLike = (url, init) => caFetch(join(dir, "ca.pem"))(url, init);

const webTransport = (protocol: HttpProtocol): FetchTransport =>
  new FetchTransport({ baseUrl: `https://127.0.0.1:${httpPort}`, protocol, fetch: nodeFetch });

async function waitHttp(): Promise<void> {
  const t0 = Date.now();
  for (;;) {
    try {
      await webTransport("connect").call("Nope", new Uint8Array(0), null);
    } catch (e) {
      if (e instanceof RpcError && e.code === grpc.status.UNIMPLEMENTED) return;
      if (Date.now() - t0 > 60_000) throw e;
      await new Promise((ok) => setTimeout(ok, 200));
    }
  }
}

for (const via of ["gRPC", "Connect", "gRPC-Web"] as const) {
  test(`TS ${via} transport against the Python collector: enrol, task, report, duplicate, refusals`,
    { skip, timeout: 120_000 }, async () => {
      if (via !== "gRPC") await waitHttp();
      const id = `q-ts-${via.toLowerCase()}`;
      cli("query", "create", ...conn(), "--kind", "mean", "--epsilon", "1", "--dataset", id, "--users", "4",
        "--samples", "10", "--bound", "1", "--method", "ssl", "--id", id);
      const t = via === "gRPC" ? transport() : webTransport(via === "Connect" ? "connect" : "grpc-web");
      try {
        await transportChecks(t, id);
      } finally {
        if (t instanceof DeviceTransport) t.close();
      }
    });
}

test("a TS device that refuses a task declines it, and the phase does not wait for its deadline",
  { skip, timeout: 120_000 }, async () => {
    await waitHttp();
    for (const via of ["gRPC", "Connect", "gRPC-Web"] as const) {
      const id = `q-decline-${via.toLowerCase()}`;
      // one user, ε 2: a device with budget 1 refuses; its decline answers the only slot
      cli("query", "create", ...conn(), "--kind", "mean", "--epsilon", "2", "--dataset", id, "--users", "2",
        "--samples", "10", "--bound", "1", "--method", "ssl", "--id", id, "--phase-timeout", "3600");
      const t = via === "gRPC" ? transport() : webTransport(via === "Connect" ? "connect" : "grpc-web");
      try {
        for (const budget of [1, 4]) {
          const d = await Device.open({ sendDelay: null, transport: t, store: new MemoryStore(), budget });
          d.addDataset(id, [0.5, 0.25]);
          const r = await d.poll();
          assert.deepEqual([r.declined, r.submitted], budget === 1 ? [[id], []] : [[], [id]]);
        }
      } finally {
        if (t instanceof DeviceTransport) t.close();
      }
      const t0 = Date.now();
      for (;;) {
        const q = JSON.parse(cli("query", "status", ...conn(), "--json", id)) as
          { phases: { received: number; declined: number; state: string }[] };
        if (q.phases[0].state === "closed") {
          assert.deepEqual([q.phases[0].received, q.phases[0].declined], [1, 1]);
          break;
        }
        assert.ok(Date.now() - t0 < 60_000, `${via}: the phase still waits`);
        await new Promise((ok) => setTimeout(ok, 200));
      }
    }
  });

test("declineTask over every transport: the collector's checks and codes, a resend is a duplicate",
  { skip, timeout: 120_000 }, async () => {
    await waitHttp();
    for (const via of ["gRPC", "Connect", "gRPC-Web"] as const) {
      const id = `q-decline-call-${via.toLowerCase()}`;
      cli("query", "create", ...conn(), "--kind", "mean", "--epsilon", "1", "--dataset", id, "--users", "3",
        "--samples", "10", "--bound", "1", "--method", "ssl", "--id", id, "--phase-timeout", "3600");
      const t = via === "gRPC" ? transport() : webTransport(via === "Connect" ? "connect" : "grpc-web");
      const code = async (p: Promise<unknown>): Promise<[number, string]> => {
        try {
          await p;
        } catch (e) {
          if (e instanceof RpcError) return [e.code, e.details];
          throw e;
        }
        return [0, ""];
      };
      try {
        const { token } = await t.enroll({ label: "client-ts decline" });
        const [task] = (await t.getTasks(token, [id])).tasks;
        const d = { queryId: id, phase: task.phase, taskDigest: task.task_digest, reason: "budget" };
        assert.deepEqual(await code(t.declineTask("not-a-token", d)), [grpc.status.UNAUTHENTICATED,
          "malformed device token"], via);
        assert.equal((await code(t.declineTask(token, { ...d, reason: "No Way" })))[0], grpc.status.INVALID_ARGUMENT);
        assert.equal((await code(t.declineTask(token, { ...d, taskDigest: "0".repeat(64) })))[0],
          grpc.status.FAILED_PRECONDITION);
        assert.deepEqual(await t.declineTask(token, d), { duplicate: false }, via);
        assert.deepEqual(await t.declineTask(token, d), { duplicate: true }, via);
      } finally {
        if (t instanceof DeviceTransport) t.close();
      }
      const q = JSON.parse(cli("query", "status", ...conn(), "--json", id)) as { phases: { declined: number }[] };
      assert.equal(q.phases[0].declined, 1, via);
    }
  });

async function transportChecks(t: DeviceTransport | FetchTransport, dataset: string): Promise<void> {
  {
    const { token } = await t.enroll({ label: "client-ts test" });
    const { tasks } = await t.getTasks(token, [dataset]);
    assert.equal(tasks.length, 1);
    const msg = tasks[0];
    assert.equal(createHash("sha256").update(msg.task_json, "utf8").digest("hex"), msg.task_digest);
    const task = parseTask(msg.task_json);
    assert.equal(task.method, "ssl");
    assert.equal(task.reportLength, msg.report_length);
    const values = computeReport(task, [0.25, 0.5, -1.5], null, RandomSource.secure());
    const report = { queryId: msg.query_id, phase: msg.phase, values, taskDigest: msg.task_digest, simulated: false };
    assert.equal((await t.submitReport(token, report)).duplicate, false);
    assert.equal((await t.submitReport(token, report)).duplicate, true); // identical resend
    // a different report the task allows (one step towards 0 stays inside its range: +1 at
    // the range's edge is refused as no report of this task before the resend check)
    const changed = values[0] > 0n ? values[0] - 1n : values[0] + 1n;
    await assert.rejects(t.submitReport(token, { ...report, values: [changed] }),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.ALREADY_EXISTS);
    await assert.rejects(t.submitReport("not-a-token", report),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.UNAUTHENTICATED);
    const other = await t.enroll({ label: "second device" });
    const t2 = (await t.getTasks(other.token, [dataset])).tasks[0];
    await assert.rejects(t.submitReport(other.token, { ...report, phase: t2.phase, taskDigest: t2.task_digest, values: [1n, 2n] }),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.INVALID_ARGUMENT);
    // a simulated report is refused by a query that does not allow simulations
    const third = await t.enroll({ label: "third device" });
    const t3 = (await t.getTasks(third.token, [dataset])).tasks[0];
    await assert.rejects(t.submitReport(third.token, { ...report, phase: t3.phase, taskDigest: t3.task_digest, simulated: true }),
      (e: unknown) => e instanceof RpcError && e.code === grpc.status.FAILED_PRECONDITION);
  }
}

// ---- the fleet -----------------------------------------------------------------------------
/** Run `fn` over `items` with at most `limit` at once. */
async function pool<T>(items: T[], limit: number, fn: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await fn(items[next++]);
  }));
}

test(`a fleet of ${FLEET} TS devices completes a mean and a distribution query; the truth lies in every interval`,
  { skip, timeout: 600_000 }, async () => {
    const t0 = Date.now();
    const common = ["--epsilon", "8", "--users", String(FLEET), "--samples", String(M), "--confidence", "0.99999",
      "--method", "two-stage", "--allow-simulated", "--phase-timeout", "120"];
    cli("query", "create", ...conn(), "--kind", "mean", "--dataset", "steps", "--bound", "1", "--id", "ts-mean", ...common);
    cli("query", "create", ...conn(), "--kind", "distribution", "--dim", String(A), "--dataset", "cats", "--id", "ts-dist", ...common);
    const transports = Array.from({ length: 4 }, transport);
    const truthMean = { s: 0 };
    const truthFreq = new Array<number>(A).fill(0);
    const devices: Device[] = [];
    for (let i = 0; i < FLEET; i++) {
      const d = await Device.open({ sendDelay: null, transport: transports[i % transports.length], store: new MemoryStore(), budget: 20,
        label: `ts-fleet-${i}`, simulation: { rng: seededSource(`ts-fleet-noise-${i}`) } });
      const { steps, cats } = population(i);
      d.addDataset("steps", steps, null, { values: "real" });
      d.addDataset("cats", cats, null, { values: "categorical", alphabet: A });
      truthMean.s += steps.reduce((a, b) => a + b, 0) / M;
      for (const c of cats) truthFreq[c] += 1 / M;
      devices.push(d);
    }
    let todo = devices;
    let rounds = 0;
    const refused: string[] = [];
    while (todo.length && Date.now() - t0 < 200_000) {
      const still: Device[] = [];
      await pool(todo, 128, async (d) => {
        const r = await d.poll();
        refused.push(...r.refused.map((x) => `${x.queryId}: ${x.code} ${x.message}`));
        assert.deepEqual(r.rejected, []);
        if (r.waiting || r.pending) still.push(d);
      });
      todo = still;
      rounds++;
      if (todo.length) await new Promise((ok) => setTimeout(ok, 300));
    }
    for (const t of transports) t.close();
    assert.deepEqual(refused, []);
    assert.equal(todo.length, 0, "devices still waiting");
    for (const d of devices) {
      assert.equal(d.ledger.entries().length, 2);
      assert.ok(d.ledger.entries().every((e) => e.state === "acknowledged" && e.simulated));
    }
    const fleetSeconds = (Date.now() - t0) / 1000;
    const result = (id: string) => {
      for (let k = 0; k < 600; k++) {
        try {
          return JSON.parse(cli("query", "result", ...conn(), "--json", id));
        } catch {
          execFileSync("sleep", ["0.2"]);
        }
      }
      throw new Error(`no result for ${id}`);
    };
    const mean = result("ts-mean");
    const truth = truthMean.s / FLEET;
    console.log(`# fleet: ${FLEET} TS devices, 2 queries, ${rounds} polling rounds, ${fleetSeconds.toFixed(1)} s`);
    console.log(`# mean: truth ${truth.toFixed(4)}, estimate ${mean.values[0].toFixed(4)} in [${mean.ci_low[0].toFixed(4)}, ${mean.ci_high[0].toFixed(4)}]`);
    assert.ok(mean.ci_low[0] <= truth && truth <= mean.ci_high[0], "the mean's truth is outside its interval");
    assert.ok(Math.abs(mean.values[0] - truth) < 0.1);
    const dist = result("ts-dist");
    truthFreq.forEach((f, c) => {
      const t = f / FLEET;
      console.log(`# distribution[${c}]: truth ${t.toFixed(4)}, estimate ${dist.values[c].toFixed(4)} in [${dist.ci_low[c].toFixed(4)}, ${dist.ci_high[c].toFixed(4)}]`);
      assert.ok(dist.ci_low[c] <= t && t <= dist.ci_high[c], `category ${c}: the truth is outside its interval`);
    });
  });
