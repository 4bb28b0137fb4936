"""Issue 12 §1 and §6: every operator mistake is one line naming the flag and the fix,
exit code 2, no traceback (``--debug`` shows it), and nothing is written; every flag has
help text; ``--mode tuned`` is accepted by ``query create`` as by ``simulate``."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

import pytest
from opcli import free_port, one_line_error, uldp


def _listdir(p: Path) -> list[str]:
    return sorted(os.listdir(p))


def test_certs_into_an_existing_ca_names_force(pki_dir: Path):
    before = {f: (pki_dir / f).read_bytes() for f in _listdir(pki_dir)}
    one_line_error(uldp("collector", "certs", "--out", str(pki_dir)), "--out", "--force")
    assert {f: (pki_dir / f).read_bytes() for f in _listdir(pki_dir)} == before


@pytest.mark.parametrize("case", ["port-in-use", "db-dir-missing", "postgres-down",
                                  "tls-dir-missing", "ttl-0", "ttl-neg", "ttl-nan",
                                  "world-readable-signing-key"])
def test_serve_mistakes_are_one_line_and_write_nothing(case, pki_dir, tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    admin = tmp_path / "new-admin.token"  # serve would create it: it must not
    args = ["collector", "serve", "--tls-dir", str(pki_dir), "--admin-token-file",
            str(admin), "--port", "0"]
    blocker = None
    if case == "port-in-use":
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        args += ["--port", str(blocker.getsockname()[1])]
        needles: tuple[str, ...] = ("--port", "already in use")
    elif case == "db-dir-missing":
        args += ["--db", str(tmp_path / "nonexistent" / "dir" / "x.db")]
        needles = ("--db", "does not exist")
    elif case == "postgres-down":
        args += ["--db", f"postgresql://uldp:s3cret-pw@127.0.0.1:{free_port()}/uldp"]
        needles = ("--db", "uldp:***@", "refused")
    elif case == "tls-dir-missing":
        args = ["collector", "serve", "--tls-dir", str(tmp_path / "nonexistent")]
        needles = ("--tls-dir", "uldp collector certs")
    elif case.startswith("ttl-"):
        args += ["--token-ttl", {"ttl-0": "0", "ttl-neg": "-5", "ttl-nan": "nan"}[case]]
        needles = ("--token-ttl", "finite positive")
    else:
        key = tmp_path / "signing.key"
        key.write_bytes((pki_dir / "token-signing.key").read_bytes())
        key.chmod(0o644)
        args += ["--token-key-file", str(key)]
        needles = ("--token-key-file", "chmod 600")
    try:
        r = uldp(*args, cwd=work, timeout=60)
    finally:
        if blocker is not None:
            blocker.close()
    err = one_line_error(r, *needles)
    assert "s3cret-pw" not in err
    assert _listdir(work) == []  # no database, no -wal/-shm
    assert not admin.exists() and not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("args,flag", [
    (["--devices", "0"], "--devices"),
    (["--epsilon", "-1"], "--epsilon"),
    (["--samples", "0"], "--samples"),
    (["--devices", "3"], "--devices"),        # too few for 5 queries
    (["--epsilon", "nan"], "--epsilon"),
])
def test_demo_argument_mistakes(args, flag, tmp_path):
    one_line_error(uldp("demo", "--workdir", str(tmp_path / "w"), *args, timeout=60), flag)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("argv,flag", [
    (["query", "create", "--kind", "mean", "--epsilon", "1", "--dataset", "d", "--users",
      "-5", "--samples", "10"], "--users"),
    # the collector's rules, checked before connecting (the message of every surface)
    (["query", "create", "--kind", "mean", "--epsilon", "inf", "--dataset", "d", "--users",
      "5", "--samples", "10"], "epsilon"),
    (["fleet", "run", "--devices", "0", "--kind", "mean", "--samples", "3", "--dataset",
      "d"], "--devices"),
    (["simulate", "mean", "--users", "-5"], "--users"),
    (["collector", "serve", "--port", "70000"], "--port"),
])
def test_bad_numbers_name_the_flag(argv, flag, pki_dir):
    conn = ["--ca", str(pki_dir / "ca.pem"), "--admin-token-file",
            str(pki_dir / "admin.token")] if argv[0] in ("query",) else (
        ["--ca", str(pki_dir / "ca.pem")] if argv[0] == "fleet" else [])
    if not flag.startswith("--"):
        one_line_error(uldp(*argv, *conn), f"INVALID_ARGUMENT: {flag} must be")
        return
    err = one_line_error(uldp(*argv, *conn), f"argument {flag}")
    assert "--help" in err


def test_value_col_does_not_swallow_the_file(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("user,v,w\n" + "".join(f"u{i % 7},{i % 3},{i % 5}\n" for i in range(60)))
    r = uldp("central", "mean", "--user-col", "user", "--value-col", "v", str(f),
             "--epsilon", "1", "--method", "wme", "--lo", "0", "--hi", "5", "--seed", "1",
             "--json")
    assert r.returncode == 0, r.stderr
    assert isinstance(json.loads(r.stdout)["estimate"], float)
    r = uldp("central", "mean", "--user-col", "user", "--value-col", "v,w", str(f),
             "--epsilon", "1", "--method", "wme", "--lo", "0", "--hi", "5", "--seed", "1",
             "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["estimate"]) == 2
    one_line_error(uldp("central", "mean", "--user-col", "user", "--value-col", "v",
                        str(tmp_path / "missing.csv"), "--epsilon", "1"), "missing.csv")


def test_wrong_ca_and_no_collector_are_one_line(collector, tmp_path):
    other = tmp_path / "other"
    assert uldp("collector", "certs", "--out", str(other)).returncode == 0
    wrong = ["--target", collector.target, "--ca", str(other / "ca.pem"),
             "--admin-token-file", str(collector.pki / "admin.token")]
    err = one_line_error(uldp("query", "list", *wrong), "--ca", "not signed by")
    assert "ssl_transport_security" not in err
    r = uldp("collector", "health", *wrong[:4])
    assert r.returncode == 1 and "ssl_transport_security" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    gone = ["--target", f"127.0.0.1:{free_port()}", "--ca", str(collector.pki / "ca.pem"),
            "--admin-token-file", str(collector.pki / "admin.token")]
    one_line_error(uldp("query", "list", *gone), "--target", "connection refused")
    one_line_error(uldp("query", "list", *gone[:2], "--ca", str(tmp_path / "nope.pem"),
                        *gone[4:]), "--ca", "nope.pem")


def test_debug_shows_the_traceback(tmp_path):
    r = uldp("--debug", "collector", "serve", "--tls-dir", str(tmp_path / "nonexistent"))
    assert r.returncode == 2 and "Traceback" in r.stderr and "--tls-dir" in r.stderr
    r = uldp("collector", "serve", "--debug", "--tls-dir", str(tmp_path / "nonexistent"))
    assert r.returncode == 2 and "Traceback" in r.stderr


def test_every_flag_has_help():
    from uldp.collector.cli.app import build_parser

    missing = []

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, f"{path} {name}")
            elif a.help != argparse.SUPPRESS and not (a.help or "").strip():
                missing.append(f"{path} {'/'.join(a.option_strings) or a.dest}")
    walk(build_parser(), "uldp")
    assert not missing, missing


def test_query_create_accepts_mode_tuned(collector):
    r = uldp("query", "create", *collector.conn(), "--kind", "mean-linf", "--dim", "4",
             "--epsilon", "1.5", "--dataset", "tuned", "--users", "500", "--samples", "10",
             "--mode", "tuned", "--id", "tuned1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["mode"] == "tuned"
