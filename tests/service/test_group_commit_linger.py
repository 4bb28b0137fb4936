"""Group-commit linger: with few reports queued the writer waits ``linger_s`` for more,
so concurrent reports share transactions; the value is validated at every entry point."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from uldp.collector.storage import open_database
from uldp.collector.storage.db import PendingReport
from uldp.collector.storage.writer import GroupCommitWriter


def _query(db) -> None:
    db.create_query(dict(query_id="q", kind="mean", dataset="x", epsilon=1.0, spec_json="{}",
                         seed="1", state="running", current_phase=1, num_phases=2,
                         target_users=2000, phase_timeout_s=60.0, result_json=None),
                    [1000, 1000], 2**62)


def _two_reports(tmp_path, linger_s: float, name: str, *, apart_s: float | None
                 ) -> tuple[int, list[int]]:
    """Commits used for two reports, each from its own thread: the second submitted
    ``apart_s`` after the first, or (None) only once the first call has returned."""
    db = open_database(f"sqlite:///{tmp_path / name}")
    _query(db)
    w = GroupCommitWriter(db, linger_s=linger_s)
    outs: list[str] = []

    def one(k: int) -> None:
        out = w.store_reports([PendingReport("q", 1, f"d{k}", 0, 1, k, b"\x01" * 8)])
        outs.append(out[0].code)
    t1 = threading.Thread(target=one, args=(1,))
    t2 = threading.Thread(target=one, args=(2,))
    t1.start()
    if apart_s is None:
        t1.join()
    else:
        time.sleep(apart_s)
    t2.start()
    t1.join()
    t2.join()
    counts = [p["received"] for p in db.get_phases("q")]
    commits = w.stats()["commits"]
    w.close()
    db.dispose()
    assert outs == ["OK", "OK"]
    return commits, counts


def test_linger_puts_close_reports_in_one_commit(tmp_path):
    # linger 100 ms (the most allowed): the second report (5 ms later) joins the first
    # one's transaction (fails only if this process stalls > 95 ms between the two)
    assert _two_reports(tmp_path, 0.1, "a.db", apart_s=0.005) == (1, [2, 0])
    # no linger: the first report is committed at once — its call returns without a
    # second report ever arriving — and the second goes in its own commit. (Submitting
    # the second 5 ms later instead failed on a loaded CI box: a writer that had not yet
    # woken for the first found both queued, rightly, and made one commit.)
    assert _two_reports(tmp_path, 0.0, "b.db", apart_s=None) == (2, [2, 0])


@pytest.mark.parametrize("bad", [-0.001, 0.5, float("nan")])
def test_bad_linger_is_refused(tmp_path, bad):
    db = open_database(f"sqlite:///{tmp_path / 'c.db'}")
    with pytest.raises(ValueError, match="linger_s"):
        GroupCommitWriter(db, linger_s=bad)
    db.dispose()


def test_cli_refuses_bad_linger(tmp_path):
    r = subprocess.run([sys.executable, "-m", "uldp.collector.cli.service", "collector",
                        "serve", "--db", str(tmp_path / "x.db"), "--tls-dir", str(tmp_path),
                        "--commit-linger-ms", "500"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "--commit-linger-ms must be between 0 and 100, got 500" in r.stderr
    assert not (tmp_path / "x.db").exists()  # refused before touching anything


def test_the_window_follows_the_arrival_rate(tmp_path):
    """The wait is the time the measured rate needs to fill the batch (linger_below),
    capped at linger_s, scaled by how often waiting gathered anything; none when the
    batch is full or lingering is off."""
    db = open_database(f"sqlite:///{tmp_path / 'w.db'}")
    w = GroupCommitWriter(db, linger_s=0.01, linger_below=64)
    try:
        assert w._window(0) == 0.01  # no rate measured yet: the cap
        w.rate = 64_000.0  # 64 more arrive in 1 ms
        assert w._window(0) == pytest.approx(0.001)
        assert w._window(32) == pytest.approx(0.0005)
        assert w._window(64) == 0.0
        w.rate = 3_200.0  # one of two replicas: half the arrivals -> twice the wait
        assert w._window(0) == pytest.approx(0.01)  # 20 ms to fill, capped at 10
        w.rate, w.useful = 32_000.0, 0.5
        assert w._window(0) == pytest.approx(0.001)
    finally:
        w.close()
        db.dispose()


def test_a_lone_sequential_caller_shrinks_the_window(tmp_path):
    # nobody else submits while one caller waits for its own report: every wait gathers
    # nothing, so the window falls to a tenth of the cap (measured, not timed)
    db = open_database(f"sqlite:///{tmp_path / 's.db'}")
    _query(db)
    w = GroupCommitWriter(db, linger_s=0.02)
    try:
        for k in range(12):
            out = w.store_reports([PendingReport("q", 1, f"d{k}", 0, 1, k, b"\x01" * 8)])
            assert out[0].code == "OK"
        assert w.useful == pytest.approx(0.1)
        assert w.stats()["commits"] == 12
    finally:
        w.close()
        db.dispose()


def test_a_slower_stream_waits_longer_so_commits_stay_few(tmp_path):
    """Reports arriving every 2 ms (a replica seeing half of a 1 000/s stream) from
    concurrent callers: the window widens to the cap (20 ms) and each commit takes
    several reports; a fixed 2 ms wait would commit one or two at a time."""
    db = open_database(f"sqlite:///{tmp_path / 'r.db'}")
    _query(db)
    w = GroupCommitWriter(db, linger_s=0.02)
    codes: list[str] = []

    def one(k: int) -> None:
        codes.append(w.store_reports([PendingReport("q", 1, f"d{k}", 0, 1, k,
                                                    b"\x01" * 8)])[0].code)
    threads = []
    try:
        for k in range(120):
            t = threading.Thread(target=one, args=(k,))
            t.start()
            threads.append(t)
            time.sleep(0.002)
        for t in threads:
            t.join()
        commits = w.stats()["commits"]
    finally:
        w.close()
        db.dispose()
    assert codes == ["OK"] * 120
    # 120 reports at >= 2 ms apart need >= 240 ms; a 20 ms window (+ the commit) holds
    # ~10 of them: at most 30 commits even if the box stalls the submitter (a stall
    # only makes batches bigger), against ~60-120 without the adaptive window
    assert commits <= 30, commits
