"""Shuffle mode in the collector: shuffled queries, opening the shuffler's batches, and the
central guarantee stated on their results.

See ``docs/privacy.md`` ("Shuffle mode") and ``proto/uldp/v1/shuffler.proto``. A query
created with ``"shuffle": {"min_batch": T, "delta": δ}`` in its params gives tasks that
carry the collector's current sealing key (``uldp.collector.security.sealkeys``); its
devices send sealed reports to an independent shuffler, never here. The collector takes
them only as batches from the shuffler (``ShuffleIntakeService``, mutual TLS, checked in
``uldp.collector.service.intake``): it checks the batch (query, phase, group, stage, task
digest, size ≥ T), opens every report with the query's private key and the task's HPKE
info, drops the ones that do not open or fail the report checks, and stores the rest with
no device identity (``uldp.collector.storage.shuffle``). One report per device per query
is the shuffler's duty here; the batch id makes a re-sent batch a no-op.

The result of a shuffled query carries ``privacy``: per (phase, group, stage) the local
ε0 of its task and the central (ε, δ) of amplification by shuffling over the reports that
actually came through the shuffler — computed with the smallest batch of that cell, since
each batch is shuffled on its own, with the variation-ratio bound of the cell's report
mechanism (``uldp.collector.accounting``, docs/privacy.md §7.1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from uldp.client.sealing import open_plaintext, seal_info, sealed_length, suite
from uldp.client.tasks import task_epsilon
from uldp.client.taskspec import TaskSpec
from uldp.collector.accounting.guarantee import BOUND, shuffle_guarantee
from uldp.collector.accounting.odometer import cells_of_privacy
from uldp.collector.accounting.parameters import task_parameters
from uldp.collector.security.sealkeys import SealKeyring
from uldp.collector.service.catalogue import QueryCatalogue, QueryRuntime
from uldp.collector.service.errors import ServiceError, echo
from uldp.collector.service.ingest import keep_valid, not_open
from uldp.collector.service.odometer import PrivacyOdometer
from uldp.collector.service.phases import PhaseView
from uldp.collector.service.tasks import TaskServer
from uldp.collector.storage.db import Database
from uldp.collector.storage.shuffle import BatchOutcome, ShuffledBatch
from uldp.collector.storage.writer import GroupCommitWriter, WriterUnavailable

__all__ = ["BATCH_ID", "ForwardedBatch", "ShuffleIntake", "privacy_section"]

BATCH_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class ForwardedBatch:
    """A ForwardBatch request, decoded."""

    batch_id: str
    query_id: str
    phase: int
    group: int
    stage: int
    task_digest: str
    sealed: Sequence[bytes]


def open_report(sealed: bytes, key: X25519PrivateKey, info: bytes, length: int, limit: int,
                allow_simulated: bool) -> bytes | None:
    """The int64 little-endian payload of one sealed report, or None if it does not open
    or fails a report check (length, range, a simulated report the query refuses)."""
    if len(sealed) != sealed_length(length):
        return None
    try:
        got = open_plaintext(suite().decrypt(sealed, key, info=info))
    except Exception:  # authentication failure, malformed enc: the report is dropped
        return None
    if got is None:
        return None
    values, simulated = got
    if len(values) != length or (simulated and not allow_simulated):
        return None
    if values.size and int(np.abs(values).max()) > limit:
        return None
    return values.astype("<i8").tobytes()


class ShuffleIntake:
    """GetShuffleQuery and ForwardBatch (see the module docstring)."""

    def __init__(self, db: Database, writer: GroupCommitWriter, catalogue: QueryCatalogue,
                 phases: PhaseView, tasks: TaskServer, keyring: SealKeyring, *,
                 allow_simulated: bool) -> None:
        self.db, self.writer, self.catalogue = db, writer, catalogue
        self.phases, self.tasks, self.keyring = phases, tasks, keyring
        self.allow_simulated = allow_simulated
        self.odometer: PrivacyOdometer | None = None

    def query(self, query_id: str) -> dict[str, Any]:
        """The public shuffle parameters of a query and the state of its phases."""
        rt = self.catalogue.runtime(query_id)
        if rt is None:
            raise ServiceError("NOT_FOUND", f"unknown query {echo(query_id)}")
        rows = self.phases.rows(query_id, fresh=True)
        prog = rt.program
        return {"query_id": query_id, "shuffled": rt.shuffle is not None,
                "min_batch": int(rt.shuffle["min_batch"]) if rt.shuffle else 0,
                "phases": [(p, str(r["state"]), int(r["deadline_ms"]))
                           for p, r in sorted(rows.items())],
                "cells": [(p, g, s, n) for p in range(1, prog.num_phases + 1)
                          for g, s, n in prog.cells(p)]}

    def _checked(self, b: ForwardedBatch) -> tuple[QueryRuntime, Any]:
        """The runtime and the task of a batch that passes every check of the batch as a
        whole (ServiceError otherwise), in the order of shuffler.proto."""
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
        if len(b.sealed) < int(rt.shuffle["min_batch"]):
            raise ServiceError("FAILED_PRECONDITION",
                               f"a batch of {len(b.sealed)} reports is below the query's "
                               f"minimum batch {rt.shuffle['min_batch']}")
        info = self.tasks.task_info(rt, {"grp": b.group, "stage": b.stage, "phase": b.phase,
                                         "slot": slot})
        if b.task_digest != info.digest:
            raise ServiceError("FAILED_PRECONDITION",
                               "the batch was sealed for a different task (task_digest "
                               f"{b.task_digest[:16] or '<empty>'}… != {info.digest[:16]}…)")
        return rt, info

    def forward(self, b: ForwardedBatch) -> BatchOutcome:
        """Check, open and store one batch; a stored batch id is an OK duplicate."""
        if not BATCH_ID.fullmatch(b.batch_id):
            raise ServiceError("INVALID_ARGUMENT", "batch_id must be 32 lowercase hex digits")
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
        opened = [open_report(s, key, hinfo, info.length, info.limit, allow) for s in b.sealed]
        opened = keep_valid(info, opened)  # the task's report rule (issue 28): dropped, counted
        batch = ShuffledBatch(b.query_id, b.batch_id, b.phase, b.group, b.stage,
                              len(b.sealed), [p for p in opened if p is not None],
                              int(rt.spec.users))
        try:
            out: BatchOutcome = self.writer.run(lambda conn: self.db.store_batch_in(conn, batch))
        except WriterUnavailable as exc:
            raise ServiceError("UNAVAILABLE", str(exc)) from None
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


def privacy_section(rt: QueryRuntime, counts: Sequence[tuple[int, int, int, int]],
                    published: dict[int, Any]) -> dict[str, Any]:
    """Per (phase, group, stage): the reports that came through the shuffler, its batches
    and the smallest, the task's local ε0 and the central (ε, δ) of shuffling them
    (the smallest batch's: each batch is its own shuffle); the whole query's guarantee
    is the largest of the cells' (each user reports in exactly one cell)."""
    assert rt.shuffle is not None
    delta = float(rt.shuffle["delta"])
    cells: dict[tuple[int, int, int], list[int]] = {}
    for phase, grp, stage, stored in counts:
        cells.setdefault((phase, grp, stage), []).append(stored)
    out: list[dict[str, Any]] = []
    for (phase, grp, stage), sizes in sorted(cells.items()):
        task = replace(_task(rt, phase, grp, stage, published), seal=None)
        eps0, vr = task_epsilon(task), task_parameters(task)
        real = [n for n in sizes if n > 0]
        amp = shuffle_guarantee(min(real), vr, delta) if real else None
        out.append({"phase": phase, "group": grp, "stage": stage, "reports": sum(sizes),
                    "batches": len(sizes), "smallest_batch": min(real) if real else 0,
                    "epsilon0": eps0, "epsilon": amp.epsilon if amp else eps0,
                    "delta": delta if amp and amp.amplified else 0.0,
                    "mechanism": vr.mechanism, "detail": vr.detail,
                    "variation_ratio": {"p": vr.p, "beta": vr.beta, "q": vr.q},
                    "amplified": bool(amp and amp.amplified)})
    eps0_all = max((float(c["epsilon0"]) for c in out), default=float(rt.spec.epsilon))
    eps_all = max((float(c["epsilon"]) for c in out), default=eps0_all)
    amplified = bool(out) and all(c["amplified"] for c in out)
    return {"mode": "shuffle", "local_epsilon": eps0_all, "central_epsilon": eps_all,
            "delta": delta if any(c["amplified"] for c in out) else 0.0,
            "amplified": amplified, "min_batch": int(rt.shuffle["min_batch"]),
            "bound": BOUND,
            "note": _note(out, amplified), "cells": out}


def _note(cells: list[dict[str, Any]], amplified: bool) -> str:
    if not cells:
        return "no report came through the shuffler; the guarantee is the local one"
    if amplified:
        return ("each user's report is ε0-LDP against everyone (the shuffler included) and, "
                "shuffled with the others of its batch, (ε, δ)-DP at user level against "
                "the collector and anyone who sees only the shuffled batches")
    return ("amplification by shuffling gives nothing in at least one cell (too few "
            "reports for its ε0): there the guarantee is the local ε0")
