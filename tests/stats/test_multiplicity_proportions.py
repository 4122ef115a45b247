"""Adjusted p-values vs statsmodels.multipletests; proportion intervals vs statsmodels.proportion_confint."""

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from ragassay.errors import InputError
from ragassay.stats import (
    adjust_pvalues,
    clopper_pearson_interval,
    paired_binary_se,
    reject,
    wilson_interval,
    zero_of_n_upper,
)

METHODS = [("bonferroni", "bonferroni"), ("holm", "holm"), ("bh", "fdr_bh")]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("ours, theirs", METHODS)
def test_adjusted_pvalues_match_statsmodels(seed, ours, theirs):
    rng = np.random.default_rng(seed)
    p = np.r_[rng.uniform(0, 0.05, 5), rng.uniform(0, 1, 20)]
    p[3] = p[7]  # a tie
    rng.shuffle(p)
    _, ref, _, _ = multipletests(p, method=theirs)
    np.testing.assert_allclose(adjust_pvalues(p, ours), ref, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(reject(p, 0.05, ours), multipletests(p, alpha=0.05, method=theirs)[0])


@pytest.mark.parametrize("ours, theirs", METHODS)
def test_nan_pvalues_pass_through_and_do_not_count(ours, theirs):
    p = np.array([0.01, np.nan, 0.04, 0.2, np.nan, 0.03])
    adj = adjust_pvalues(p, ours)
    assert np.isnan(adj[[1, 4]]).all()
    ok = ~np.isnan(p)
    np.testing.assert_allclose(adj[ok], multipletests(p[ok], method=theirs)[1], rtol=1e-12)
    assert not reject(p, 0.05, ours)[[1, 4]].any()


def test_adjust_edge_cases():
    assert adjust_pvalues([], "holm").size == 0
    assert np.isnan(adjust_pvalues([np.nan], "bh")).all()
    assert adjust_pvalues([0.02], "bonferroni")[0] == 0.02
    with pytest.raises(InputError, match="method"):
        adjust_pvalues([0.1], "sidak")
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        adjust_pvalues([0.1, 1.5], "holm")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wilson_and_clopper_pearson_match_statsmodels(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.integers(1, 300))
        k = int(rng.integers(0, n + 1))
        conf = float(rng.choice([0.9, 0.95, 0.99]))
        w = wilson_interval(k, n, conf)
        cp = clopper_pearson_interval(k, n, conf)
        np.testing.assert_allclose(w, proportion_confint(k, n, alpha=1 - conf, method="wilson"), atol=1e-12)
        np.testing.assert_allclose(cp, proportion_confint(k, n, alpha=1 - conf, method="beta"), atol=1e-10)


def test_interval_endpoints_at_extremes():
    assert clopper_pearson_interval(0, 20)[0] == 0.0
    assert clopper_pearson_interval(20, 20)[1] == 1.0
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and 0 < hi < 0.2


def test_zero_of_100_upper_bound_is_2_951305_percent():
    assert zero_of_n_upper(100) * 100 == pytest.approx(2.951305, abs=5e-7)
    # It is the one-sided Clopper-Pearson bound at k = 0 (two-sided CP at confidence 1 - 2 alpha).
    assert zero_of_n_upper(100) == pytest.approx(clopper_pearson_interval(0, 100, 0.90)[1], rel=1e-10)


def test_paired_binary_se_equals_se_of_paired_differences():
    for u, v, n in [(34, 14, 200), (30, 18, 200), (5, 0, 10), (0, 0, 7)]:
        d = np.r_[np.ones(u), -np.ones(v), np.zeros(n - u - v)]
        assert paired_binary_se(u, v, n) == pytest.approx(d.std() / np.sqrt(n), abs=1e-15)


@pytest.mark.parametrize("k, n", [(3, 0), (-1, 5), (6, 5), (1.5, 5)])
def test_bad_counts_raise(k, n):
    with pytest.raises(InputError):
        wilson_interval(k, n)


def test_bad_paired_counts_raise():
    with pytest.raises(InputError):
        paired_binary_se(5, 6, 10)
    with pytest.raises(InputError):
        zero_of_n_upper(0)
