"""uldp device SDK: one privatized report per query from a user's whole local dataset.

See ``docs/privacy.md`` (what is guaranteed and why) and ``docs/device-protocol.md`` (the
contract a device in any language implements). The app-facing API::

    from uldp.client import Device
    dev = Device("collector.example:443", "/var/lib/myapp/uldp", ca_cert="ca.pem", budget=4.0)
    dev.add_dataset("steps", samples=my_samples)
    dev.poll()

The report functions (:func:`compute_report`, :func:`compute_reports`) and the primitives
below are also what the collector and the simulations use: the package is the trusted
core both halves share (randomness, exact noise, task checks). It never imports the
collector.
"""

from typing import TYPE_CHECKING, Any

from uldp.client.budget import EPS_DENOMINATOR, MAX_EPSILON, epsilon_units
from uldp.client.dataset import DatasetSchema
from uldp.client.kinds import KINDS, DataError, Kind
from uldp.client.ledger import BudgetExceeded, Ledger
from uldp.client.methods import METHODS
from uldp.client.randomness import RandomSource
from uldp.client.schedule import SendDelay
from uldp.client.tasks import (
    compute_report,
    compute_reports,
    report_length,
    report_limit,
    task_epsilon,
    validate_task,
)
from uldp.client.taskspec import SCHEMA, TaskRefused, TaskSpec

if TYPE_CHECKING:
    from uldp.client.device import Device, PollResult, ReportRejected
    from uldp.client.transport import Endpoint, RetryPolicy

#: names whose modules import gRPC, loaded on first use: importing the package (as the
#: collector and its CLI do) must not start gRPC's C core, which reads its logging
#: settings (GRPC_VERBOSITY) once, when it is imported
_LAZY = {"Device": "device", "PollResult": "device", "ReportRejected": "device",
         "Endpoint": "transport", "RetryPolicy": "transport"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"uldp.client.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'uldp.client' has no attribute {name!r}")

__all__ = [
    "EPS_DENOMINATOR",
    "KINDS",
    "MAX_EPSILON",
    "METHODS",
    "SCHEMA",
    "BudgetExceeded",
    "DataError",
    "DatasetSchema",
    "Device",
    "Endpoint",
    "Kind",
    "Ledger",
    "PollResult",
    "RandomSource",
    "ReportRejected",
    "RetryPolicy",
    "SendDelay",
    "TaskRefused",
    "TaskSpec",
    "compute_report",
    "compute_reports",
    "epsilon_units",
    "report_length",
    "report_limit",
    "task_epsilon",
    "validate_task",
]
