"""Tests for uldp.client.hadamard (spec §3.5, [D15], acceptance S7: H² = K I)."""

from __future__ import annotations

import numpy as np
import pytest

from uldp.client.hadamard import fwht, fwht_columns, hadamard_matrix, is_pow2, next_pow2, pad_pow2

ORDERS = [1, 2, 4, 8, 16, 32, 64, 256]


def test_next_pow2_and_is_pow2() -> None:
    assert [next_pow2(n) for n in [1, 2, 3, 4, 5, 7, 8, 9, 1000, 1024, 1025]] == [
        1, 2, 4, 4, 8, 8, 8, 16, 1024, 1024, 2048]
    assert [is_pow2(n) for n in [0, 1, 2, 3, 4, 6, 8, -2]] == [
        False, True, True, False, True, False, True, False]
    with pytest.raises(ValueError):
        next_pow2(0)


@pytest.mark.parametrize("K", ORDERS)
def test_hadamard_matrix_properties(K: int) -> None:
    H = hadamard_matrix(K)
    assert H.dtype == np.int64 and H.shape == (K, K)
    assert set(np.unique(H)) <= {-1, 1}
    assert np.array_equal(H, H.T)
    assert np.array_equal(H @ H, K * np.eye(K, dtype=np.int64))  # S7: H² = K I
    assert (H[0] == 1).all() and (H[:, 0] == 1).all()


def test_hadamard_sylvester_recursion_and_closed_form() -> None:
    H = np.array([[1]])
    for _ in range(6):
        H = np.block([[H, H], [H, -H]])
        assert np.array_equal(hadamard_matrix(H.shape[0]), H)
    K = 64
    Hk = hadamard_matrix(K)
    for k in range(K):
        for ell in range(K):
            assert Hk[k, ell] == (-1) ** bin(k & ell).count("1")


@pytest.mark.parametrize("K", [0, 3, 6, 12, -4])
def test_hadamard_matrix_rejects_non_pow2(K: int) -> None:
    with pytest.raises(ValueError):
        hadamard_matrix(K)


@pytest.mark.parametrize("K", ORDERS)
def test_fwht_equals_matrix_product_and_involution(K: int) -> None:
    rng = np.random.default_rng(K)
    X = rng.standard_normal((7, K))  # batch < 8: butterflies
    H = hadamard_matrix(K).astype(float)
    X40 = rng.standard_normal((40, K))  # batch >= 8: Kronecker factors
    np.testing.assert_allclose(fwht(X40), X40 @ H, atol=1e-12 * K)
    np.testing.assert_allclose(fwht(X), X @ H, atol=1e-12 * K)
    np.testing.assert_allclose(fwht(fwht(X)), K * X, atol=1e-12 * K)
    x = rng.standard_normal(K)  # 1-D
    np.testing.assert_allclose(fwht(x), H @ x, atol=1e-12 * K)


def test_fwht_other_axes_and_shapes() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3, 16, 5))
    H = hadamard_matrix(16).astype(float)
    np.testing.assert_allclose(fwht(X, axis=1), np.einsum("kl,ilj->ikj", H, X), atol=1e-12)
    np.testing.assert_allclose(fwht(X, axis=-2), fwht(X, axis=1))
    Y = rng.standard_normal((8, 3))
    np.testing.assert_allclose(fwht(Y, axis=0), hadamard_matrix(8) @ Y, atol=1e-12)
    # non-contiguous input
    Z = rng.standard_normal((32, 10))[:, ::2].T  # (5, 32), Fortran-ish view
    np.testing.assert_allclose(fwht(Z), Z @ hadamard_matrix(32), atol=1e-12)
    before = Z.copy()
    fwht(Z)
    assert np.array_equal(Z, before)  # input untouched


def test_fwht_large_batch_blocks() -> None:
    """fwht() transforms cache-sized blocks; results must not depend on the blocking."""
    rng = np.random.default_rng(9)
    X = rng.standard_normal((3000, 64))  # several blocks of 2048 rows
    ref = X @ hadamard_matrix(64)
    np.testing.assert_allclose(fwht(X), ref, atol=1e-11)
    assert fwht(X).flags.c_contiguous


def test_fwht_integer_exact() -> None:
    rng = np.random.default_rng(2)
    K = 1024
    X = rng.integers(-(2**40), 2**40, size=(4, K))
    out = fwht(X)
    assert out.dtype == np.int64
    assert np.array_equal(out, X @ hadamard_matrix(K))
    assert np.array_equal(fwht(out), K * X)
    assert fwht(np.array([True, False, True, True])).tolist() == [3, 1, -1, 1]
    assert fwht(np.array([1, 2, 3, 4], dtype=np.int32)).dtype == np.int64


def test_fwht_float32_keeps_dtype() -> None:
    x = np.arange(8, dtype=np.float32)
    assert fwht(x).dtype == np.float32


@pytest.mark.parametrize("K", [3, 5, 6, 12, 100])
def test_fwht_rejects_non_pow2(K: int) -> None:
    with pytest.raises(ValueError):
        fwht(np.ones((2, K)))
    with pytest.raises(ValueError):
        fwht(np.ones((2, 8)), axis=5)
    with pytest.raises(ValueError):
        fwht(np.float64(1.0))


def test_fwht_rejects_bad_dtype() -> None:
    with pytest.raises(TypeError):
        fwht(np.array(["a", "b"]))


def test_fwht_columns_buffers() -> None:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((64, 9))
    out, scratch = np.empty_like(X), np.empty_like(X)
    res = fwht_columns(X, out=out, scratch=scratch)
    assert res is out
    np.testing.assert_allclose(res, hadamard_matrix(64) @ X, atol=1e-12)
    with pytest.raises(ValueError):
        fwht_columns(X, out=X)
    with pytest.raises(ValueError):
        fwht_columns(X, out=np.empty((64, 9), order="F"))
    # Fortran-ordered input works (copied to C order internally)
    XF = np.asfortranarray(X)
    np.testing.assert_allclose(fwht_columns(XF), hadamard_matrix(64) @ X, atol=1e-12)


def test_pad_pow2() -> None:
    x = np.arange(5.0)
    p = pad_pow2(x)
    assert p.shape == (8,) and np.array_equal(p[:5], x) and (p[5:] == 0).all()
    M = np.ones((3, 6))
    assert pad_pow2(M, axis=0).shape == (4, 6)
    assert pad_pow2(M).shape == (3, 8)
    same = np.ones(4)
    assert pad_pow2(same) is same
    # padded transform of an l1 vector: |H x / sqrt(K)|_inf <= |x|_1 / sqrt(K)  (§6.2)
    v = np.array([0.5, -0.25, 0.0, 0.25, 0.0])
    z = fwht(pad_pow2(v)) / np.sqrt(8)
    assert np.abs(z).max() <= np.abs(v).sum() / np.sqrt(8) + 1e-15
    with pytest.raises(ValueError):
        pad_pow2(np.ones((2, 0)))


def test_hadamard_factors() -> None:
    from uldp.client.hadamard import hadamard_factors

    assert hadamard_factors(1) == [1]
    assert hadamard_factors(256) == [16, 16]
    assert hadamard_factors(1024) == [16, 8, 8]
    for r in range(15):
        f = hadamard_factors(1 << r)
        assert int(np.prod(f)) == 1 << r and max(f) <= 16
    with pytest.raises(ValueError):
        hadamard_factors(12)


@pytest.mark.parametrize("K", [2048, 4096])
def test_fwht_float_kronecker_path_matches_exact_integer_path(K: int) -> None:
    rng = np.random.default_rng(K)
    Xi = rng.integers(-1000, 1000, size=(12, K))
    exact = fwht(Xi)  # int64 butterflies
    np.testing.assert_array_equal(fwht(Xi.astype(np.float64)), exact.astype(np.float64))
    X = rng.standard_normal((12, K))
    np.testing.assert_allclose(fwht(fwht(X)) / K, X, atol=1e-12)
    y = fwht(X)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.sqrt(K) * np.linalg.norm(X, axis=1))


def test_fwht_butterfly_and_kronecker_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    import uldp.client.hadamard as had

    X = np.random.default_rng(5).standard_normal((512, 40))  # batch >= 8: Kronecker path
    kron = had.fwht_columns(X)
    monkeypatch.setattr(had, "_KRON", False)
    bfly = had.fwht_columns(X)
    np.testing.assert_allclose(kron, bfly, atol=1e-11)
    np.testing.assert_allclose(bfly, hadamard_matrix(512) @ X, atol=1e-11)
