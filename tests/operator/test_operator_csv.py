"""Issue 17 items 20 and 25: one CSV reader for every command (``uldp.collector.csvdata``).

Each command that reads per-user rows — ``central mean``, ``central robust-mean``,
``central subset-stats``, ``simulate KIND --data`` — accepts a UTF-8 file with a BOM,
strips whitespace (``u1``, ``u1 `` and `` u1`` are one user), refuses an empty user id or
category and a non-numeric value with one line naming the row and the column (nothing
released), and says on stderr how many values it clamped into ``--lo/--hi``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from opcli import one_line_error, uldp

#: command line (file name appended) -> how to read the number of users from its JSON
COMMANDS = {
    "central-mean": (["central", "mean", "--user-col", "user", "--value-col", "v", "--lo",
                      "0", "--hi", "10", "--epsilon", "1", "--seed", "1", "--json"],
                     lambda d: d["privacy"]["public"]["n_users"]),
    "central-robust": (["central", "robust-mean", "--user-col", "user", "--value-col", "v",
                        "--lo", "0", "--hi", "10", "--epsilon", "1", "--seed", "1",
                        "--json"], lambda d: d["privacy"]["public"]["n_users"]),
    "central-subset": (["central", "subset-stats", "--user-col", "user", "--value-col", "v",
                        "--subset-col", "cat", "--upper", "10", "--epsilon", "1", "--seed",
                        "1", "--json"], lambda d: d["privacy"]["public"]["n_users"]),
    "simulate-mean": (["simulate", "mean", "--user-col", "user", "--value-col", "v", "--lo",
                       "0", "--hi", "10", "--json", "--data"], lambda d: d["users"]),
    "simulate-distribution": (["simulate", "distribution", "--user-col", "user",
                               "--category-col", "cat", "--dim", "3", "--json", "--data"],
                              lambda d: d["users"]),
}


def _rows(n_users: int = 60, spaced: bool = False) -> list[str]:
    g = np.random.default_rng(3)
    rows = ["user,v,cat"]
    for u in range(n_users):
        for k in range(4):
            uid = f"u{u}"
            if spaced:  # the same user written three ways
                uid = (uid, f"{uid} ", f" {uid}", uid)[k]
            rows.append(f"{uid},{g.uniform(0, 10):.3f},{'abc'[(u + k) % 3]}")
    return rows


def _write(path: Path, rows: list[str], bom: bool = False) -> Path:
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + ("\n".join(rows) + "\n").encode())
    return path


def _same(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "seconds"}


def _run(name: str, path: Path):
    argv, _ = COMMANDS[name]
    if argv[-1] == "--data":
        return uldp(*argv, str(path))
    return uldp(*argv[:2], str(path), *argv[2:])


@pytest.mark.parametrize("name", COMMANDS)
def test_bom_and_whitespace(name, tmp_path):
    plain = _run(name, _write(tmp_path / "plain.csv", _rows()))
    assert plain.returncode == 0, plain.stderr
    users = COMMANDS[name][1]
    assert users(json.loads(plain.stdout)) == 60
    bom = _run(name, _write(tmp_path / "bom.csv", _rows(), bom=True))
    assert bom.returncode == 0, bom.stderr
    assert _same(json.loads(bom.stdout)) == _same(json.loads(plain.stdout))
    spaced = _run(name, _write(tmp_path / "spaced.csv", _rows(spaced=True), bom=True))
    assert spaced.returncode == 0, spaced.stderr
    assert users(json.loads(spaced.stdout)) == 60


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("bad,needle", [
    ("  ,1.0,a", "empty 'user'"),
    ("u1,abc,a", "'abc' is not a number"),
    ("u1,,a", "empty"),
    ("u1,nan,a", "NaN or infinite"),
    ("u1,1.0,  ", "empty 'cat'"),
])
def test_bad_cells_are_one_line_naming_row_and_column(name, bad, needle, tmp_path):
    argv = COMMANDS[name][0]
    reads_v = "--value-col" in argv
    reads_cat = "cat" in argv
    if ("'cat'" in needle and not reads_cat) or (bad.split(",")[1] != "1.0" and not reads_v):
        pytest.skip("the command does not read that column")
    rows = _rows()
    rows.insert(5, bad)
    r = _run(name, _write(tmp_path / "bad.csv", rows))
    one_line_error(r, "row 6", needle)
    assert r.stdout == ""


@pytest.mark.parametrize("name", [n for n, (a, _) in COMMANDS.items() if "--value-col" in a])
def test_values_outside_the_range_are_clamped_and_counted(name, tmp_path):
    rows = _rows()
    rows[3] = rows[3].split(",")[0] + ",12.5,a"
    rows[7] = rows[7].split(",")[0] + ",-3,b"
    r = _run(name, _write(tmp_path / "out.csv", rows))
    assert r.returncode == 0, r.stderr
    notes = [x for x in r.stderr.splitlines() if "outside" in x]
    assert len(notes) == 1 and "2 of 240 values" in notes[0] and "clamped" in notes[0], \
        r.stderr


def test_not_utf8_is_one_line(tmp_path):
    p = tmp_path / "latin1.csv"
    p.write_bytes("user,v\nJosé,1\n".encode("latin-1"))
    one_line_error(uldp("central", "mean", str(p), "--user-col", "user", "--value-col", "v",
                        "--lo", "0", "--hi", "2", "--epsilon", "1"), "not UTF-8")
