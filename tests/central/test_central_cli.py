"""``uldp central`` (issue 5 §2): every subcommand on a small CSV, and its clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from uldp.collector.cli.app import main


@pytest.fixture()
def csv_file(tmp_path):
    g = np.random.default_rng(0)
    lines = ["user,value,region,other"]
    for u in range(300):
        for _ in range(int(g.integers(1, 5))):
            lines.append(f"u{u},{g.normal(2.0, 1.0):.4f},{g.choice(['a', 'b'])},x")
    p = tmp_path / "data.csv"
    p.write_text("\n".join(lines) + "\n")
    return p


def _run(capsys, *argv):
    code = main(["central", *argv, "--seed", "1", "--json"])
    return code, capsys.readouterr()


@pytest.mark.parametrize("argv", [
    ["mean", "--epsilon", "2", "--delta", "1e-5", "--method", "hlm", "--bound", "6",
     "--allow-small-n"],
    ["mean", "--epsilon", "2", "--method", "wme", "--bound", "6"],
    ["mean", "--epsilon", "2", "--lo", "-6", "--hi", "6"],
    ["mean", "--epsilon", "2", "--lo", "-6", "--hi", "6", "--method", "simple"],
    ["mean", "--epsilon", "2", "--lo", "-6", "--hi", "6", "--method", "pmwm"],
    ["robust-mean", "--epsilon", "2", "--lo", "-6", "--hi", "6"],
    ["robust-mean", "--epsilon", "2", "--method", "pmwm"],
    ["robust-mean", "--epsilon", "2", "--method", "sa", "--statistic", "mean"],
])
def test_mean_releases_carry_a_privacy_record(csv_file, capsys, argv):
    code, out = _run(capsys, argv[0], str(csv_file), "--user-col", "user", "--value-col",
                     "value", *argv[1:])
    assert code == 0, out.err
    d = json.loads(out.out)
    assert np.isfinite(d["estimate"])
    assert d["privacy"]["unit"] == "user" and d["privacy"]["epsilon"] == pytest.approx(2.0)
    assert "mean" in d["estimand"]  # every release says which mean it estimates
    if "sa" not in argv:
        lo, hi = d["interval"]
        assert lo <= d["estimate"] <= hi
    if "--lo" in argv or "--bound" in argv:
        assert -6 <= d["estimate"] <= 6


def test_default_method_prints_estimand_and_interval(csv_file, capsys):
    assert main(["central", "mean", str(csv_file), "--user-col", "user", "--value-col",
                 "value", "--epsilon", "1", "--lo", "-4", "--hi", "8", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "(--method adaptive)" in out
    assert "estimand: mean of user means" in out
    assert "95% interval [" in out


def test_subset_stats_with_clip_user(csv_file, capsys):
    code, out = _run(capsys, "subset-stats", str(csv_file), "--user-col", "user",
                     "--value-col", "value", "--subset-col", "region", "--epsilon", "1",
                     "--upper", "6", "--clip-user")
    assert code == 0, out.err
    d = json.loads(out.out)
    assert set(d["estimate"]) == {"a", "b"}


def test_plan_is_printed_before_the_release(csv_file, capsys):
    assert main(["central", "subset-stats", str(csv_file), "--user-col", "user",
                 "--value-col", "value", "--subset-col", "region", "--epsilon", "1",
                 "--upper", "6", "--clip-user", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert out.index("Clip-User plan") < out.index("privacy:")


@pytest.mark.parametrize("content,needle", [
    ("user,value\nu1,1.0\nu2,abc\n", "row 3, column 'value': 'abc' is not a number"),
    ("user,value\nu1,nan\n", "NaN or infinite"),
    ("user,value\n", "no data rows"),
    ("usr,value\nu1,1\n", "no column 'user'"),
    ("user,value\n,1\n", "row 2: empty 'user'"),
])
def test_bad_csv_gives_a_clear_error(tmp_path, capsys, content, needle):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    code = main(["central", "robust-mean", str(p), "--user-col", "user", "--value-col",
                 "value", "--epsilon", "1"])
    assert code == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("extra,needle", [
    ([], "--lo and --hi (the public range of one value"),
    (["--lo", "1"], "--lo and --hi go together"),
    (["--lo", "5", "--hi", "1"], "--lo must be below --hi"),
    (["--lo", "0", "--hi", "1", "--bound", "2"], "either --bound B or --lo/--hi"),
    (["--method", "hlm", "--bound", "6"], "--delta is required for --method hlm"),
    (["--method", "hlm", "--bound", "6", "--delta", "1e-5"], "--allow-small-n"),
    (["--lo", "0", "--hi", "1", "--alpha", "2"], "--alpha must be in (0, 1)"),
    (["--lo", "0", "--hi", "1", "--epsilon", "0"], "--epsilon must be"),
])
def test_bad_flags_name_the_flag(csv_file, capsys, extra, needle):
    argv = ["central", "mean", str(csv_file), "--user-col", "user", "--value-col", "value",
            "--epsilon", "1", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1  # one clear line


def test_two_value_columns_are_refused_by_the_scalar_methods(tmp_path, capsys):
    p = tmp_path / "two.csv"
    p.write_text("user,a,b\nu1,1,2\nu2,3,4\n")
    assert main(["central", "mean", str(p), "--user-col", "user", "--value-col", "a,b",
                 "--epsilon", "1", "--lo", "0", "--hi", "5"]) == 2
    assert "--value-col: --method adaptive takes exactly one value column" in \
        capsys.readouterr().err


def test_budget_that_cannot_work(csv_file, capsys):
    assert main(["central", "robust-mean", str(csv_file), "--user-col", "user",
                 "--value-col", "value", "--epsilon", "-1"]) == 2
    assert "epsilon" in capsys.readouterr().err
    assert main(["central", "mean", str(csv_file) + ".missing", "--user-col", "user",
                 "--value-col", "value", "--epsilon", "1"]) == 2
