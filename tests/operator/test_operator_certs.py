"""Issue 17 items 16–17: ``uldp collector certs`` keeps what only the operator may hold
(the CA key, the client key) out of the server's directory, every deploy recipe ships
only the server's directory to the collectors, and every recipe's ``certs`` command runs
as written (parents created)."""

from __future__ import annotations

import re
import shlex
import stat
from pathlib import Path

import pytest
from opcli import REPO, one_line_error, uldp

yaml = pytest.importorskip("yaml")

DEPLOY = REPO / "deploy"
SERVER_FILES = {"server.pem", "server.key", "ca.pem", "admin.token", "token-signing.key"}
ADMIN_ONLY = {"ca.key", "client.key", "client.pem"}


def _certs_args(command: str) -> list[str]:
    """The arguments after ``uldp collector certs`` of a shell command line."""
    words = shlex.split(command.replace("\\\n", " "))
    i = next(k for k in range(len(words) - 2)
             if words[k].endswith("uldp") and words[k + 1:k + 3] == ["collector", "certs"])
    out = words[i + 3:]
    end = next((k for k, w in enumerate(out) if w in ("&&", "||", ";", ")")), len(out))
    return [w.rstrip(")") for w in out[:end]]


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _run_certs(args: list[str], root: Path) -> None:
    """Run a recipe's ``certs`` arguments with absolute paths moved under ``root`` (and
    relative ones relative to it)."""
    moved = [str(root / a.lstrip("/")) if a.startswith("/") else a for a in args]
    moved = [a.replace("$(hostname -f)", "localhost") for a in moved]
    r = uldp("collector", "certs", *moved, cwd=root)
    assert r.returncode == 0, r.stderr


def _check_split(server: Path, admin: Path) -> None:
    assert {p.name for p in server.iterdir()} == SERVER_FILES
    assert {p.name for p in admin.iterdir()} >= ADMIN_ONLY
    assert (admin / "ca.pem").read_bytes() == (server / "ca.pem").read_bytes()
    assert (admin / "admin.token").read_bytes() == (server / "admin.token").read_bytes()
    assert stat.S_IMODE(admin.stat().st_mode) == 0o700


def test_certs_writes_server_and_admin_material_to_separate_directories(tmp_path):
    r = uldp("collector", "certs", "--out", str(tmp_path / "tls"))
    assert r.returncode == 0, r.stderr
    _check_split(tmp_path / "tls", tmp_path / "tls-admin")
    assert "keep it off the servers" in r.stdout
    r = uldp("collector", "certs", "--out", str(tmp_path / "a"), "--admin-out",
             str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    _check_split(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("admin", [".", "inner"])
def test_admin_directory_inside_the_server_directory_is_refused(tmp_path, admin):
    out = tmp_path / "tls"
    one_line_error(uldp("collector", "certs", "--out", str(out), "--admin-out",
                        str(out / admin)), "--admin-out", "outside --out")
    assert not out.exists()


def test_certs_creates_missing_parents(tmp_path):
    """The systemd recipe's ``certs --out /etc/uldp/tls`` on a host without /etc/uldp."""
    out = tmp_path / "etc" / "uldp" / "tls"
    r = uldp("collector", "certs", "--out", str(out))
    assert r.returncode == 0, r.stderr
    _check_split(out, tmp_path / "etc" / "uldp" / "tls-admin")


def test_kubernetes_secret_holds_only_the_server_directory(tmp_path):
    """The README's recipe, run as written: the directory the TLS secret is created from
    (mounted into every replica) has no CA key and no client key."""
    for doc in (DEPLOY / "README.md", DEPLOY / "k8s" / "deployment.yaml"):
        text = doc.read_text().replace("#   ", "").replace("#  ", "")
        certs = [m.group(0) for m in re.finditer(
            r"uldp collector certs --out (?:[^\n]*\\\n)*[^\n]*", text)
            if "uldp-collector" in m.group(0)]
        assert len(certs) == 1, doc
        args = _certs_args(certs[0])
        secret = re.search(r"kubectl create secret generic uldp-collector-tls "
                           r"--from-file=(\S+?)/?\s", text)
        assert secret is not None, doc
        assert secret.group(1) == _flag(args, "--out"), doc
        root = tmp_path / doc.name
        root.mkdir()
        _run_certs(args, root)
        _check_split(root / _flag(args, "--out"), root / _flag(args, "--admin-out"))


def test_compose_mounts_only_the_server_directory_into_the_collector(tmp_path):
    (doc,) = [d for d in yaml.safe_load_all((DEPLOY / "compose.yaml").read_text()) if d]
    svc = doc["services"]
    args = _certs_args(" ".join(svc["certs"]["command"]))
    out, admin = _flag(args, "--out"), _flag(args, "--admin-out")

    def volume_of(service: str, path: str) -> str | None:
        for v in svc[service].get("volumes", []):
            src, dst = v.split(":")[:2]
            if path == dst or path.startswith(dst.rstrip("/") + "/"):
                return src
        return None

    assert volume_of("certs", out) and volume_of("certs", admin)
    assert volume_of("certs", out) != volume_of("certs", admin)
    mounted = {v.split(":")[0] for v in svc["collector"].get("volumes", [])}
    assert volume_of("certs", out) in mounted
    assert volume_of("certs", admin) not in mounted
    _run_certs(args, tmp_path)
    _check_split(tmp_path / out.lstrip("/"), tmp_path / admin.lstrip("/"))


def test_systemd_recipe_runs_on_a_host_without_etc_uldp(tmp_path):
    unit = (DEPLOY / "systemd" / "uldp-collector.service").read_text()
    line = next(x for x in unit.splitlines() if "collector certs" in x)
    args = _certs_args(line.lstrip("# "))
    assert _flag(args, "--out") == "/etc/uldp/tls"
    _run_certs(args, tmp_path)  # tmp_path/etc does not exist
    _check_split(tmp_path / "etc/uldp/tls", tmp_path / _flag(args, "--admin-out").lstrip("/"))
