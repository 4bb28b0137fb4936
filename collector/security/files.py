"""Files that hold secrets or private data: created 0600 under a 0077 umask, never left
readable by other users (invariant 5, docs/architecture.md; issue 12).

* :func:`private_umask` — the collector process creates everything owner-only (the
  SQLite database and its ``-wal``/``-shm``/``-journal`` files, a generated admin token,
  the ready/port files);
* :func:`restrict_sqlite_files` — an existing database (and its side files) created by an
  older version with 0644 is narrowed to 0600 before it is opened: when no token-signing
  key file is given, the key lives in that database;
* :func:`write_private` — write a file with mode 0600 even when it already exists with a
  wider mode (``uldp collector certs --force``);
* :func:`check_not_world_readable` — refuse to serve with a key file every local user can
  read (group-readable is allowed: Kubernetes secret volumes with ``fsGroup`` are 0440).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["check_not_world_readable", "private_umask", "restrict_sqlite_files",
           "sqlite_path", "write_private"]

SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def private_umask() -> int:
    """Set the process umask to 0077 (owner-only new files); returns the previous one."""
    return os.umask(0o077)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite database URL or plain path; None for other backends and for
    in-memory databases."""
    if "://" not in url:
        return Path(url) if url not in ("", ":memory:") else None
    scheme, _, rest = url.partition("://")
    if scheme.split("+")[0] != "sqlite":
        return None
    path = rest[1:] if rest.startswith("/") else rest  # sqlite:///rel, sqlite:////abs
    path = path.split("?")[0]
    return Path(path) if path not in ("", ":memory:") else None


def restrict_sqlite_files(db_file: Path) -> list[Path]:
    """chmod 0600 the database file and its side files that exist and are ours; returns
    the files whose mode was narrowed."""
    changed = []
    for suffix in SQLITE_SIDE_FILES:
        p = Path(str(db_file) + suffix)
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077:
            p.chmod(0o600)
            changed.append(p)
    return changed


def write_private(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` with mode 0600 (also narrowing an existing file)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(data)
    finally:
        if fd >= 0:
            os.close(fd)


def check_not_world_readable(path: Path, flag: str) -> str | None:
    """A one-line complaint when ``path`` can be read by every local user, else None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & 0o004:
        return (f"{flag} {path} is readable by every user on this machine (mode "
                f"{stat.S_IMODE(mode):04o}); run `chmod 600 {path}`")
    return None
