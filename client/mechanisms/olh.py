"""Optimized local hashing (OLH), device half — ``docs/device-protocol.md`` §17.6,
``docs/mechanisms.md`` (OLH).

Wang, Blocki, Li, Jha, USENIX Security 2017, §4.4: the device draws a random hash function
``H: [k] → [g]`` from a public family, hashes its value and reports ``(H, GRR_g(H(v)))``
with ``g = e^ε + 1`` (rounded). The report is two integers whatever ``k``.

The family: ``H_s`` for a seed ``s < 2^32``; ``H_s(v) = ⌊w_v · g / 2^64⌋`` where ``w_v`` is
word ``v`` (§2.1: bytes ``8v … 8v+7``, little-endian) of the ChaCha20 keystream keyed by
``SHA-256("uldp.olh.hash/v1" ‖ s as 8 bytes big-endian)`` — a public function of the
seed, so the collector recomputes it. Each bucket has a dyadic probability
``π_j = #{w : ⌊wg/2^64⌋ = j} / 2^64``; the collector's estimator uses the exact collision
probability ``Σ π_j²`` (``uldp.collector.mechanisms.olh``).

Exact design: ``g = clamp(⌊(S + 2^64 + 2^63) / 2^64⌋, 2, 2^16)`` (``e^ε + 1`` rounded,
``S/2^64 <= e^ε``), and the GRR design over ``g`` (``uldp.client.mechanisms.grr``). Given
the seed the report is GRR's, so it is ε-LDP; the seed itself does not depend on the data.

Draws: the seed (the top 32 bits of one word), then GRR over ``g`` of ``H_s(v)``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from uldp.client.mechanisms.base import OracleBase
from uldp.client.mechanisms.exact import ONE, exp_lower, units_of
from uldp.client.mechanisms.grr import GRRDesign, grr_design, grr_values
from uldp.client.randomness import RandomSource

__all__ = ["OLH", "SEED_BITS", "hash_key", "hash_of", "hash_table", "olh_design"]

#: a report's hash seed is uniform below 2^SEED_BITS
SEED_BITS = 32
MAX_RANGE = 1 << 16
_LABEL = b"uldp.olh.hash/v1"


@functools.lru_cache(maxsize=4096)
def olh_design(units: int) -> GRRDesign:
    """The hash range ``g`` and the GRR design over it (module docstring)."""
    S = exp_lower(units)
    g = min(max((S + ONE + ONE // 2) // ONE, 2), MAX_RANGE)
    return grr_design(g, units)


def hash_key(seed: int) -> bytes:
    return hashlib.sha256(_LABEL + int(seed).to_bytes(8, "big")).digest()


def _stream(key: bytes, nbytes: int, block: int = 0) -> bytes:
    nonce = block.to_bytes(4, "little") + bytes(12)
    enc = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
    return enc.update(bytes(nbytes))


def hash_of(seed: int, value: int, g: int) -> int:
    """``H_seed(value)``: one keystream block, read at word ``value``."""
    block, word = divmod(int(value), 8)
    raw = _stream(hash_key(seed), 64, block)
    w = int.from_bytes(raw[8 * word: 8 * word + 8], "little")
    return (w * g) >> 64


def hash_table(seed: int, k: int, g: int) -> np.ndarray:
    """``[H_seed(0), …, H_seed(k−1)]`` (the collector's view of one report)."""
    w = np.frombuffer(_stream(hash_key(seed), 8 * k), dtype="<u8")
    hi, lo = w >> np.uint64(32), w & np.uint64(0xFFFFFFFF)
    # ⌊w·g / 2^64⌋ exactly for g < 2^32: (hi·g + ⌊lo·g / 2^32⌋) >> 32
    gg = np.uint64(g)
    return ((hi * gg + ((lo * gg) >> np.uint64(32))) >> np.uint64(32)).astype(np.int64)


class OLH(OracleBase):
    """Optimized local hashing (module docstring)."""

    name = "olh"
    family = "oracle"

    def length(self, k: int, eps: float) -> int:
        return 2

    def limit(self, k: int, eps: float) -> int:
        return (1 << SEED_BITS) - 1

    def privatize(self, items: np.ndarray, k: int, eps: float, rng: RandomSource
                  ) -> np.ndarray:
        items = np.asarray(items, dtype=np.int64)
        d = olh_design(units_of(eps))
        seeds = rng.below(1 << SEED_BITS, size=items.size)
        hashed = np.array([hash_of(int(s), int(v), d.k) for s, v in zip(seeds, items,
                                                                        strict=True)],
                          dtype=np.int64)
        return np.stack([seeds, grr_values(hashed, d.k, d.P, rng)], axis=1)

    def probability(self, report: Sequence[int], item: int, k: int, eps: float) -> Fraction:
        d = olh_design(units_of(eps))
        s, y = report
        if not (0 <= s < 1 << SEED_BITS and 0 <= y < d.k):
            return Fraction(0)
        hit = y == hash_of(s, item, d.k)
        return Fraction(d.P if hit else d.Q, ONE) / (1 << SEED_BITS)
