"""Wilcoxon signed-rank against scipy, Fleiss' kappa and the Agresti-Coull / Jeffreys intervals against
statsmodels."""

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss
from statsmodels.stats.proportion import proportion_confint

from ragassay.errors import InputError
from ragassay.stats import agresti_coull_interval, fleiss_kappa, jeffreys_interval, wilcoxon_test


@pytest.mark.parametrize("seed", range(12))
def test_wilcoxon_matches_scipy_exact_and_approximate(seed):
    rng = np.random.default_rng(seed)
    n = [8, 20, 45, 80, 12, 60][seed % 6]
    a = rng.random(n)
    if seed % 3 == 0:  # ties and zeros, as per-query metric differences have: normal approximation
        b = a + rng.choice([-0.5, 0.0, 0.0, 0.25, 0.5], size=n)
    else:
        b = a + rng.normal(0.05, 0.3, size=n)
    ours = wilcoxon_test(a, b)
    ref = sps.wilcoxon(b - a)
    assert ours.statistic == pytest.approx(ref.statistic, abs=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)
    assert ours.extra["method"] == ("exact" if n <= 50 and seed % 3 else "exact_conditional" if n <= 13 else "approx")


def test_wilcoxon_all_zero_is_undefined_and_nan_pairs_are_excluded():
    r = wilcoxon_test([0.1, 0.2, np.nan], [0.1, 0.2, 0.5])
    assert not r.defined and math.isnan(r.p_value) and r.n_excluded == 1


def test_fleiss_kappa_matches_statsmodels_and_fleiss_1971_example():
    # Fleiss (1971) / Wikipedia worked table: 10 items, 14 raters, 5 categories, kappa = 0.210
    table = np.array([[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                      [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]])
    assert round(fleiss_kappa(table), 3) == 0.210
    rng = np.random.default_rng(1)
    for _ in range(20):
        n_items, raters, cats = int(rng.integers(5, 40)), int(rng.integers(2, 7)), int(rng.integers(2, 5))
        t = np.zeros((n_items, cats), dtype=int)
        for i in range(n_items):
            np.add.at(t[i], rng.integers(0, cats, size=raters), 1)
        assert fleiss_kappa(t) == pytest.approx(sm_fleiss(t), abs=1e-12)
    with pytest.raises(InputError, match="same number of ratings"):
        fleiss_kappa([[2, 1], [1, 1]])


@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_agresti_coull_and_jeffreys_match_statsmodels(conf):
    for n in (1, 5, 30, 250):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            for ours, method in ((agresti_coull_interval, "agresti_coull"), (jeffreys_interval, "jeffreys")):
                lo, hi = ours(k, n, conf)
                rlo, rhi = proportion_confint(k, n, alpha=1 - conf, method=method)
                if method == "jeffreys":  # Brown, Cai & DasGupta's boundary rule; statsmodels keeps the quantile
                    rlo, rhi = (0.0 if k == 0 else rlo), (1.0 if k == n else rhi)
                assert (lo, hi) == (pytest.approx(rlo, abs=1e-12), pytest.approx(rhi, abs=1e-12)), (k, n, method)
