"""The phase closer: the service's driver loop over every query's program.

See ``docs/architecture.md`` ("Programs", "Service"). Sections of ``docs/algorithms.md``: §2.2
(round template), §2.4 / [D12] (a phase closes at its deadline with the reports received).
A background ticker closes due phases (quota in, or deadline passed). Closing one is the
same step for every kind and method: claim the phase (``Database.begin_close``, a
conditional update — exactly one replica wins), reduce its stored reports window by
window into the program's accumulators (``uldp.collector.service.reduce``: in the
database where it can, in bounded bytes always, in process or on a Dask cluster), and
publish ``program.close`` (opening the next phase) or store ``program.result`` after the
last phase. The claim is a lease renewed while the closer works
(``uldp.collector.service.lease``): a dead closer is taken over within one lease, a
restarted one frees its own leases at start. Everything a close needs is the stored spec
and the published JSON of the earlier phases, so a restart resumes where it stopped.

A stored report that breaks its task's rule (stored before ingest checked it) never fails
a close: it is left out and counted, in the phase's published JSON and the result
(:data:`INVALID_REPORTS`). A close that cannot succeed fails its query with one clear
reason instead of being retried forever: at once for a database error the same
statements would hit again (``Database.is_permanent``: an engine limit, corrupt or
malformed data), and after :data:`MAX_CLOSE_ATTEMPTS` begun closes for any other
failure — counted in the phase row, so a replica killed by every attempt (out of memory)
counts too.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import DBAPIError

from uldp.collector.service.catalogue import QueryCatalogue, QueryRuntime
from uldp.collector.service.lease import LeaseKeeper, LeaseLost, owned_by
from uldp.collector.service.phases import PhaseView
from uldp.collector.service.reduce import (
    CloseEngine,
    LocalEngine,
    PhaseSums,
    PhaseWork,
    close_phase_accumulators,
    remember_program,
)
from uldp.collector.storage.db import Database, now_ms

__all__ = ["INVALID_REPORTS", "MAX_CLOSE_ATTEMPTS", "TEST_CLOSE_DELAY_ENV", "PhaseCloser"]

#: closes of one phase begun (claims and take-overs) before its query fails
MAX_CLOSE_ATTEMPTS = 5

#: the key of a phase's published JSON and of a result that counts the stored reports
#: the close left out because they break their task's rule (present only when some were)
INVALID_REPORTS = "invalid_reports"

log = logging.getLogger("uldp.collector")

#: environment variable of the slow-close test hook (seconds; unset in production)
TEST_CLOSE_DELAY_ENV = "ULDP_TEST_CLOSE_DELAY_S"


def _test_close_delay_s() -> float:
    """Seconds every close stalls after its claim, from the test-only environment
    variable ``ULDP_TEST_CLOSE_DELAY_S`` (unset: 0, no stall)."""
    return float(os.environ.get(TEST_CLOSE_DELAY_ENV) or 0)


class PhaseCloser:
    """Closes due phases of every query (see the module docstring)."""

    #: called after this replica closed a phase, with (query id, phase, seconds the close
    #: took); the collector's metrics set it (``uldp.collector.observe.metrics``)
    on_closed: Callable[[str, int, float], None] | None = None

    def __init__(self, db: Database, catalogue: QueryCatalogue, phases: PhaseView, *,
                 name: str, closer_id: str, lease_ms: int, tick_s: float,
                 engine: CloseEngine | None = None) -> None:
        self.db, self.catalogue, self.phases = db, catalogue, phases
        #: who reduces a closing phase's windows (in process by default; a Dask cluster
        #: with ``uldp.collector.service.dask_close``)
        self.engine: CloseEngine = engine or LocalEngine()
        self.name, self.closer_id = name, closer_id
        self.lease_ms, self.tick_s = lease_ms, tick_s
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="uldp-closer", daemon=True)
        #: shuffle mode: (runtime, published) -> the result's "privacy" section, or None
        self.privacy: Callable[[QueryRuntime, dict[int, Any]], dict[str, Any] | None] | None = None

    def start(self) -> None:
        # an earlier incarnation of this replica killed mid-close cannot still be working:
        # free its leases now instead of waiting for them to run out
        for qid, phase in self.db.expire_leases(owned_by(self.name), keep=self.closer_id):
            log.warning("query %s phase %d: took back the closing lease of an earlier "
                        "incarnation of %s", qid, phase, self.name)
        self._ticker.start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join(timeout=30)

    def _tick_loop(self) -> None:
        last_checkpoint = time.monotonic()
        while not self._stop.wait(self.tick_s):
            if time.monotonic() - last_checkpoint > 1.0:
                last_checkpoint = time.monotonic()
                try:
                    self.db.checkpoint()
                except Exception:
                    log.exception("WAL checkpoint")
            try:
                for qid, phase in self.db.phases_due():
                    if self._stop.is_set():
                        break
                    self.close_phase(qid, phase)
            except Exception:  # keep ticking: the database may be briefly unavailable
                log.exception("phase ticker")

    def close_phase(self, query_id: str, phase: int, force: bool = False) -> bool:
        """Aggregate a due phase if this replica wins the claim; True if it closed it.

        Losing the lease stops the close without publishing; a database error leaves the
        phase ``closing`` for a retry once the lease runs out; any other error fails the
        query (if the lease is still ours)."""
        closer = self.closer_id
        if not self.db.begin_close(query_id, phase, closer, self.lease_ms, force=force):
            return False
        attempts, last = self.db.close_attempts(query_id, phase)
        if attempts > MAX_CLOSE_ATTEMPTS:
            self.phases.forget(query_id)
            log.error("query %s phase %d: %d closes failed; failing the query", query_id,
                      phase, attempts - 1)
            self.db.fail_close(query_id, phase, closer,
                               f"closing phase {phase} failed {attempts - 1} times"
                               + (f"; last error: {last}" if last else ""))
            return False
        t0 = time.perf_counter()
        try:
            with LeaseKeeper(self.db, query_id, phase, closer, self.lease_ms) as keeper:
                delay = _test_close_delay_s()
                if delay > 0:  # test hook: a slow close to kill or take over
                    keeper.sleep(delay)
                n, ok = self._close(query_id, phase, keeper)
        except LeaseLost as exc:
            log.warning("stopped closing: %s", exc)
            return False
        except Exception as exc:
            return self._failed(query_id, phase, exc)
        finally:
            self.phases.forget(query_id)
        if ok:
            spent = time.perf_counter() - t0
            log.info("query %s phase %d closed by %s: %d reports in %.2fs", query_id, phase,
                     self.name, n, spent)
            if self.on_closed is not None:
                try:
                    self.on_closed(query_id, phase, spent)
                except Exception:  # metrics never stop the closer
                    log.exception("phase-closed hook")
        else:
            log.warning("query %s phase %d: lost the closing lease before publishing",
                        query_id, phase)
        return ok

    def _failed(self, query_id: str, phase: int, exc: Exception) -> bool:
        db_error = isinstance(exc, (DBAPIError, self.db.dbapi_error))
        reason = _reason(exc) if db_error else str(exc)
        if db_error and not self.db.is_permanent(exc):
            log.warning("closing phase %d of query %s hit a database error (retried when the "
                        "lease runs out): %s", phase, query_id, reason)
            try:
                self.db.record_close_error(query_id, phase, self.closer_id, reason)
            except Exception:  # the database may be down: the attempt still counted
                log.warning("could not record the close error of query %s", query_id)
            return False
        if db_error:
            log.error("closing phase %d of query %s cannot succeed: %s", phase, query_id,
                      reason)
            msg = (f"closing phase {phase} failed: the database cannot read its reports "
                   f"({reason})")
        else:
            log.exception("closing phase %d of query %s failed", phase, query_id)
            msg = f"closing phase {phase} failed: {reason}"
        self.db.fail_close(query_id, phase, self.closer_id, msg)
        return False

    def _close(self, query_id: str, phase: int, keeper: LeaseKeeper) -> tuple[int, bool]:
        """Accumulate, then publish (and open the next phase) or store the result."""
        rt = self.catalogue.runtime(query_id)
        assert rt is not None
        published = {p: self.db.published(query_id, p) for p in range(1, phase)}
        sums = self._accumulate(rt, phase, published, keeper.check)
        pub = rt.program.close(phase, sums.accs, published)
        if sums.skipped:
            log.warning("query %s phase %d: %d stored reports break their task's rule "
                        "(stored before ingest checked it); left out", query_id, phase,
                        sums.skipped)
            pub = {**pub, INVALID_REPORTS: sums.skipped}
        keeper.check()
        if phase < rt.num_phases:
            row = self.db.get_query(query_id)
            timeout = float(row["phase_timeout_s"]) if row else 3600.0
            ok = self.db.finish_close(query_id, phase, keeper.closer, pub,
                                      next_deadline_ms=now_ms() + int(timeout * 1000),
                                      result=None)
        else:
            result = rt.program.result({**published, phase: pub})
            extra = self.privacy(rt, {**published, phase: pub}) if self.privacy else None
            if extra is not None:
                result = {**result, "privacy": extra}
            invalid = sum(int((p or {}).get(INVALID_REPORTS, 0))
                          for p in (*published.values(), pub))
            if invalid:
                result = {**result, INVALID_REPORTS: invalid}
            ok = self.db.finish_close(query_id, phase, keeper.closer, pub,
                                      next_deadline_ms=None, result=result)
        return sums.reports, ok

    def _accumulate(self, rt: QueryRuntime, phase: int, published: dict[int, Any],
                    check: Callable[[], None]) -> PhaseSums:
        """The phase's accumulators (one per group with reports), its report count and
        the stored reports left out, reduced window by window by the close engine
        (``service.reduce``)."""
        spec_json = json.dumps(rt.spec.to_dict(), sort_keys=True)
        remember_program(spec_json, rt.program)
        # the URL travels to Dask workers without its password (they take it from ULDP_DB)
        work = PhaseWork(self.db.url.render_as_string(hide_password=True), rt.query_id,
                         phase, spec_json, json.dumps({str(k): v for k, v in published.items()}))
        return close_phase_accumulators(self.db, work, int(rt.spec.users), self.engine,
                                        check)


def _reason(exc: BaseException) -> str:
    """The database's own message of ``exc`` (no SQL text, no parameters)."""
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
