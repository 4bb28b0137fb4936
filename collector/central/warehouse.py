"""Per-user tables of any size for the central estimators, read through DuckDB.

See ``docs/central.md`` ("Reading a warehouse table"). The central estimators of user
means (``uldp.collector.central.mean_of_means``) need one number per user: the mean of
that user's values clamped into the public range. :func:`user_means` has the embedded
DuckDB engine compute it where the rows are — a Parquet file or glob, a CSV file, or any
``SELECT`` DuckDB can run (its own tables, views over files, attached databases) — so the
rows (10^8 of them, say) never enter Python: the engine groups by user and clamps, and
the per-user means stream out as Arrow record batches. DuckDB and pyarrow are optional
dependencies: ``pip install 'uldp[scale]'``.

Clamping is post-processing of each row into the public ``[lo, hi]`` (what the CSV
reader does with ``--lo/--hi``); how many rows it moved is reported for the operator,
never released. A NULL or non-finite value is refused (the numpy API refuses NaN too),
naming how many rows carry one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["UserMeans", "UserTable", "user_means"]


@dataclass(frozen=True)
class UserTable:
    """Rows of (user, value): ``source`` is a path or glob of Parquet (``*.parquet``) or
    CSV (``*.csv``) files, or ``sql:SELECT …`` for a query DuckDB runs; ``user`` and
    ``value`` name its columns."""

    source: str
    user: str
    value: str

    def relation(self) -> str:
        """The DuckDB relation (FROM clause) of the rows."""
        if self.source.startswith("sql:"):
            return f"({self.source[4:]})"
        path = self.source.replace("'", "''")
        low = self.source.lower()
        if low.endswith(".parquet") or ".parquet" in low:
            return f"read_parquet('{path}')"
        if low.endswith(".csv") or ".csv" in low:
            return f"read_csv_auto('{path}', header = true)"
        raise ValueError(f"{self.source!r} is not a Parquet or CSV file (or glob), nor "
                         "'sql:SELECT …'")


@dataclass(frozen=True)
class UserMeans:
    """One clamped mean per user (in no particular order), and what it came from."""

    means: np.ndarray
    records: int
    clamped: int  # rows moved into [lo, hi]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def user_means(table: UserTable, *, lo: float, hi: float, connection: Any = None,
               batch_rows: int = 1 << 20) -> UserMeans:
    """Per-user means of the values clamped into ``[lo, hi]``, grouped and clamped by
    DuckDB (module docstring); ``connection``: a DuckDB connection (default: a new
    in-memory one). Memory in Python: one float per user."""
    try:
        import duckdb
    except ImportError:  # pragma: no cover - the extra is installed in CI
        raise ImportError("reading tables through DuckDB needs the 'scale' extra: "
                          "pip install 'uldp[scale]'") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"the public range must be finite with lo < hi, got [{lo}, {hi}]")
    con = connection if connection is not None else duckdb.connect()
    rows = (f"SELECT {_ident(table.user)} AS u, CAST({_ident(table.value)} AS DOUBLE) AS v "
            f"FROM {table.relation()}")
    try:
        (bad, n, clamped), = con.sql(
            f"SELECT count(*) FILTER (WHERE v IS NULL OR NOT isfinite(v)), count(*), "
            f"count(*) FILTER (WHERE v < {lo!r} OR v > {hi!r}) FROM ({rows})").fetchall()
        if bad:
            raise ValueError(f"{table.value} is NULL, NaN or infinite in {bad} rows")
        if n == 0:
            raise ValueError("the table is empty: no user contributed a record")
        rel = con.sql(
            f"SELECT avg(least(greatest(v, {lo!r}), {hi!r})) AS m FROM ({rows}) GROUP BY u")
        # a stream of Arrow record batches (the name changed across DuckDB versions)
        stream = getattr(rel, "to_arrow_reader", None) or rel.fetch_record_batch
        reader = stream(batch_rows)
        parts = [batch.column(0).to_numpy(zero_copy_only=False) for batch in reader]
    except duckdb.Error as exc:
        raise ValueError(f"reading {table.source}: {exc}") from None
    finally:
        if connection is None:
            con.close()
    means = np.concatenate(parts) if parts else np.zeros(0)
    return UserMeans(means.astype(np.float64, copy=False), int(n), int(clamped))
