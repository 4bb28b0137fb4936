"""The one source of randomness for privacy noise (invariant 2, docs/architecture.md).

Every random bit that touches a privatized report comes from a ChaCha20 keystream
(RFC 8439, via ``cryptography``):

* ``RandomSource.secure()`` keys it from the operating system's CSPRNG (``os.urandom``).
  This is the only mode a production device uses.
* ``RandomSource.seeded(seed)`` keys it from a hash of a public seed and
  ``RandomSource.from_key(key)`` from a given 32-byte key (conformance vectors). Both exist
  for tests, conformance vectors and fleet simulations only, are marked
  ``simulation=True``, and a :class:`uldp.client.device.Device` accepts them only when it
  is itself built with ``simulation=True`` — its reports then say ``simulated`` on the wire
  and a collector refuses them unless the query or the server allows simulations.

A production source (``simulation=False``) can only be made by :meth:`RandomSource.secure`
(and its :meth:`~RandomSource.spawn` children): the constructor refuses a caller-chosen key
for production use.

Both modes run exactly the same sampling code; only the key differs. On top of the raw
64-bit words this module offers *exact* integer primitives (uniform integers below ``n``,
Bernoulli with a rational probability) — no floating-point inverse CDFs, so the pmf of
every sampler built on them is exactly the one its privacy argument assumes.

The keystream is read ahead in blocks of :data:`_READ_AHEAD` bytes. This changes nothing
about which bytes a draw gets: ChaCha20 is one continuous stream, every reader takes the
next bytes of it in order, and the buffer is just the stream's next bytes computed early.
"""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

__all__ = ["RandomSource", "as_source", "check_device_rng"]

_READ_AHEAD = 512  # keystream bytes computed per refill of the read-ahead buffer


_OS_KEYED = object()  # capability: only secure() and spawn() make production sources


class RandomSource:
    """ChaCha20 keystream exposed as exact integer samplers over numpy arrays."""

    def __init__(self, key: bytes, *, simulation: bool = True, _os_keyed: object = None,
                 ) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise ValueError("key must be 32 bytes")
        if not simulation and _os_keyed is not _OS_KEYED:
            raise ValueError("a production random source is keyed by the OS: use "
                             "RandomSource.secure(); a caller-chosen key is for simulations")
        nonce = b"\x00" * 16  # a fresh random key per source: a fixed nonce is safe
        self._enc = Cipher(algorithms.ChaCha20(bytes(key), nonce), mode=None).encryptor()
        self._buf = b""  # the stream's next bytes, computed ahead
        self._pos = 0
        self.simulation = bool(simulation)

    @classmethod
    def secure(cls) -> RandomSource:
        """A source keyed from OS entropy: the production mode."""
        return cls(os.urandom(32), simulation=False, _os_keyed=_OS_KEYED)

    @classmethod
    def from_key(cls, key: bytes) -> RandomSource:
        """The keystream of a given 32-byte key (conformance vectors; ``simulation=True``)."""
        return cls(key, simulation=True)

    @classmethod
    def seeded(cls, seed: int | str | bytes) -> RandomSource:
        """A reproducible source for tests and simulations only (``simulation=True``)."""
        if isinstance(seed, int):
            if seed < 0:
                raise ValueError(f"seed must be non-negative, got {seed}")
            material = seed.to_bytes((seed.bit_length() + 8) // 8, "big")
        elif isinstance(seed, str):
            material = seed.encode()
        else:
            material = bytes(seed)
        return cls(hashlib.sha256(b"uldp-simulation-seed:" + material).digest(), simulation=True)

    def spawn(self, label: str) -> RandomSource:
        """An independent child source (same mode), keyed from this source's stream."""
        key = hashlib.sha256(label.encode() + self.bytes(32)).digest()
        return RandomSource(key, simulation=self.simulation,
                            _os_keyed=None if self.simulation else _OS_KEYED)

    # ---- raw material -------------------------------------------------------------
    def bytes(self, n: int) -> bytes:
        """The next ``n`` bytes of the keystream."""
        pos, buf = self._pos, self._buf
        if pos + n <= len(buf):
            self._pos = pos + n
            return buf[pos:pos + n]
        head = buf[pos:]
        need = n - len(head)
        if need >= _READ_AHEAD:  # a large read: straight from the cipher
            self._buf, self._pos = b"", 0
            return head + self._enc.update(b"\x00" * need)
        self._buf = self._enc.update(b"\x00" * _READ_AHEAD)
        self._pos = need
        return head + self._buf[:need]

    def word_list(self, n: int) -> list[int]:
        """``words(n)`` as a list of Python ints (the same words, for scalar code)."""
        if n <= 0:
            return []
        return list(struct.unpack(f"={n}Q", self.bytes(8 * n)))

    def words(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit words."""
        if n <= 0:
            return np.zeros(0, dtype=np.uint64)
        return np.frombuffer(self.bytes(8 * n), dtype=np.uint64).copy()

    def numpy_generator(self) -> np.random.Generator:
        """A numpy Generator seeded from this stream, for *non-privacy* randomness only
        (synthetic data, shuffles of public assignments). Never use it for noise."""
        return np.random.default_rng(np.frombuffer(self.bytes(32), dtype=np.uint64))

    # ---- exact integer primitives ---------------------------------------------------
    def below(self, n: np.ndarray | int, size: int | None = None) -> np.ndarray:
        """Uniform integers in ``[0, n)`` by rejection (exact), ``1 <= n < 2**63``.

        ``n`` is a scalar (then ``size`` values are drawn) or an array (one value each).
        A power-of-two scalar ``n`` takes the top bits of each word (no rejection needed).
        """
        if np.ndim(n) == 0:
            if size is None:
                raise ValueError("size is required when n is a scalar")
            return self._below_scalar(int(n), int(size))
        n_arr = np.asarray(n, dtype=np.uint64)
        if n_arr.size and (n_arr.min() < 1 or n_arr.max() >= np.uint64(1 << 63)):
            raise ValueError("n must be in [1, 2**63)")
        # 2**64 mod n: words at or above it fill whole multiples of n.
        lim = (np.uint64(0) - n_arr) % n_arr
        out = np.empty(n_arr.shape, dtype=np.uint64)
        todo = np.arange(n_arr.size)
        while todo.size:
            w = self.words(todo.size)
            ok = w >= lim[todo]
            out[todo[ok]] = w[ok] % n_arr[todo[ok]]
            todo = todo[~ok]
        return out.astype(np.int64)

    def _below_scalar(self, n: int, size: int) -> np.ndarray:
        if not 1 <= n < 1 << 63:
            raise ValueError(f"n must be in [1, 2**63), got {n}")
        if n & (n - 1) == 0:  # power of two: the top log2(n) bits are exactly uniform
            if n == 1:
                return np.zeros(size, dtype=np.int64)
            return (self.words(size) >> np.uint64(64 - (n.bit_length() - 1))).astype(np.int64)
        lim = np.uint64((1 << 64) % n)
        nn = np.uint64(n)
        out = np.empty(size, dtype=np.int64)
        todo = np.arange(size)
        while todo.size:
            w = self.words(todo.size)
            ok = w >= lim
            out[todo[ok]] = (w[ok] % nn).astype(np.int64)
            todo = todo[~ok]
        return out

    def below_list(self, n: int, size: int) -> list[int]:
        """:meth:`below` of a scalar ``n`` as a list: the same draws from the same words,
        without numpy's per-call overhead (for a handful of values)."""
        if not 1 <= n < 1 << 63:
            raise ValueError(f"n must be in [1, 2**63), got {n}")
        if n & (n - 1) == 0:
            if n == 1:
                return [0] * size
            shift = 64 - (n.bit_length() - 1)
            return [w >> shift for w in self.word_list(size)]
        lim = (1 << 64) % n
        out = [0] * size
        todo = list(range(size))
        while todo:
            rest = []
            for j, w in zip(todo, self.word_list(len(todo)), strict=True):
                if w >= lim:
                    out[j] = w % n
                else:
                    rest.append(j)
            todo = rest
        return out

    def bernoulli_rational(self, num: np.ndarray | int, den: np.ndarray | int,
                           size: int | None = None) -> np.ndarray:
        """Exact Bernoulli(num/den) draws, ``0 <= num <= den``."""
        num_a, den_a = np.broadcast_arrays(np.asarray(num, np.int64), np.asarray(den, np.int64))
        if num_a.ndim == 0:
            if size is None:
                raise ValueError("size is required when num/den are scalars")
            num_a = np.full(size, num_a, np.int64)
            den_a = np.full(size, den_a, np.int64)
        return self.below(den_a) < num_a

    def bernoulli_float(self, p: np.ndarray) -> np.ndarray:
        """Bernoulli(p) with ``p`` rounded to 53 bits: for *data* rounding, not noise.

        Used by unbiased randomized rounding of a device's own statistic to the public
        grid; the privacy of a report rests on the discrete noise added afterwards.
        """
        p = np.asarray(p, dtype=np.float64)
        if p.size and (np.isnan(p).any() or p.min() < 0.0 or p.max() > 1.0):
            raise ValueError("probabilities must lie in [0, 1]")
        u = (self.words(p.size) >> np.uint64(11)).reshape(p.shape)
        return u < np.floor(p * float(1 << 53)).astype(np.uint64)


def as_source(rng: RandomSource | None) -> RandomSource:
    """``rng`` itself, or a fresh secure source when ``None`` (the production default)."""
    if rng is None:
        return RandomSource.secure()
    if not isinstance(rng, RandomSource):
        raise TypeError(
            f"rng must be a uldp RandomSource, got {type(rng).__name__}; "
            "use RandomSource.seeded(seed) in tests"
        )
    return rng


def check_device_rng(rng: RandomSource | None, simulation: bool) -> None:
    """A device takes a seeded source only in simulation mode (ValueError otherwise)."""
    if rng is not None and not simulation:
        raise ValueError("a seeded random source is for simulations only: pass "
                         "simulation=True (reports are then marked simulated), or "
                         "rng=None for a production device")
    if rng is not None and not (isinstance(rng, RandomSource) and rng.simulation):
        raise ValueError("rng must be a simulation RandomSource (RandomSource.seeded)")
