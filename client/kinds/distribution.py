"""Discrete distributions over ``{0, …, A-1}`` via Hadamard coefficients.

See ``docs/algorithms.md`` ("Kinds"). Sections of ``docs/algorithms.md``: §6.3. A user's statistic
is the Hadamard transform of its category frequencies; samples that are not integers in
``[0, A)`` are missing (``docs/privacy.md``, sanitizing rules).
"""

from __future__ import annotations

import math

import numpy as np

from uldp.client.hadamard import next_pow2
from uldp.client.kinds.base import Kind, register_kind
from uldp.client.kinds.means import hadamard_rows, hadamard_transform
from uldp.client.taskspec import TaskSpec

__all__: list[str] = []


def _alphabet(task: TaskSpec) -> int:
    return next_pow2(task.dim)


def _in_alphabet(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    """Sanitizing rule of ``distribution``: a sample is a category iff it is an integer in
    ``[0, A)``; anything else (fractions, negatives, ≥ A) is ignored like a missing value."""
    return (x == np.floor(x)) & (x >= 0) & (x < task.dim)


def _user_stats(task: TaskSpec, X: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Category frequencies ``count_c / m_i`` over the valid samples (one exact division of
    an integer count), zero-padded to ``K`` and Hadamard-transformed: ``H f / √K``."""
    n, m = X.shape[:2]
    freq = np.zeros((n, task.dim))
    if m:
        cats = np.where(valid, X, 0).astype(np.int64)
        flat = (np.arange(n)[:, None] * task.dim + cats).ravel()
        counts = np.bincount(flat, weights=valid.ravel().astype(np.float64),
                             minlength=n * task.dim).reshape(n, task.dim)
        freq = counts / np.maximum(valid.sum(axis=1, keepdims=True), 1).astype(np.float64)
    return hadamard_rows(freq, _alphabet(task))


def _sample_map(task: TaskSpec, x: np.ndarray) -> np.ndarray:
    cats = np.asarray(x).ravel()
    ok = _in_alphabet(task, cats)
    onehot = np.zeros((cats.size, task.dim))
    onehot[np.flatnonzero(ok), cats[ok].astype(np.int64)] = 1.0
    return hadamard_rows(onehot, _alphabet(task))


register_kind(Kind(
    name="distribution", vector=False,
    n_components=_alphabet,
    sample_map=_sample_map,
    user_stats=_user_stats,
    bounds=lambda t: np.full(_alphabet(t), 1.0 / math.sqrt(_alphabet(t))),
    valid_value=_in_alphabet,
    transform=hadamard_transform,
    output_range=lambda t: (0.0, 1.0),  # frequencies
    categories=lambda t: t.dim,
))
