"""The collector's logic behind the gRPC servicers (no gRPC types in here).

See ``docs/architecture.md`` ("Service"). :class:`CollectorCore` wires one replica's parts
together and is what the servicers call:

* identity — device tokens, the admin credential, enrolment (this module);
* :class:`~uldp.collector.service.catalogue.QueryCatalogue` — create / list / cancel
  queries; each query's program;
* :class:`~uldp.collector.service.tasks.TaskServer` — slot assignment and tasks;
* :class:`~uldp.collector.service.ingest.ReportIngest` — report checks, then the
  group-commit writer (``uldp.collector.storage.writer``);
* :class:`~uldp.collector.service.closer.PhaseCloser` — the driver loop that closes
  phases through each query's program.

Sections of ``docs/algorithms.md``: §2.2 (round template), §3.7 / [D1] [D2], §2.4 / [D12], [D23].
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES
from uldp.collector.security.attestation import EnrolmentVerifier
from uldp.collector.security.sealkeys import SealKeyring
from uldp.collector.security.tokens import AdminAuth, TokenError, TokenKey
from uldp.collector.service.catalogue import QueryCatalogue, QueryRuntime
from uldp.collector.service.closer import TEST_CLOSE_DELAY_ENV, PhaseCloser
from uldp.collector.service.enrolment import (
    DEFAULT_ATTESTED_LIMIT,
    DEFAULT_CREDENTIAL_LIMIT,
    DEFAULT_PEER_LIMIT,
    EnrolmentPolicy,
    RateLimit,
)
from uldp.collector.service.errors import ServiceError, authenticate
from uldp.collector.service.ingest import SIMULATED_REFUSED, ReportIngest
from uldp.collector.service.lease import closer_id
from uldp.collector.service.odometer import CentralBudget, PrivacyOdometer
from uldp.collector.service.phases import PhaseView
from uldp.collector.service.reduce import CloseEngine, LocalEngine
from uldp.collector.service.shuffled import ShuffleIntake
from uldp.collector.service.tasks import TaskAnswer, TaskInfo, TaskServer
from uldp.collector.storage.db import Database, PendingReport, ReportOutcome, now_ms
from uldp.collector.storage.writer import GroupCommitWriter

__all__ = ["SIMULATED_REFUSED", "TEST_CLOSE_DELAY_ENV", "CollectorCore", "CoreConfig",
           "ServiceError", "TaskInfo"]


@dataclass(frozen=True)
class CoreConfig:
    token_ttl_s: float = 7 * 24 * 3600.0
    token_grace_s: float = 90 * 24 * 3600.0  # re-enrolment with an expired token
    default_phase_timeout_s: float = 3600.0
    #: closing lease: renewed every third of it while a phase is aggregated; a replica
    #: that dies mid-close is taken over within this long (uldp.collector.service.lease)
    close_lease_ms: int = 5_000
    tick_s: float = 0.2
    enrollment_secret: str | None = None
    max_users: int = 10_000_000
    commit_linger_ms: float = 20.0  # group commit: wait at most this long for more reports
    #: accept reports marked ``simulated`` (seeded noise) for every query; otherwise only
    #: queries created with ``"allow_simulated": true`` in their params accept them
    allow_simulated: bool = False
    #: the largest message the server sends or accepts (--max-message-bytes): batch
    #: calls take no more items than an answer of this size can hold
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    #: enrolments per network address (--enroll-peer-limit; None: no limit)
    enroll_peer_limit: RateLimit | None = DEFAULT_PEER_LIMIT
    #: new identities per credential (--enroll-credential-limit; None: no limit;
    #: "auto": DEFAULT_ATTESTED_LIMIT with a verifier, else DEFAULT_CREDENTIAL_LIMIT)
    enroll_credential_limit: RateLimit | Literal["auto"] | None = "auto"
    #: who may create a new identity (--attestation-key-file; None: anyone)
    enrolment_verifier: EnrolmentVerifier | None = None
    #: shuffle mode: each dataset's central budget (--central-budget, --central-delta)
    central_budget: CentralBudget = field(default_factory=CentralBudget)
    #: windows of a closing phase reduced at once in this process (--close-threads)
    close_threads: int = 2
    #: reduce closing phases on this Dask scheduler instead (--dask-scheduler; None: in
    #: process): ``uldp.collector.service.dask_close``
    dask_scheduler: str | None = None


def _close_engine(cfg: CoreConfig) -> CloseEngine:
    """The engine that reduces closing phases: a Dask cluster or this process."""
    if cfg.dask_scheduler:
        from uldp.collector.service.dask_close import DaskEngine, dask_client

        return DaskEngine(dask_client(cfg.dask_scheduler))
    return LocalEngine(max(1, cfg.close_threads))


class CollectorCore:
    """One replica's collector logic; thread-safe (see the module docstring)."""

    def __init__(self, db: Database, token_key: TokenKey, admin: AdminAuth,
                 config: CoreConfig | None = None, name: str | None = None) -> None:
        self.db = db
        self.token_key = token_key
        self.admin = admin
        self.config = cfg = config or CoreConfig()
        self.name = name or f"collector-{secrets.token_hex(4)}"
        #: this process's holder id in closing leases (a restart gets a new one)
        self.closer_id = closer_id(self.name)
        self.writer = GroupCommitWriter(db, linger_s=cfg.commit_linger_ms / 1000)
        self.phases = PhaseView(db)
        self.seal_keys = SealKeyring(db)
        self.catalogue = QueryCatalogue(db, max_users=cfg.max_users,
                                        default_phase_timeout_s=cfg.default_phase_timeout_s,
                                        seal_keys=self.seal_keys)
        self.tasks = TaskServer(db, self.writer, self.catalogue, self.phases)
        self.ingest = ReportIngest(db, self.writer, self.catalogue, self.phases, self.tasks,
                                   allow_simulated=cfg.allow_simulated)
        self.shuffled = ShuffleIntake(db, self.writer, self.catalogue, self.phases, self.tasks,
                                      self.seal_keys, allow_simulated=cfg.allow_simulated)
        cred = cfg.enroll_credential_limit
        if cred == "auto":
            cred = (DEFAULT_ATTESTED_LIMIT if cfg.enrolment_verifier is not None
                    else DEFAULT_CREDENTIAL_LIMIT)
        self.enrolment = EnrolmentPolicy(cfg.enroll_peer_limit, cred, cfg.enrolment_verifier)
        self.closer = PhaseCloser(db, self.catalogue, self.phases, name=self.name,
                                  closer_id=self.closer_id, lease_ms=cfg.close_lease_ms,
                                  tick_s=cfg.tick_s, engine=_close_engine(cfg))
        self.closer.privacy = self.shuffled.privacy  # shuffle mode: the central guarantee
        self.odometer = PrivacyOdometer(db, cfg.central_budget)  # and its composition
        self.catalogue.odometer = self.shuffled.odometer = self.odometer

    # ---- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self.closer.start()

    def stop(self) -> None:
        self.closer.stop()
        self.shuffled.close()
        self.writer.close()
        close = getattr(self.closer.engine, "close", None)
        if close is not None:
            close()

    # ---- authentication -------------------------------------------------------------
    def device_from_token(self, token: str | None) -> str:
        return authenticate(self.token_key, token)

    def check_admin(self, token: str | None) -> None:
        if not self.admin.check(token):
            raise ServiceError("UNAUTHENTICATED", "analyst calls need the admin credential "
                               "(metadata 'authorization: Bearer <admin token>')")

    def devices_from_tokens(self, tokens: Sequence[str]) -> list[str | ServiceError]:
        """:meth:`device_from_token` of each token: the device id or the refusal."""
        out: list[str | ServiceError] = []
        for token in tokens:
            try:
                out.append(self.device_from_token(token))
            except ServiceError as exc:
                out.append(exc)
        return out

    # ---- enrollment -----------------------------------------------------------------
    def enroll(self, secret: str, label: str, previous_token: str, attestation: str = "",
               peer: str = "") -> tuple[str, str, int]:
        got = self.enroll_many([(secret, label, previous_token, attestation)], peer)[0]
        if isinstance(got, ServiceError):
            raise got
        return got

    def enroll_many(self, asks: Sequence[tuple[str, str, str, str]], peer: str = ""
                    ) -> list[tuple[str, str, int] | ServiceError]:
        """Enroll each ``(secret, label, previous token, attestation)`` asked by the
        caller at network address ``peer``: (device id, token, expiry ms) or the refusal
        of that one. The address's rate limit must take every item, else the whole call
        is refused (RESOURCE_EXHAUSTED). The registry rows of new devices go to the
        writer in one ticket."""
        self.enrolment.admit_call(peer, len(asks))
        out: list[tuple[str, str, int] | ServiceError] = []
        new: list[tuple[str, str]] = []
        for secret, label, previous, attestation in asks:
            try:
                device_id, fresh = self._identity(secret, previous, attestation)
            except ServiceError as exc:
                out.append(exc)
                continue
            if fresh:
                new.append((device_id, label))
            token, exp = self.token_key.issue(device_id, self.config.token_ttl_s)
            out.append((device_id, token, exp))
        # the registry rows are informational (tokens are stateless): do not wait for them
        self.writer.register_devices(new)
        return out

    def _identity(self, secret: str, previous_token: str, attestation: str
                  ) -> tuple[str, bool]:
        """(device id, whether it is new) of an enrolment; ServiceError if refused (the
        checks of ``Enroll`` in device.proto, in order)."""
        want = self.config.enrollment_secret
        if want is not None and not secrets.compare_digest(secret.encode(), want.encode()):
            raise ServiceError("UNAUTHENTICATED", "wrong or missing enrollment secret")
        if not previous_token:
            self.enrolment.admit_identity(self.enrolment.credential(secret, attestation))
            return "d-" + secrets.token_hex(12), True
        try:
            claims = self.token_key.verify(previous_token, allow_expired=True)
        except TokenError as exc:
            raise ServiceError("UNAUTHENTICATED", f"previous token rejected: {exc}") from None
        if now_ms() - claims.expires_at_ms > self.config.token_grace_s * 1000:
            raise ServiceError("UNAUTHENTICATED", "previous token expired too long ago")
        return claims.device_id, False

    # ---- the parts, as the servicers call them ------------------------------------------
    def create_query(self, **kw: Any) -> dict[str, Any]:
        return self.catalogue.create(**kw)

    def get_query(self, query_id: str) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
        return self.catalogue.get(query_id)

    def list_queries(self, state: str | None) -> list[dict[str, Any]]:
        return self.catalogue.list(state)

    def cancel_query(self, query_id: str) -> None:
        self.catalogue.cancel(query_id)
        self.phases.forget(query_id)

    def runtime(self, query_id: str) -> QueryRuntime | None:
        return self.catalogue.runtime(query_id)

    def get_tasks(self, device_id: str, datasets: Sequence[str],
                  query_id: str = "") -> tuple[list[TaskInfo], list[tuple[str, int]], int]:
        return self.tasks.get_tasks(device_id, datasets, query_id)

    def get_tasks_many(self, asks: Sequence[tuple[str, Sequence[str], str]]
                       ) -> list[TaskAnswer | ServiceError]:
        return self.tasks.get_tasks_many(asks)

    def prefetch_assignments(self, pairs: Sequence[tuple[str, str]]) -> None:
        self.tasks.prefetch_assignments(pairs)

    def validate_report(self, device_id: str, query_id: str, phase: int,
                        values: Sequence[int], digest: str, simulated: bool = False
                        ) -> PendingReport | ReportOutcome:
        return self.ingest.validate(device_id, query_id, phase, values, digest, simulated)

    def store(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        return self.ingest.store(items)

    def validate_decline(self, device_id: str, query_id: str, phase: int, digest: str,
                         reason: str) -> PendingReport | ReportOutcome:
        return self.ingest.validate_decline(device_id, query_id, phase, digest, reason)

    def store_declines(self, items: Sequence[PendingReport]) -> list[ReportOutcome]:
        return self.ingest.store_declines(items)

    def close_phase(self, query_id: str, phase: int, force: bool = False) -> bool:
        return self.closer.close_phase(query_id, phase, force)
