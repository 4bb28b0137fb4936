"""The bad-input cases of the gRPC service, replayed over Connect and gRPC-Web: the same
status code, the same message, and nothing changed (invariant 5, one implementation of
every check). The test functions of ``test_service_bad_input`` run unchanged; only their
``env`` fixture differs: the device stub and the analyst client talk to the collector's
HTTP port through ``ConnectChannel`` (connectrpc's client), and ``c.channel()`` too."""

from __future__ import annotations

import pytest

from tests.service import test_service_bad_input as grpc_cases
from tests.service.conftest import ADMIN_TOKEN
from tests.service.connect_channel import ConnectChannel
from uldp.client.wire import device_pb2_grpc
from uldp.collector.service.client import AnalystClient, QueryRequest


@pytest.fixture(params=["connect", "grpc-web"])
def env(request, start_collector):
    c = start_collector(http=True)
    c.channel = lambda: ConnectChannel(c.http_url, c.pki.ca_cert, request.param)
    a = AnalystClient(c.endpoint, ADMIN_TOKEN, channel=c.channel())
    a.create(QueryRequest(method="two-stage", kind="mean", epsilon=2.0, dataset="x",
                          users=grpc_cases.USERS, samples=16, query_id="q1",
                          phase_timeout_s=600))
    ch = c.channel()
    yield c, a, device_pb2_grpc.DeviceServiceStub(ch)
    ch.close()
    a.channel.close()


test_token_failures = grpc_cases.test_token_failures
test_report_failures = grpc_cases.test_report_failures
test_batch_items_get_their_own_status = grpc_cases.test_batch_items_get_their_own_status
test_analyst_failures = grpc_cases.test_analyst_failures
test_watch_streams_progress = grpc_cases.test_watch_streams_progress
