"""Post-processing of estimates into their public range (pure, no privacy cost; INV-5).

See ``docs/algorithms.md`` ("Estimates"). The output transforms ``T`` (output = ``T θ̂``)
belong to the kinds (``uldp.client.kinds``: ``Kind.transform``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["project_simplex"]


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (sort-based, exact)."""
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    idx = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / idx > 0)[0][-1]
    theta = css[rho] / (rho + 1)
    return np.maximum(v - theta, 0.0)
