"""Issue 12 §4: ``uldp demo`` shows progress with an ETA also when stdout is not a
terminal (plain lines, no carriage returns), ends with a table a person reads at a glance
(with a legend of its columns), and every README example states its run time."""

from __future__ import annotations

import re

from opcli import REPO, uldp


def test_demo_piped_prints_progress_lines_and_a_readable_table():
    r = uldp("demo", "--devices", "150", "--gateways", "2", "--concurrency", "8",
             "--seed", "5", env={"ULDP_PROGRESS_SECONDS": "0.5"}, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "\r" not in out  # not a terminal: plain lines
    progress = [x for x in out.splitlines() if x.startswith("fleet [")]
    assert len(progress) >= 2, out
    assert all(("ETA" in x or x.endswith("done")) for x in progress)
    assert progress[-1].endswith("done") and "150/150 devices done" in progress[-1]
    head = next(x for x in out.splitlines() if x.startswith("query ") and "covered" in x)
    for col in ("coord", "users", "truth", "estimate", "95% interval", "error", "covered"):
        assert col in head
    for col in ("truth", "estimate", "95% interval", "error", "covered"):  # the legend
        assert re.search(rf"^  {re.escape(col)}\s+\S", out, re.M), col
    rows = [x for x in out.splitlines() if re.search(r"\]\s+[+-]\d\.\d{4}\s+(yes|NO)$", x)]
    assert len(rows) == 1 + 4 + 4 + 4 + 8  # one per component of the 5 queries
    assert re.search(r"^150 reports from 150 devices in .*intervals hold the truth", out, re.M)


def test_every_readme_command_states_its_run_time():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert blocks
    missing = []
    for block in blocks:
        for line in block.splitlines():
            cmd = line.strip()
            if not cmd.startswith(("uldp ", "pip ", "python ")) and " uldp " not in cmd:
                continue
            if cmd.endswith("&") or cmd.startswith(("A=", "export ")):
                continue  # background server / variables: no run time of their own
            if not re.search(r"#.*\((~|<)\s*\d+(\.\d+)?\s*(s|min)\b", cmd):
                missing.append(cmd)
    assert not missing, missing
