"""The device's crash-safe privacy ledger (§1.3 INV-1, INV-4; invariants 1, 3, 6 in
docs/architecture.md).

See ``docs/privacy.md`` ("The ledger"). One SQLite file in the device's state directory,
one row per query the device has accepted a task for. Budgets are counted in integer
units of 2^-24 (``uldp.client.budget``): no float slack anywhere.

A row goes through these states:

``reserved``
    The task passed every public check and its ε is charged — in the same transaction
    that checks the budget and the one-report-per-query rule — **before** the device
    touches its data. From here on the device owes exactly one report for the query,
    whatever its data are (totality).
``pending``
    The report bytes are stored; they are what is sent, and re-sent after a crash or a
    lost acknowledgement (never a fresh noisy draw, which would spend the budget twice).
``acknowledged`` / ``rejected``
    The collector's answer. The spend stays either way: the bytes left the device.

A crash between ``reserved`` and ``pending`` leaves a charged row without a report; the
device then computes the report afresh (nothing was sent, so nothing was released) and
sends it (:meth:`uldp.client.device.Device.resend_pending`). With ``durable=True`` (the
default) every commit is fsynced (``synchronous=FULL``); simulated fleets pass
``durable=False`` (survives a process crash, not a power cut).

**Many devices in one file.** A gateway that runs many devices can keep their state in
one :class:`StateFile` instead of one directory per device: every device has its own rows
(its ledger entries and its identity, keyed by the device's name in the ``owner``
column), and every ledger update is one transaction of one device, with the same checks
and the same states — so each device's ledger stays separate and crash-safe, while the
gateway pays for one open file instead of thousands.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uldp.client.budget import EPS_DENOMINATOR, epsilon_units, units_to_epsilon

__all__ = ["STATES", "AlreadyParticipated", "BudgetExceeded", "Ledger", "LedgerEntry",
           "LedgerError", "StateFile", "StateSlot"]

STATES = ("reserved", "pending", "acknowledged", "rejected")

_COLUMNS = ("query_id, task_digest, phase, eps_units, report, state, created_at, detail, "
            "task")
_TABLE = ("CREATE TABLE IF NOT EXISTS entries (query_id TEXT NOT NULL, "
          "task_digest TEXT NOT NULL, phase INTEGER NOT NULL, epsilon REAL NOT NULL, "
          "report BLOB NOT NULL, state TEXT NOT NULL, created_at REAL NOT NULL, "
          "detail TEXT NOT NULL DEFAULT '', eps_units INTEGER, task BLOB NOT NULL DEFAULT x'', "
          "owner TEXT NOT NULL DEFAULT ''")


class LedgerError(Exception):
    """Base class of ledger refusals."""


class BudgetExceeded(LedgerError):
    """The task's ε does not fit in the device's remaining budget."""


class AlreadyParticipated(LedgerError):
    """The device already accepted a (different) task for this query."""


@dataclass(frozen=True)
class LedgerEntry:
    query_id: str
    task_digest: str
    phase: int
    eps_units: int  # ε charged, in units of 2^-24
    report: bytes  # b"" while reserved
    state: str  # one of STATES
    created_at: float
    detail: str = ""
    task: bytes = b""  # the serialized Task message (to recompute after a crash)

    @property
    def epsilon(self) -> float:
        return units_to_epsilon(self.eps_units)


class Ledger:
    """Budget ledger and report store of one device: its own SQLite file at ``path``, or
    its rows in a shared :class:`StateFile` (:meth:`StateFile.ledger`)."""

    def __init__(self, path: str | Path, total_epsilon: float, *, durable: bool = True) -> None:
        self._setup(Path(path), total_epsilon, durable, owner="", shared=None)
        with self._connect() as c:
            c.execute(_TABLE + ", PRIMARY KEY (query_id))")
            _migrate(c)

    def _setup(self, path: Path, total_epsilon: float, durable: bool, owner: str,
               shared: StateFile | None) -> None:
        self.budget_units = epsilon_units(total_epsilon, "the device budget")
        self.path = path
        self.durable = durable
        self.owner = owner  # the device's name in a shared StateFile ("" in its own file)
        self._shared = shared
        self._conn: sqlite3.Connection | None = None
        self._lock = shared.lock if shared is not None else threading.RLock()

    @property
    def total_epsilon(self) -> float:
        return units_to_epsilon(self.budget_units)

    def _connect(self) -> _Locked:
        """The ledger's connection (opened once), held under the ledger lock."""
        if self._shared is not None:
            return self._shared.locked()
        with self._lock:
            if self._conn is None:
                c = sqlite3.connect(self.path, isolation_level=None, timeout=30,
                                    check_same_thread=False)
                if self.durable:  # fsync every commit
                    c.execute("PRAGMA journal_mode=WAL")
                    c.execute("PRAGMA synchronous=FULL")
                else:  # rollback journal, no fsync: survives a process crash only
                    c.execute("PRAGMA synchronous=OFF")
                self._conn = c
            return _Locked(self._conn, self._lock)

    def close(self) -> None:
        """Close the ledger's own file (a shared :class:`StateFile` stays open)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # ---- queries --------------------------------------------------------------------
    def spent_units(self) -> int:
        with self._connect() as c:
            return _spent(c, self.owner)

    def spent(self) -> float:
        return units_to_epsilon(self.spent_units())

    def remaining(self) -> float:
        return units_to_epsilon(max(self.budget_units - self.spent_units(), 0))

    def get(self, query_id: str) -> LedgerEntry | None:
        with self._connect() as c:
            r = c.execute(f"SELECT {_COLUMNS} FROM entries WHERE owner = ? AND query_id = ?",
                          (self.owner, query_id)).fetchone()
        return _entry(r) if r else None

    def entries(self, state: str | None = None) -> list[LedgerEntry]:
        sql = f"SELECT {_COLUMNS} FROM entries WHERE owner = ?"
        args: tuple[str, ...] = (self.owner,)
        if state:
            sql += " AND state = ?"
            args += (state,)
        with self._connect() as c:
            return [_entry(r) for r in c.execute(sql + " ORDER BY created_at", args)]

    def check(self, query_id: str, task_digest: str, eps_units: int) -> LedgerEntry | None:
        """Would :meth:`reserve` accept this task? Returns the stored entry for a resend.
        Read in one transaction, so the entry and the spent sum are one snapshot: another
        instance's reservation of this very query between the two reads must not look like
        a budget refusal (which the device would then decline, pre-empting that
        instance's report)."""
        with self._connect() as c:
            c.execute("BEGIN")
            try:
                return self._admit(c, query_id, task_digest, eps_units)
            finally:
                c.execute("COMMIT")

    def _admit(self, c: sqlite3.Connection, query_id: str, task_digest: str,
               eps_units: int) -> LedgerEntry | None:
        r = c.execute(f"SELECT {_COLUMNS} FROM entries WHERE owner = ? AND query_id = ?",
                      (self.owner, query_id)).fetchone()
        if r is not None:
            e = _entry(r)
            if e.task_digest == task_digest:
                return e
            raise AlreadyParticipated(f"already accepted a task for query {query_id}; "
                                      "a device reports at most once per query")
        spent = _spent(c, self.owner)
        if spent + eps_units > self.budget_units:
            raise BudgetExceeded(
                f"task needs epsilon={units_to_epsilon(eps_units):.10g} but only "
                f"{units_to_epsilon(self.budget_units - spent):.10g} of the device budget "
                f"{self.total_epsilon:.10g} remains")
        return None

    # ---- updates --------------------------------------------------------------------
    def reserve(self, query_id: str, task_digest: str, phase: int, eps_units: int,
                task: bytes = b"") -> LedgerEntry:
        """Atomically check the rules and charge the task's ε (state ``reserved``).

        Returns the stored entry, which is the *previous* one if this exact task was
        already accepted (the caller then sends its stored report, or computes it if the
        device crashed before storing it).
        """
        if not isinstance(eps_units, int) or eps_units < 1:
            raise ValueError(f"eps_units must be a positive integer, got {eps_units!r}")
        with self._connect() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                e = self._admit(c, query_id, task_digest, eps_units)
                if e is None:
                    e = LedgerEntry(query_id, task_digest, int(phase), eps_units, b"",
                                    "reserved", time.time(), "", bytes(task))
                    c.execute(f"INSERT INTO entries ({_COLUMNS}, epsilon, owner) VALUES "
                              "(?, ?, ?, ?, x'', 'reserved', ?, '', ?, ?, ?)",
                              (query_id, task_digest, e.phase, eps_units, e.created_at,
                               e.task, units_to_epsilon(eps_units), self.owner))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return e

    def store_report(self, query_id: str, report: bytes,
                     reserved: LedgerEntry | None = None) -> LedgerEntry:
        """Attach the computed report to a reserved row (state ``pending``). A row that
        already has a report keeps it: the first stored bytes are the ones sent.
        ``reserved``: the row as :meth:`reserve` returned it (saves reading it back)."""
        if not report:
            raise ValueError("a report has at least one value")
        with self._connect() as c:
            cur = c.execute("UPDATE entries SET report = ?, state = 'pending' "
                            "WHERE owner = ? AND query_id = ? AND state = 'reserved'",
                            (bytes(report), self.owner, query_id))
            stored = cur.rowcount == 1
        if stored and reserved is not None and reserved.query_id == query_id \
                and reserved.state == "reserved":
            return dataclasses.replace(reserved, report=bytes(report), state="pending")
        e = self.get(query_id)
        if e is None:
            raise LedgerError(f"no reservation for query {query_id}")
        return e

    def record(self, query_id: str, task_digest: str, phase: int, eps_units: int,
               report: bytes) -> LedgerEntry:
        """:meth:`reserve` and :meth:`store_report` in one step (for callers that already
        computed the report without touching private data, e.g. tests)."""
        e = self.reserve(query_id, task_digest, phase, eps_units)
        return self.store_report(query_id, report) if e.state == "reserved" else e

    def mark(self, query_id: str, state: str, detail: str = "") -> None:
        """Record the collector's answer (``acknowledged`` or ``rejected``); the spend stays."""
        if state not in ("acknowledged", "rejected"):
            raise ValueError(f"state must be acknowledged or rejected, got {state!r}")
        with self._connect() as c:
            c.execute("UPDATE entries SET state = ?, detail = ? WHERE owner = ? AND "
                      "query_id = ? AND state != 'reserved'",
                      (state, detail[:1000], self.owner, query_id))


def _spent(c: sqlite3.Connection, owner: str) -> int:
    return int(c.execute("SELECT COALESCE(SUM(eps_units), 0) FROM entries WHERE owner = ?",
                         (owner,)).fetchone()[0])


def _entry(r: tuple[Any, ...]) -> LedgerEntry:
    q, digest, phase, units, report, state, created, detail, task = r
    return LedgerEntry(q, digest, int(phase), int(units), bytes(report), state, float(created),
                       detail, bytes(task or b""))


def _migrate(c: sqlite3.Connection) -> None:
    """Ledgers written before ε units: add the columns (``owner`` is "" in a device's own
    file), charge ⌈ε·2^24⌉ (never less than was spent), rename the state ``acked``."""
    cols = {row[1] for row in c.execute("PRAGMA table_info(entries)")}
    if "eps_units" not in cols:
        c.execute("ALTER TABLE entries ADD COLUMN eps_units INTEGER")
    if "task" not in cols:
        c.execute("ALTER TABLE entries ADD COLUMN task BLOB NOT NULL DEFAULT x''")
    if "owner" not in cols:
        c.execute("ALTER TABLE entries ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
    for q, eps in c.execute("SELECT query_id, epsilon FROM entries WHERE eps_units IS NULL"
                            ).fetchall():
        c.execute("UPDATE entries SET eps_units = ? WHERE query_id = ?",
                  (math.ceil(float(eps) * EPS_DENOMINATOR), q))
    c.execute("UPDATE entries SET state = 'acknowledged' WHERE state = 'acked'")


class _Locked:
    """Context manager: the shared connection, with the ledger lock held."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self._c, self._lock = conn, lock

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        return self._c

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


@dataclass(frozen=True)
class StateSlot:
    """One device's place in a :class:`StateFile` (pass it as a Device's ``state_dir``)."""

    file: StateFile
    owner: str


class StateFile:
    """The state of many devices in one SQLite file (e.g. a gateway's devices).

    Each device is an ``owner`` (a name unique in the file): its ledger entries are the
    rows of table ``entries`` with that owner, its identity (device id, token, expiry) a
    row of ``identities``. Every ledger update is one transaction of one device, with the
    checks of :class:`Ledger`; the file is in WAL mode, fsynced at every commit when
    ``durable`` (else it survives a crash of the process, not of the machine). One
    connection, shared by the devices under one lock, holding the file's lock for its
    lifetime (``locking_mode=EXCLUSIVE``: no other process opens the file meanwhile, and
    no lock round trips per transaction). :attr:`fresh`: the file was created now, so no
    device in it has any state yet.
    """

    def __init__(self, path: str | Path, *, durable: bool = True) -> None:
        self.path = Path(path)
        self.durable = durable
        self.fresh = not self.path.exists()
        self.lock = threading.RLock()
        # the file is held EXCLUSIVE from the first statement on: a second StateFile over
        # it (another process, or a second object in this one) fails at once with a
        # LedgerError instead of waiting, so two ledgers can never interleave in it
        c = sqlite3.connect(self.path, isolation_level=None, timeout=2,
                            check_same_thread=False)
        try:
            c.execute("PRAGMA locking_mode=EXCLUSIVE")
            c.execute("PRAGMA journal_mode=WAL")
            c.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
            c.execute(_TABLE + ", PRIMARY KEY (owner, query_id))")
            c.execute("CREATE TABLE IF NOT EXISTS identities (owner TEXT PRIMARY KEY, "
                      "identity TEXT NOT NULL)")
            c.execute("BEGIN IMMEDIATE")  # take the exclusive lock now, even if nothing
            c.execute("COMMIT")           # had to be created
        except sqlite3.OperationalError as exc:
            c.close()
            if "locked" not in str(exc):
                raise
            raise LedgerError(f"state file {self.path} is in use (another process, or "
                              "another StateFile object of this one): open it once and "
                              "share the object") from None
        self._conn: sqlite3.Connection | None = c

    def slot(self, owner: str) -> StateSlot:
        if not owner:
            raise ValueError("a device in a StateFile needs a non-empty name")
        return StateSlot(self, owner)

    def locked(self) -> _Locked:
        if self._conn is None:
            raise LedgerError(f"state file {self.path} is closed")
        return _Locked(self._conn, self.lock)

    def ledger(self, owner: str, total_epsilon: float) -> Ledger:
        """The ledger of device ``owner`` (its rows of this file)."""
        led = Ledger.__new__(Ledger)
        led._setup(self.path, total_epsilon, self.durable, owner=self.slot(owner).owner,
                   shared=self)
        return led

    def load_identity(self, owner: str) -> dict[str, Any] | None:
        with self.locked() as c:
            r = c.execute("SELECT identity FROM identities WHERE owner = ?",
                          (owner,)).fetchone()
        return json.loads(r[0]) if r else None

    def save_identity(self, owner: str, identity: dict[str, Any]) -> None:
        with self.locked() as c:
            c.execute("INSERT OR REPLACE INTO identities (owner, identity) VALUES (?, ?)",
                      (owner, json.dumps(identity)))

    def owners(self) -> list[str]:
        """Every device with a ledger entry or an identity in this file."""
        with self.locked() as c:
            rows = c.execute("SELECT owner FROM identities UNION "
                             "SELECT owner FROM entries ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        with self.lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
