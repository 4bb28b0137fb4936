"""The proto comments state facts of the code (issue 9): the token format, the
message-size limit, the fixed messages and the order of the report checks. These tests
hold the comments and the code to each other."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tests.service.wire import enroll_with_task, one_phase_query, report_for, send
from uldp.client.wire import DEFAULT_MAX_MESSAGE_BYTES, bearer, device_pb2, device_pb2_grpc
from uldp.collector.security.tokens import TokenKey
from uldp.collector.service.core import SIMULATED_REFUSED
from uldp.collector.service.handlers import undecodable_message
from uldp.collector.service.servicers import DATABASE_UNAVAILABLE, INTERNAL_ERROR
from uldp.collector.storage.writer import WRITE_FAILED

PROTO = Path(__file__).resolve().parents[2] / "proto" / "uldp" / "v1"


def _comments(name: str) -> str:
    """The comment text of a proto file, one space between words."""
    lines = [ln.split("//", 1)[1] for ln in (PROTO / name).read_text().splitlines()
             if "//" in ln]
    return " ".join(" ".join(lines).split())


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_token_is_signed_as_documented():
    """Verify a token the way device.proto says, with nothing of the collector's code."""
    key = TokenKey.generate()
    token, exp = key.issue("d-00112233445566778899aabb", 3600, now_ms=1766620800000)
    assert len(token) <= 1024 and token.count(".") == 1 and "=" not in token
    p64, s64 = token.split(".")
    payload, sig = _b64d(p64), _b64d(s64)
    public = serialization.load_pem_private_key(key.private_pem(), None).public_key()
    pk_raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    Ed25519PublicKey.from_public_bytes(pk_raw).verify(sig, payload)  # raises if not
    assert len(sig) == 64
    kid = hashlib.sha256(pk_raw).hexdigest()[:16]
    assert payload == (b'{"exp":%d,"iat":1766620800000,"kid":"%s",'
                       b'"sub":"d-00112233445566778899aabb","v":1}' % (exp, kid.encode()))
    assert exp == 1766620800000 + 3_600_000
    assert payload.isascii()


def test_fixed_messages_and_limit_are_the_documented_ones():
    dev, ana = _comments("device.proto"), _comments("analyst.proto")
    assert f"{DEFAULT_MAX_MESSAGE_BYTES:,}".replace(",", " ") == "4 194 304"
    assert "at most 4 194 304 bytes" in dev and "over 4 194 304 bytes" in ana
    for text in (SIMULATED_REFUSED, DATABASE_UNAVAILABLE, INTERNAL_ERROR, WRITE_FAILED):
        assert text in dev, text
    for text in (DATABASE_UNAVAILABLE, INTERNAL_ERROR):
        assert text in ana, text
    shape = undecodable_message("/uldp.v1.DeviceService/<Rpc>", "uldp.v1.<Type>")
    assert shape in dev
    assert undecodable_message("/uldp.v1.AnalystService/<Rpc>", "uldp.v1.<Type>") in ana


def _steps(text: str, title: str = "Checks of a report, in order") -> list[str]:
    """The numbered steps of a section ('Checks of a report, in order', ...)."""
    block = text.split(title)[1].lstrip("- ").split("---- ")[0]
    return re.findall(r"\b(\d+)\. (\w+)", block)


def test_documented_order_is_the_order_of_the_checks(start_collector):
    """Reports that fail two consecutive documented checks get the earlier one's code."""
    assert [name for _, name in _steps(_comments("device.proto"))] == [
        "authentication", "SubmitReport", "query", "simulated", "assignment", "phase",
        "length", "range", "task", "one", "storage"]
    # the checks of a decline (tests/service/test_service_decline.py runs them in order)
    assert [name for _, name in _steps(_comments("device.proto"),
                                       "Checks of a decline, in order")] == [
        "authentication", "DeclineTask", "reason", "query", "assignment", "phase", "task",
        "one", "storage"]
    c = start_collector(allow_simulated=False)
    one_phase_query(c)
    with c.channel() as ch:
        stub = device_pb2_grpc.DeviceServiceStub(ch)
        tok, task = enroll_with_task(stub)
        good = report_for(task, seed=1)

        def code(rep, token=tok) -> grpc.StatusCode:
            with pytest.raises(grpc.RpcError) as ei:
                stub.SubmitReport(device_pb2.SubmitReportRequest(report=rep),
                                  metadata=bearer(token) if token else None)
            return ei.value.code()

        def bad(**kw) -> device_pb2.Report:
            r = device_pb2.Report()
            r.CopyFrom(good)
            for k, v in kw.items():
                if k == "values":
                    del r.values[:]
                    r.values.extend(v)
                else:
                    setattr(r, k, v)
            return r
        S = grpc.StatusCode
        big = [task.max_abs_value + 1] * task.report_length
        # 1 before 2, 2 before 3, 3 before 4, 4 before 5
        assert code(bad(device_token=tok), token=None) == S.UNAUTHENTICATED
        assert code(bad(device_token=tok, query_id="nope")) == S.INVALID_ARGUMENT
        assert code(bad(query_id="nope", simulated=True)) == S.NOT_FOUND
        other = stub.Enroll(device_pb2.EnrollRequest()).token  # never assigned
        assert code(bad(simulated=True), token=other) == S.FAILED_PRECONDITION
        # 5 before 6, 6 before 7, 7 before 8, 8 before 9
        assert code(bad(phase=2), token=other) == S.PERMISSION_DENIED
        assert code(bad(phase=2, values=[0])) == S.FAILED_PRECONDITION
        assert code(bad(values=[task.max_abs_value + 1])) == S.INVALID_ARGUMENT
        assert code(bad(values=big, task_digest="0" * 64)) == S.INVALID_ARGUMENT
        assert code(bad(task_digest="0" * 64)) == S.FAILED_PRECONDITION
        # 9 before 10: a stored report does not excuse a wrong digest
        assert not send(stub, tok, good).duplicate
        assert code(bad(task_digest="0" * 64)) == S.FAILED_PRECONDITION
        assert code(bad(values=[0] * task.report_length)) == S.ALREADY_EXISTS
        assert send(stub, tok, good).duplicate
