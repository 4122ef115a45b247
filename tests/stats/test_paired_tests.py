"""Sign-flip, paired t, exact McNemar and TOST against scipy and statsmodels."""

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.weightstats import ttost_paired

from ragassay.errors import InputError
from ragassay.stats import mcnemar_exact, paired_t_test, sign_flip_test, tost


def mean_diff(x, y, axis=-1):
    return np.mean(y - x, axis=axis)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sign_flip_exact_matches_scipy_permutation_test(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=11)
    b = a + rng.normal(0.3, 1.0, size=11)
    ours = sign_flip_test(a, b)
    ref = stats.permutation_test(
        (a, b), mean_diff, permutation_type="samples", vectorized=True, n_resamples=10_000
    )
    assert ours.extra["exact"] and ours.extra["n_resamples"] == 2**11
    assert ours.p_value == pytest.approx(ref.pvalue, abs=1e-12)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_sign_flip_randomized_matches_scipy_within_mc_error(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=60)
    b = a + rng.normal(0.25, 1.0, size=60)
    reps = 20_000
    ours = sign_flip_test(a, b, n_resamples=reps, seed=seed)
    ref = stats.permutation_test(
        (a, b),
        mean_diff,
        permutation_type="samples",
        vectorized=True,
        n_resamples=reps,
        random_state=np.random.default_rng(seed + 50),
    )
    sd = np.sqrt(ref.pvalue * (1 - ref.pvalue) / reps)
    assert not ours.extra["exact"]
    assert ours.p_value == pytest.approx(ref.pvalue, abs=5 * np.sqrt(2) * sd + 1e-4)


def test_sign_flip_p_value_never_zero():
    d = np.linspace(1, 2, 40)
    r = sign_flip_test(d, n_resamples=999, seed=0)
    assert r.p_value == pytest.approx(1 / 1000)


def test_sign_flip_all_ties_gives_p_one_and_excludes_nan():
    r = sign_flip_test(np.r_[np.zeros(30), np.nan], n_resamples=500)
    assert r.p_value == 1.0 and r.n == 30 and r.n_excluded == 1


def test_sign_flip_single_pair_is_exact():
    r = sign_flip_test([0.5])
    assert r.extra["exact"] and r.p_value == 1.0  # both sign vectors are as extreme


def test_sign_flip_rejects_empty_and_mismatch():
    with pytest.raises(InputError, match="nothing to test"):
        sign_flip_test([np.nan, np.nan])
    with pytest.raises(InputError, match="paired"):
        sign_flip_test([1.0, 2.0], [1.0])
    with pytest.raises(InputError, match="too large"):
        sign_flip_test(np.arange(30.0), exact=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paired_t_matches_scipy_ttest_rel(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=35)
    b = a + rng.normal(0.2, 0.7, size=35)
    ours = paired_t_test(a, b)
    ref = stats.ttest_rel(b, a)
    ci = ref.confidence_interval(0.95)
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert ours.extra["df"] == ref.df
    assert ours.extra["ci_low"] == pytest.approx(ci.low, rel=1e-10)
    assert ours.extra["ci_high"] == pytest.approx(ci.high, rel=1e-10)


def test_paired_t_degenerate_cases_are_undefined_with_reason():
    one = paired_t_test([0.3], [0.5])
    assert not one.defined and "at least 2" in one.reason
    const = paired_t_test(np.zeros(10), np.full(10, 0.1))
    assert not const.defined and "zero variance" in const.reason
    ties = paired_t_test(np.ones(10), np.ones(10))
    assert not ties.defined and np.isnan(ties.p_value)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_mcnemar_exact_matches_statsmodels_and_binomtest(seed):
    rng = np.random.default_rng(seed)
    a = (rng.random(80) < 0.6).astype(int)
    b = np.where(rng.random(80) < 0.2, 1 - a, a)
    ours = mcnemar_exact(a, b)
    b01 = int(((a == 0) & (b == 1)).sum())
    b10 = int(((a == 1) & (b == 0)).sum())
    table = [[int(((a == 0) & (b == 0)).sum()), b01], [b10, int(((a == 1) & (b == 1)).sum())]]
    ref = mcnemar(table, exact=True)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-12)
    if b01 + b10:
        assert ours.p_value == pytest.approx(stats.binomtest(b01, b01 + b10, 0.5).pvalue, rel=1e-12)
    assert (ours.extra["b_wins"], ours.extra["b_losses"]) == (b01, b10)


def test_mcnemar_without_discordant_pairs_is_p_one():
    r = mcnemar_exact([1, 0, 1], [1, 0, 1])
    assert r.p_value == 1.0 and r.extra["discordant"] == 0


def test_mcnemar_rejects_non_binary():
    with pytest.raises(InputError, match="binary"):
        mcnemar_exact([0, 1, 2], [0, 1, 1])


@pytest.mark.parametrize("seed, margin", [(0, 0.3), (1, 0.1), (2, (-0.2, 0.5)), (3, 0.05)])
def test_tost_matches_statsmodels_ttost_paired(seed, margin):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=50)
    b = a + rng.normal(0.02, 0.4, size=50)
    ours = tost(a, b, margin=margin)
    low, high = (-margin, margin) if np.ndim(margin) == 0 else margin
    p, lower, upper = ttost_paired(b, a, low, high)
    assert ours.p_value == pytest.approx(p, rel=1e-10)
    assert ours.extra["p_low"] == pytest.approx(lower[1], rel=1e-10)
    assert ours.extra["p_high"] == pytest.approx(upper[1], rel=1e-10)
    # Equivalence at alpha iff the (1 - 2 alpha) CI sits inside the margin.
    inside = low < ours.extra["ci_low"] and ours.extra["ci_high"] < high
    assert ours.extra["equivalent"] == inside == (p < 0.05)


def test_null_difference_is_not_equivalence():
    rng = np.random.default_rng(11)
    a = rng.normal(size=20)
    b = a + rng.normal(0.0, 1.0, size=20)
    assert paired_t_test(a, b).p_value > 0.05  # no detectable difference ...
    assert not tost(a, b, margin=0.1).extra["equivalent"]  # ... and still not shown equivalent


def test_tost_rejects_bad_margin_and_alpha():
    with pytest.raises(InputError, match="margin"):
        tost([0.1, 0.2, 0.3], margin=0)
    with pytest.raises(InputError, match="margin"):
        tost([0.1, 0.2, 0.3], margin=(0.2, -0.2))
    with pytest.raises(InputError, match="alpha"):
        tost([0.1, 0.2, 0.3], margin=0.1, alpha=0.6)
    assert not tost([0.1], margin=0.5).defined
