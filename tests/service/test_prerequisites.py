"""The test command's prerequisites (issue 29, item 6): under ``CI=true`` a missing
PostgreSQL fails the run instead of skipping its tests (after ``scripts/ensure-postgres.sh``
had its chance to install it); on a developer's machine the tests are skipped with the
reason and how to install it (README, "Set up")."""

from __future__ import annotations

import subprocess

import pytest

from tests.service import conftest


def test_missing_postgres_skips_locally_and_fails_under_ci(monkeypatch):
    calls = []
    monkeypatch.setattr(conftest, "_pg_bin", lambda name: None)
    monkeypatch.setattr(conftest.subprocess, "run", lambda argv, **kw: calls.append(argv)
                        or subprocess.CompletedProcess(argv, 1))
    gen = conftest.postgres.__wrapped__  # the fixture's function
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install postgresql"):
        next(gen(None))
    assert calls == []  # nothing is installed on a developer's machine
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: a missing prerequisite fails"):
        next(gen(None))
    assert calls and calls[0][-1].endswith("scripts/ensure-postgres.sh")


def test_the_install_script_is_idempotent_where_postgres_is_found():
    """Where the binaries exist (this machine, CI), the script changes nothing and exits 0."""
    if conftest._pg_bin("initdb") is None:
        pytest.skip("no PostgreSQL here to check the no-op against")
    r = subprocess.run(["bash", str(conftest.Path(conftest.__file__).resolve().parents[2]
                                    / "scripts" / "ensure-postgres.sh")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
