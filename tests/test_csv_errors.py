"""Own-data CSV mistakes as one line naming where (issue 29, item 8): a ``1e308`` cell
without ``--lo/--hi`` names its row and column (it used to end in "bin_width must be a
finite positive number, got inf"), a semicolon-separated file gets a delimiter hint, a
Latin-1 file names the row that is not UTF-8. ``uldp simulate ... --data`` in-process."""

from __future__ import annotations

import pytest

from uldp.collector.cli import main

FILES = {
    "big.csv": (b"user,minutes\nu1,5\nu2,1e308\nu3,7\n",
                ["row 3, column 'minutes'", "'1e308'", "--lo/--hi"]),
    "semi.csv": (b"user;minutes\nu1;5\nu2;6\n", ["delimiter", "';'", "comma-separated"]),
    "tabs.csv": (b"user\tminutes\nu1\t5\n", ["delimiter", "'\\t'"]),
    "latin.csv": (b"user,minutes\nu1,5\nu\xe9,6\nu3,7\n", ["row 3 is not UTF-8", "Latin-1",
                                                          "CSV UTF-8"]),
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_own_data_file_mistakes_are_one_line_naming_where(name, tmp_path, capsys):
    body, needles = FILES[name]
    path = tmp_path / name
    path.write_bytes(body)
    code = main(["simulate", "mean", "--data", str(path), "--user-col", "user",
                 "--value-col", "minutes", "--epsilon", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)


def test_with_a_range_a_huge_value_is_clamped_and_said(tmp_path, capsys):
    path = tmp_path / "big.csv"
    path.write_bytes(FILES["big.csv"][0])
    assert main(["simulate", "mean", "--data", str(path), "--user-col", "user", "--value-col",
                 "minutes", "--epsilon", "1", "--lo", "0", "--hi", "120"]) == 0
    err = capsys.readouterr().err
    assert "1 of 3 values lie outside [0, 120]" in err and "too few users" in err
