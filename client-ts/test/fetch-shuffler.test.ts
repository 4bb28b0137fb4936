/**
 * The fetch shuffler transport (`FetchShufflerTransport`, `@uldp/device/web`) against a real
 * shuffle-mode deployment on loopback: a Python collector with its shuffler port and a real
 * `uldp shuffler serve --http-port` process (TLS, dev PKI; started by
 * `uldp.collector.shuffler.launch`, as the Python end-to-end tests do). TS devices get their
 * tasks from the collector over gRPC and send their sealed reports to the shuffler over Connect
 * and gRPC-Web; the shuffled query completes. The shuffler's refusals arrive with their gRPC codes,
 * an identical resend is a duplicate. Needs a Python with uldp (`ULDP_PYTHON`), like
 * collector.test.ts.
 */
import assert from "node:assert/strict";
import { type ChildProcessByStdio, execFileSync, spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { RandomSource, seededSource } from "../src/core/index.js";
import { Device } from "../src/device/index.js";
import { MemoryStore } from "../src/ledger/index.js";
import { DeviceTransport, grpc, RpcError } from "../src/node/index.js";
import { FetchShufflerTransport, type HttpProtocol } from "../src/web/index.js";
import { caFetch } from "./ca-fetch.js";

const PY = process.env.ULDP_PYTHON ?? "python3";
const CLI = "import sys; from uldp.collector.cli.service import main; sys.exit(main())";
/** Starts the deployment, prints its coordinates as one JSON line, stops it when stdin closes. */
const DEPLOY = `
import json, sys
from pathlib import Path
from uldp.collector.simulation.demo import start_shuffled_collector
from uldp.collector.security.attestation import HmacAttestation
from uldp.collector.shuffler.launch import free_port, make_shuffle_pki, start_shuffler_process
work = Path(sys.argv[1])
sp = make_shuffle_pki(work)
col, port, intake = start_shuffled_collector(work, sp)
http = free_port()
sh, _ = start_shuffler_process(work, sp, f"127.0.0.1:{intake}", extra=[
    "--min-batch", "2", "--linger", "0.2", "--http-port", str(http)])
# the app's back end: attestations for the shuffler's own enrolment check
att = HmacAttestation.from_file(sp.attestation_key)
print(json.dumps({"port": port, "http": http, "ca": str(sp.ca),
                  "admin": str(sp.pki.directory / "admin.token"),
                  "attest": [att.issue(f"ts-{i}", ttl_s=3600) for i in range(10)]}), flush=True)
sys.stdin.read()
for p in (sh, col):
    p.terminate()
    p.wait(30)
`;

const ready = (() => {
  try {
    execFileSync(PY, ["-c", "import uldp.collector.shuffler.launch"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();
if (!ready && process.env.CI) throw new Error(`${PY} cannot import uldp.collector (set ULDP_PYTHON)`);
const skip = ready ? false : `${PY} cannot import uldp.collector`;

const dir = mkdtempSync(join(tmpdir(), "uldp-shuffler-"));
let deploy: ChildProcessByStdio<Writable, Readable, null> | undefined;
let at = { port: 0, http: 0, ca: "", admin: "", attest: [] as string[] };

before(async () => {
  if (!ready) return;
  deploy = spawn(PY, ["-c", DEPLOY, dir], { stdio: ["pipe", "pipe", "inherit"] });
  const line = await new Promise<string>((ok, fail) => {
    let out = "";
    deploy!.stdout.on("data", (c: Buffer) => {
      out += c.toString();
      if (out.includes("\n")) ok(out.split("\n")[0]);
    });
    deploy!.on("exit", (code) => fail(new Error(`the deployment exited with ${code}`)));
  });
  at = JSON.parse(line) as typeof at;
});

after(async () => {
  if (deploy && deploy.exitCode === null) {
    const gone = new Promise((ok) => deploy!.on("exit", ok));
    deploy.stdin.end();
    await gone;
  }
  rmSync(dir, { recursive: true, force: true });
});

const cli = (...args: string[]): string => execFileSync(PY, ["-c", CLI, ...args], { encoding: "utf8" });
const conn = (): string[] => ["--target", `127.0.0.1:${at.port}`, "--ca", at.ca, "--admin-token-file", at.admin];
const shuffler = (protocol: HttpProtocol): FetchShufflerTransport =>
  new FetchShufflerTransport({ baseUrl: `https://127.0.0.1:${at.http}`, protocol, fetch: caFetch(at.ca) });

test("TS devices send sealed reports to the shuffler over Connect and gRPC-Web; the shuffled query completes",
  { skip, timeout: 180_000 }, async () => {
    const users = 6;
    cli("query", "create", ...conn(), "--kind", "mean", "--epsilon", "1", "--dataset", "web", "--users", String(users),
      "--samples", "2", "--bound", "1", "--method", "ssl", "--id", "ts-shuffled", "--shuffle-min-batch", "2",
      "--allow-simulated", "--phase-timeout", "120");
    const collector = new DeviceTransport({ target: `127.0.0.1:${at.port}`, caFile: at.ca, serverName: "localhost" });
    try {
      for (let i = 0; i < users; i++) {
        const d = await Device.open({ sendDelay: null, transport: collector, store: new MemoryStore(), budget: 2,
          shuffler: shuffler(i % 2 ? "grpc-web" : "connect"), shufflerAttestation: at.attest[i],
          simulation: { rng: seededSource(`ts-sh-${i}`) } });
        d.addDataset("web", [0.25, 0.5]);
        const r = await d.poll();
        assert.deepEqual([r.submitted, r.refused, r.rejected], [["ts-shuffled"], [], []], `device ${i}`);
      }
    } finally {
      collector.close();
    }
    const t0 = Date.now();
    for (;;) {
      const q = JSON.parse(cli("query", "status", ...conn(), "--json", "ts-shuffled")) as { state: string; error?: string };
      if (q.state !== "running") {
        assert.equal(q.state, "done", q.error);
        break;
      }
      assert.ok(Date.now() - t0 < 120_000, "the shuffled query did not complete");
      await new Promise((ok) => setTimeout(ok, 250));
    }
    const res = JSON.parse(cli("query", "result", ...conn(), "--json", "ts-shuffled")) as
      { reports_per_phase: number[]; privacy: { mode: string; verifier: string; cells: { reports: number; counted: number }[] } };
    assert.equal(res.privacy.mode, "shuffle");
    assert.equal(res.privacy.verifier, "hmac-attestation");
    assert.ok(res.privacy.cells.every((c) => c.counted === c.reports)); // every TS device attested
    assert.deepEqual(res.reports_per_phase, [users]);
    assert.equal(res.privacy.cells.reduce((a, c) => a + c.reports, 0), users);
  });

test("the shuffler's HTTP port: its refusals with their gRPC codes, an identical resend is a duplicate",
  { skip, timeout: 120_000 }, async () => {
    cli("query", "create", ...conn(), "--kind", "mean", "--epsilon", "1", "--dataset", "web2", "--users", "4",
      "--samples", "2", "--bound", "1", "--method", "ssl", "--id", "ts-sh-checks", "--shuffle-min-batch", "2",
      "--phase-timeout", "120");
    const collector = new DeviceTransport({ target: `127.0.0.1:${at.port}`, caFile: at.ca, serverName: "localhost" });
    const { token } = await collector.enroll({});
    const [task] = (await collector.getTasks(token, ["web2"], "ts-sh-checks")).tasks;
    collector.close();
    assert.ok(task.shuffle_ticket?.startsWith("t1."));
    const sealed = { queryId: "ts-sh-checks", phase: task.phase, group: task.group ?? 0, stage: task.stage ?? 0,
      taskDigest: task.task_digest, sealed: new Uint8Array(57), ticket: task.shuffle_ticket ?? "",
      attestation: at.attest[9] };
    const code = async (p: Promise<unknown>): Promise<[number, string]> => {
      try {
        await p;
        return [0, ""];
      } catch (e) {
        if (e instanceof RpcError) return [e.code, e.details];
        throw e;
      }
    };
    for (const protocol of ["connect", "grpc-web"] as const) {
      const s = shuffler(protocol);
      assert.equal((await code(s.submitSealed({ ...sealed, ticket: "forged.ticket" })))[0], grpc.status.UNAUTHENTICATED, protocol);
      assert.equal((await code(s.submitSealed({ ...sealed, ticket: token })))[0], grpc.status.UNAUTHENTICATED, protocol);
      assert.equal((await code(s.submitSealed({ ...sealed, attestation: "" })))[0], grpc.status.UNAUTHENTICATED, protocol);
      assert.deepEqual(await code(s.submitSealed({ ...sealed, queryId: "nope" })),
        [grpc.status.PERMISSION_DENIED, "the ticket was issued for another task (query, phase, group, stage or task digest)"],
        protocol);
      assert.equal((await code(s.submitSealed({ ...sealed, sealed: new Uint8Array(10) })))[0],
        grpc.status.INVALID_ARGUMENT, protocol);
    }
    assert.deepEqual(await shuffler("connect").submitSealed(sealed), { duplicate: false });
    assert.deepEqual(await shuffler("grpc-web").submitSealed(sealed), { duplicate: true });
    assert.equal((await code(shuffler("grpc-web").submitSealed({ ...sealed, sealed: new Uint8Array(58) })))[0],
      grpc.status.ALREADY_EXISTS);
  });
