"""Own data (``uldp.collector.simulation.own_data``, ``uldp simulate KIND --data FILE.csv``): the
estimand is computed exactly, the CSV reader keeps a device's missing-value rules, the
error and coverage over reps are honest, and ``--compare`` runs every method."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from uldp.collector.cli.app import COMPARED, main
from uldp.collector.simulation.own_data import UserData, read_user_csv, run_users


def _users(seed: int = 3, n: int = 400) -> list[np.ndarray]:
    """Skewed counts (0..200, some empty) and spread-out user means on [0, 10]."""
    g = np.random.default_rng(seed)
    counts = np.minimum(g.geometric(1 / 30, n), 200)
    counts[:5] = 0
    return [np.clip(g.normal(g.uniform(1, 9), 1.0, c), 0, 10) for c in counts]


def test_truth_is_the_mean_of_user_means_with_empty_users_at_the_centre():
    users = _users()
    res = run_users("mean", UserData(users), epsilon=1.0, lo=0.0, hi=10.0, method="ssl")
    means = [u.mean() if len(u) else 5.0 for u in users]  # [D10]: the zero statistic
    assert res.truth == pytest.approx([np.mean(means)], abs=1e-12)
    assert res.users == 400 and res.m_ref == int(np.median([len(u) for u in users]))
    assert res.range == (0.0, 10.0) and res.method == "ssl"


def test_distribution_truth_is_the_mean_of_user_frequencies():
    g = np.random.default_rng(4)
    cats = [g.integers(0, 3, g.integers(1, 50)).astype(float) for _ in range(300)]
    res = run_users("distribution", UserData(cats), epsilon=2.0, dim=3, method="ssl")
    freq = np.mean([np.bincount(c.astype(int), minlength=3) / len(c) for c in cats], axis=0)
    np.testing.assert_allclose(res.truth, freq, atol=1e-12)


def test_reps_give_fresh_noise_and_an_honest_error_and_coverage():
    """SSL's intervals are exact: over 200 reps the squared error matches the formula
    evaluated with the users' own variances, and coverage is near 95 %."""
    data = UserData(_users())
    res = run_users("mean", data, epsilon=1.0, lo=0.0, hi=10.0, method="ssl", reps=200)
    assert res.reps == 200 and len(res.sq_errors) == 200 and len(set(res.sq_errors)) == 200
    # mean of 200 scaled chi-square(1) values: sd of the ratio ≈ sqrt(2/200) = 0.1
    assert 0.7 < res.rmse**2 / res.predicted_mse < 1.35
    # binomial(200, 0.95): sd 1.5 %; the 1e-3 quantiles are 90.2 % and 99.4 %
    assert 0.90 <= res.coverage <= 0.995
    one = run_users("mean", data, epsilon=1.0, lo=0.0, hi=10.0, method="ssl")
    assert one.sq_errors == [res.sq_errors[0]]  # rep r uses seed + r: reproducible


def test_auto_records_its_choice_and_runs_it():
    res = run_users("mean", UserData(_users()), epsilon=1.0, lo=0.0, hi=10.0)
    assert res.auto is not None and res.auto["chosen"] == res.method
    assert res.method in ("ssl", "two-stage")


@pytest.mark.parametrize("bad, needle", [
    (dict(lo=1.0, hi=1.0), "lo < hi"),
    (dict(lo=None, hi=None), "public range"),
    (dict(reps=0), "reps"),
])
def test_bad_arguments_are_refused(bad, needle):
    kw = dict(epsilon=1.0, lo=0.0, hi=10.0) | bad
    with pytest.raises(ValueError, match=needle):
        run_users("mean", UserData(_users()), **kw)
    with pytest.raises(ValueError, match="2 users"):
        run_users("mean", UserData([np.ones(3)]), epsilon=1.0, lo=0.0, hi=1.0)


def _write(path: Path, rows: list[tuple]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user", "minutes", "region"])
        w.writerows(rows)
    return path


def test_csv_reader_groups_users_and_refuses_bad_values(tmp_path):
    """Issue 17 item 25: one rule with ``uldp central`` (``uldp.collector.csvdata``): a
    non-numeric, empty or infinite value refuses the file, naming the row."""
    for bad, needle in (("x", "'x' is not a number"), ("", "empty"),
                        ("inf", "NaN or infinite")):
        f = _write(tmp_path / "b.csv", [("a", "1.5", "n"), ("b", bad, "s")])
        with pytest.raises(ValueError, match=f"row 3, column 'minutes': .*{needle}"):
            read_user_csv(f, "user", ["minutes"])
    f = _write(tmp_path / "v.csv", [("a", "1.5", "n"), ("b", "3", "s"), ("a", "0", "s"),
                                    ("b", "2", "n"), ("c", "7", "e")])
    data = read_user_csv(f, "user", ["minutes"])
    assert [v.tolist() for v in data.values] == [[1.5, 0.0], [3.0, 2.0], [7.0]]
    cats = read_user_csv(f, "user", [], category_col="region")
    assert cats.categories == ["e", "n", "s"]
    assert cats.values[0].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="no column 'mins'"):
        read_user_csv(f, "user", ["mins"])
    empty = _write(tmp_path / "e.csv", [])
    with pytest.raises(ValueError, match="no data rows"):
        read_user_csv(empty, "user", ["minutes"])


def _visits(tmp_path: Path) -> Path:
    g = np.random.default_rng(5)
    rows = []
    for u in range(300):
        mu = g.uniform(5, 60)
        for _ in range(int(g.geometric(1 / 6))):
            rows.append((f"u{u}", f"{min(g.exponential(mu), 120):.1f}",
                         "nse"[int(g.integers(3))]))
    return _write(tmp_path / "visits.csv", rows)


def test_cli_compare_runs_every_method(tmp_path, capsys):
    f = _visits(tmp_path)
    args = ["simulate", "mean", "--data", str(f), "--user-col", "user", "--value-col",
            "minutes", "--lo", "0", "--hi", "120", "--compare", "--reps", "3"]
    assert main([*args, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["method"] for r in runs][1:] == list(COMPARED)[1:]
    assert runs[0]["auto"]["chosen"] == runs[0]["method"]
    assert all(r["reps"] == 3 and r["rmse"] > 0 and 0 <= r["coverage"] <= 1 for r in runs)
    truths = {r["truth"][0] for r in runs}
    assert len(truths) == 1  # one estimand for every method
    assert main(args) == 0
    out = capsys.readouterr().out
    for m in COMPARED:
        assert f"\n{m} " in out
    assert "RMSE" in out and "coverage" in out


def test_cli_own_data_reps_and_distribution(tmp_path, capsys):
    f = _visits(tmp_path)
    assert main(["simulate", "distribution", "--data", str(f), "--user-col", "user",
                 "--category-col", "region", "--reps", "4"]) == 0
    out = capsys.readouterr().out
    assert "over 4 reps: RMSE (l2)" in out and "estimand: mean over users" in out
    for label in ("e", "n", "s"):
        assert f"\n{label:>12} " in out


@pytest.mark.parametrize("extra, needle", [
    ([], "--user-col"),
    (["--user-col", "user"], "--value-col"),
    (["--user-col", "user", "--value-col", "minutes", "--compare", "--lo", "0", "--hi",
      "120"], None),
])
def test_cli_own_data_operator_mistakes_are_one_line(tmp_path, capsys, extra, needle):
    f = _visits(tmp_path)
    kind = "classify" if needle is None else "mean"
    rc = main(["simulate", kind, "--data", str(f), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert (needle or "--label-col") in err


@pytest.mark.parametrize("method", COMPARED)
@pytest.mark.parametrize("kind", ["mean", "mean-linf", "distribution"])
def test_every_method_accepts_empty_single_and_huge_users(kind, method):
    """Issue 11 (3): no exception on short or empty users, whatever the method."""
    g = np.random.default_rng(6)
    users = [g.random(c) for c in [0, 0, 1, 1, 2, 5000, *g.integers(0, 30, 200)]]
    if kind == "distribution":
        data, kw = UserData([np.floor(4 * u) for u in users]), dict(dim=4)
    elif kind == "mean-linf":
        data, kw = UserData([np.c_[u, 1 - u] for u in users]), dict(lo=0.0, hi=1.0)
    else:
        data, kw = UserData(users), dict(lo=0.0, hi=1.0)
    res = run_users(kind, data, epsilon=1.0, method=method, **kw)
    assert np.all(np.isfinite(res.estimate.values))
    assert np.all(res.estimate.ci_low <= res.estimate.values)
    assert np.all(res.estimate.values <= res.estimate.ci_high)
    assert np.all((res.estimate.values >= 0) & (res.estimate.values <= 1))


def test_ssl_intervals_are_about_these_users_not_a_larger_population():
    """docs/algorithms.md ("Estimates"): at large ε the users' spread dominates a report's
    variance. The interval is for the mean over the users who reported (the truth here), so
    it holds the exact noise only and covers ~95 %; the superpopulation error (the
    empirical variance) is kept as an extra and is much larger. 300 reps: 3 binomial
    standard errors of 0.95 are 0.038."""
    users = _users()
    res = run_users("mean", UserData(users), epsilon=8.0, lo=0.0, hi=10.0, method="ssl",
                    reps=300)
    assert 0.95 - 0.038 <= res.coverage <= 0.95 + 0.038
    se = res.estimate.std_error[0]
    se_super = res.estimate.extra["std_error_superpopulation"][0]
    assert se_super > 1.5 * se  # user means spread over [1, 9]: the spread dominates
    # and the prediction with the users' actual spread agrees with the measured error
    assert np.mean(res.sq_errors) == pytest.approx(res.predicted_mse, rel=0.25)


def test_finite_population_covariance():
    from uldp.collector.methods.common import finite_population

    cov = np.array([[4.0, 1.0], [1.0, 3.0]]) / 10
    noise = np.array([2.0, 2.0])
    assert finite_population(cov, noise, 10, 10) == pytest.approx(np.diag(noise) / 10)
    half = finite_population(cov, noise, 10, 20)
    assert half == pytest.approx(np.diag(noise) / 10 + 0.5 * (cov - np.diag(noise) / 10))
    # an empirical covariance below the noise (sampling error) never shrinks it
    low = finite_population(np.eye(2) * 0.1, noise, 10, 40)
    assert np.all(np.linalg.eigvalsh(low - np.diag(noise) / 10) >= -1e-12)
    assert finite_population(cov, noise, 1, 10) is cov  # fewer than 2 reports: unchanged


def test_reference_count_is_the_median_and_the_least_under_users_alike():
    """m_ref: the median count without an assumption (it only sizes the plan); the least
    count under ``assume="users-alike"`` (its bounds count on every user holding m
    records), and a run with a larger explicit m_ref says how many users hold fewer."""
    from uldp.collector.simulation.own_data import reference_count

    counts = np.array([3, 50, 60, 70, 400])
    assert reference_count(counts, None) == (60, None)
    assert reference_count(counts, None, "users-alike") == (3, None)
    m, note = reference_count(np.array([0, 5, 9]), None, "users-alike")  # an empty user
    assert m == 1 and note is not None and "1 of 3 users hold fewer" in note
    m, note = reference_count(counts, 60, "users-alike")
    assert m == 60 and note is not None and "2 of 5 users hold fewer" in note
    assert reference_count(counts, 60) == (60, None)
    g = np.random.default_rng(5)
    users = [(g.random(k) < 0.3).astype(float) for k in g.integers(20, 200, 300)]
    res = run_users("mean", UserData(users), epsilon=2.0, lo=0.0, hi=1.0,
                    options={"assume": "users-alike"})
    assert res.m_ref == min(len(u) for u in users)
    assert not any("hold fewer" in a for a in res.advisories)
    res = run_users("mean", UserData(users), epsilon=2.0, lo=0.0, hi=1.0, samples=100,
                    options={"assume": "users-alike"})
    assert res.m_ref == 100 and any("hold fewer" in a for a in res.advisories)


def test_ssl_reports_depend_on_a_users_statistic_alone():
    """``bench/population_suite.py --collapsed`` replaces every user's records by one record,
    their statistic, to run the n = 10⁵ ``ssl`` cells fast: with the same public ``m_ref``
    and seed, the estimate, its interval and the prediction are the same bits (users of
    equal counts, so the device batches hold the users in the same order; with unequal
    counts the order, and so which random words a user draws, differs: the same law)."""
    g = np.random.default_rng(4)
    rows = [g.uniform(0, 10, 20) for _ in range(300)]
    full = run_users("mean", UserData(rows), epsilon=1.0, lo=0.0, hi=10.0, method="ssl",
                     reps=2, seed=3)
    one = run_users("mean", UserData([np.array([float(np.mean(r))]) for r in rows]),
                    epsilon=1.0, lo=0.0, hi=10.0, method="ssl", samples=20, reps=2, seed=3)
    assert full.m_ref == one.m_ref == 20
    assert full.sq_errors == one.sq_errors and full.coverage == one.coverage
    assert np.array_equal(full.estimate.ci_low, one.estimate.ci_low)
