"""``uldp demo --shuffle --http-port``: the shuffled demo's processes serve their HTTP ports
(the collector's: Connect, gRPC-Web, the console, /metrics; the shuffler's: Connect,
gRPC-Web for browser devices), and a fleet too small for the shuffled batches is refused
naming the flag before anything starts."""

from __future__ import annotations

import re

import pytest

from tests.service.connect_channel import https_call
from uldp.collector.cli.util import OperatorError
from uldp.collector.simulation.demo import _start_shuffled, _stop, check_demo_args


def test_a_fleet_too_small_for_shuffled_batches_is_refused_naming_the_flag():
    check_demo_args(3000, 2.0, 100, shuffle=True)
    check_demo_args(1500, 2.0, 100)  # the same fleet in the clear is fine
    with pytest.raises(OperatorError, match=r"--devices 1500 --shuffle: .* give more devices"):
        check_demo_args(1500, 2.0, 100, shuffle=True)


def test_the_shuffled_demo_serves_both_http_ports(tmp_path):
    said: list[str] = []
    procs, ep, _, _, attest = _start_shuffled(tmp_path, said.append, http_port=0)
    try:
        assert attest  # the devices are vouched for towards the shuffler's own check
        (line,) = said
        ports = re.findall(r"https://127\.0\.0\.1:(\d+)", line)
        assert len(ports) == 2 and "/console/" in line, line
        for port in ports:
            assert https_call(f"https://127.0.0.1:{port}/healthz", ep.ca_cert)[0] == 200
        st, _, _ = https_call(f"https://127.0.0.1:{ports[1]}/uldp.v1.ShufflerService/"
                              "SubmitSealed", ep.ca_cert, "POST",
                              {"content-type": "application/proto"}, b"")
        assert st == 401  # the shuffler's Connect port: no ticket, UNAUTHENTICATED
    finally:
        for p in procs:
            _stop(p)
