"""The central estimators over a warehouse table read through DuckDB (issue 28 item 4):
the engine groups the rows by user and clamps them, the per-user means stream out, and
the release equals the numpy API's on the same rows (exact values, same seed); bad input
gets one clear error."""

from __future__ import annotations

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.collector.central.mean_of_means import user_mean, user_mean_of_means
from uldp.collector.central.warehouse import UserTable, user_means

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb")


def _rows(n_users: int = 2_000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 9, n_users)
    users = np.repeat(np.arange(n_users), counts)
    # multiples of 1/8 in [-1.5, 1.5]: every mean is exact in any summation order
    values = rng.integers(-12, 13, users.size) / 8.0
    return users, values


def test_parquet_release_equals_the_numpy_api(tmp_path):
    users, values = _rows()
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"user_id": users, "x": values}), path, row_group_size=1000)
    got = user_means(UserTable(str(path), "user_id", "x"), lo=-1.0, hi=1.0, batch_rows=500)
    assert got.records == users.size and got.means.size == 2_000
    assert got.clamped == int(((values < -1) | (values > 1)).sum())
    via_engine = user_mean_of_means(got.means, epsilon=1.0, lo=-1.0, hi=1.0,
                                    rng=RandomSource.seeded(3))
    via_numpy = user_mean(users, np.clip(values, -1, 1), epsilon=1.0, lo=-1.0, hi=1.0,
                          rng=RandomSource.seeded(3))
    assert via_engine.estimate == via_numpy.estimate
    assert via_engine.interval == via_numpy.interval


def test_csv_glob_and_sql_sources(tmp_path):
    users, values = _rows(300, seed=2)
    for part in (0, 1):
        sel = users % 2 == part
        (tmp_path / f"p{part}.csv").write_text(
            "uid,val\n" + "".join(f"{u},{v}\n" for u, v in zip(users[sel], values[sel],
                                                                strict=True)))
    a = user_means(UserTable(str(tmp_path / "p*.csv"), "uid", "val"), lo=-2, hi=2)
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM read_csv_auto(?)",
                [str(tmp_path / "p*.csv")])
    b = user_means(UserTable("sql:SELECT uid, val FROM t WHERE uid >= 0", "uid", "val"),
                   lo=-2, hi=2, connection=con)
    assert sorted(a.means.tolist()) == sorted(b.means.tolist())
    assert a.records == b.records == users.size and a.clamped == 0


def test_bad_tables_are_one_clear_error(tmp_path):
    path = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"u": [1, 2, 3], "x": [0.5, float("nan"), None]}), path)
    with pytest.raises(ValueError, match="x is NULL, NaN or infinite in 2 rows"):
        user_means(UserTable(str(path), "u", "x"), lo=0, hi=1)
    with pytest.raises(ValueError, match="not a Parquet or CSV"):
        user_means(UserTable(str(tmp_path / "rows.txt"), "u", "x"), lo=0, hi=1)
    with pytest.raises(ValueError, match=r"reading .*nope"):
        user_means(UserTable(str(path), "u", "nope"), lo=0, hi=1)
    with pytest.raises(ValueError, match="public range"):
        user_means(UserTable(str(path), "u", "x"), lo=1, hi=1)


def test_central_mean_cli_reads_parquet(tmp_path, capsys):
    from uldp.collector.cli import main

    users, values = _rows(400, seed=5)
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"uid": users, "x": values}), path)
    code = main(["central", "mean", str(path), "--user-col", "uid", "--value-col", "x",
                 "--epsilon", "1", "--lo", "-1", "--hi", "1", "--method", "simple",
                 "--seed", "2", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert '"n_users": 400' in out.out and "clamped into [-1, 1]" in out.err
