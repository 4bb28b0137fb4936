"""The analyst's Python API: create, list, watch, cancel and read queries of a collector.

See ``docs/analyst.md``. One client: ``uldp query ...`` is built on :class:`Analyst`, which
talks to the collector's AnalystService over TLS with the admin credential (the wire
calls are :class:`uldp.collector.service.client.AnalystClient`) and returns typed records
(``uldp.collector.analyst.types``). A refused call raises :class:`AnalystError` with the
collector's status code and message.

A whole session on a collector started here on loopback (``uldp.collector.simulation.sandbox``; a
real collector is reached the same way with its address, CA and admin token):

>>> from uldp.collector.analyst import Analyst, AnalystError
>>> from uldp.collector.simulation.sandbox import Sandbox
>>> lab = Sandbox.start()
>>> analyst = Analyst(lab.target, ca=lab.ca, token=lab.admin_token)
>>> p = analyst.preview("mean", epsilon=1.0, users=500, samples=20)
>>> print(f"±{p.likely_half_width[0]:.2f} with {p.method}")  # before anything is spent
±0... with ...
>>> q = analyst.create("mean", epsilon=1.0, dataset="steps", users=500, samples=20,
...                    query_id="steps-mean")
>>> q.state, [ph.quota for ph in q.phases]
('running', [500])
>>> lab.fleet("steps", "mean", users=500, samples=20)   # 500 simulated devices report
500
>>> final = None
>>> for q in analyst.watch("steps-mean", timeout_s=120):  # progress, until it ends
...     final = q
>>> final.state, final.phases[0].received
('done', 500)
>>> r = analyst.result("steps-mean")
>>> r.method, r.epsilon, r.estimand
('ssl', 1.0, "mean over users of each user's mean")
>>> r.ci_low[0] < r.values[0] < r.ci_high[0]
True
>>> abs(r.widths[0] / 2 / p.likely_half_width[0] - 1) < 0.15  # as the preview said
True
>>> frame = r.to_frame()
>>> list(frame.columns)[:5]
['query_id', 'estimate', 'ci_low', 'ci_high', 'std_error']
>>> [q.query_id for q in analyst.list(state="done")]
['steps-mean']
>>> try:                                           # refusals: the collector's code
...     analyst.cancel("steps-mean")
... except AnalystError as exc:
...     print(exc.code)
FAILED_PRECONDITION
>>> analyst.close(); lab.stop()
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from uldp.client.transport import Endpoint
from uldp.collector.analyst.preview import DEFAULT_MAX_USERS, preview_message
from uldp.collector.analyst.types import Preview, Query, Result
from uldp.collector.service.catalogue import check_message
from uldp.collector.service.client import AnalystClient, QueryRequest
from uldp.collector.service.errors import ServiceError

__all__ = ["Analyst", "AnalystError"]


class AnalystError(Exception):
    """A call the collector refused (or could not answer): its gRPC status code name and
    message. ``rpc`` is the underlying ``grpc.RpcError`` (None for a local preview)."""

    def __init__(self, code: str, message: str, rpc: grpc.RpcError | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.rpc = code, message, rpc

    @classmethod
    def from_rpc(cls, exc: grpc.RpcError) -> AnalystError:
        try:
            code, details = exc.code().name, exc.details() or ""
        except Exception:  # pragma: no cover - not a call error
            code, details = "UNKNOWN", str(exc)
        return cls(code, details, exc)


#: create/preview keywords that travel in params_json
_PARAMS = ("moment_p", "moment_m", "frame_kind", "mode", "confidence", "extra", "shuffle",
           "objective", "oracle", "randomizer", "stage1_share", "records", "assume")


def _request(kind: str, epsilon: float, dataset: str, users: int, samples: int,
             **kw: Any) -> QueryRequest:
    """The CreateQuery request of the Python API's keywords: a keyword left out is "not
    given" on the wire (``dim``/``bound`` 0, ``lo``/``hi`` absent), so the collector's one
    set of rules (``uldp.collector.service.requests.check_shape``) fills in the defaults
    and refuses what the CLI and the console refuse, with the same message."""
    params = {k: v for k in _PARAMS if (v := kw.pop(k, None)) is not None}
    for key in ("dim", "bound"):
        if kw.get(key) is None:
            kw[key] = 0
    if kw.get("groups") is not None:
        kw["groups"] = tuple(kw["groups"])
    return QueryRequest(kind=kind, epsilon=epsilon, dataset=dataset, users=users,
                        samples=samples, params=params or None, **kw)


class Analyst:
    """A connection to a collector's analyst service (see the module docstring).

    ``target``: ``host:port`` of the gRPC port; ``ca``: the CA certificate that signed the
    collector's; ``token``: the admin credential (or ``token_file``); ``server_name``:
    the name to check in the collector's certificate when it differs from the host;
    ``client_cert``/``client_key``: for a collector that requires mutual TLS.
    """

    def __init__(self, target: str, *, ca: str | Path, token: str | None = None,
                 token_file: str | Path | None = None, server_name: str | None = None,
                 client_cert: str | Path | None = None, client_key: str | Path | None = None,
                 timeout_s: float = 30.0, max_users: int | None = None) -> None:
        if (token is None) == (token_file is None):
            raise ValueError("give the admin credential as token= or token_file=")
        secret = token if token is not None else Path(str(token_file)).read_text()
        ep = Endpoint(target, Path(ca), Path(client_cert) if client_cert else None,
                      Path(client_key) if client_key else None, server_name=server_name)
        self.wire = AnalystClient(ep, secret, timeout_s=timeout_s)
        self.max_users = max_users

    @classmethod
    def from_endpoint(cls, endpoint: Endpoint, token: str, timeout_s: float = 30.0
                      ) -> Analyst:
        """An analyst over an already checked :class:`Endpoint` (the CLI's)."""
        self = cls.__new__(cls)
        self.wire = AnalystClient(endpoint, token, timeout_s=timeout_s)
        self.max_users = None
        return self

    def close(self) -> None:
        self.wire.close()

    def __enter__(self) -> Analyst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except grpc.RpcError as exc:
            raise AnalystError.from_rpc(exc) from None

    # ---- the calls ------------------------------------------------------------------
    def create(self, kind: str, *, epsilon: float, dataset: str, users: int, samples: int,
               **kw: Any) -> Query:
        """Create a query (``CreateQuery``). Keywords: ``dim``, ``lo`` and ``hi`` (the
        public range of a value) or ``bound`` (``D``: the range ``[-D, D]``; default 1),
        ``by`` and ``groups`` (group-by: a categorical dataset and its groups' names),
        ``method`` (default ``auto``; a method named without its mechanisms runs with
        the best ones for the public parameters), ``objective`` (``width``, the default:
        the interval's expected width; or ``mse``), ``assume`` (``"users-alike"``: every
        user's records i.i.d. from one distribution — the intervals of two-stage windows
        count on it and say so; default ``"none"``: valid for every population),
        ``oracle`` / ``randomizer`` (a report
        mechanism, ``docs/mechanisms.md``), ``stage1_share``, ``records``,
        ``moment_p``/``moment_m``, ``frame_kind``,
        ``mode``, ``confidence``, ``extra``, ``phase_timeout_s``, ``query_id``
        (idempotent create), ``allow_simulated``, ``shuffle``. Refused (``AnalystError``
        INVALID_ARGUMENT) exactly when ``uldp query create`` and the console refuse."""
        req = _request(kind, epsilon, dataset, users, samples, **kw)
        try:  # the collector's own rules first, here: a refusal costs no round trip
            check_message(req.message(), max_users=None, program=False, plan=False)
        except ServiceError as exc:
            raise AnalystError(exc.code, exc.message) from None
        return Query.from_message(self._call(self.wire.create, req))

    def preview(self, kind: str, *, epsilon: float, users: int, samples: int,
                dataset: str = "preview", **kw: Any) -> Preview:
        """What a query with these parameters will likely give, before it runs
        (``uldp.collector.analyst.preview``; computed here, nothing is sent)."""
        msg = _request(kind, epsilon, dataset, users, samples, **kw).message()
        try:
            return preview_message(msg, self.max_users or DEFAULT_MAX_USERS)
        except ServiceError as exc:
            raise AnalystError(exc.code, exc.message) from None

    def get(self, query_id: str) -> Query:
        return Query.from_message(self._call(self.wire.get, query_id))

    def list(self, state: str | None = None) -> list[Query]:
        """Queries, oldest first; ``state``: running, done, cancelled or failed."""
        if state is not None and state not in ("running", "done", "cancelled", "failed"):
            raise ValueError(f"state must be running, done, cancelled or failed, got {state!r}")
        return [Query.from_message(q) for q in self._call(self.wire.list, state)]

    def cancel(self, query_id: str) -> Query:
        return Query.from_message(self._call(self.wire.cancel, query_id))

    def watch(self, query_id: str, timeout_s: float | None = None) -> Iterator[Query]:
        """The query now, then at every change, until it is done, cancelled or failed."""
        try:
            for q in self.wire.watch(query_id, timeout_s):
                yield Query.from_message(q)
        except grpc.RpcError as exc:
            raise AnalystError.from_rpc(exc) from None

    def wait(self, query_id: str, timeout_s: float = 600.0) -> Query:
        """Block until the query ends; its final state."""
        last = None
        for q in self.watch(query_id, timeout_s):
            last = q
        if last is None:  # pragma: no cover - the stream always sends the current state
            raise AnalystError("UNKNOWN", f"no progress received for {query_id}")
        return last

    def result(self, query_id: str) -> Result:
        """The estimate of a finished query (FAILED_PRECONDITION while it runs)."""
        r = self._call(self.wire.result, query_id)
        return Result.from_messages(r, self.get(query_id))
