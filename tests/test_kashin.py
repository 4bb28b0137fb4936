"""Tests for uldp.client.kashin (spec §3.6, §6.1, [D8], [D9], acceptance S6)."""

from __future__ import annotations

import functools
import hashlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

from uldp.client.kashin import (
    FRAME_VERSION,
    K_LV_DEFAULT,
    KASHIN_DELTA_DEFAULT,
    KASHIN_TOL_DEFAULT,
    KashinFrame,
    kashin_coefficients,
    kashin_coefficients_info,
    kashin_level,
)
from uldp.client.kashin_calibration import (
    CalibrationResult,
    calibrate,
    coefficient_bound,
    warn_if_exceeds,
)

KINDS = ["gaussian", "hadamard"]


@functools.cache
def _frame(d: int, kind: str = "gaussian") -> KashinFrame:
    """Frames shared between tests (frames are immutable; saves repeated QRs)."""
    return KashinFrame.from_seed(d, seed=5, kind=kind)  # type: ignore[arg-type]


def _close(actual: np.ndarray, desired: np.ndarray, kind: str, tol: float | None = None) -> None:
    """Equal up to the iteration precision: float64 (Gaussian, or any frame with tol < 1e-5)
    or float32 iterates (Hadamard frame at the default tol; the final correction is exact)."""
    f32 = kind == "hadamard" and (tol is None or tol >= 1e-5)
    rel = 2e-5 if f32 else 1e-9
    scale = max(float(np.abs(desired).max(initial=0.0)), 1e-300)
    np.testing.assert_allclose(actual, desired, rtol=rel, atol=rel * 1e-2 * scale)


def _data(S: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((S, d))
    X[: S // 4] *= rng.exponential(size=(S // 4, 1))  # mixed norms
    X[S // 4 : S // 2, : max(1, d // 8)] *= 20.0  # anisotropic
    return X


def test_defaults_match_spec() -> None:
    assert K_LV_DEFAULT == 4.0
    assert KASHIN_DELTA_DEFAULT == 0.5


@pytest.mark.parametrize("d", [1, 8, 64, 130])
def test_gaussian_frame_is_isometry(d: int) -> None:
    F = _frame(d)
    U = F.matrix()
    assert U.shape == (2 * d, d)
    assert U.shape[0] == F.N
    np.testing.assert_allclose(U.T @ U, np.eye(d), atol=1e-12)
    np.testing.assert_allclose(F.row_norms_sq(), (U**2).sum(axis=1), atol=1e-14)
    assert abs(F.row_norms_sq().sum() - d) < 1e-10


@pytest.mark.parametrize("d", [1, 3, 8, 100, 256])
def test_hadamard_frame_is_isometry(d: int) -> None:
    F = _frame(d, "hadamard")
    N = F.N
    assert N & (N - 1) == 0
    assert 2 * d <= N < 4 * d
    U = F.matrix()
    np.testing.assert_allclose(U.T @ U, np.eye(d), atol=1e-12)
    assert np.allclose(np.abs(U), 1 / np.sqrt(N))
    X = _data(20, d, 1)
    np.testing.assert_allclose(F.synthesis(F.analysis(X)), X, atol=1e-12)  # Uᵀ U = I
    np.testing.assert_allclose(F.analysis(X), X @ U.T, atol=1e-12)
    B = np.random.default_rng(2).standard_normal((5, N))
    np.testing.assert_allclose(F.synthesis(B), B @ U, atol=1e-12)
    np.testing.assert_allclose(F.row_norms_sq(), (U**2).sum(axis=1), atol=1e-14)
    # not the first d Sylvester columns (§3.6)
    assert not np.array_equal(np.sort(F._cols), np.arange(d)) or d == 1


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_frame_different_seed_differs(kind: str) -> None:
    a = KashinFrame.from_seed(32, seed=123, kind=kind)
    b = KashinFrame.from_seed(32, seed=123, kind=kind)  # independent construction
    assert a == b and a.frame_id == b.frame_id
    assert np.array_equal(a.matrix(), b.matrix())
    for other in (KashinFrame.from_seed(32, seed=124, kind=kind),
                  KashinFrame.from_seed(32, seed="123", kind=kind),
                  KashinFrame.from_seed(32, seed=b"123", kind=kind)):
        assert other != a and other.frame_id != a.frame_id
        assert not np.allclose(other.matrix(), a.matrix())
    assert KashinFrame.from_seed(32, 123, kind, lam=2.0) == a  # 2 and 2.0 are the same λ
    assert KashinFrame.from_seed(33, 123, kind).frame_id != a.frame_id


def test_frame_pinned_values() -> None:
    """The seed → frame map is part of the protocol (frame derivation v2, from a ChaCha20
    keystream: ``uldp.client.kashin_frames``; the TypeScript SDK and the conformance vectors
    rebuild the same frames bit for bit): pin it. Any change must bump FRAME_VERSION."""
    assert FRAME_VERSION == "uldp.kashin.frame/v2"
    F = KashinFrame.from_seed(4, seed=2024, kind="hadamard")
    assert F.frame_id == "a5294e9e9bfba27e7327ae1ab0d03654a74939f2be86274c83c3978b037b54a0"
    assert F._cols is not None and F._signs is not None
    assert F._cols.tolist() == [1, 7, 2, 0]
    assert F._signs.astype(int).tolist() == [-1, -1, -1, 1, -1, 1, 1, 1]
    G = KashinFrame.from_seed(2, seed=2024)
    assert G.frame_id == "8d9bfaa982384c80cb6d91397171d390ae2afa751ef94cafd9a2ca99f7e4246f"
    np.testing.assert_allclose(G.matrix(), [[0.17323701379, -0.914724582132],
                                            [-0.225006023956, -0.394409366479],
                                            [-0.578291508915, -0.083199196886],
                                            [0.764813805415, 0.028250382545]], atol=1e-11)
    # bit-exact: basic IEEE operations only (no LAPACK, no libm)
    U = KashinFrame.from_seed(24, seed="client-42").matrix()
    assert hashlib.sha256(np.ascontiguousarray(U).tobytes()).hexdigest() == \
        "9496694844a497d99466d4da50c6a54692f804a7144bdb87e475f73f7aea660f"


def test_same_frame_in_a_fresh_interpreter() -> None:
    """S6: client and collector rebuild the same U from the public seed (independent process)."""
    code = (
        "import hashlib, numpy as np\n"
        "from uldp.client.kashin import KashinFrame\n"
        "for kind in ('gaussian', 'hadamard'):\n"
        "    U = KashinFrame.from_seed(24, seed='client-42', kind=kind).matrix()\n"
        "    print(hashlib.sha256(np.ascontiguousarray(U).tobytes()).hexdigest())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    here = [hashlib.sha256(np.ascontiguousarray(
        KashinFrame.from_seed(24, seed="client-42", kind=kind).matrix()).tobytes()).hexdigest()
        for kind in ("gaussian", "hadamard")]
    assert out == here


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", [1, 2, 8, 64, 256])
def test_exact_reconstruction_and_bound(kind: str, d: int) -> None:
    F = _frame(d, kind)
    S = 300 if d <= 64 else 64
    X = _data(S, d, d)
    A = kashin_coefficients(F, X)
    assert A.shape == (S, F.N)
    err = np.linalg.norm(F.synthesis(A) - X, axis=1)
    assert (err <= 1e-9 * np.linalg.norm(X, axis=1)).all()  # S6
    assert kashin_level(F, X, A).max() <= K_LV_DEFAULT


@pytest.mark.parametrize("kind", KINDS)
def test_looser_tolerance_still_exact(kind: str) -> None:
    F = _frame(64, kind)
    X = _data(100, 64, 3)
    for tol in (1e-2, 1e-6):
        info = kashin_coefficients_info(F, X, tol=tol)
        err = np.linalg.norm(F.synthesis(info.coefficients) - X, axis=1)
        assert (err <= 1e-9 * np.linalg.norm(X, axis=1)).all()
    fast = kashin_coefficients_info(F, X, tol=1e-2).iterations
    slow = kashin_coefficients_info(F, X, tol=1e-10).iterations
    assert (fast <= slow).all() and fast.mean() < slow.mean()
    # max_iter = 0 is the linear map U x (still exact)
    np.testing.assert_allclose(kashin_coefficients(F, X, max_iter=0), F.analysis(X), atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_batch_equals_single_and_edge_rows(kind: str) -> None:
    F = _frame(16, kind)
    X = _data(50, 16, 4)
    X[7] = 0.0
    X[8] = 1e-300
    X[9] = 1e200
    A = kashin_coefficients(F, X)
    assert (A[7] == 0).all()
    for i in (0, 8, 9, 20, 49):
        _close(kashin_coefficients(F, X[i]), A[i], kind)
    # homogeneity: a(c x) = c a(x) for c > 0; oddness a(-x) = -a(x)
    _close(kashin_coefficients(F, 3.0 * X[:5]), 3.0 * A[:5], kind)
    _close(kashin_coefficients(F, -X[:5]), -A[:5], kind)
    # float64 iterates (spec tol) agree batch vs single to 1e-9
    A64 = kashin_coefficients(F, X[:12], tol=1e-10)
    for i in (0, 8, 9, 11):
        _close(kashin_coefficients(F, X[i], tol=1e-10), A64[i], kind, tol=1e-10)
    assert kashin_coefficients(F, np.zeros((0, 16))).shape == (0, F.N)
    assert kashin_coefficients(F, X[10:].astype(np.float32)).dtype == np.float64


@pytest.mark.parametrize("kind", KINDS)
def test_bigger_than_chunk(kind: str) -> None:
    F = _frame(8, kind)
    X = _data(5000, 8, 8)
    info = kashin_coefficients_info(F, X)
    assert info.coefficients.shape == (5000, F.N) and info.iterations.shape == (5000,)
    np.testing.assert_allclose(F.synthesis(info.coefficients), X, atol=1e-9)
    _close(info.coefficients[4321], kashin_coefficients(F, X[4321]), kind)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError):
        KashinFrame.from_seed(0, seed=1)
    with pytest.raises(ValueError):
        KashinFrame.from_seed(-3, seed=1)
    with pytest.raises(ValueError):
        KashinFrame.from_seed(4, seed=1, kind="dct")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        KashinFrame.from_seed(4, seed=1, lam=0.5)
    with pytest.raises(TypeError):
        KashinFrame.from_seed(4, seed=1.5)  # type: ignore[arg-type]
    F = KashinFrame.from_seed(4, seed=1)
    for bad in (np.array([[1.0, np.nan, 0, 0]]), np.array([0, 0, np.inf, 1.0])):
        with pytest.raises(ValueError):
            kashin_coefficients(F, bad)
    for shape in [(3, 5), (5,), (2, 2, 4)]:
        with pytest.raises(ValueError):
            kashin_coefficients(F, np.ones(shape))
    with pytest.raises(ValueError):
        F.synthesis(np.ones((2, 4)))
    with pytest.raises(ValueError):
        kashin_coefficients(F, np.ones((1, 4)), delta=0.0)
    with pytest.raises(ValueError):
        kashin_coefficients(F, np.ones((1, 4)), tol=-1.0)
    with pytest.raises(ValueError):
        kashin_coefficients(F, np.ones((1, 4)), max_iter=-1)
    with pytest.raises(TypeError):
        kashin_coefficients(F, np.array([["a", "b", "c", "d"]]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", [8, 64, 256])
def test_calibration_level_at_most_default(kind: str, d: int) -> None:
    F = _frame(d, kind)
    res = calibrate(F, trials=300 if d <= 64 else 120, adversarial_steps=8,
                    adversarial_starts=8, rng_seed=1)
    assert isinstance(res, CalibrationResult)
    assert 1.0 <= res.level <= K_LV_DEFAULT  # S6
    assert not res.exceeds(K_LV_DEFAULT)
    assert res.exceeds(res.level - 1e-9)
    assert {"random", "aligned", "basis"} <= set(res.by_family)
    assert res.level == max(res.by_family.values())
    x = res.worst_x
    a = kashin_coefficients(F, x)
    assert np.isclose(np.sqrt(F.N) * np.abs(a).max() / np.linalg.norm(x), res.level)


def test_calibration_is_deterministic() -> None:
    F = _frame(16)
    r1 = calibrate(F, trials=100, adversarial_steps=5, rng_seed=4)
    r2 = calibrate(F, trials=100, adversarial_steps=5, rng_seed=4)
    assert r1.level == r2.level and r1.by_family == r2.by_family


def test_warn_if_exceeds() -> None:
    with pytest.warns(UserWarning, match="exceeds"):
        assert warn_if_exceeds(4.5, 4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_exceeds(3.9, 4.0)
        assert not warn_if_exceeds(4.0)
    F = _frame(8)
    res = calibrate(F, trials=50, adversarial_steps=2, rng_seed=0)
    with pytest.warns(UserWarning):
        warn_if_exceeds(res, K_LV=0.5)


def test_coefficient_bound() -> None:
    assert coefficient_bound(1.0, 16) == pytest.approx(1.0)
    assert coefficient_bound(2.0, 64, K_LV=4.0) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        coefficient_bound(0.0, 4)


@pytest.mark.parametrize("kind", KINDS)
def test_threads_and_chunks_do_not_change_results(kind: str) -> None:
    F = _frame(8, kind)
    X = _data(9000, 8, 6)  # several blocks
    a1 = kashin_coefficients(F, X, workers=1)
    a2 = kashin_coefficients(F, X, workers=2)
    np.testing.assert_allclose(a1, a2, rtol=1e-12, atol=1e-15)
    for i in (0, 17, 39):
        _close(a1[i], kashin_coefficients(F, X[i]), kind)


@pytest.mark.parametrize("kind", KINDS)
def test_spec_tolerance_1e10(kind: str) -> None:
    """The spec's tol = 1e-10 ([D9]) is available and changes the level only marginally."""
    F = _frame(64, kind)
    X = _data(150, 64, 8)
    info_spec = kashin_coefficients_info(F, X, tol=1e-10)
    info_def = kashin_coefficients_info(F, X)
    assert (info_spec.iterations >= info_def.iterations).all()
    res = np.linalg.norm(F.synthesis(info_spec.coefficients) - X, axis=1)
    assert (res <= 1e-9 * np.linalg.norm(X, axis=1)).all()
    lev_spec = kashin_level(F, X, info_spec.coefficients)
    lev_def = kashin_level(F, X, info_def.coefficients)
    assert np.abs(lev_spec - lev_def).max() <= KASHIN_TOL_DEFAULT * (np.sqrt(F.N) + 3)
    assert lev_spec.max() <= K_LV_DEFAULT


@pytest.mark.parametrize("kind", KINDS)
def test_extreme_magnitudes(kind: str) -> None:
    """Huge / tiny rows: no overflow or underflow in the norms (exact power-of-two rescaling)."""
    F = _frame(16, kind)
    base = _data(6, 16, 12)
    scales = np.array([1e300, 1e-300, 1e200, 1e-310, 1.0, 3.0])
    X = base * scales[:, None]
    X_before = X.copy()
    A = kashin_coefficients(F, X)
    assert np.array_equal(X, X_before)  # input untouched
    assert np.isfinite(A).all()
    ref = kashin_coefficients(F, base)
    for i, c in enumerate(scales):
        _close(A[i] / c, ref[i], kind)
    lev = kashin_level(F, X, A)
    assert (lev <= K_LV_DEFAULT).all() and (lev > 0.5).all()
    one = X[0].copy()
    kashin_coefficients(F, one)
    assert np.array_equal(one, X_before[0])  # single row: still untouched


@pytest.mark.parametrize("kind", KINDS)
def test_device_batch_equals_per_record_bit_for_bit(kind: str) -> None:
    """The canonical (device) iteration over a batch of records gives each record exactly the
    bits it gets alone, so a fleet may batch every user's records into one call."""
    F = _frame(8, kind)
    X = _data(300, 8, 11)
    X[3], X[4], X[5] = 0.0, 1e-300, 1e200
    info = kashin_coefficients_info(F, X, exact=True)
    A, it = info.coefficients, info.iterations
    for i in range(0, 300, 7):
        one = kashin_coefficients_info(F, X[i], exact=True)
        assert np.array_equal(one.coefficients, A[i]) and one.iterations[0] == it[i]
    if kind == "gaussian":  # the fast float64 path in its single-threaded blocks: same iterates
        fast = kashin_coefficients(F, X, exact=False)
        scale = np.abs(A).max(axis=1, keepdims=True)
        assert (np.abs(fast - A) <= 1e-9 * scale).all()


def test_gaussian_blocks_stay_single_threaded_in_blas() -> None:
    """The Gaussian frame's GEMMs stay below OpenBLAS's one-thread size (threads cost 20–60×)."""
    from uldp.client.kashin import _BLAS_ONE_THREAD, _chunk_size

    for d in (2, 8, 16):
        F = _frame(d, "gaussian")
        assert F.N * F.d * _chunk_size(F) <= max(_BLAS_ONE_THREAD, 64 * F.N * F.d)
