"""stats.power takes its normal quantiles and CDF from scipy.special (ndtri, ndtr) rather than scipy.stats.norm,
so `compare` and `report` do not load scipy.stats: every figure must be the one scipy.stats.norm gives, bit for
bit, and importing the module must not load scipy.stats."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
from scipy.stats import norm

from ragassay.stats.power import ci_width_curve, mde_paired, n_for_mde, power_paired

ALPHAS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 0.9, 0.999)
POWERS = (0.01, 0.5, 0.8, 0.9, 0.95, 0.99, 0.9999)


def _z_sum_scipy_stats(alpha: float, power: float) -> float:
    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power))


def test_mde_and_n_match_scipy_stats_norm_bit_for_bit():
    for alpha in ALPHAS:
        for power in POWERS:
            for n, sd in ((1, 0.0), (2, 0.3), (137, 0.17), (100_000, 0.41)):
                want = _z_sum_scipy_stats(alpha, power) * sd / math.sqrt(n)
                assert mde_paired(n, sd, alpha=alpha, power=power) == want
            want_n = max(1, math.ceil(round((_z_sum_scipy_stats(alpha, power) * 0.3 / 0.02) ** 2, 9)))
            assert n_for_mde(0.02, 0.3, alpha=alpha, power=power) == want_n


def test_power_matches_scipy_stats_norm_bit_for_bit():
    for alpha in ALPHAS:
        z = norm.ppf(1 - alpha / 2)
        for n, delta, sd in ((1, 0.0, 1.0), (50, 0.05, 0.3), (5_000, -0.01, 0.2), (10**6, 0.5, 0.01)):
            shift = abs(delta) * math.sqrt(n) / sd
            want = float(norm.cdf(shift - z) + norm.cdf(-shift - z))
            assert power_paired(n, delta, sd, alpha=alpha) == want


def test_ci_width_normal_matches_scipy_stats_norm_bit_for_bit():
    d = np.random.default_rng(3).normal(0.01, 0.2, 400)
    sd = float(d.std(ddof=1))
    for conf in (0.5, 0.9, 0.95, 0.99):
        pts = ci_width_curve(d, [10, 400], confidence=conf, n_resamples=200, seed=1)
        z = norm.ppf(0.5 + conf / 2)
        assert [p.width_normal for p in pts] == [float(2 * z * sd / math.sqrt(n)) for n in (10, 400)]


def test_importing_power_and_compare_does_not_load_scipy_stats():
    code = ("import sys, ragassay.stats.power, ragassay.analysis.compare; "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
