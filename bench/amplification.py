"""The central ε of shuffle mode, per mechanism (issue 25; docs/privacy.md §7.1, §7.2).

Prints markdown tables (and writes them to ``bench/results/amplification.md``):

1. n = 10⁵, ε0 = 1, δ = 1e-8, every mechanism: the variation-ratio bound the collector
   states, the authors' two-count model (Wang et al.'s numerical bound, which the stated
   bound may only exceed) and Feldman–McMillan–Talwar's bound for any ε0-randomizer
   (FMT21, what results stated before), with the seconds each took;
2. the generic bound against FMT21 over n ∈ {10⁴, 10⁵, 10⁶} and ε0 ∈ {0.5, 1, 2, 4};
3. T shuffled queries of n = 10⁵ at ε0 = 1 composed with the PLD odometer, against the
   sum of their ε.

    python bench/amplification.py            # ~2-5 min on two cores
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from uldp.collector.accounting.amplification import central_epsilon as fmt_epsilon
from uldp.collector.accounting.odometer import Cell, self_composed
from uldp.collector.accounting.parameters import mechanism_parameters
from uldp.collector.accounting.variation_ratio import VariationRatio, central_epsilon

OUT = Path(__file__).resolve().parent / "results" / "amplification.md"
MECHS = [("any", None), ("grr", 32), ("grr", 256), ("oue", 256), ("ss", 256), ("olh", None),
         ("duchi", None), ("pm", None), ("hm", None), ("laplace", None), ("laplace", 32)]


def two_count_epsilon(n: int, vr: VariationRatio, delta: float) -> float:
    """The authors' two-count model (the victim's common part joins the others' rest):
    E[(w0 A/r + w1 B/r + wr (n − T)/(1 − 2r))+]/n over (A, B) ~ Mult(n; r, r)."""
    al, g, r = vr.alpha, vr.gamma, vr.r
    sd = math.sqrt(2 * r * n)
    T = np.arange(max(0, int(2 * r * n - 12 * sd)), min(n, int(2 * r * n + 12 * sd)) + 1)
    wT = stats.binom.pmf(T, n, 2 * r)

    def d(eps: float) -> float:
        e = math.exp(eps)
        w0, w1, wr = (vr.p - e) * al / r, (1 - e * vr.p) * al / r, g * (1 - e) / (1 - 2 * r)
        a = np.ceil((-w1 * T - wr * (n - T)) / (w0 - w1))
        val = ((w0 - w1) * T / 2 * stats.binom.sf(a - 2, T - 1, 0.5)
               + (w1 * T + wr * (n - T)) * stats.binom.sf(a - 1, T, 0.5))
        return float(np.dot(wT, np.maximum(val, 0))) / n
    lo, hi = 0.0, math.log(vr.p)
    for _ in range(45):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    return hi


def table_mechanisms(n: int = 10**5, eps0: float = 1.0, delta: float = 1e-8) -> list[str]:
    rows = [f"### n = {n}, ε0 = {eps0:g}, δ = {delta:g}", "",
            "| mechanism | β | stated (variation-ratio) | s | two-count model | stated / model "
            "| FMT21 (any randomizer) |", "|---|---|---|---|---|---|---|"]
    fmt = fmt_epsilon(n, eps0, delta)
    for m, k in MECHS:
        vr = mechanism_parameters(m, eps0, k)
        t = time.perf_counter()
        eps = central_epsilon(n, vr, delta)
        secs = time.perf_counter() - t
        model = two_count_epsilon(n, vr, delta)
        name = m + (f" k={k}" if k else "")
        rows.append(f"| {name} | {vr.beta:.4f} | {eps:.5f} | {secs:.1f} | {model:.5f} | "
                    f"{eps / model:.5f} | {fmt:.5f} |")
    return rows


def table_generic(delta: float = 1e-8) -> list[str]:
    rows = ["### any ε0-randomizer, δ = 1e-8: variation-ratio / FMT21", "",
            "| users \\ ε0 | 0.5 | 1 | 2 | 4 |", "|---|---|---|---|---|"]
    for n in (10**4, 10**5, 10**6):
        cells = []
        for e0 in (0.5, 1.0, 2.0, 4.0):
            vr = central_epsilon(n, mechanism_parameters("any", e0), delta)
            cells.append(f"{vr:.4f} / {fmt_epsilon(n, e0, delta):.4f}")
        rows.append(f"| 10^{int(math.log10(n))} | " + " | ".join(cells) + " |")
    return rows


def table_composition(n: int = 10**5, delta: float = 1e-8) -> list[str]:
    rows = [f"### T queries of n = {n}, ε0 = 1 composed (PLD odometer), δ = {delta:g}", "",
            "| mechanism | T | composed | summed (stated bound) | summed (FMT21) |",
            "|---|---|---|---|---|"]
    fmt = fmt_epsilon(n, 1.0, delta)
    for m, k in (("any", None), ("grr", 256)):
        vr = mechanism_parameters(m, 1.0, k)
        one = central_epsilon(n, vr, delta)
        for t in (10, 100):
            comp = self_composed((Cell(n, vr),), t, delta)
            rows.append(f"| {m}{f' k={k}' if k else ''} | {t} | {comp:.4f} | {t * one:.4f} | "
                        f"{t * fmt:.4f} |")
    return rows


def main() -> int:
    lines = ["# Amplification by shuffling: the bound each result states", "",
             "`python bench/amplification.py`; s = seconds of the stated bound.", ""]
    for part in (table_mechanisms(), table_generic(), table_composition()):
        lines += [*part, ""]
        print("\n".join(part) + "\n", flush=True)
    OUT.write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
