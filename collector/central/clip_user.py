"""Clip-User suppression planner and the per-subset pseudo-user cap.

See ``docs/central.md`` ("subset-stats"). Reference: ``docs/central-algorithms.md`` —
implemented here:

* C§2.5 Algorithm CLIP_USER (argmin, C§5 B2; cumulative stage semantics, B10; stop at K ≤ 1,
  B6; S = 0 infeasible, B5; optional protected minimum-error grid, B7; error target E†);
* C§2.7 Algorithm PSEUDO_USER_CAP (ties to the largest cap; optional search from m = 1);
* C§2.8 defaults and tie-breaking (ascending user id, smallest grid id, largest cap);
* C§6 pipeline step 2: the plan (Γ, K, E, Ē, per-user loss) is shown before any release.

Privacy: the planner reads **only** the public occupancy array A (which users touch which
subsets, with how many records; C§5 B1) and the public (U, ε, split, weights). It never sees a
sample value, so it consumes no privacy budget and its output may be published. The release
(:func:`uldp.collector.central.subset_release.subset_stats` with ``plan=``) is then Kε-DP with
K = max_ℓ |{g: Γ_{g,ℓ} > 0}| (Prop. V.1 / Thm II.3); the pseudo-user cap only lowers counts,
so it never raises K.

Usage::

    plan = plan_clip_user(user_ids, subsets, epsilon=0.5, upper=65.0, public_occupancy=True)
    print(plan.describe())            # K before/after, per-subset worst-case errors, ledger
    rel = subset_stats(user_ids, speeds, subsets, epsilon=0.5, upper=65.0, plan=plan,
                       public_occupancy=True)      # rel.privacy.epsilon == plan.epsilon_total
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

from uldp.collector.central.occupancy import (
    Occupancy,
    kept_summary,
    occupancy_from_rows,
    require_public_occupancy,
)
from uldp.collector.central.subset_params import (
    ErrorModel,
    Statistic,
    SubsetStatsParams,
    error_scalar,
    grid_error_arrays,
)

__all__ = ["ClipUserOptions", "ClipUserPlan", "clip_user", "plan_clip_user", "plan_from_occupancy",
           "pseudo_user_cap"]


@dataclass(frozen=True)
class ClipUserOptions:
    """Planner options (C§2.5, C§2.7, C§2.8, C§5 B6/B7).

    error_target: the error bound E† (default: the initial max_g E_g, C§2.8).
    protect_min_grid: never suppress in the subset with the smallest initial E_g (B7).
    pseudo_user_cap: run PSEUDO_USER_CAP after Clip-User (C§2.7).
    cap_from_one: search caps m in [1, Γ⋆_g] instead of [min Γ, Γ⋆_g] (C§2.7, optional).
    stop_at_one: stop once K ≤ 1 (B6).
    """

    error_target: float | None = None
    protect_min_grid: bool = False
    pseudo_user_cap: bool = True
    cap_from_one: bool = False
    stop_at_one: bool = True

    def __post_init__(self) -> None:
        et = self.error_target
        if et is not None and (isinstance(et, bool) or not isinstance(et, (int, float))
                               or not np.isfinite(et) or et <= 0):
            raise ValueError(f"error_target must be a finite positive number, got {et!r}")
        for name in ("protect_min_grid", "pseudo_user_cap", "cap_from_one", "stop_at_one"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class ClipUserResult:
    """Raw output of :func:`clip_user` (Γ per occupancy pair and bookkeeping)."""

    kept: np.ndarray
    error_initial: np.ndarray
    error_bound: float
    protected_grid: int | None
    stages: int
    suppressions: int
    halted: str


class _Suppressor:
    """CLIP_USER's mutable state, in plain Python containers (the loop is scalar and
    sequential, B10): kept counts per pair, kept totals per subset and, per subset, how
    many pairs keep each count (to find the kept maximum Γ⋆ after a suppression)."""

    def __init__(self, occ: Occupancy, s0: np.ndarray, params: SubsetStatsParams,
                 protected: int | None) -> None:
        self.users = occ.users
        self.u = params.width
        self.consts = params.error_constants()
        self.protected = protected
        self.kept: list[int] = occ.counts.tolist()
        self.grid_of: list[int] = occ.pair_grid.tolist()
        self.s_cur: list[int] = s0.tolist()
        self.n_list: list[int] = occ.totals().tolist()
        self.cnt: list[dict[int, int]] = [{} for _ in range(occ.n_subsets)]
        for g, c in zip(self.grid_of, self.kept, strict=True):
            self.cnt[g][c] = self.cnt[g].get(c, 0) + 1
        self.distinct: list[list[int]] = [sorted(d) for d in self.cnt]
        by_user = np.argsort(occ.pair_user, kind="stable")  # a user's pairs by ascending grid
        self.starts = np.searchsorted(occ.pair_user[by_user],
                                      np.arange(occ.n_users + 1)).tolist()
        self.user_pairs: list[int] = by_user.tolist()

    def best(self, ell: int) -> tuple[float, int, bool]:
        """(E_g after the best suppression of user ``ell``, its pair or -1, whether the
        user has any suppressible pair at all). The argmin of C§5 B2."""
        best_e, best_p = float("inf"), -1
        have_candidate = False
        for p in self.user_pairs[self.starts[ell]:self.starts[ell + 1]]:
            c = self.kept[p]
            g = self.grid_of[p]
            if c == 0 or g == self.protected:
                continue
            have_candidate = True
            s_new = self.s_cur[g] - c
            if s_new <= 0:
                continue  # B5: would empty the subset (E = +inf)
            vals = self.distinct[g]
            mx = vals[-1]
            gs_new = mx if (c < mx or self.cnt[g][mx] > 1) else vals[-2]
            e = error_scalar(s_new, self.n_list[g], gs_new, self.u, self.consts)
            if e < best_e:  # strict: ties go to the smallest grid id
                best_e, best_p = e, p
        return best_e, best_p, have_candidate

    def suppress(self, p: int) -> None:
        g = self.grid_of[p]
        c = self.kept[p]
        self.kept[p] = 0
        self.s_cur[g] -= c
        self.cnt[g][c] -= 1
        if self.cnt[g][c] == 0:
            del self.cnt[g][c]
            del self.distinct[g][bisect.bisect_left(self.distinct[g], c)]


def _stage(state: _Suppressor, g_user: np.ndarray, k_now: int, bound: float,
           ) -> tuple[int, str | None]:
    """One stage (B10): each user at the current K, by ascending id, loses the subset whose
    suppression gives the smallest E_g. Returns (suppressions, why it halted or None)."""
    done = 0
    for ell in np.flatnonzero(g_user == k_now).tolist():
        best_e, best_p, have_candidate = state.best(ell)
        if not have_candidate:
            return done, f"a user at K = {k_now} has no suppressible subset"
        if best_p < 0 or best_e > bound:  # no user id: plans are printed
            return done, (f"a user at K = {k_now} cannot be suppressed anywhere without "
                          f"exceeding E (best candidate {best_e:.6g} > {bound:.6g})")
        state.suppress(best_p)
        g_user[ell] -= 1
        done += 1
    return done, None


def clip_user(occ: Occupancy, params: SubsetStatsParams, *, error_target: float | None = None,
              protect_min_grid: bool = False, stop_at_one: bool = True) -> ClipUserResult:
    """Algorithm CLIP_USER (C§2.5) on the public occupancy ``occ``.

    Returns kept counts Γ aligned with ``occ``'s pairs (0 = suppressed). Reads counts only.
    """
    ClipUserOptions(error_target=error_target, protect_min_grid=protect_min_grid,
                    stop_at_one=stop_at_one)  # validates
    s0, gmax0 = kept_summary(occ, occ.counts)
    e0 = grid_error_arrays(s0, occ.totals(), gmax0, params.width, params.error_constants())
    bound = float(e0.max()) if error_target is None else float(error_target)
    protected = int(np.argmin(e0)) if protect_min_grid else None
    state = _Suppressor(occ, s0, params, protected)
    g_user = occ.subsets_per_user()
    stages = suppressions = 0
    halted = "K <= 1" if stop_at_one else "no user left to suppress"
    while True:
        k_now = int(g_user.max())
        if (stop_at_one and k_now <= 1) or k_now == 0:
            halted = "K <= 1" if k_now <= 1 else halted
            break
        stages += 1
        done, why = _stage(state, g_user, k_now, bound)
        suppressions += done
        if why is not None:
            halted = why
            break
    return ClipUserResult(kept=np.asarray(state.kept, np.int64), error_initial=e0,
                          error_bound=bound, protected_grid=protected, stages=stages,
                          suppressions=suppressions, halted=halted)


def pseudo_user_cap(occ: Occupancy, kept: np.ndarray, params: SubsetStatsParams, *,
                    from_one: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Algorithm PSEUDO_USER_CAP (C§2.7): per subset, the cap m minimising E_g.

    Searches m in [min active Γ, Γ⋆] (or [1, Γ⋆] with ``from_one``); ties go to the largest
    m. Returns (capped Γ̄ per pair, cap per subset, Ē_g per subset). Biases are against the
    original counts; suppressed users stay at 0.
    """
    u = params.width
    consts = params.error_constants()
    n_tot = occ.totals()
    kept = np.asarray(kept, np.int64)
    caps = np.zeros(occ.n_subsets, np.int64)
    errs = np.zeros(occ.n_subsets)
    order = np.argsort(occ.pair_grid, kind="stable")
    bounds = np.searchsorted(occ.pair_grid[order], np.arange(occ.n_subsets + 1))
    for g in range(occ.n_subsets):
        v = np.sort(kept[order[bounds[g]:bounds[g + 1]]])
        v = v[v > 0]
        if v.size == 0:
            caps[g], errs[g] = 0, np.inf
            continue
        lo = 1 if from_one else int(v[0])
        ms = np.arange(lo, int(v[-1]) + 1, dtype=np.int64)
        prefix = np.r_[0, np.cumsum(v)]
        below = np.searchsorted(v, ms, side="left")
        s_m = prefix[below] + ms * (v.size - below)
        e_m = grid_error_arrays(s_m, np.full(ms.size, n_tot[g]), ms, u, consts)
        j = ms.size - 1 - int(np.argmin(e_m[::-1]))  # ties -> largest m
        caps[g], errs[g] = ms[j], e_m[j]
    capped = np.minimum(kept, caps[occ.pair_grid])
    return capped, caps, errs


@dataclass(frozen=True, eq=False)
class ClipUserPlan:
    """A suppression plan computed from public data only; print it before releasing.

    ``kept`` (Γ̄, after the optional pseudo-user cap) is what the release uses; ``kept_clip``
    is Γ after Clip-User alone. Arrays ending in ``_initial/_clip/_final`` are per subset.
    """

    params: SubsetStatsParams
    options: ClipUserOptions
    occupancy: Occupancy
    kept_clip: np.ndarray
    kept: np.ndarray
    caps: np.ndarray
    error_initial: np.ndarray
    error_clip: np.ndarray
    error_final: np.ndarray
    error_bound: float
    error_target: float | None
    protected_grid: int | None
    stages: int
    suppressions: int
    halted: str
    pseudo_user_cap: bool

    # ---- privacy accounting (C§2.6) ----------------------------------------------------
    @property
    def subsets_per_user_before(self) -> np.ndarray:
        return self.occupancy.subsets_per_user()

    @property
    def subsets_per_user_after(self) -> np.ndarray:
        return np.bincount(self.occupancy.pair_user, weights=self.kept > 0,
                           minlength=self.occupancy.n_users).astype(np.int64)

    @property
    def user_loss_before(self) -> np.ndarray:
        """ε·G_ℓ without suppression (per user, aligned with ``occupancy.users``)."""
        return self.params.epsilon * self.subsets_per_user_before

    @property
    def user_loss_after(self) -> np.ndarray:
        """ε·|{g: Γ̄_{g,ℓ} > 0}|: what each user's ledger is charged by the release."""
        return self.params.epsilon * self.subsets_per_user_after

    @property
    def k_initial(self) -> int:
        return int(self.subsets_per_user_before.max())

    @property
    def k_final(self) -> int:
        return int(self.subsets_per_user_after.max())

    @property
    def epsilon_total(self) -> float:
        """Kε: the pure-DP guarantee of the whole release (Prop. V.1)."""
        return self.params.epsilon * self.k_final

    @property
    def initial_max_error(self) -> float:
        return float(self.error_initial.max())

    @property
    def max_error(self) -> float:
        """Ē = max_g Ē_g after the plan (≤ E by construction)."""
        return float(self.error_final.max())

    # ---- presentation -----------------------------------------------------------------
    def to_table(self, kind: str = "subsets") -> list[dict[str, Any]]:
        """Rows per subset (``kind="subsets"``) or per user (``kind="users"``)."""
        occ = self.occupancy
        if kind == "subsets":
            users_before = np.bincount(occ.pair_grid, minlength=occ.n_subsets)
            users_after = np.bincount(occ.pair_grid, weights=self.kept > 0,
                                      minlength=occ.n_subsets).astype(np.int64)
            kept_tot, kept_max = kept_summary(occ, self.kept)
            return [{"subset": _plain(occ.subsets[g]), "users_before": int(users_before[g]),
                     "users_after": int(users_after[g]), "records": int(occ.totals()[g]),
                     "kept_records": int(kept_tot[g]), "max_kept": int(kept_max[g]),
                     "cap": int(self.caps[g]) if self.pseudo_user_cap else None,
                     "error_before": float(self.error_initial[g]),
                     "error_after": float(self.error_final[g]),
                     "protected": g == self.protected_grid}
                    for g in range(occ.n_subsets)]
        if kind == "users":
            before, after = self.subsets_per_user_before, self.subsets_per_user_after
            eps = self.params.epsilon
            return [{"user": _plain(occ.users[i]), "subsets_before": int(before[i]),
                     "subsets_after": int(after[i]), "loss_before": eps * int(before[i]),
                     "loss_after": eps * int(after[i])} for i in range(occ.n_users)]
        raise ValueError(f"kind must be 'subsets' or 'users', got {kind!r}")

    def describe(self, max_rows: int = 20) -> str:
        """Human-readable plan: K, E, Ē, per-subset errors and how many users lose how much
        (never a user id: :meth:`to_table` ``("users")`` has them, for the data owner)."""
        occ = self.occupancy
        eps = self.params.epsilon
        lines = [
            "Clip-User plan (docs/central-algorithms.md C§2.5–C§2.7) from the public occupancy "
            "array only; no privacy budget spent",
            f"  parameters: {self.params.describe()}",
            f"  {occ.n_users} users, {occ.n_subsets} subsets, {int(occ.counts.sum())} records",
            f"  K (max subsets per user): {self.k_initial} -> {self.k_final}; worst per-user "
            f"loss {eps * self.k_initial:g} -> {eps * self.k_final:g} (pure eps-DP)",
            f"  max worst-case error: initial {self.initial_max_error:.6g}, bound E "
            f"{self.error_bound:.6g}"
            + (f" (target {self.error_target:.6g})" if self.error_target is not None else "")
            + f", after Clip-User {float(self.error_clip.max()):.6g}, final {self.max_error:.6g}",
            f"  {self.suppressions} suppressions in {self.stages} stages; stopped: {self.halted}",
        ]
        if self.protected_grid is not None:
            lines.append(f"  protected subset: {_plain(occ.subsets[self.protected_grid])!r}")
        rows = self.to_table("subsets")
        lines.append("  subset | users before->after | records kept/total | cap | "
                     "error before -> after")
        for r in rows[:max_rows]:
            lines.append(f"  {r['subset']!s:>8} | {r['users_before']:>6} -> "
                         f"{r['users_after']:<6} | {r['kept_records']}/{r['records']} | "
                         f"{r['cap'] if r['cap'] is not None else '-'} | "
                         f"{r['error_before']:.6g} -> {r['error_after']:.6g}")
        if len(rows) > max_rows:
            lines.append(f"  ... {len(rows) - max_rows} more subsets")
        before, after = self.user_loss_before, self.user_loss_after
        levels = np.unique(np.round(np.r_[before, after], 12))[::-1]
        lines.append("  users by privacy loss (before -> after): " + ", ".join(
            f"{v:g}: {int(np.sum(np.isclose(before, v)))} -> "
            f"{int(np.sum(np.isclose(after, v)))}" for v in levels[:max_rows]))
        return "\n".join(lines)


def _plain(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def plan_from_occupancy(occ: Occupancy, params: SubsetStatsParams,
                        options: ClipUserOptions | None = None, **option_kwargs: Any,
                        ) -> ClipUserPlan:
    """CLIP_USER then (optionally) PSEUDO_USER_CAP on a public occupancy array.

    Options come as a :class:`ClipUserOptions` or as its fields by keyword.
    """
    if options is None:
        options = ClipUserOptions(**option_kwargs)
    elif option_kwargs:
        raise ValueError("pass either options or option keywords, not both")
    res = clip_user(occ, params, error_target=options.error_target,
                    protect_min_grid=options.protect_min_grid, stop_at_one=options.stop_at_one)
    s, gmax = kept_summary(occ, res.kept)
    consts = params.error_constants()
    e_clip = grid_error_arrays(s, occ.totals(), gmax, params.width, consts)
    if options.pseudo_user_cap:
        final, caps, e_final = pseudo_user_cap(occ, res.kept, params,
                                               from_one=options.cap_from_one)
    else:
        final, caps, e_final = res.kept.copy(), gmax, e_clip
    return ClipUserPlan(params=params, options=options, occupancy=occ, kept_clip=res.kept,
                        kept=final, caps=caps, error_initial=res.error_initial,
                        error_clip=e_clip, error_final=e_final, error_bound=res.error_bound,
                        error_target=options.error_target, protected_grid=res.protected_grid,
                        stages=res.stages, suppressions=res.suppressions, halted=res.halted,
                        pseudo_user_cap=options.pseudo_user_cap)


def plan_clip_user(user_ids: Any, subsets: Any, *, epsilon: float, upper: float,
                   lower: float = 0.0, statistic: Statistic = "both", mean_share: float = 0.5,
                   weights: tuple[float, float] = (1.0, 1.0), error_target: float | None = None,
                   protect_min_grid: bool = False, pseudo_user_cap: bool = True,
                   cap_from_one: bool = False, error_model: ErrorModel = "release",
                   grid_bits: int = 16, public_occupancy: bool = False) -> ClipUserPlan:
    """Plan suppression from record labels only (one ``(user_id, subset)`` per record).

    Reads the occupancy counts, never values; pass the same ``epsilon``, bounds, statistic,
    ``mean_share`` and ``grid_bits`` to
    :func:`~uldp.collector.central.subset_release.subset_stats` together with the plan.
    """
    params = SubsetStatsParams(epsilon=epsilon, upper=upper, lower=lower, statistic=statistic,
                               mean_share=mean_share, weights=weights, grid_bits=grid_bits,
                               error_model=error_model)
    options = ClipUserOptions(error_target=error_target, protect_min_grid=protect_min_grid,
                              pseudo_user_cap=pseudo_user_cap, cap_from_one=cap_from_one)
    require_public_occupancy(public_occupancy)
    occ = occupancy_from_rows(user_ids, subsets)
    return plan_from_occupancy(occ, params, options)
