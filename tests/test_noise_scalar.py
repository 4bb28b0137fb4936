"""The speed-ups of the exact samplers change no output (the byte-exact contract of
``docs/device-protocol.md``): the keystream read-ahead gives every reader the same bytes as
unbuffered reads, and the scalar twin of the discrete-Laplace sampler (small reports)
draws the same values from the same words, leaving the stream at the same position, as
the vectorized sampler."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from uldp.client import noise
from uldp.client.budget import epsilon_units
from uldp.client.noise import LaplaceScale, discrete_laplace, laplace_scale
from uldp.client.randomness import RandomSource


def _raw_stream(key: bytes, n: int) -> bytes:
    enc = Cipher(algorithms.ChaCha20(key, b"\x00" * 16), mode=None).encryptor()
    return enc.update(b"\x00" * n)


def test_read_ahead_returns_the_keystream_in_order():
    key = bytes(range(32))
    want = _raw_stream(key, 5000)
    rng = RandomSource.from_key(key)
    got = b""
    for n in (1, 7, 8, 0, 64, 511, 512, 513, 3, 1200, 16, 8 * 3):
        got += rng.bytes(n)
    got += bytes(np.asarray(rng.words(5), dtype="=u8").tobytes())
    got += b"".join(w.to_bytes(8, "little") for w in rng.word_list(4))
    assert got == want[:len(got)]


@pytest.mark.parametrize("scale", [laplace_scale(2, 0.5), laplace_scale(1 << 16, 2.0),
                                   laplace_scale(1 << 16, 0.01), laplace_scale(2, 7.3),
                                   LaplaceScale(3, 7), LaplaceScale(1, 1), LaplaceScale(5, 1)])
def test_scalar_sampler_equals_the_vectorized_one(monkeypatch, scale):
    for seed in range(60):
        for n in (1, 2, 5, 8, 33):
            outs = []
            for limit in (-1, 10**9):  # vectorized, then scalar
                monkeypatch.setattr(noise, "_SCALAR_MAX", limit)
                r = RandomSource.seeded(f"{seed}:{n}")
                outs.append((discrete_laplace(scale, n, r).tolist(), r.bytes(16)))
            assert outs[0] == outs[1], (seed, n)


def test_below_list_equals_below():
    for n in (1, 2, 3, 7, 1 << 20, (1 << 62) + 12345, 10**18):
        a, b = RandomSource.seeded(n), RandomSource.seeded(n)
        assert a.below(n, size=50).tolist() == b.below_list(n, 50)
        assert a.bytes(8) == b.bytes(8)
    with pytest.raises(ValueError):
        RandomSource.seeded(1).below_list(0, 3)


def test_memoized_conversions_match_the_exact_ones():
    for eps in (0.1, 1.0, 2.0, 1 / 3, 2.0**-24, 7.3):
        assert epsilon_units(eps) == epsilon_units(eps) == int(eps * 2**24)
        s1, s2 = laplace_scale(2, eps), noise._laplace_scale(2, eps)
        assert s1 == s2
