"""``uldp privacy shuffle`` as an operator meets it (issue 25, item 6): the issue's two
commands (a real subprocess) print bounds within its figures, ``--json`` is one object,
and every mistake is one line naming the flag, exit code 2, before any computation (the
same ``main`` in process: each subprocess costs seconds of imports)."""

from __future__ import annotations

import json
import subprocess

import pytest
from opcli import one_line_error, uldp

from uldp.collector.cli.app import main

BASE = ("privacy", "shuffle", "--users", "100000", "--epsilon0", "1", "--delta", "1e-8")


def test_the_commands_of_the_issue():
    r = uldp(*BASE, "--mechanism", "grr", "--k", "256")
    assert r.returncode == 0, r.stderr
    eps = float(r.stdout.split("central ε = ")[1].split()[0])
    assert eps <= 0.0019 and "variation-ratio parameters" in r.stdout
    r = uldp(*BASE, "--mechanism", "any", "--queries", "100", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["epsilon"] <= 0.0170 and out["composed_epsilon"] <= 0.24
    assert out["sum_epsilon"] == pytest.approx(100 * out["epsilon"])
    assert out["amplified"] and out["mechanism"] == "any" and "variation-ratio" in out["bound"]


@pytest.mark.parametrize("args,needles", [
    (("--mechanism", "grr"), ("--k", "required")),
    (("--mechanism", "pm", "--k", "8"), ("--k", "applies")),
    (("--mechanism", "oue", "--k", "1"), ("--k 1",)),
    (("--mechanism", "oue", "--k", "70000"), ("--k 70000",)),
    (("--mechanism", "rappor",), ("--mechanism", "rappor")),
    (("--queries", "0"), ("--queries",)),
    (("--queries", "1000000"), ("--queries 1000000",)),
])
def test_mistakes_are_one_line(args, needles, capsys):
    one_line_error(_in_process([*BASE, *args], capsys), *needles)


@pytest.mark.parametrize("flag,value", [("--users", "0"), ("--users", "1e9"),
                                        ("--users", "1000000000"), ("--epsilon0", "0"),
                                        ("--epsilon0", "nan"), ("--epsilon0", "50"),
                                        ("--delta", "0"), ("--delta", "1"),
                                        ("--delta", "x")])
def test_bad_numbers_name_the_flag(flag, value, capsys):
    args = dict(zip(BASE[2::2], BASE[3::2], strict=True)) | {flag: value}
    r = _in_process(["privacy", "shuffle", *[x for kv in args.items() for x in kv]], capsys)
    one_line_error(r, flag)


def _in_process(argv: list[str], capsys) -> subprocess.CompletedProcess[str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's errors
        code = int(exc.code or 0)
    got = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, got.out, got.err)
