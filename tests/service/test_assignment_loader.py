"""A replica that has not cached a device's assignment (the device enrolled through
another replica) loads it off the event loop, many misses in one read (issue 28: with N
replicas N − 1 in N devices miss on their first report; each miss was a database round
trip on the loop, stalling every other call of that replica)."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from uldp.collector.planner import QuerySpec
from uldp.collector.programs import program_for
from uldp.collector.security.tokens import AdminAuth, TokenKey
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.tasks import AssignmentLoader
from uldp.collector.storage import open_database


def test_misses_are_read_off_the_loop_and_batched(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    db = open_database(url)
    spec = QuerySpec(kind="mean", epsilon=1.0, users=300, samples=10, method="ssl",
                     query_id="q")
    program = program_for(spec)
    db.create_query(dict(query_id="q", kind="mean", dataset="x", epsilon=1.0,
                         spec_json=json.dumps(spec.to_dict()), seed="0", state="running",
                         current_phase=1, num_phases=program.num_phases, target_users=300,
                         phase_timeout_s=3600.0, result_json=None), program.quotas(), 2**62)
    devices = [f"d{i}" for i in range(200)]
    with db.write() as conn:  # assigned through "another replica"
        db.assign_many_in(conn, "q", devices, program.place)
    replica = CollectorCore(open_database(url), TokenKey.generate(), AdminAuth("x" * 32),
                            CoreConfig())
    pool = ThreadPoolExecutor(2)
    loader = AssignmentLoader(replica.tasks, pool)
    loop_thread: list[int] = []
    reader_threads: set[int] = set()
    prefetch = replica.tasks.prefetch_assignments

    def spy(pairs):  # records where the reads run; the real read does the work
        reader_threads.add(threading.get_ident())
        return prefetch(pairs)
    replica.tasks.prefetch_assignments = spy  # type: ignore[method-assign]

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        # 200 first reports at once, and one device unknown to the query
        await asyncio.gather(*(loader.load("q", d) for d in [*devices, "stranger"]))
    try:
        assert not any(replica.tasks.cached("q", d) for d in devices)
        asyncio.run(main())
        assert all(replica.tasks.cached("q", d) for d in devices)
        assert not replica.tasks.cached("q", "stranger")  # its own look-up refuses it
        assert replica.tasks.assignment("q", "stranger") is None
        assert loop_thread[0] not in reader_threads  # never on the loop
        # the first miss starts a read; every miss queued meanwhile shares the next one
        assert 1 <= loader.reads <= 2, loader.reads
        rows = {d: replica.tasks.assignment("q", d) for d in devices}
        assert sorted(r["slot"] for r in rows.values()) == sorted(
            a["slot"] for a in db.get_assignments("q", devices))
    finally:
        pool.shutdown()
        replica.stop()
        replica.db.dispose()
        db.dispose()
