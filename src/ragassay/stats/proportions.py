"""Intervals for a binomial proportion and the paired-binary standard error.

References: Wilson (1927); Clopper & Pearson (1934); Agresti & Coull (1998); Brown, Cai & DasGupta (2001)
for the Jeffreys interval; Newcombe (1998) for the comparison of both;
the zero-of-n bound is the Clopper-Pearson one-sided upper limit at k = 0 ("rule of three" for large n).
"""

from __future__ import annotations

import math

from scipy.stats import beta, norm

from ragassay.errors import InputError
from ragassay.stats._validate import check_prob


def _check_counts(k: int, n: int) -> tuple[int, int]:
    if int(n) != n or n < 1:
        raise InputError(f"n must be a positive integer count of trials, got {n}")
    if int(k) != k or not 0 <= k <= n:
        raise InputError(f"successes must be an integer in [0, n={n}], got {k}")
    return int(k), int(n)


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval: (p + z^2/2n -/+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), p = k/n.

    Stays inside [0, 1] and keeps sensible coverage at k = 0 or k = n, unlike the Wald interval.
    """
    check_prob(confidence, "confidence")
    k, n = _check_counts(k, n)
    z = norm.ppf(0.5 + confidence / 2)
    p = k / n
    den = 1 + z * z / n
    center = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return float(max(0.0, center - half)), float(min(1.0, center + half))


def clopper_pearson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval from beta quantiles: [B(a/2; k, n-k+1), B(1-a/2; k+1, n-k)],
    with 0 at k = 0 and 1 at k = n. Conservative: coverage is at least ``confidence``."""
    check_prob(confidence, "confidence")
    k, n = _check_counts(k, n)
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def agresti_coull_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Agresti-Coull interval: add z^2 pseudo-trials, half successes: n~ = n + z^2, p~ = (k + z^2/2) / n~, then
    the Wald interval p~ -/+ z sqrt(p~(1 - p~)/n~), clipped to [0, 1]."""
    check_prob(confidence, "confidence")
    k, n = _check_counts(k, n)
    z = norm.ppf(0.5 + confidence / 2)
    nt = n + z * z
    pt = (k + z * z / 2) / nt
    half = z * math.sqrt(pt * (1 - pt) / nt)
    return float(max(0.0, pt - half)), float(min(1.0, pt + half))


def jeffreys_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Jeffreys interval: the equal-tailed interval of the Beta(k + 1/2, n - k + 1/2) posterior, with the lower
    end 0 at k = 0 and the upper end 1 at k = n (Brown, Cai & DasGupta 2001)."""
    check_prob(confidence, "confidence")
    k, n = _check_counts(k, n)
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k + 0.5, n - k + 0.5))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 0.5, n - k + 0.5))
    return lo, hi


def zero_of_n_upper(n: int, alpha: float = 0.05) -> float:
    """One-sided (1 - alpha) upper bound on the rate when 0 of n independent trials succeeded: 1 - alpha^(1/n).

    Zero observed events is not a zero rate: 0 of 100 still allows about 2.95% at alpha = 0.05.
    """
    check_prob(alpha, "alpha")
    if int(n) != n or n < 1:
        raise InputError(f"n must be a positive integer count of trials, got {n}")
    return 1.0 - alpha ** (1.0 / int(n))


def paired_binary_se(wins: int, losses: int, n: int) -> float:
    """Standard error of the difference of two paired proportions from discordant counts:
    sqrt((u + v) - (u - v)^2 / n) / n with u wins, v losses over n pairs. Depends only on discordance,
    not on the two marginal accuracies."""
    if int(n) != n or n < 1:
        raise InputError(f"n must be a positive integer, got {n}")
    if min(wins, losses) < 0 or wins + losses > n or int(wins) != wins or int(losses) != losses:
        raise InputError(
            f"wins and losses must be non-negative integers with wins + losses <= n; got {wins}, {losses}, n={n}"
        )
    u, v = int(wins), int(losses)
    return math.sqrt(max(0.0, (u + v) - (u - v) ** 2 / n)) / n
