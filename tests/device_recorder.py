"""A collector stand-in for device tests: a real gRPC server on loopback that serves a list
of tasks and records every message a device sends (``tests/test_totality.py``,
``tests/test_device_hostile.py``)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import grpc

from uldp.client.tasks import TaskSpec, report_length, report_limit
from uldp.client.wire import device_pb2, device_pb2_grpc


class Recorder(device_pb2_grpc.DeviceServiceServicer):
    """Serves ``tasks``, records every message (``calls``) and report (``reports``)."""

    def __init__(self) -> None:
        self.tasks: list[device_pb2.Task] = []
        self.reports: list[device_pb2.Report] = []
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def Enroll(self, request, context):
        with self.lock:
            self.calls.append("Enroll")
        return device_pb2.EnrollResponse(device_id="dev", token="tok", expires_at_ms=2**62)

    def GetTasks(self, request, context):
        with self.lock:
            self.calls.append("GetTasks")
        return device_pb2.GetTasksResponse(tasks=self.tasks)

    def SubmitReport(self, request, context):
        with self.lock:
            self.calls.append(f"SubmitReport:{request.report.query_id}")
            self.reports.append(request.report)
        return device_pb2.SubmitReportResponse()


@contextmanager
def serve_recorder() -> Iterator[tuple[Recorder, grpc.Channel]]:
    with serve(Recorder()) as (svc, chan):
        yield svc, chan


@contextmanager
def serve(svc: Any) -> Iterator[tuple[Any, grpc.Channel]]:
    """A DeviceService servicer on loopback, and a channel to it."""
    server = grpc.server(futures.ThreadPoolExecutor(4))
    device_pb2_grpc.add_DeviceServiceServicer_to_server(svc, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    chan = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield svc, chan
    finally:
        chan.close()
        server.stop(0).wait()


def raw_task(text: str, query_id: str, length: int, dataset: str = "data") -> device_pb2.Task:
    """A Task message carrying ``text`` verbatim (it may break the device's rules)."""
    return device_pb2.Task(query_id=query_id, phase=1, group=0, dataset=dataset,
                           task_json=text, report_length=length,
                           task_digest=hashlib.sha256(text.encode()).hexdigest())


def wire_task(task: TaskSpec, query_id: str, dataset: str = "data") -> device_pb2.Task:
    t = replace(task, query_id=query_id)
    msg = raw_task(t.to_json(), query_id, report_length(t), dataset)
    msg.stage, msg.max_abs_value = t.stage, report_limit(t)
    return msg
