"""Paired and clustered bootstrap: spec worked examples, scipy.stats.bootstrap as oracle, degenerate inputs."""

import json
import tracemalloc

import numpy as np
import pytest
from scipy import stats

from ragassay.errors import InputError
from ragassay.stats import bootstrap_deltas, clustered_bootstrap, paired_bootstrap, resample_counts
from ragassay.stats.bootstrap import _CHUNK_BYTES, _chunk_rows


def wlt(wins, losses, ties):
    return np.r_[np.ones(wins), -np.ones(losses), np.zeros(ties)]


def mean_diff(x, y, axis=-1):
    return np.mean(y - x, axis=axis)


def test_spec_34_wins_14_losses_interval_excludes_zero():
    r = bootstrap_deltas(wlt(34, 14, 152), seed=0).metrics[0]
    assert r.delta == pytest.approx(0.10)
    assert (r.wins, r.losses, r.ties, r.n) == (34, 14, 152, 200)
    assert 0.03 <= r.ci_low <= 0.05
    assert 0.155 <= r.ci_high <= 0.18
    assert r.p_value < 0.05


def test_spec_30_wins_18_losses_interval_contains_zero():
    r = bootstrap_deltas(wlt(30, 18, 152), seed=0).metrics[0]
    assert r.delta == pytest.approx(0.06)
    assert r.ci_low < 0 < r.ci_high
    assert -0.02 <= r.ci_low <= 0.0
    assert 0.115 <= r.ci_high <= 0.14
    assert r.p_value > 0.05


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentile_ci_matches_scipy_bootstrap_within_mc_error(seed):
    rng = np.random.default_rng(seed)
    n, m, reps = 300, 3, 5000
    a = rng.beta(2, 3, size=(n, m))
    b = np.clip(a + rng.normal(0.03, 0.15, size=(n, m)), 0, 1)
    ours = paired_bootstrap(a, b, n_resamples=reps, seed=seed)
    for j in range(m):
        ref = stats.bootstrap(
            (a[:, j], b[:, j]),
            mean_diff,
            paired=True,
            vectorized=True,
            n_resamples=reps,
            method="percentile",
            random_state=np.random.default_rng(seed + 100),
        )
        se = (b[:, j] - a[:, j]).std(ddof=1) / np.sqrt(n)
        # Endpoint MC sd is ~0.038 se at R = 5000; two independent runs, 5 sigma.
        tol = 5 * np.sqrt(2) * 0.04 * se
        assert ours.metrics[j].ci_low == pytest.approx(ref.confidence_interval.low, abs=tol)
        assert ours.metrics[j].ci_high == pytest.approx(ref.confidence_interval.high, abs=tol)
        assert ours.metrics[j].delta == pytest.approx((b[:, j] - a[:, j]).mean(), abs=1e-12)


@pytest.mark.parametrize("seed", [4, 5])
def test_bca_ci_matches_scipy_bca_within_mc_error(seed):
    rng = np.random.default_rng(seed)
    n, reps = 150, 5000
    d = rng.exponential(0.2, size=n) - 0.15  # skewed, so BCa differs from percentile
    ours = bootstrap_deltas(d, n_resamples=reps, seed=seed, method="bca").metrics[0]
    pct = bootstrap_deltas(d, n_resamples=reps, seed=seed).metrics[0]
    ref = stats.bootstrap(
        (d,), np.mean, n_resamples=reps, method="BCa", random_state=np.random.default_rng(seed)
    )
    se = d.std(ddof=1) / np.sqrt(n)
    tol = 5 * np.sqrt(2) * 0.06 * se
    assert ours.ci_low == pytest.approx(ref.confidence_interval.low, abs=tol)
    assert ours.ci_high == pytest.approx(ref.confidence_interval.high, abs=tol)
    # Right skew shifts the BCa interval up relative to the percentile one.
    assert ours.ci_high > pct.ci_high


def test_bootstrap_p_value_agrees_with_t_test_on_large_normal_sample():
    rng = np.random.default_rng(7)
    d = rng.normal(0.05, 0.3, size=400)
    r = bootstrap_deltas(d, n_resamples=20000, seed=7).metrics[0]
    p_t = stats.ttest_1samp(d, 0).pvalue
    assert r.p_value == pytest.approx(p_t, rel=0.25)


def test_p_value_is_never_zero_and_uses_plus_one_correction():
    d = np.linspace(0.5, 1.0, 50)  # every item improves: no resample near zero
    r = bootstrap_deltas(d, n_resamples=999, seed=0).metrics[0]
    assert r.p_value == pytest.approx(1 / 1000)


def test_same_seed_reproduces_and_other_seed_differs():
    rng = np.random.default_rng(0)
    d = rng.normal(size=(80, 4))
    r1 = bootstrap_deltas(d, seed=11, n_resamples=2000).to_dict()
    r2 = bootstrap_deltas(d, seed=11, n_resamples=2000).to_dict()
    r3 = bootstrap_deltas(d, seed=12, n_resamples=2000).to_dict()
    assert r1 == r2
    assert r1["metrics"][0]["ci_low"] != r3["metrics"][0]["ci_low"]


def test_generator_seed_is_accepted_and_bad_seed_rejected():
    d = np.random.default_rng(0).normal(size=30)
    r = bootstrap_deltas(d, seed=np.random.default_rng(5), n_resamples=500)
    assert r.metrics[0].defined and r.seed is None
    with pytest.raises(InputError, match="seed"):
        bootstrap_deltas(d, seed="abc")


def test_chunk_size_does_not_change_results():
    d = np.random.default_rng(3).normal(size=(60, 2))
    a = bootstrap_deltas(d, seed=1, n_resamples=1000, chunk_size=1000).to_dict()
    b = bootstrap_deltas(d, seed=1, n_resamples=1000, chunk_size=7).to_dict()
    assert a == b


@pytest.mark.parametrize("clustered", [False, True])
def test_results_are_bit_identical_across_chunk_shapes_and_blas_threads(clustered):
    # BLAS picks kernels (and so summation orders) by matrix shape and thread count; the integer grid makes
    # every order give the same float64 result, for all the odd chunk shapes that expose kernel tails.
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(11)
    d = rng.normal(size=(997, 7)) * np.array([1e-9, 1e-3, 1, 1e3, 1e9, 0.5, 3])
    cl = rng.integers(0, 200, size=997) if clustered else None
    ref = bootstrap_deltas(d, clusters=cl, seed=4, n_resamples=999, chunk_size=999, return_distribution=True)
    for chunk in (1, 3, 17, 64, 333):
        for threads in (1, 2):
            with threadpool_limits(limits=threads, user_api="blas"):
                got = bootstrap_deltas(d, clusters=cl, seed=4, n_resamples=999, chunk_size=chunk,
                                       return_distribution=True)
            assert np.array_equal(got.distribution, ref.distribution)
            assert got.to_dict() == ref.to_dict()


def test_resampled_means_match_exact_integer_arithmetic():
    # Oracle without BLAS: the same counts and grid, summed in int64 (exact), then scaled.
    from ragassay.stats.bootstrap import _boot_centered, _draw, _exact_grid

    rng = np.random.default_rng(2)
    s = rng.normal(size=(300, 3))
    s -= s.mean(axis=0)
    c = np.ones(300)
    boots = _boot_centered(s, c, 50, np.random.default_rng(9), 16)
    draws = _draw(np.random.default_rng(9), 300, 50)
    w = np.stack([np.bincount(r, minlength=300) for r in draws]).astype(np.int64)
    grid, scale = _exact_grid(s)
    exact = (w @ grid.astype(np.int64)) / scale / 300.0
    assert np.array_equal(boots, exact)
    # and the grid moves a resampled mean by far less than float32 rounding would
    assert np.abs(boots - (w @ s) / 300.0).max() < 1e-12


def test_many_metrics_equal_one_at_a_time():
    d = np.random.default_rng(4).normal(size=(100, 5))
    together = bootstrap_deltas(d, seed=2, n_resamples=1500)
    for j in range(5):
        alone = bootstrap_deltas(d[:, j], seed=2, n_resamples=1500).metrics[0]
        # Same resamples and per-column exact products: a metric's figures do not depend on its neighbours.
        assert together.metrics[j].to_dict() == {**alone.to_dict(), "metric": f"metric_{j}"}


def test_nan_items_are_excluded_per_metric_and_counted():
    rng = np.random.default_rng(5)
    d = rng.normal(0.1, 1, size=(120, 3))
    d[:10, 1] = np.nan
    d[:, 2] = np.nan
    res = bootstrap_deltas(d, seed=3, n_resamples=1000, metrics=["x", "y", "z"])
    assert res["x"].n == 120 and res["x"].n_excluded == 0
    assert res["y"].n == 110 and res["y"].n_excluded == 10
    alone = bootstrap_deltas(d[10:, 1], seed=3, n_resamples=1000).metrics[0]
    assert res["y"].ci_low == pytest.approx(alone.ci_low, abs=1e-6)
    assert res["y"].delta == pytest.approx(np.nanmean(d[:, 1]))
    z = res["z"]
    assert not z.defined and "all NaN" in z.reason and z.n == 0 and z.n_excluded == 120
    assert np.isnan(z.ci_low) and np.isnan(z.delta)
    assert res.n_undefined == 1


def test_nan_in_either_arm_excludes_the_pair():
    a = np.array([0.1, np.nan, 0.3, 0.4, 0.5])
    b = np.array([0.2, 0.2, np.nan, 0.6, 0.5])
    r = paired_bootstrap(a, b, n_resamples=500).metrics[0]
    assert r.n == 3 and r.n_excluded == 2
    assert r.delta == pytest.approx((0.1 + 0.2 + 0.0) / 3)


def test_single_item_is_undefined_with_reason():
    r = bootstrap_deltas([0.4], n_resamples=100).metrics[0]
    assert not r.defined and "at least 2" in r.reason
    assert r.delta == 0.4 and np.isnan(r.ci_low) and np.isnan(r.p_value)


def test_all_ties_give_zero_interval_and_p_one():
    r = bootstrap_deltas(np.zeros(40), n_resamples=500).metrics[0]
    assert (r.ci_low, r.ci_high, r.p_value) == (0.0, 0.0, 1.0)
    assert (r.wins, r.losses, r.ties) == (0, 0, 40)


def test_constant_nonzero_difference_gives_point_interval():
    r = bootstrap_deltas(np.full(25, 0.2), n_resamples=500).metrics[0]
    assert r.ci_low == pytest.approx(0.2, abs=1e-6) and r.ci_high == pytest.approx(0.2, abs=1e-6)
    assert r.p_value == pytest.approx(1 / 501)


def test_tie_tolerance_moves_small_differences_into_ties():
    d = np.array([0.001, -0.002, 0.5, -0.4, 0.0])
    r0 = bootstrap_deltas(d, n_resamples=200).metrics[0]
    r1 = bootstrap_deltas(d, n_resamples=200, tie_tol=0.01).metrics[0]
    assert (r0.wins, r0.losses, r0.ties) == (2, 2, 1)
    assert (r1.wins, r1.losses, r1.ties) == (1, 1, 3)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(a=np.ones(5), b=np.ones(6)), "paired"),
        (dict(a=np.ones((5, 2)), b=np.ones((5, 3))), "paired"),
        (dict(a=[], b=[]), "empty"),
        (dict(a=[1.0, np.inf], b=[1.0, 2.0]), "infinite"),
        (dict(a=[[[1.0]]], b=[[[1.0]]]), "shape"),
    ],
)
def test_bad_inputs_raise_input_error(bad, match):
    with pytest.raises(InputError, match=match):
        paired_bootstrap(bad["a"], bad["b"])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n_resamples=0), "n_resamples"),
        (dict(confidence=1.0), "confidence"),
        (dict(method="bc"), "method"),
        (dict(tie_tol=-1), "tie_tol"),
        (dict(metrics=["a", "b"]), "names"),
        (dict(clusters=[1, 2]), "cluster"),
    ],
)
def test_bad_settings_raise_input_error(kw, match):
    with pytest.raises(InputError, match=match):
        bootstrap_deltas(np.arange(5.0), **kw)


def test_to_dict_is_json_serializable():
    res = bootstrap_deltas(
        np.random.default_rng(0).normal(size=(20, 2)), n_resamples=200, metrics=["m1", "m2"]
    )
    back = json.loads(json.dumps(res.to_dict()))
    assert back["metrics"][1]["metric"] == "m2" and back["n_resamples"] == 200


def test_resample_counts_are_multinomial():
    rng = np.random.default_rng(0)
    w = resample_counts(rng, 50, 4000)
    assert w.dtype == np.float64 and (w.sum(axis=1) == 50).all()
    # Each count is Binomial(50, 1/50): mean 1, variance 0.98.
    assert w.mean() == pytest.approx(1.0, abs=0.01)
    assert w.var() == pytest.approx(0.98, abs=0.02)
    # Bootstrap-multinomial zero fraction (1 - 1/n)^n.
    assert (w == 0).mean() == pytest.approx((1 - 1 / 50) ** 50, abs=0.01)


def test_chunk_memory_is_bounded_for_100k_items():
    assert _chunk_rows(100_000, 512) * 12 * 100_000 <= _CHUNK_BYTES
    d = np.random.default_rng(0).normal(size=(100_000, 5)).astype(np.float64)
    tracemalloc.start()
    res = bootstrap_deltas(d, n_resamples=200, seed=0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2 * 1024**3
    assert all(r.defined and r.n == 100_000 for r in res)


def test_clustered_with_singleton_clusters_equals_item_bootstrap():
    d = np.random.default_rng(8).normal(size=(70, 2))
    item = bootstrap_deltas(d, seed=4, n_resamples=1000)
    clus = bootstrap_deltas(d, seed=4, n_resamples=1000, clusters=np.arange(70))
    for r1, r2 in zip(item, clus, strict=True):
        assert r1.ci_low == pytest.approx(r2.ci_low, abs=1e-9)
        assert r1.ci_high == pytest.approx(r2.ci_high, abs=1e-9)
    assert clus.metrics[0].n_clusters == 70 and clus.clustered


def test_clustered_matches_naive_cluster_resampling_loop():
    rng = np.random.default_rng(9)
    k = 40
    sizes = rng.integers(1, 6, size=k)
    clusters = np.repeat(np.arange(k), sizes)
    effect = rng.normal(0.05, 0.3, size=k)
    d = effect[clusters] + rng.normal(0, 0.05, size=clusters.size)
    reps = 4000
    ours = bootstrap_deltas(d, clusters=clusters, seed=1, n_resamples=reps).metrics[0]
    # Independent oracle: draw cluster ids, pool their items, take the item mean.
    ref_rng = np.random.default_rng(123)
    members = [d[clusters == c] for c in range(k)]
    sums = np.array([m.sum() for m in members])
    boots = np.empty(reps)
    for r in range(reps):
        pick = ref_rng.integers(0, k, size=k)
        boots[r] = sums[pick].sum() / sizes[pick].sum()
    lo, hi = np.quantile(boots, [0.025, 0.975])
    width = hi - lo
    assert ours.ci_low == pytest.approx(lo, abs=0.06 * width)
    assert ours.ci_high == pytest.approx(hi, abs=0.06 * width)


def test_clustered_interval_is_wider_than_naive_for_duplicated_items():
    rng = np.random.default_rng(10)
    base = rng.normal(0.05, 0.3, size=60)
    d = np.repeat(base, 5)  # five identical trials per query
    clusters = np.repeat(np.arange(60), 5)
    naive = bootstrap_deltas(d, seed=0, n_resamples=3000).metrics[0]
    clus = clustered_bootstrap(np.zeros_like(d), d, clusters, seed=0, n_resamples=3000).metrics[0]
    base_only = bootstrap_deltas(base, seed=0, n_resamples=3000).metrics[0]
    w_naive, w_clus, w_base = (
        (naive.ci_high - naive.ci_low),
        (clus.ci_high - clus.ci_low),
        (base_only.ci_high - base_only.ci_low),
    )
    assert w_clus == pytest.approx(w_base, rel=0.08)
    assert w_clus > 1.8 * w_naive


def test_clustered_with_one_cluster_is_undefined():
    r = bootstrap_deltas(np.arange(6.0), clusters=["q1"] * 6, n_resamples=100).metrics[0]
    assert not r.defined and "cluster" in r.reason and r.n_clusters == 1


def test_distribution_is_returned_on_request():
    d = np.random.default_rng(1).normal(size=(50, 2))
    res = bootstrap_deltas(d, n_resamples=300, return_distribution=True)
    assert res.distribution.shape == (300, 2)
    assert np.quantile(res.distribution[:, 0], 0.025) == pytest.approx(res.metrics[0].ci_low)
