"""Fixtures of the learning tests: the service engineer's loopback collector fixtures."""

from tests.service.conftest import pki, start_collector  # noqa: F401
