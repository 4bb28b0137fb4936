"""The query kinds a device can compute (device half), registered by name.

Importing this package imports every kind module, so :data:`KINDS` is complete:

* ``means`` — ``mean``, ``mean-linf``, ``mean-l2`` (Kashin), ``mean-l1`` (Hadamard);
* ``distribution`` — discrete distributions;
* ``learning`` — ``sgd``, ``classify``, ``regress``.

A new kind is one module that calls :func:`register_kind` plus one import line here (see
``docs/architecture.md``, "Adding a kind").
"""

from uldp.client.kinds import distribution, grouped, learning, means
from uldp.client.kinds.base import (
    HEAVY_GUARD,
    KINDS,
    DataError,
    Kind,
    centre,
    check_samples,
    count_clamped,
    kashin_frame,
    masked_mean,
    register_kind,
    value_range,
)

__all__ = [
    "HEAVY_GUARD",
    "KINDS",
    "DataError",
    "Kind",
    "centre",
    "check_samples",
    "count_clamped",
    "distribution",
    "grouped",
    "kashin_frame",
    "learning",
    "masked_mean",
    "means",
    "register_kind",
    "value_range",
]
