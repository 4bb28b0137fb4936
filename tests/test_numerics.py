"""The canonical float64 arithmetic of the device computation (``uldp.client.numerics``,
``docs/device-protocol.md`` §12): sequential sums, norms, ln/exp from basic operations, the
canonical FWHT, and the agreement of the fast batch kernels with the canonical path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from uldp.client import numerics as nm
from uldp.client.hadamard import fwht
from uldp.client.kashin import KashinFrame, kashin_coefficients
from uldp.client.kinds import KINDS
from uldp.client.randomness import RandomSource
from uldp.client.tasks import TaskSpec, compute_report, compute_reports


def _loop_sum(x: np.ndarray, axis: int) -> np.ndarray:
    x = np.moveaxis(x, axis, -1)
    out = np.zeros(x.shape[:-1])
    for k in range(x.shape[-1]):
        out = out + x[..., k]
    return out


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((5, 1000), 1), ((1000, 5), 0),
                                        ((3, 4, 5), 1), ((3, 4, 5), 2), ((3, 1, 5), 1),
                                        ((1, 300), 1), ((2, 0), 1), ((1, 1), 0)])
def test_seq_sum_is_the_left_to_right_sum(shape, axis):
    rng = np.random.default_rng(sum(shape) + axis)
    x = rng.standard_normal(shape) * np.exp(rng.uniform(-30, 30, shape))
    assert np.array_equal(nm.seq_sum(x, axis), _loop_sum(x, axis))
    assert nm._REDUCE_SEQUENTIAL


def test_seq_sum_zero_sign_and_overflow():
    assert math.copysign(1.0, float(nm.seq_sum(np.array([-0.0, -0.0])))) == 1.0
    assert nm.seq_sum(np.array([1e308, 1e308, -1e308])) == math.inf


def test_bincount_adds_in_index_order():
    """The classify/regress features rely on np.bincount adding weights sequentially."""
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 4, 5000)
    w = rng.standard_normal(5000) * np.exp(rng.uniform(-20, 20, 5000))
    want = np.zeros(4)
    for i, v in zip(idx, w, strict=True):
        want[i] = want[i] + v
    assert np.array_equal(np.bincount(idx, weights=w, minlength=4), want)


def test_ln_and_exp_are_accurate():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.random(20000), np.exp(rng.uniform(-700, 700, 20000)),
                        [5e-324, 1e308, 1.0, 0.5]])
    ref = np.log(x)
    ulp = np.abs(nm.ln(x) - ref) / np.spacing(np.abs(ref))
    assert nm.ln(np.array([1.0]))[0] == 0.0 and np.nanmax(ulp[ref != 0]) <= 2
    y = rng.uniform(-700, 700, 20000)
    assert (np.abs(nm.exp(y) - np.exp(y)) / np.spacing(np.exp(y))).max() <= 2
    with pytest.raises(ValueError):
        nm.exp(np.array([701.0]))


def test_norms_and_radial_do_not_overflow():
    x = np.array([[1e308, -1e308, 0.0], [3.0, 4.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(nm.norms(x[1:], 2), [5.0, 0.0])
    assert nm.norms(x[:1], 1)[0] == math.inf
    r = nm.radial(x, 1.0, 1)
    np.testing.assert_allclose(r[0], [0.5, -0.5, 0.0])
    np.testing.assert_allclose(r[1], [3 / 7, 4 / 7, 0.0])
    assert np.array_equal(nm.radial(x[1:2], 10.0, 2), x[1:2])


def test_fast_fwht_agrees_with_the_canonical_order():
    rng = np.random.default_rng(5)
    for K in (8, 64, 1024):
        X = rng.standard_normal((40, K))
        canon = fwht(X, axis=-1, fast=False)
        fast = fwht(X, axis=-1, fast=True)
        scale = np.abs(X).sum(axis=1, keepdims=True)
        assert (np.abs(fast - canon) <= 1e-12 * scale).all()
        one = np.stack([fwht(X[i:i + 1], axis=-1, fast=False)[0] for i in range(3)])
        assert np.array_equal(one, canon[:3])  # rows are independent in canonical order


@pytest.mark.parametrize("kind", ["gaussian", "hadamard"])
def test_fast_kashin_agrees_with_the_canonical_iteration(kind):
    F = KashinFrame.from_seed(24, 3, kind)  # type: ignore[arg-type]
    X = np.random.default_rng(2).standard_normal((300, 24))
    exact = kashin_coefficients(F, X, exact=True)
    fast = kashin_coefficients(F, X, exact=False)
    scale = np.linalg.norm(X, axis=1, keepdims=True)
    err = np.abs(exact - fast) / scale
    # the same iterates up to rounding (float32 iterates in the fast Hadamard path); a
    # stopping test that falls differently moves a coefficient by at most ~tol·‖x‖
    assert np.median(err.max(axis=1)) < (1e-12 if kind == "gaussian" else 1e-6)
    assert err.max() < 1e-2
    U = F.matrix()
    assert np.abs(exact @ U - X).max() < 1e-12 * scale.max()


def test_single_device_is_canonical_and_batches_agree():
    """compute_report (one device) runs in canonical mode; a batch of users computes the
    same statistics up to rounding, and a batch of one is the single-device path."""
    task = TaskSpec(query_id="q", kind="mean-l1", method="ssl", stage=0, epsilon=8.0,
                    eps_c=1.0, components=tuple(range(8)), dim=8, bound=1.0,
                    intervals=tuple((-0.4, 0.4) for _ in range(8)))
    X = np.random.default_rng(4).uniform(-1, 1, (12, 5, 8))
    key = bytes(range(32))
    one = compute_report(task, X[0], rng=RandomSource.from_key(key))
    assert np.array_equal(one, compute_reports(task, X[:1], RandomSource.from_key(key))[0])
    kind = KINDS["mean-l1"]
    with nm.canonical():
        canon = kind.statistics(task, X)
    fast = kind.statistics(task, X)
    assert np.abs(canon - fast).max() < 1e-14
