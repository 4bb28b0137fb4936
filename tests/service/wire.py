"""Raw-stub helpers of the protocol tests: what a client written from the proto alone
does (enroll, fetch a task, compute a report with the SDK's task code, submit)."""

from __future__ import annotations

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, compute_report
from uldp.client.wire import bearer, device_pb2
from uldp.collector.service.client import QueryRequest

#: a one-phase query (method ssl) of USERS devices: every device reports in phase 1
USERS = 3


def one_phase_query(c, qid: str = "q", users: int = USERS, **kw) -> object:
    """Create the one-phase query ``qid`` on collector ``c``; returns the Query."""
    a = c.analyst()
    try:
        return a.create(QueryRequest(kind="mean", method="ssl", epsilon=2.0, dataset="x",
                                     users=users, samples=16, query_id=qid,
                                     phase_timeout_s=3600, **kw))
    finally:
        a.close()


def enroll_with_task(stub) -> tuple[str, device_pb2.Task]:
    """Enroll a device over a raw stub and fetch its one task; (token, task)."""
    tok = stub.Enroll(device_pb2.EnrollRequest(label="t")).token
    r = stub.GetTasks(device_pb2.GetTasksRequest(datasets=["x"]), metadata=bearer(tok))
    assert len(r.tasks) == 1
    return tok, r.tasks[0]


def report_for(task: device_pb2.Task, seed: int) -> device_pb2.Report:
    """A well-formed report for ``task`` (fixed data, seeded noise)."""
    spec = TaskSpec.from_json(task.task_json)
    v = compute_report(spec, np.full(16, 0.25), rng=RandomSource.seeded(seed))
    return device_pb2.Report(query_id=task.query_id, phase=task.phase, values=v.tolist(),
                             task_digest=task.task_digest)


def send(stub, tok: str, rep: device_pb2.Report) -> device_pb2.SubmitReportResponse:
    return stub.SubmitReport(device_pb2.SubmitReportRequest(report=rep), metadata=bearer(tok))


def fill_quota(stub, users: int = USERS) -> list[tuple[str, device_pb2.Report]]:
    """``users`` devices each send one report (the last one reaches the quota)."""
    out = []
    for i in range(users):
        tok, task = enroll_with_task(stub)
        rep = report_for(task, seed=i)
        assert not send(stub, tok, rep).duplicate
        out.append((tok, rep))
    return out
