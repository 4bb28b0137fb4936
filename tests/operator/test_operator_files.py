"""Issue 12 §3: safe files. The collector's SQLite database and its -wal/-shm are 0600
(created under umask 0077, an older wider file is narrowed), so the token-signing key
kept in it is not readable by another user; ``certs --force`` re-applies 0600; the
systemd unit sets UMask=0077; .gitignore covers what the README would write."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from opcli import REPO, start_serve, stop_serve, uldp


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _as_nobody(*cmd: str) -> subprocess.CompletedProcess[str] | None:
    """Run ``cmd`` as user 'nobody' when this test runs as root (else None)."""
    runuser = shutil.which("runuser")
    if os.geteuid() != 0 or not runuser:
        return None
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return None
    return subprocess.run([runuser, "-u", "nobody", "--", *cmd], capture_output=True,
                          text=True, timeout=30)


def test_fresh_database_is_owner_only_and_other_users_cannot_read_the_key(pki_dir):
    # a world-traversable directory (pytest's tmp tree is private, which would hide the
    # file modes): only the modes of the files themselves protect them here
    work = Path(tempfile.mkdtemp(prefix="uldp-op-files-"))
    try:
        work.chmod(0o755)
        tls = work / "tls"  # no token-signing.key: the collector keeps the key in the DB
        tls.mkdir()
        for f in ("server.pem", "server.key", "ca.pem", "admin.token"):
            shutil.copy2(pki_dir / f, tls / f)
        c = start_serve(tls, work)
        try:
            r = uldp("query", "create", *c.conn(), "--kind", "mean", "--epsilon", "1",
                     "--dataset", "d", "--users", "10", "--samples", "5")
            assert r.returncode == 0, r.stderr
            files = [c.db, Path(f"{c.db}-wal"), Path(f"{c.db}-shm")]
            for f in files:
                assert f.exists() and _mode(f) == 0o600, (f, oct(_mode(f)))
            r = subprocess.run(["stat", "-c", "%a", str(c.db)], capture_output=True,
                               text=True)
            assert r.stdout.strip() == "600"
            denied = _as_nobody("cat", str(c.db))
            if denied is not None:
                assert denied.returncode != 0 and "Permission denied" in denied.stderr
                allowed = _as_nobody("cat", str(tls / "ca.pem"))  # the check itself works
                assert allowed is not None and allowed.returncode == 0
        finally:
            assert stop_serve(c) == 0
        # an older database left 0644 is narrowed when the collector opens it
        for f in (c.db, Path(f"{c.db}-wal"), Path(f"{c.db}-shm")):
            if f.exists():
                f.chmod(0o644)
        c = start_serve(tls, work)
        try:
            assert _mode(c.db) == 0o600
        finally:
            assert stop_serve(c) == 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_certs_force_reapplies_owner_only_modes(tmp_path):
    out = tmp_path / "pki"
    assert uldp("collector", "certs", "--out", str(out)).returncode == 0
    secret = ["server.key", "admin.token", "token-signing.key", "../pki-admin/ca.key",
              "../pki-admin/client.key", "../pki-admin/admin.token"]
    for f in secret:
        assert _mode(out / f) == 0o600, f
        (out / f).chmod(0o644)
    old_ca = (out / "ca.pem").read_bytes()
    r = uldp("collector", "certs", "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    for f in secret:
        assert _mode(out / f) == 0o600, f
    assert (out / "ca.pem").read_bytes() != old_ca


def test_systemd_unit_sets_a_private_umask():
    unit = (REPO / "deploy" / "systemd" / "uldp-collector.service").read_text()
    assert "\nUMask=0077\n" in unit


@pytest.mark.parametrize("path", ["pki/ca.key", "pki/admin.token", "pki/token-signing.key",
                                  "pki-admin/ca.key", "pki-admin/client.pem", "tls-admin/x",
                                  "uldp.db", "uldp.db-wal", "uldp.db-shm",
                                  "uldp-collector.db", "x/collector.db", "tls/server.key"])
def test_gitignore_covers_what_the_readme_writes(path):
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    r = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", path])
    assert r.returncode == 0, f"{path} is not ignored"
