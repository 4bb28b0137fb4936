"""The shuffler's store (real SQLite): one report per slot, a cell's placement, replays,
distinct attested subjects per batch, nothing committed by a failed call, and no link
between a slot and its report once the batch is forwarded (``docs/privacy.md`` §7)."""

from __future__ import annotations

import os
import sqlite3

import pytest

from uldp.collector.shuffler.store import (
    FORGOTTEN,
    Admission,
    ShufflerStore,
    Submission,
    subject_hash,
)

DIGEST = "ab" * 32


def _item(slot: int, subject: str | None = "s", sealed: bytes | None = None) -> Admission:
    sub = None if subject is None else subject_hash("q", f"{subject}-{slot}")
    return Admission(Submission("q", 1, 0, 0, DIGEST, sealed or os.urandom(57), slot, sub),
                     placed=10)


@pytest.fixture
def store(tmp_path):
    s = ShufflerStore(tmp_path / "s.db")
    yield s
    s.close()


def _dump(path) -> str:
    db = sqlite3.connect(path)
    try:
        return "\n".join(db.iterdump())
    finally:
        db.close()


def test_one_report_per_slot_and_cell_and_ciphertext(store):
    a = _item(1)
    assert store.submit([a, a]) == [("OK", False, ""), ("OK", True, "")]
    other = Admission(Submission("q", 1, 0, 0, DIGEST, os.urandom(57), 1), 10)
    assert store.submit([other])[0][:2] == ("ALREADY_EXISTS", False)
    replay = Admission(Submission("q", 1, 0, 0, DIGEST, a.item.sealed, 2), 10)
    code, _, msg = store.submit([replay])[0]
    assert code == "ALREADY_EXISTS" and "replayed" in msg
    assert [c for c, _, _ in store.submit([_item(s) for s in range(2, 12)])] == \
        ["OK"] * 9 + ["FAILED_PRECONDITION"]  # the cell holds its 10 placed devices
    assert store.admitted("q", 1) == {(0, 0): 10}


def test_a_failed_call_commits_nothing(store):
    bad = Admission(Submission("q", 1, 0, 0, DIGEST, os.urandom(57), 3,
                               object()), 10)  # type: ignore[arg-type]
    # an unbindable subject: the call fails in the insert of its waiting reports, after
    # its slots and ciphertext hashes were written in the transaction
    with pytest.raises(sqlite3.Error):
        store.submit([_item(1), _item(2), bad])
    assert store.prior("q", 1) is None and store.counts()["pending"] == 0
    assert store.admitted("q", 1) == {}


def test_batches_count_distinct_attested_subjects(store):
    store.submit([_item(1, "x"), _item(2, "y"), _item(3, None)])
    same = Admission(Submission("q", 1, 0, 0, DIGEST, os.urandom(57), 4,
                                subject_hash("q", "x-1")), 10)  # x again, another slot
    store.submit([same])
    (b,) = store.buckets()
    assert b.count == 4
    store.draw(b, 4, "hmac-attestation")
    (batch,) = store.unsent()
    assert (len(batch.sealed), batch.attested, batch.verifier) == (4, 2, "hmac-attestation")
    assert store.buckets() == []


def test_the_shuffler_forgets_which_slot_sent_which_report(store, tmp_path):
    items = [_item(s) for s in range(5)]
    store.submit(items)
    (b,) = store.buckets()
    store.draw(b, 5, "hmac-attestation")
    (batch,) = store.unsent()
    dump = _dump(tmp_path / "s.db")
    assert items[0].item.sealed.hex() in dump.lower()  # waiting for the collector: still there
    assert items[0].item.digest.hex() in dump.lower()
    store.finish(batch.batch_id, "forwarded", 5, 0)
    dump = _dump(tmp_path / "s.db")
    for it in items:  # neither the bytes nor the hash resends were judged by
        assert it.item.sealed.hex() not in dump.lower()
        assert it.item.digest.hex() not in dump.lower()
        assert store.prior("q", it.item.slot) == FORGOTTEN
    db = sqlite3.connect(tmp_path / "s.db")
    assert db.execute("SELECT count(*) FROM pending").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM submissions WHERE digest IS NOT NULL"
                      ).fetchone()[0] == 0
    db.close()
    # a resend after forwarding is an OK duplicate and stores nothing
    assert store.submit([items[2]]) == [("OK", True, "")]
    assert store.counts()["pending"] == 0


def test_a_dropped_bucket_is_forgotten_too(store):
    store.submit([_item(1), _item(2)])
    (b,) = store.buckets()
    assert store.drop_bucket(b) == 2
    assert store.prior("q", 1) == FORGOTTEN and store.buckets() == []


def test_a_database_of_another_version_is_refused(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE submissions (query_id TEXT, device_id TEXT, digest BLOB)")
    db.commit()
    db.close()
    with pytest.raises(RuntimeError, match="another version"):
        ShufflerStore(path)
