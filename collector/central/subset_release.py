"""Per-subset means and variances under user-level DP (baseline and clip mechanisms).

See ``docs/central.md`` ("subset-stats"). Reference: ``docs/central-algorithms.md``. This
module is the release; its pieces live next to it:

* C§1.2 targets (per-subset mean and *population* variance, C§5 B14): here;
* C§2.1–C§2.3 exact sensitivities and worst-case biases (Prop. III.1, Lemma III.3, Thm IV.1,
  the **corrected** Thm IV.2 of C§5 B3): :mod:`uldp.collector.central.subset_bounds`;
* C§2.4 worst-case error metric (eq. 12/13) with the split of C§5 B11 and weights of C§5 B8:
  :mod:`uldp.collector.central.subset_params`;
* C§2.6 release after Clip-User (the plan comes from :mod:`uldp.collector.central.clip_user`);
* C§5 B1 (occupancy must be declared public) and B4 (keep the *first* Γ records in input
  order): :mod:`uldp.collector.central.occupancy`;
* B5 (S = 0 is infeasible) and B15 (clamp; the clamp count is logged for operators, never
  put in the release): here; B9 (per-coordinate intervals) and B13 (discrete noise):
  :mod:`uldp.collector.central.subset_noise`.

Privacy argument (pure user-level ε-DP per subset; Kε overall by Thm II.3)
-------------------------------------------------------------------------
Neighbours (C§1.3) share the public occupancy array ``A`` and differ in the values of one
user. Everything that is not a value — which subsets exist, the kept counts Γ, the
sensitivities Δ, the grid steps and the noise scales — is a function of ``(A, Γ, U, ε)``
only and is recomputed here from them (never accepted as an input).

For one subset and one statistic θ with exact sensitivity Δ > 0 (C§2.1/C§2.2 formulas):

1. values are clamped to ``[lower, upper]`` (a per-record, data-independent map; B15) and the
   first Γ_ℓ records of each user are kept (a rule depending only on that user's own record
   order; B4), so θ of the kept records has sensitivity at most Δ;
2. the grid step is ``γ = Δ / 2^k`` (public), so the exact grid position ``θ/γ`` moves by at
   most ``2^k`` between neighbours;
3. the released integer is ``r = floor(θ̂/γ + 1/2)`` where ``θ̂`` is θ computed in floating
   point with ``math.fsum``. ``floor(x + 1/2)`` is monotone and commutes with integer shifts,
   so if the computed positions of two neighbours differ by less than ``2^k + 1`` the rounded
   integers differ by at most ``Δ_int = 2^k + 1``. The float error of a computed position is
   at most ``2^(k-48)·S`` grid units (fsum is correctly rounded; the bound is derived in
   :func:`~uldp.collector.central.subset_noise.effective_bits`), and ``k`` is lowered from
   a public function of ``S`` so that this is ≤ 1/8; two neighbours' computed positions
   therefore differ by ≤ 2^k + 1/4 + tiny;
4. ``r + Z`` with ``Z ~ DLap(Δ_int/ε_r)`` (exact CKS sampler, ε_r ≤ ε rounded down to
   2^-24, :mod:`uldp.client.noise`) is ε_r-DP on integers, hence ε-DP, and the released
   float ``γ·(r + Z)`` is post-processing.

Mean and variance use budget shares ``ε_μ + ε_Var = ε`` (default ε/2 each, C§2.1, B11), so one
subset is ε-DP; a subset's release reads only that subset's records, so by disjoint-subset
composition (Thm II.3) the whole release is ``max_ℓ ε·|{g: Γ_{g,ℓ} > 0}| = Kε``-DP. When
``Δ = 0`` (the variance of a single kept sample) the statistic is the constant 0 and is
released without noise.

Every released mean is clamped into ``[lower, upper]`` and every released variance into
``[0, (upper − lower)²/4]`` (post-processing; the estimands lie there). Estimands: the
per-subset mean and population variance of the kept *records* (record-weighted, not a
mean of user means).

Only sample *values* are protected: ``A`` (who is in which subset, with how many records) is
public by declaration (B1) and the caller must say so with ``public_occupancy=True``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource, as_source
from uldp.collector.central.clip_user import ClipUserPlan
from uldp.collector.central.occupancy import (
    Occupancy,
    Rows,
    index_rows,
    kept_summary,
    require_public_occupancy,
)
from uldp.collector.central.privacy import CentralRelease, PrivacyRecord
from uldp.collector.central.subset_bounds import mean_sensitivity, var_sensitivity
from uldp.collector.central.subset_noise import effective_bits, half_widths, release_on_grid
from uldp.collector.central.subset_params import Statistic, SubsetStatsParams, grid_error_arrays

__all__ = ["subset_stats"]

#: operators filter the clamp count (B15) on this name, the name of the release it comes from
_LOG = logging.getLogger("uldp.collector.central.subset_stats")


# ---- C§2.2 / C§2.6: the release ---------------------------------------------------------
def _grid_sums(values: np.ndarray, grid: np.ndarray, n_grids: int,
               ) -> tuple[np.ndarray, np.ndarray]:
    """fsum-exact per-grid mean and two-pass population variance of kept values."""
    order = np.argsort(grid, kind="stable")
    v = values[order]
    bounds = np.searchsorted(grid[order], np.arange(n_grids + 1))
    mean = np.zeros(n_grids)
    var = np.zeros(n_grids)
    for gi in range(n_grids):
        x = v[bounds[gi]:bounds[gi + 1]]
        if x.size == 0:
            continue
        mu = math.fsum(x) / x.size
        mean[gi] = mu
        var[gi] = math.fsum((x - mu) ** 2) / x.size
    return mean, var


def _resolve_kept(occ: Occupancy, params: SubsetStatsParams, plan: ClipUserPlan | None,
                  ) -> np.ndarray:
    if plan is None:
        return occ.counts.copy()
    if not plan.occupancy.same_as(occ):
        raise ValueError("plan was computed for a different occupancy array (users, subsets "
                         "or per-user counts differ from these rows)")
    p = plan.params
    same = (p.epsilon == params.epsilon and p.lower == params.lower and p.upper == params.upper
            and p.statistic == params.statistic and p.epsilon_mean == params.epsilon_mean
            and p.grid_bits == params.grid_bits)
    if not same:
        raise ValueError("plan was made with different parameters (epsilon, value range, "
                         "statistic, mean_share or grid_bits); the same ones must be used "
                         f"for planning and release (plan: {p.describe()})")
    kept = np.asarray(plan.kept, np.int64)
    if kept.shape != occ.counts.shape or (kept < 0).any() or (kept > occ.counts).any():
        raise ValueError("plan.kept must satisfy 0 <= kept <= counts pairwise")
    return kept.copy()



def _check_values(values: Any, n_rows: int) -> np.ndarray:
    try:
        vals = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"values must be numeric: {exc}") from None
    if vals.shape != (n_rows,):
        raise ValueError(f"values must have shape ({n_rows},) like user_ids, got {vals.shape}")
    if not np.isfinite(vals).all():
        bad = int(np.argmax(~np.isfinite(vals)))
        raise ValueError(f"values contains NaN or infinity (first at row {bad})")
    return vals


def _kept_statistics(rows: Rows, vals: np.ndarray, kept: np.ndarray,
                     params: SubsetStatsParams) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-subset mean and population variance of the kept values, and the clamp count.

    B15 clamp, shift to [0, U]; B4 keep the first Γ records of each (subset, user) pair.
    """
    occ = rows.occupancy
    n_clamped = int(((vals < params.lower) | (vals > params.upper)).sum())
    x = np.clip(vals, params.lower, params.upper) - params.lower
    keep_row = rows.row_rank < kept[rows.row_pair]
    row_grid = occ.pair_grid[rows.row_pair]
    mean, var = _grid_sums(x[keep_row], row_grid[keep_row], occ.n_subsets)
    return mean, var, n_clamped


def _sensitivities(gmax: np.ndarray, s: np.ndarray, u: float) -> tuple[np.ndarray, np.ndarray]:
    """(Δ_μ, Δ_Var) per subset from the kept maximum Γ⋆ and total S (C§2.2)."""
    d_mu = np.array([mean_sensitivity(int(a), int(b), u) for a, b in zip(gmax, s, strict=True)])
    d_var = np.array([var_sensitivity(int(a), int(b), u) for a, b in zip(gmax, s, strict=True)])
    return d_mu, d_var


def _release_stat(details: dict[str, Any], name: str, stat: np.ndarray, sens: np.ndarray,
                  bits: np.ndarray, eps: float, src: RandomSource, coords: int,
                  public_range: tuple[float, float], shift: float | None = None,
                  ) -> tuple[np.ndarray, dict[int, str]]:
    """Noisy ``stat`` (shifted back by ``shift``) clamped into its public range.

    The clamp is post-processing (issue 11): the estimand lies in ``public_range``. The
    noisy value before the clamp, the sensitivities, grid steps and 95 % noise half-widths
    go into ``details``.
    """
    out, step, scales = release_on_grid(stat, sens, bits, eps, src)
    if shift is not None:
        out = out + shift
    details[f"{name}_unclamped"] = out  # the noisy value before the clamp
    details[f"{name}_sensitivity"] = sens
    details[f"{name}_grid_step"] = step
    details[f"{name}_half_width_95"] = half_widths(sens, bits, eps, coords)
    return np.clip(out, *public_range), scales


def _public_details(occ: Occupancy, kept: np.ndarray, s: np.ndarray, gmax: np.ndarray,
                    bits: np.ndarray) -> dict[str, Any]:
    return {
        "subsets": occ.subsets, "records": occ.totals(), "kept_records": s, "max_kept": gmax,
        "users_per_subset": np.bincount(occ.pair_grid, weights=kept > 0,
                                        minlength=occ.n_subsets).astype(np.int64),
        "grid_bits": bits,
    }


def _estimate(subsets: np.ndarray, released: dict[str, np.ndarray],
              statistic: Statistic) -> dict[Any, Any]:
    """Subset label -> released value (a ``(mean, variance)`` pair for ``"both"``)."""
    labels = [lab.item() if isinstance(lab, np.generic) else lab for lab in subsets]
    if statistic == "both":
        return {lab: (float(a), float(b))
                for lab, a, b in zip(labels, released["mean"], released["variance"],
                                     strict=True)}
    return {lab: float(a) for lab, a in zip(labels, released[statistic], strict=True)}


def _record(params: SubsetStatsParams, occ: Occupancy, k_factor: int,
            planned: bool) -> PrivacyRecord:
    return PrivacyRecord(
        mechanism="subset_mean_variance/" + ("clip_user" if planned else "baseline"),
        mode="pure",
        epsilon=params.epsilon * k_factor,
        unit="user",
        neighbouring=("replace-one-user (same public occupancy array A, "
                      "docs/central-algorithms.md C§1.3)"),
        split={"mean": params.epsilon_mean / params.epsilon,
               "variance": params.epsilon_var / params.epsilon},
        public={
            "occupancy_array": "declared public (docs/central-algorithms.md C§5 B1)",
            "per_subset_epsilon": params.epsilon, "K": k_factor,
            "lower": params.lower, "upper": params.upper, "n_subsets": occ.n_subsets,
            "n_users": occ.n_users, "kept_counts": "Γ from the plan" if planned
            else "all records", "grid_bits": params.grid_bits,
        },
        notes=("discrete Laplace on a fixed-point grid γ = Δ/2^k, Δ_int = 2^k + 1 units; "
               "each subset ε-DP (mean/variance split), Kε-DP overall by disjoint-subset "
               "composition (Thm II.3)"),
    )


def _release_params(plan: ClipUserPlan | None, **kwargs: Any) -> SubsetStatsParams:
    """The release's parameters; a plan brings its error model and weights (B11)."""
    if plan is not None and not isinstance(plan, ClipUserPlan):
        raise ValueError(f"plan must be a ClipUserPlan, got {type(plan).__name__}")
    return SubsetStatsParams(**kwargs, error_model="release" if plan is None
                             else plan.params.error_model,
                             weights=(1.0, 1.0) if plan is None else plan.params.weights)


def subset_stats(user_ids: Any, values: Any, subsets: Any, *, epsilon: float, upper: float,
                 lower: float = 0.0, statistic: Statistic = "both",
                 plan: ClipUserPlan | None = None, public_occupancy: bool = False,
                 mean_share: float = 0.5, grid_bits: int = 16,
                 rng: RandomSource | None = None) -> CentralRelease:
    """Per-subset mean and/or population variance, user-level ε-DP per subset (C§2.1/C§2.6).

    Without ``plan`` this is the baseline mechanism (all records kept, C§2.1); with a
    :class:`~uldp.collector.central.clip_user.ClipUserPlan` it keeps the first Γ_{g,ℓ}
    records of each user in each subset (input row order, B4) and runs M_clip (C§2.2).
    The whole release is Kε-DP, K = max_ℓ |{g: Γ_{g,ℓ} > 0}| (Thm II.3).

    ``estimate`` maps each subset label to its released value (a ``(mean, variance)`` tuple
    for ``"both"``). ``details`` has per-subset arrays (public counts, sensitivities, grid
    steps, worst-case errors, 95% noise half-widths) and the per-user ledger ε·G_ℓ.
    """
    params = _release_params(plan, epsilon=epsilon, upper=upper, lower=lower,
                             statistic=statistic, mean_share=mean_share, grid_bits=grid_bits)
    require_public_occupancy(public_occupancy)
    rows = index_rows(user_ids, subsets)
    vals = _check_values(values, rows.row_pair.size)
    src = as_source(rng)
    occ = rows.occupancy
    kept = _resolve_kept(occ, params, plan)
    s, gmax = kept_summary(occ, kept)
    if (s == 0).any():
        raise ValueError("plan keeps no record in some subset (S = 0 is infeasible, B5)")
    mean, var, n_clamped = _kept_statistics(rows, vals, kept, params)
    u = params.width
    d_mu, d_var = _sensitivities(gmax, s, u)
    bits = effective_bits(params.grid_bits, s)
    src_mu, src_var = src.spawn("subset_stats/mean"), src.spawn("subset_stats/variance")
    details = _public_details(occ, kept, s, gmax, bits)
    if n_clamped:  # B15: for operators only — a data-dependent count, never in the release
        _LOG.info("subset_stats clamped %d of %d values to [%g, %g]", n_clamped,
                  rows.row_pair.size, params.lower, params.upper)
    coords = 2 if statistic == "both" else 1
    released: dict[str, np.ndarray] = {}
    scales: dict[str, dict[int, str]] = {}
    if params.epsilon_mean > 0:
        released["mean"], scales["mean"] = _release_stat(
            details, "mean", mean, d_mu, bits, params.epsilon_mean, src_mu, coords,
            (params.lower, params.upper), shift=params.lower)
    if params.epsilon_var > 0:  # a population variance of values in [lower, upper]
        released["variance"], scales["variance"] = _release_stat(
            details, "variance", var, d_var, bits, params.epsilon_var, src_var, coords,
            (0.0, float(u) ** 2 / 4))
    details["worst_case_error"] = grid_error_arrays(s, occ.totals(), gmax, u,
                                                    params.error_constants())
    details["noise_scale_grid_units"] = scales
    g_post = np.bincount(occ.pair_user, weights=kept > 0, minlength=occ.n_users)
    k_factor = int(g_post.max())
    details.update(users=occ.users, user_loss=params.epsilon * g_post, K=k_factor)
    return CentralRelease(estimate=_estimate(occ.subsets, released, statistic),
                          privacy=_record(params, occ, k_factor, plan is not None),
                          details=details)
