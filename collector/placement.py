"""Placements without per-user state: a keyed permutation of enrolment slots, computed on
demand.

See ``docs/architecture.md`` ("Programs") and ``docs/algorithms.md`` §3.7 / [D1]: a query
places every enrolment slot in a (group, stage, phase) by a uniformly random permutation
drawn from its public seed before any data exist. :class:`KeyedPermutation` is that
permutation as a function — a balanced Feistel network over the smallest power of four at
least ``n``, restricted to ``[0, n)`` by cycle-walking (Black & Rogaway, "Ciphers with
arbitrary finite domains", CT-RSA 2002) — so no process holds an array of ``n`` ranks:
``rank(slot)`` and its inverse ``slot(rank)`` cost a few microseconds, vectorized over
numpy arrays, and every replica computes the same answer from the seed alone.

The round function is the SplitMix64 finalizer of ``right ⊕ k_i`` (the round keys are
SHA-256 of the seed): eight rounds, far beyond the four a Luby–Rackoff permutation needs
to be indistinguishable from a random one — the seed is public, so what matters is that
the placement is a fixed, balanced, data-independent function of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ROUNDS", "KeyedPermutation", "stage_sizes"]

#: Feistel rounds
ROUNDS = 8
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (a bijection of uint64 with full avalanche)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


_U64 = (1 << 64) - 1


def _mix_int(x: int) -> int:
    """:func:`_mix` in Python integers."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _U64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


@dataclass(frozen=True)
class KeyedPermutation:
    """A permutation of ``[0, n)`` keyed by ``seed`` (module docstring)."""

    n: int
    seed: int | str
    half: int = field(init=False)
    keys: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {self.n}")
        bits = max(int(self.n - 1).bit_length(), 2)
        object.__setattr__(self, "half", (bits + 1) // 2)
        digest = hashlib.sha256(f"uldp-placement/{self.seed}".encode()).digest()
        keys = tuple(int.from_bytes(digest[4 * i:4 * i + 4], "little") for i in range(ROUNDS))
        object.__setattr__(self, "keys", keys)

    def _round(self, r: np.ndarray, i: int) -> np.ndarray:
        mask = np.uint64((1 << self.half) - 1)
        return _mix(r ^ np.uint64(self.keys[i])) & mask

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        h, mask = np.uint64(self.half), np.uint64((1 << self.half) - 1)
        left, right = x >> h, x & mask
        for i in range(ROUNDS):
            left, right = right, left ^ self._round(right, i)
        return (left << h) | right

    def _decrypt(self, y: np.ndarray) -> np.ndarray:
        h, mask = np.uint64(self.half), np.uint64((1 << self.half) - 1)
        left, right = y >> h, y & mask
        for i in reversed(range(ROUNDS)):
            left, right = right ^ self._round(left, i), left
        return (left << h) | right

    def _walk(self, a: int | np.ndarray, step: Callable[[np.ndarray], np.ndarray]
              ) -> np.ndarray:
        x = np.asarray(a)
        if x.size and (int(x.min()) < 0 or int(x.max()) >= self.n):
            raise ValueError(f"outside [0, {self.n})")
        flat = x.reshape(-1).astype(np.uint64)
        with np.errstate(over="ignore"):  # the mixing multiplies modulo 2^64
            out = step(flat)
            bad = np.flatnonzero(out >= np.uint64(self.n))
            while bad.size:  # cycle-walking: a few steps at most (the domain is < 4n)
                out[bad] = step(out[bad])
                bad = bad[out[bad] >= np.uint64(self.n)]
        return out.astype(np.int64).reshape(x.shape)

    def rank(self, slot: int | np.ndarray) -> np.ndarray:
        """``π(slot)`` (int64, the shape of ``slot``)."""
        return self._walk(slot, self._encrypt)

    def slot(self, rank: int | np.ndarray) -> np.ndarray:
        """``π⁻¹(rank)`` (int64, the shape of ``rank``)."""
        return self._walk(rank, self._decrypt)

    def rank_of(self, slot: int) -> int:
        """``π(slot)`` of one slot, in Python integers (what one assignment needs)."""
        return self._walk_int(slot, inverse=False)

    def slot_of(self, rank: int) -> int:
        """``π⁻¹(rank)`` of one rank, in Python integers."""
        return self._walk_int(rank, inverse=True)

    def _walk_int(self, x: int, inverse: bool) -> int:
        if not 0 <= x < self.n:
            raise ValueError(f"{x} is outside [0, {self.n})")
        h, mask = self.half, (1 << self.half) - 1
        order = range(ROUNDS - 1, -1, -1) if inverse else range(ROUNDS)
        while True:
            left, right = x >> h, x & mask
            for i in order:
                if inverse:
                    left, right = right ^ (_mix_int(left ^ self.keys[i]) & mask), left
                else:
                    left, right = right, left ^ (_mix_int(right ^ self.keys[i]) & mask)
            x = (left << h) | right
            if x < self.n:
                return x


def stage_sizes(size: int, shares: Sequence[float], phases: int) -> list[int]:
    """Users of a group of ``size`` in each of ``phases`` stages, in phase order: every
    stage but the last ``⌊share·size⌋`` users, at least 1 and leaving 1 to the rest ([D2])."""
    if phases == 1:
        return [size]
    out, left = [], size
    for s in shares:
        k = min(max(int(s * size), 1), max(left - 1, 1))
        out.append(k)
        left -= k
    return out + [left]
