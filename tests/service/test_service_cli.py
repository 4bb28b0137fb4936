"""The CLI as an operator uses it: ``uldp collector certs|serve``, ``uldp query ...``,
``uldp fleet run`` — real processes, real TLS on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from uldp.collector.simulation.demo import start_collector_process


def uldp(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "uldp.collector.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_workflow(tmp_path):
    base = {**os.environ}
    r = uldp("collector", "certs", "--out", str(tmp_path / "pki"), env=base)
    assert r.returncode == 0, r.stderr
    for name in ("ca.pem", "server.pem", "server.key", "admin.token", "token-signing.key"):
        assert (tmp_path / "pki" / name).exists()
    for name in ("ca.key", "client.pem", "client.key"):  # the operator's, not the server's
        assert (tmp_path / "pki-admin" / name).exists() and not (tmp_path / "pki" / name).exists()
    assert oct((tmp_path / "pki" / "server.key").stat().st_mode & 0o777) == "0o600"
    proc, port = start_collector_process(tmp_path, f"sqlite:///{tmp_path / 'c.db'}",
                                         tmp_path / "pki")
    try:
        env = {**base, "ULDP_TARGET": f"127.0.0.1:{port}",
               "ULDP_CA": str(tmp_path / "pki" / "ca.pem"),
               "ULDP_ADMIN_TOKEN_FILE": str(tmp_path / "pki" / "admin.token")}
        r = uldp("query", "create", "--kind", "mean", "--epsilon", "2", "--dataset", "steps",
                 "--users", "60", "--samples", "16", "--id", "cli1", "--json",
                 "--method", "two-stage", env=env)
        assert r.returncode == 0, r.stderr
        q = json.loads(r.stdout)
        assert q["query_id"] == "cli1" and q["state"] == "running" and len(q["phases"]) == 2
        r = uldp("query", "create", "--kind", "mean", "--epsilon", "1", "--dataset", "other",
                 "--users", "10", "--samples", "4", "--id", "cli2", env=env)
        assert r.returncode == 0 and "created query cli2" in r.stdout
        r = uldp("query", "list", env=env)
        assert "cli1" in r.stdout and "cli2" in r.stdout and "STATE" in r.stdout
        r = uldp("query", "cancel", "cli2", env=env)
        assert "cancelled" in r.stdout
        r = uldp("fleet", "run", "--query", "cli1", "--devices", "60", "--dist", "uniform",
                 "--seed", "3", "--concurrency", "8", "--json", env=env)
        assert r.returncode == 0, r.stderr + r.stdout
        fleet = json.loads(r.stdout)
        assert fleet["reports_acknowledged"] == 60 and fleet["errors"] == 0
        r = uldp("query", "status", "cli1", "--watch", "--json", env=env)
        assert r.returncode == 0
        assert json.loads(r.stdout.strip().splitlines()[-1])["state"] == "done"
        r = uldp("query", "status", "cli1", env=env)
        assert "done" in r.stdout and "30/30" in r.stdout
        r = uldp("query", "result", "cli1", "--json", env=env)
        res = json.loads(r.stdout)
        assert res["ci_low"][0] <= res["values"][0] <= res["ci_high"][0]
        # A gross-error check only (60 users): z-scores are calibrated (in-process, 20000
        # runs with random check-in orders: z mean -0.03, sd 1.03, |z| > 4 in 1.5e-4 of
        # runs), but the standard error is itself noisy at this size (sd 20 % of its mean),
        # so 6 standard errors bound the false-alarm rate only by ≈ 2e-5; 7 give ≈ 2e-6.
        assert abs(res["values"][0] - fleet["truth"][0]) < 7 * res["std_error"][0]
        r = uldp("query", "result", "cli1", env=env)
        assert "INTERVAL" in r.stdout
        r = uldp("query", "result", "cli2", env=env)
        assert r.returncode == 2 and "FAILED_PRECONDITION" in r.stderr
        (tmp_path / "wrong.token").write_text("not-the-admin-token-at-all\n")
        bad = {**env, "ULDP_ADMIN_TOKEN_FILE": str(tmp_path / "wrong.token")}
        r = uldp("query", "list", env=bad)
        assert r.returncode == 2 and "UNAUTHENTICATED" in r.stderr
        bad = {**env, "ULDP_ADMIN_TOKEN_FILE": str(tmp_path / "pki" / "ca.pem")}
        r = uldp("query", "list", env=bad)
        assert r.returncode == 2 and "one line" in r.stderr
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # graceful shutdown on SIGTERM
