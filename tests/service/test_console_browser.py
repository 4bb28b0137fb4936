"""The analyst console in headless Chromium against a real collector (issue 20).

A collector process serves the console on its HTTP port (TLS); ``scripts/console-browser.mjs``
drives Debian's Chromium through playwright-core (from ``client-ts/node_modules``, installed
from the lockfile when missing): it signs in, fills "Before you run", creates the query from
that page, watches it while a fleet of real devices reports to it (started here when the
page says it created the query), and reads the plotted intervals. The test checks them
against ``uldp query result --json`` (the CLI, a separate client) and saves a screenshot of
every page; with ``ULDP_CONSOLE_SCREENSHOTS=docs`` they go to ``docs/img/`` (the README
shows them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.service.conftest import ADMIN_TOKEN
from uldp.collector.analyst import Analyst
from uldp.collector.simulation.fleet import FleetDataset, dataset_for_query, run_fleet

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
USERS = 240  # per query
#: the form the browser fills on "Before you run"
FORM = {"kind": "mean", "dataset": "steps", "epsilon": 2, "users": USERS, "samples": 50,
        "dim": 1, "bound": 1, "query_id": "steps-mean"}
#: the other queries shown (created here): id, kind, dim, population, extra, screenshot
OTHERS = [("langs", "distribution", 8, "zipf:1.1", None, "console-result-distribution"),
          ("velocity", "mean-l2", 4, "sphere", None, "console-result-vector"),
          ("risk", "classify", 1, "sine:0.0", {"grid": 8, "lo": [0.0], "hi": [1.0]},
           "console-result-classify")]


def _playwright() -> None:
    """playwright-core from client-ts's lockfile (npm ci when missing), and Chromium."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (the console test drives Chromium from Node)")
    if not Path(CHROMIUM).exists():
        r = subprocess.run(["bash", str(ROOT / "client-ts/scripts/ensure-chromium.sh")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"no Chromium at {CHROMIUM}: {r.stderr.strip()}")
    if not (ROOT / "client-ts/node_modules/playwright-core").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=ROOT / "client-ts", check=True, capture_output=True, timeout=600)


def _fleet(c, tmp_path: Path) -> dict:
    """Devices for the browser's query and the other queries (device i holds dataset i
    mod 4), reporting as real devices do."""
    sets = [FleetDataset("steps", dataset_for_query("mean", "gaussian", 50, 1, 1.0, 1),
                         modulo=4, residue=0)]
    for k, (_, kind, dim, dist, _, _) in enumerate(OTHERS, 1):
        sets.append(FleetDataset(OTHERS[k - 1][0] + "-data",
                                 dataset_for_query(kind, dist, 50, dim, 1.0, k + 1),
                                 modulo=4, residue=k))
    res = run_fleet(c.endpoint, tmp_path / "fleet", 4 * USERS, sets, concurrency=6, seed=9,
                    progress=False, timeout_s=600)
    return {"submitted": res.submitted, "errors": res.errors[:3], "rejected": res.rejected[:3]}


def _cli_result(c, query_id: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "uldp.collector.cli.service", "query", "result",
                        query_id, "--json", "--target", c.target, "--ca", str(c.pki.ca_cert),
                        "--admin-token-file", str(c.pki.directory / "admin.token")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_console_in_chromium(start_collector, tmp_path):
    _playwright()
    c = start_collector(subprocess_=True, http=True)
    analyst = Analyst(c.target, ca=c.pki.ca_cert, token=ADMIN_TOKEN)
    for qid, kind, dim, _, extra, _ in OTHERS:
        analyst.create(kind, epsilon=4.0, dataset=qid + "-data", users=USERS, samples=50,
                       dim=dim, extra=extra, query_id=qid)
    # an earlier query over the browser's dataset, cancelled: the budgets page adds it up
    analyst.create("mean", epsilon=0.5, dataset="steps", users=10, samples=50,
                   query_id="steps-pilot")
    analyst.cancel("steps-pilot")
    shots = ROOT / "docs" / "img" if os.environ.get("ULDP_CONSOLE_SCREENSHOTS") == "docs" \
        else tmp_path / "shots"
    env = {**os.environ, "ULDP_CONSOLE_URL": c.http_url, "ULDP_ADMIN_TOKEN": ADMIN_TOKEN,
           "ULDP_SERVER_PEM": str(c.pki.server_cert), "ULDP_SHOTS": str(shots),
           "ULDP_QUERY": json.dumps(FORM),
           "ULDP_OTHERS": json.dumps([[q[0], q[5]] for q in OTHERS])}
    node = subprocess.Popen(["node", str(ROOT / "scripts/console-browser.mjs")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    fleet: dict = {}
    runner = None
    assert node.stdout is not None
    for line in node.stdout:
        lines.append(line.rstrip())
        if line.startswith("CREATED ") and runner is None:  # the page made the query
            runner = threading.Thread(target=lambda: fleet.update(_fleet(c, tmp_path)))
            runner.start()
    node.wait(timeout=60)
    if runner is not None:
        runner.join(timeout=600)
    out = "\n".join(lines)
    assert node.returncode == 0, out
    assert fleet.get("submitted") == 4 * USERS and not fleet["errors"], (fleet, out)
    got = {x.split(" ", 1)[0]: json.loads(x.split(" ", 1)[1]) for x in lines
           if x.split(" ", 1)[0] in ("PLOT", "PREVIEW", "BUDGET")}
    plot = got["PLOT"]
    assert plot["id"] == FORM["query_id"]
    cli = _cli_result(c, plot["id"])
    assert plot["method"] == cli["method"]
    assert len(plot["intervals"]) == len(cli["values"])
    for iv in plot["intervals"]:  # the plotted numbers are the collector's, exactly
        j = iv["component"]
        assert (iv["value"], iv["low"], iv["high"]) == (cli["values"][j], cli["ci_low"][j],
                                                        cli["ci_high"][j])
    # the query the preview page created is the query the form described
    q = analyst.get(plot["id"])
    assert (q.kind, q.dataset, q.epsilon, q.target_users) == ("mean", "steps", 2.0, USERS)
    realised = cli["ci_high"][0] - cli["ci_low"][0]
    print(f"preview ±{got['PREVIEW']['half_width']:.4f} ({got['PREVIEW']['method']}), "
          f"realised width {realised:.4f}")
    for name in ("console-preview", "console-queries", "console-result", "console-budgets",
                 *[q[5] for q in OTHERS]):
        assert (shots / f"{name}.png").stat().st_size > 10_000, name
    assert np.isfinite(realised)
    budget = dict(got["BUDGET"]) if "BUDGET" in got else {}
    assert budget.get("steps") == 2.5 and budget.get("langs-data") == 4.0, budget
