"""What the table mixins of :class:`uldp.collector.storage.db.Database` share.

See ``docs/architecture.md`` ("Storage").
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

__all__ = ["Tables"]


class Tables:
    """Attributes :class:`~uldp.collector.storage.db.Database` sets up for its mixins."""

    engine: Engine
    is_sqlite: bool
    _insert: Any  # the dialect's INSERT construct (ON CONFLICT support)
    _sql: dict[str, str]  # report statements with the driver's parameter marker
    _held: Any  # the writer thread's held connection
    writer_id: str  # this process's counter rows in ``phase_counts``
    _sql_due: str  # phases_due's statement with the driver's parameter marker
    _readers: list[Any]  # held autocommit read connections (raw_read)
    _readers_lock: Any  # guards them

    def raw_read(self) -> Any:
        raise NotImplementedError

    def read_with(self, work: Any) -> Any:
        raise NotImplementedError

    def phase_open(self, cur: Any, query_id: str, phase: int) -> str | None:
        raise NotImplementedError

    def count_in(self, cur: Any, query_id: str, phase: int, *, received: int = 0,
                 declined: int = 0) -> None:
        raise NotImplementedError

    def write(self) -> Any:
        raise NotImplementedError

    def _insert_reports(self, cur: Any, rows: list[Any], t: int) -> set[tuple[str, str]]:
        raise NotImplementedError

    def read(self) -> Any:
        raise NotImplementedError

    @property
    def dbapi_error(self) -> type[Exception]:
        raise NotImplementedError
