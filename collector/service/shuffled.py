"""Shuffle mode in the collector: shuffled queries, opening the shuffler's batches, and the
central guarantee stated on their results.

See ``docs/privacy.md`` §7 and ``proto/uldp/v1/shuffler.proto``. A query created with
``"shuffle": {"min_batch": T, "delta": δ}`` in its params gives tasks that carry the
collector's current sealing key (``uldp.collector.security.sealkeys``) and, per device, a
shuffler ticket for its slot (``uldp.collector.service.tasks``); its devices send sealed
reports to an independent shuffler, never here. The collector takes them only as batches
from the shuffler (``ShuffleIntakeService``, mutual TLS, checked in
``uldp.collector.service.intake``): it checks the batch (query, phase, group, stage, task
digest, size ≥ T, the phase's quota), opens every report with the query's private key and
the task's HPKE info, drops the ones that do not open or fail the report checks, and
stores the rest with no device identity (``uldp.collector.storage.shuffle``). One report
per slot is the shuffler's duty; the collector still stores a ciphertext once: repeated
inside a batch it is opened once and its copies dropped, and a digest of every stored
ciphertext, unique per (query, phase) and checked in the transaction that stores the
batch, drops a replay forwarded in another batch (counted as refused, so the stated
guarantee counts it out). The batch id makes a re-sent batch a no-op.

What the shuffler polls (:meth:`ShuffleIntake.query`) costs O(cells) per call: the number
of devices of each (phase, group, stage) is fixed at creation and read from the plan's
sizes (:func:`cell_sizes`), once per query, then kept (a few integers per cell).

The result of a shuffled query carries ``privacy``: per (phase, group, stage) the local
ε0 of its task and the central (ε, δ) of amplification by shuffling, with the
variation-ratio bound of the cell's report mechanism (``uldp.collector.accounting``,
docs/privacy.md §7.1), computed with the smallest number of reports any batch of that cell
hides a report among — each batch is shuffled on its own — counting only reports the
shuffler admitted from distinct subjects its own enrolment check attested, less the ones
that did not open. A shuffler that runs no enrolment check of its own gives no amplified
guarantee: the collector mints the tickets, so it could have filled the batches itself.
``privacy.assumption`` says what the stated guarantee rests on.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from uldp.client.sealing import open_reports, seal_info
from uldp.client.tasks import task_epsilon
from uldp.client.taskspec import TaskSpec
from uldp.client.wire import MAX_FORWARD_REPORTS
from uldp.collector.accounting.guarantee import BOUND, shuffle_guarantee
from uldp.collector.accounting.odometer import cells_of_privacy
from uldp.collector.accounting.parameters import task_parameters
from uldp.collector.security.sealkeys import SealKeyring
from uldp.collector.service.catalogue import QueryCatalogue, QueryRuntime, cell_sizes
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.service.ingest import keep_valid, not_open
from uldp.collector.service.odometer import PrivacyOdometer
from uldp.collector.service.phases import PhaseView
from uldp.collector.service.tasks import TaskServer
from uldp.collector.storage.db import Database
from uldp.collector.storage.shuffle import (
    BatchOutcome,
    ShuffledBatch,
    StoredBatch,
    sealed_digest,
)
from uldp.collector.storage.writer import GroupCommitWriter, WriterUnavailable

__all__ = ["BATCH_ID", "ForwardedBatch", "ShuffleIntake", "cell_sizes",
           "privacy_section"]

#: batches of at least this many reports are opened by a pool of processes (outside the
#: GIL: the collector receives and stores while the pool opens)
PARALLEL_OPEN = 256
#: reports per job of the opening pool, at most (a piece is split into jobs this large)
OPEN_JOB = 1000
#: processes of that pool, at most (and at most the machine's cores)
MAX_OPENERS = 8


def _workers() -> int:
    return min(os.cpu_count() or 1, MAX_OPENERS)


def _opener_start(parent: int) -> None:
    """In each opening process, at its start: end it once the collector that started it
    (``parent``, its pid as the collector gave it: a collector killed before this process
    got here leaves it with another parent already) is gone — a collector killed with
    SIGKILL would otherwise leave its pool running."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)
    threading.Thread(target=watch, name="uldp-opener-parent", daemon=True).start()

BATCH_ID = re.compile(r"[0-9a-f]{32}")
VERIFIER = re.compile(r"[a-z0-9-]{0,64}")

#: a cell: (phase, group, stage)
Cell = tuple[int, int, int]


@dataclass(frozen=True)
class ForwardedBatch:
    """The first piece of a ForwardBatch stream, decoded: the batch's header and its first
    reports (``sealed``); ``size`` is the reports of the whole batch (0: just these)."""

    batch_id: str
    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    sealed: Sequence[bytes]
    attested: int = 0  # reports from distinct subjects the shuffler's check attested
    verifier: str = ""  # the name of that check ("": none)
    size: int = 0  # reports in the whole batch (0: the batch is ``sealed``)

    @property
    def total(self) -> int:
        return self.size or len(self.sealed)


class _Opening:
    """The opening of one streamed batch, piece by piece as its pieces arrive: each new
    ciphertext (a ciphertext repeated in the batch is opened once; its copies count as
    dropped) goes to the opening pool at once — or is opened in this thread when the
    batch is small or there is no pool — and :meth:`result` gives every opened report in
    the batch's order once the last piece is in."""

    def __init__(self, pool: ProcessPoolExecutor | None, key: bytes, info: bytes,
                 length: int, limit: int, allow: bool) -> None:
        self.pool, self.args = pool, (key, info, length, limit, allow)
        self.seen: set[bytes] = set()
        self.firsts: list[bytes] = []
        #: per first, its :func:`sealed_digest` (computed while the pool opens the piece,
        #: not after the batch's last piece)
        self.digests: list[bytes] = []
        self.parts: list[Future[list[bytes | None]] | list[bytes | None]] = []

    def add(self, piece: Sequence[bytes]) -> None:
        fresh = []
        for s in piece:
            if s not in self.seen:
                self.seen.add(s)
                fresh.append(s)
        self.firsts += fresh
        self.digests += [sealed_digest(s) for s in fresh]
        if self.pool is None:
            if fresh:
                self.parts.append(open_reports(*self.args, fresh))
            return
        step = max(1, min(OPEN_JOB, -(-len(fresh) // _workers())))
        for i in range(0, len(fresh), step):
            self.parts.append(self.pool.submit(open_reports, *self.args, fresh[i:i + step]))

    def result(self) -> list[bytes | None]:
        return [p for part in self.parts
                for p in (part.result() if isinstance(part, Future) else part)]

    def cancel(self) -> None:
        for part in self.parts:
            if isinstance(part, Future):
                part.cancel()


def _received(opening: _Opening, first: Sequence[bytes], rest: Iterable[Sequence[bytes]],
              size: int) -> tuple[list[bytes], list[bytes | None]]:
    """Every piece of a batch into ``opening`` — each checked against ``size`` before it
    is opened — then (the digests of the batch's distinct ciphertexts, their opened
    reports) once the stream has ended with exactly ``size`` reports; anything raised
    cancels the opening (nothing is stored)."""
    try:
        opening.add(first)
        got = len(first)
        for piece in rest:
            if got + len(piece) > size:  # before the piece is opened
                raise ServiceError("INVALID_ARGUMENT", f"a piece of {len(piece)} reports "
                                   f"takes the batch past its size {size} ({got} came "
                                   "before it): nothing stored")
            got += len(piece)
            opening.add(piece)
        if got < size:
            raise ServiceError("INVALID_ARGUMENT", f"the stream ended after {got} of the "
                               f"batch's {size} reports: nothing stored")
        return opening.digests, opening.result()
    except BaseException:
        opening.cancel()
        raise


class ShuffleIntake:
    """GetShuffleQuery and ForwardBatch (see the module docstring)."""

    def __init__(self, db: Database, writer: GroupCommitWriter, catalogue: QueryCatalogue,
                 phases: PhaseView, tasks: TaskServer, keyring: SealKeyring, *,
                 allow_simulated: bool) -> None:
        self.db, self.writer, self.catalogue = db, writer, catalogue
        self.phases, self.tasks, self.keyring = phases, tasks, keyring
        self.allow_simulated = allow_simulated
        self.odometer: PrivacyOdometer | None = None
        self._cells: dict[str, dict[Cell, int]] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _openers(self) -> ProcessPoolExecutor | None:
        """The pool of opening processes (None on a machine with one core)."""
        if _workers() < 2:
            return None
        with self._pool_lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    _workers(), mp_context=multiprocessing.get_context("spawn"),
                    initializer=_opener_start, initargs=(os.getpid(),))
            return self._pool

    def warm(self) -> None:
        """Start the opening processes now, in the background (the shuffler port calls
        this when it starts: a process's start-up is seconds of imports, which the first
        large batch should not wait for)."""
        pool = self._openers()
        if pool is not None:
            threading.Thread(target=lambda: list(pool.map(abs, range(_workers()))),
                             name="uldp-openers-warm", daemon=True).start()

    def close(self) -> None:
        """Stop the opening processes (if a large batch started them)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def cells(self, rt: QueryRuntime) -> dict[Cell, int]:
        """:func:`cell_sizes` of a query, counted once (fixed at creation)."""
        got = self._cells.get(rt.query_id)
        if got is None:
            got = cell_sizes(rt.program)
            if len(self._cells) >= 1000:
                self._cells.clear()
            self._cells[rt.query_id] = got
        return got

    def query(self, query_id: str) -> dict[str, Any]:
        """The public shuffle parameters of a query and the state of its phases: O(cells)
        work (no pass over the query's users); per cell its size and its declines so far."""
        rt = self.catalogue.runtime(query_id)
        if rt is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        rows = self.phases.rows(query_id, fresh=True)
        declined = self.db.cell_declines(query_id) if rt.shuffle is not None else {}
        return {"query_id": query_id, "shuffled": rt.shuffle is not None,
                "min_batch": int(rt.shuffle["min_batch"]) if rt.shuffle else 0,
                "users": int(rt.spec.users),
                "phases": [(p, str(r["state"]), int(r["deadline_ms"]), int(r["quota"]),
                            int(r.get("declined") or 0)) for p, r in sorted(rows.items())],
                "cells": [(p, g, st, n, declined.get((p, g, st), 0))
                          for (p, g, st), n in sorted(self.cells(rt).items())]
                if rt.shuffle is not None else []}

    def _checked(self, b: ForwardedBatch) -> tuple[QueryRuntime, Any]:
        """The runtime and the task of a batch that passes every check of the batch as a
        whole (ServiceError otherwise), in the order of shuffler.proto: on its first
        piece, with the size it announces, before any report is opened."""
        rt = self.catalogue.runtime(b.query_id)
        if rt is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(b.query_id)}")
        if rt.shuffle is None:
            raise ServiceError("FAILED_PRECONDITION",
                               f"query {b.query_id} is not in shuffle mode")
        ph = self.phases.rows(b.query_id, fresh=True).get(b.phase)
        if ph is None:
            raise ServiceError("FAILED_PRECONDITION", f"query {b.query_id} has no phase {b.phase}")
        if ph["state"] != "open":
            raise ServiceError("FAILED_PRECONDITION", not_open(b.query_id, b.phase, ph["state"]))
        slot = rt.program.slot_in(b.phase, b.group, b.stage)
        if slot is None:
            raise ServiceError("FAILED_PRECONDITION", f"phase {b.phase} of query {b.query_id} "
                               f"has no group {b.group} stage {b.stage}")
        if b.total < int(rt.shuffle["min_batch"]):
            raise ServiceError("FAILED_PRECONDITION",
                               f"a batch of {b.total} reports is below the query's "
                               f"minimum batch {rt.shuffle['min_batch']}")
        got, quota = int(ph["received"]), int(ph["quota"])
        if got + b.total > quota:  # before any report is opened (the store checks
            # again, under the phase's lock, what actually opened)
            raise ServiceError("FAILED_PRECONDITION", f"a batch of {b.total} reports "
                               f"would take phase {b.phase} of query {b.query_id} past its "
                               f"quota ({got} of {quota} received)")
        info = self.tasks.task_info(rt, {"grp": b.group, "stage": b.stage, "phase": b.phase,
                                         "slot": slot})
        if b.task_digest != info.digest:
            raise ServiceError("FAILED_PRECONDITION",
                               "the batch was sealed for a different task (task_digest "
                               f"{b.task_digest[:16] or '<empty>'}… != {info.digest[:16]}…)")
        return rt, info

    @staticmethod
    def _head(b: ForwardedBatch) -> int:
        """The checks of a batch's first piece that need no query (INVALID_ARGUMENT);
        the batch's size."""
        if not BATCH_ID.fullmatch(b.batch_id):
            raise ServiceError("INVALID_ARGUMENT", "batch_id must be 32 lowercase hex digits")
        size = b.total
        if size > MAX_FORWARD_REPORTS:
            raise ServiceError("INVALID_ARGUMENT", f"a batch of {size} reports is more than "
                               f"the {MAX_FORWARD_REPORTS} one batch may hold (reports "
                               "held in memory here until the batch is stored)")
        if len(b.sealed) > size:
            raise ServiceError("INVALID_ARGUMENT", f"the first piece holds {len(b.sealed)} "
                               f"reports, more than the batch's size {size}")
        if not 0 <= b.attested <= size:
            raise ServiceError("INVALID_ARGUMENT", f"attested {b.attested} is more than the "
                               f"batch's {size} reports")
        if not VERIFIER.fullmatch(b.verifier):
            raise ServiceError("INVALID_ARGUMENT", "verifier must be at most 64 characters "
                               "of [a-z0-9-]")
        return size

    def forward(self, b: ForwardedBatch, rest: Iterable[Sequence[bytes]] = ()
                ) -> BatchOutcome:
        """Check, open and store one batch streamed in pieces: ``b`` is its first piece
        (the header and the first reports), ``rest`` the sealed reports of each later
        piece, in order. The batch as a whole is checked on the first piece; each piece is
        checked against the announced size, then handed to the opening pool, before the
        next is read; the whole batch is stored in one transaction once the stream has
        ended with exactly ``size`` reports. Anything raised — a refusal, a stream that
        breaks (``rest`` raises) — stores nothing. A stored batch id is an OK duplicate."""
        size = self._head(b)
        if self.catalogue.runtime(b.query_id) is not None:
            old = self.db.stored_batch(b.query_id, b.batch_id)
            if old is not None:
                return old  # a re-send (the shuffler lost our answer): nothing changes
        rt, info = self._checked(b)
        assert rt.shuffle is not None
        key = self.keyring.private(str(rt.shuffle["key_id"]))
        if key is None:
            raise ServiceError("FAILED_PRECONDITION", "this collector does not hold the "
                               f"sealing key {rt.shuffle['key_id']} of query {b.query_id}")
        hinfo = seal_info(b.query_id, b.phase, b.group, b.stage, b.task_digest)
        allow = self.allow_simulated or rt.allow_simulated
        opening = _Opening(self._openers() if size >= PARALLEL_OPEN else None,
                           key.private_bytes_raw(), hinfo, info.length, info.limit, allow)
        digests, opened = _received(opening, b.sealed, rest, size)
        opened = keep_valid(info, opened)  # the task's report rule (issue 28): dropped, counted
        kept = [i for i, p in enumerate(opened) if p is not None]
        batch = ShuffledBatch(b.query_id, b.batch_id, b.phase, b.group, b.stage,
                              size, [opened[i] or b"" for i in kept],
                              int(rt.spec.users), b.attested if b.verifier else 0, b.verifier,
                              [digests[i] for i in kept])
        try:
            out: BatchOutcome = self.writer.run(lambda conn: self.db.store_batch_in(conn, batch))
        except WriterUnavailable as exc:
            raise ServiceError("UNAVAILABLE", str(exc)) from None
        if out.over_quota is not None:
            got, quota = out.over_quota
            raise ServiceError("FAILED_PRECONDITION", f"a batch of {len(batch.payloads)} "
                               f"reports would take phase {b.phase} of query {b.query_id} "
                               f"past its quota ({got} of {quota} received)")
        if out.state is not None:
            raise ServiceError("FAILED_PRECONDITION", not_open(b.query_id, b.phase, out.state))
        return out

    def privacy(self, rt: QueryRuntime, published: dict[int, Any]) -> dict[str, Any] | None:
        """The ``privacy`` section of a shuffled query's result (None if not shuffled)."""
        if rt.shuffle is None:
            return None
        section = privacy_section(rt, self.db.batch_counts(rt.query_id), published)
        if self.odometer is not None:  # the dataset's composed central ε (docs/privacy.md §7.2)
            section["odometer"] = self.odometer.state(
                rt.dataset, (rt.query_id, cells_of_privacy(section)))
        return section


def _task(rt: QueryRuntime, phase: int, group: int, stage: int,
          published: dict[int, Any]) -> TaskSpec:
    slot = rt.program.slot_in(phase, group, stage)
    per_device = slot is not None and rt.program.offsets(phase, np.array([slot])) is not None
    return rt.program.task(phase, group, stage, {p: v for p, v in published.items()
                                                 if p < phase}, slot if per_device else None)


def counted(b: StoredBatch) -> int:
    """The reports of a batch a report of it hides among, as far as the guarantee
    counts: the ones from distinct subjects the shuffler's own enrolment check attested,
    less every report that did not open (a garbage report may be an attested one), never
    more than the reports stored. 0 when the shuffler ran no check."""
    if not b.verifier:
        return 0
    return max(0, min(b.stored, b.attested - b.refused))


def privacy_section(rt: QueryRuntime, batches: Sequence[StoredBatch],
                    published: dict[int, Any]) -> dict[str, Any]:
    """Per (phase, group, stage): the reports that came through the shuffler, its batches
    and the smallest, the smallest number of reports the guarantee counts in a batch
    (:func:`counted`), the task's local ε0 and the central (ε, δ) of shuffling that many
    (each batch is its own shuffle); the whole query's guarantee is the largest of the
    cells' (each user reports in exactly one cell)."""
    assert rt.shuffle is not None
    delta = float(rt.shuffle["delta"])
    cells: dict[Cell, list[StoredBatch]] = {}
    for b in batches:
        cells.setdefault((b.phase, b.grp, b.stage), []).append(b)
    out: list[dict[str, Any]] = []
    verifiers: set[str] = set()
    for (phase, grp, stage), bs in sorted(cells.items()):
        task = replace(_task(rt, phase, grp, stage, published), seal=None)
        eps0, vr = task_epsilon(task), task_parameters(task)
        real = [b for b in bs if b.stored > 0]
        hide = min((counted(b) for b in real), default=0)
        verifiers.update(b.verifier for b in real)
        amp = shuffle_guarantee(hide, vr, delta) if hide >= 2 else None
        out.append({"phase": phase, "group": grp, "stage": stage,
                    "reports": sum(b.stored for b in bs), "batches": len(bs),
                    "smallest_batch": min((b.stored for b in real), default=0),
                    "counted": hide, "dropped": sum(b.refused for b in bs),
                    "epsilon0": eps0, "epsilon": amp.epsilon if amp else eps0,
                    "delta": delta if amp and amp.amplified else 0.0,
                    "mechanism": vr.mechanism, "detail": vr.detail,
                    "variation_ratio": {"p": vr.p, "beta": vr.beta, "q": vr.q},
                    "amplified": bool(amp and amp.amplified)})
    eps0_all = max((float(c["epsilon0"]) for c in out), default=float(rt.spec.epsilon))
    eps_all = max((float(c["epsilon"]) for c in out), default=eps0_all)
    amplified = bool(out) and all(c["amplified"] for c in out)
    checks = sorted(v for v in verifiers if v)
    return {"mode": "shuffle", "local_epsilon": eps0_all, "central_epsilon": eps_all,
            "delta": delta if any(c["amplified"] for c in out) else 0.0,
            "amplified": amplified, "min_batch": int(rt.shuffle["min_batch"]),
            "bound": BOUND,
            "verifier": ", ".join(checks), "assumption": _assumption(checks, verifiers),
            "note": _note(out, amplified), "cells": out}


def _assumption(checks: list[str], seen: set[str]) -> str:
    if not seen:
        return "no report came through the shuffler"
    if not checks or "" in seen:
        return ("the shuffler ran no enrolment check of its own for some batch: the "
                "collector issues the shuffler tickets, so those batches could hold reports "
                "it made itself; only the local ε0 is stated there")
    return (f"the shuffler does not collude with the collector, shuffles each batch "
            f"uniformly, and its own enrolment check ({', '.join(checks)}) admits only "
            "distinct real devices: a batch's central ε counts only the reports the "
            "shuffler admitted once per assignment ticket from distinct attested subjects, "
            "less every report that did not open")


def _note(cells: list[dict[str, Any]], amplified: bool) -> str:
    if not cells:
        return "no report came through the shuffler; the guarantee is the local one"
    if amplified:
        return ("each user's report is ε0-LDP against everyone (the shuffler included) and, "
                "shuffled with the others of its batch, (ε, δ)-DP at user level against "
                "the collector and anyone who sees only the shuffled batches, under the "
                "assumption stated")
    return ("amplification by shuffling is not stated for at least one cell (too few "
            "counted reports for its ε0, or reports not attested by the shuffler's own "
            "enrolment check): there the guarantee is the local ε0")
