"""The compiled resample totals give exactly what the numpy path gives (same draws, exact integer sums), so
switching them on changes speed and never a reported number."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from ragassay.analysis import decomposition as dec
from ragassay.stats import bootstrap as boot
from ragassay.stats import bootstrap_deltas, resample_counts
from ragassay.stats.bootstrap import resampled_sums


@pytest.fixture(params=["0", "1"], ids=["numpy", "compiled"])
def jit(request, monkeypatch):
    monkeypatch.setenv("RAGASSAY_JIT", request.param)
    return request.param


@pytest.mark.parametrize("clustered", [False, True])
def test_compiled_totals_give_bit_identical_bootstraps(monkeypatch, clustered):
    rng = np.random.default_rng(3)
    d = rng.normal(size=(2_003, 6)) * np.array([1e-9, 1e-3, 1, 1e3, 1e9, 0.5])
    d[rng.random(2_003) < 0.1, 2] = np.nan  # a second validity group, resampled on its own
    cl = rng.integers(0, 700, size=2_003) if clustered else None
    got = {}
    for setting in ("0", "1"):
        monkeypatch.setenv("RAGASSAY_JIT", setting)
        got[setting] = bootstrap_deltas(d, clusters=cl, seed=5, n_resamples=777, chunk_size=100,
                                        return_distribution=True)
    assert boot._KERNEL is not None  # the compiled path really ran
    assert np.array_equal(got["0"].distribution, got["1"].distribution, equal_nan=True)
    assert got["0"].to_dict() == got["1"].to_dict()


def test_resampled_sums_equal_the_counts_times_the_sums(jit):
    rng = np.random.default_rng(8)
    s = rng.integers(-50, 50, size=(1_000, 5)).astype(float)
    want = resample_counts(np.random.default_rng(4), 1_000, 64) @ s
    got = resampled_sums(np.random.default_rng(4), s, 64)
    assert np.array_equal(got, want)
    # exact integers: the same as summing the drawn rows one by one in int64
    draws = boot._draw(np.random.default_rng(4), 1_000, 64)
    assert np.array_equal(got, s.astype(np.int64)[draws].sum(axis=1))


def test_resampled_sums_of_non_integers_fall_back_to_the_product(monkeypatch):
    monkeypatch.setenv("RAGASSAY_JIT", "1")
    s = np.random.default_rng(1).normal(size=(300, 2))
    want = resample_counts(np.random.default_rng(2), 300, 20) @ s
    assert np.array_equal(resampled_sums(np.random.default_rng(2), s, 20), want)


def test_decomposition_is_unchanged_by_the_compiled_totals(monkeypatch):
    rng = np.random.default_rng(11)
    n = 6_000
    qids = np.asarray([f"q{i % 2_000}" for i in range(n)], dtype=object)
    ya, ha, yb, hb = ((rng.random(n) < p).astype(float) for p in (0.5, 0.7, 0.6, 0.8))
    out = {}
    for setting in ("0", "1"):
        monkeypatch.setenv("RAGASSAY_JIT", setting)
        out[setting] = dec._paired_split(ya, ha, yb, hb, qids, n_resamples=300, confidence=0.9, seed=4)
    assert out["0"] == out["1"]


def test_compiled_percentile_interval_matches_scipy_within_monte_carlo_error(jit):
    rng = np.random.default_rng(21)
    d = rng.normal(0.1, 1.0, size=400)
    ours = bootstrap_deltas(d, seed=0, n_resamples=20_000)["metric_0"]
    ref = scipy.stats.bootstrap((d,), np.mean, n_resamples=20_000, method="percentile",
                                random_state=np.random.default_rng(0)).confidence_interval
    se = d.std(ddof=1) / np.sqrt(d.size)
    assert abs(ours.ci_low - ref.low) < 0.03 * se * 4 and abs(ours.ci_high - ref.high) < 0.03 * se * 4
