"""The one refusal type of the collector's logic (no gRPC types below the servicers).

See ``proto/uldp/v1/device.proto`` and ``analyst.proto`` for every status code, its
meaning and the order of the checks.
"""

from __future__ import annotations

__all__ = ["ServiceError"]


class ServiceError(Exception):
    """A request is refused: ``code`` is a gRPC status code name, ``message`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
