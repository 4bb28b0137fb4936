"""A device's local dataset: its public declaration and the sanitizing of its values.

See ``docs/privacy.md`` ("Totality"). What an app declares when it registers a dataset is
*public* — the name, the per-sample dimension, the kind of values, whether samples carry
labels — and a device may refuse a task by comparing it with these facts. Everything else
(how many samples, their values) is private: it may change the noisy report's content,
never whether, when or how many messages the device sends. So converting values never
raises; values that are not usable are marked *missing* by documented rules:

* a value is ``float(v)`` when that conversion succeeds (numbers, booleans, numeric
  strings: ASCII text in the grammar of protocol §13.1 — Python's ``float`` also takes
  other Unicode digits and spaces, which the contract does not), otherwise NaN (missing);
* no data (``None``) is the empty dataset;
* a vector row that is not a sequence of exactly ``dim`` values is a row of NaN;
* labels are aligned to the samples: missing labels (a shorter or absent label list)
  are NaN, surplus labels are ignored.

Which samples a statistic then uses (every coordinate finite, label finite, category in
the alphabet) is the kind's rule (``uldp.client.kinds.Kind.valid_samples``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["VALUE_KINDS", "DatasetSchema", "LocalDataset", "align_labels", "coerce_values"]

#: What an app may declare about its values: ``real`` numbers, ``categorical`` codes
#: (integers 0..A-1), or ``any`` (the device accepts every task kind over it).
VALUE_KINDS = ("any", "real", "categorical")


@dataclass(frozen=True)
class DatasetSchema:
    """The public facts of a registered dataset."""

    name: str
    dim: int | None  # None: scalar samples (m,); d: vectors (m, d)
    values: str = "any"
    labelled: bool = False
    alphabet: int | None = None  # categorical: the number of categories A, if declared

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("a dataset needs a non-empty name")
        if self.dim is not None and (not isinstance(self.dim, int) or self.dim < 1):
            raise ValueError(f"dim must be a positive integer or None, got {self.dim!r}")
        if self.values not in VALUE_KINDS:
            raise ValueError(f"values must be one of {VALUE_KINDS}, got {self.values!r}")
        if self.alphabet is not None and (self.values != "categorical"
                                          or not isinstance(self.alphabet, int)
                                          or self.alphabet < 1):
            raise ValueError("alphabet (a positive integer) goes with values='categorical'")


@dataclass(frozen=True)
class LocalDataset:
    """A registered dataset: its public schema and its private, sanitized arrays."""

    schema: DatasetSchema
    samples: np.ndarray  # float64 (m,) or (m, d); NaN marks a missing value
    labels: np.ndarray | None = None  # float64 (m,) when labelled

    @property
    def name(self) -> str:
        return self.schema.name


def _to_float(v: Any) -> float:
    if isinstance(v, (list, tuple, dict, set, np.ndarray)):
        return float("nan")  # a container is not a value
    if isinstance(v, str) and not v.isascii():
        return float("nan")  # numeric strings are ASCII (protocol §13.1), whatever float() says
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return float("nan")


def _row(v: Any, dim: int) -> np.ndarray:
    r = _numeric_array(v)
    if r is not None and r.shape == (dim,):
        return r
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        return np.full(dim, np.nan)
    vals = list(v)
    if len(vals) != dim:
        return np.full(dim, np.nan)
    return np.array([_to_float(x) for x in vals])


def coerce_values(samples: Any, dim: int | None) -> np.ndarray:
    """float64 ``(m,)`` (``dim=None``) or ``(m, dim)``; unusable values become NaN.

    Raises ``ValueError`` only when the *structure* of the argument contradicts the
    declaration — an app bug, the same for every non-empty dataset: something that is not
    a sequence, or a NumPy array of another shape (a matrix for a scalar dataset, a
    matrix of another width). Inside a list, an element or row of the wrong form is a
    missing sample, never an error. ``None`` (no data) is the empty dataset.
    """
    if samples is None:
        return np.zeros((0,) if dim is None else (0, dim))
    if isinstance(samples, np.ndarray):
        return _coerce_array(samples, dim)
    arr = _numeric_array(samples)
    if arr is not None:  # a regular list of numbers: use it if it has the declared form
        if dim is None and arr.ndim == 1:
            return arr
        if dim is not None and arr.ndim == 2 and arr.shape[1] == dim:
            return arr
        if arr.size == 0 and arr.ndim >= 1:
            return np.zeros((0,) if dim is None else (0, dim))
    items = _items(samples)
    if dim is None:
        return np.array([_to_float(v) for v in items], dtype=np.float64)
    if not items:
        return np.zeros((0, dim))
    return np.stack([_row(v, dim) for v in items])


def _numeric_array(samples: Any) -> np.ndarray | None:
    """The samples as float64 when they are a regular nest of numbers or booleans (the
    fast path); None when any leaf is something else — a string goes through
    :func:`_to_float` and its ASCII rule, never through NumPy's own ``float()``."""
    try:
        raw = np.asarray(samples)
    except (TypeError, ValueError, OverflowError):
        return None
    return raw.astype(np.float64) if raw.dtype.kind in "biuf" else None


def _coerce_array(a: np.ndarray, dim: int | None) -> np.ndarray:
    if a.ndim == 0:
        raise ValueError("samples must be a sequence of values, got a single value")
    if a.size == 0:
        return np.zeros((0,) if dim is None else (0, dim))
    # numeric arrays convert at once; object or string arrays element by element
    arr = a.astype(np.float64) if a.dtype.kind in "biuf" else None
    if dim is None:
        if a.ndim == 2 and a.shape[1] == 1:
            a = a[:, 0]
            arr = None if arr is None else arr[:, 0]
        if a.ndim != 1:
            raise ValueError(f"a scalar dataset needs samples of shape (m,), got {a.shape}; "
                             "declare dim=d for vectors")
        return arr.copy() if arr is not None else np.array([_to_float(v) for v in a])
    if a.ndim == 1 and dim == 1:
        a = a[:, None]
        arr = None if arr is None else arr[:, None]
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"a dataset of dimension {dim} needs samples of shape (m, {dim}), "
                         f"got {a.shape}")
    if arr is not None:
        return arr
    return np.array([[_to_float(v) for v in row] for row in a], dtype=np.float64).reshape(-1, dim)


def _items(samples: Any) -> list[Any]:
    if isinstance(samples, (str, bytes)) or not isinstance(samples, Iterable):
        raise ValueError("samples must be a sequence")
    return list(samples)


def align_labels(labels: Any, m: int) -> np.ndarray:
    """Labels as float64 ``(m,)``: converted like values, NaN where missing or unusable,
    padded with NaN or truncated to the number of samples."""
    if labels is None:
        return np.full(m, np.nan)
    lab = coerce_values(labels, None)
    out = np.full(m, np.nan)
    k = min(m, lab.shape[0])
    out[:k] = lab[:k]
    return out
