"""Power and minimum detectable effect (MDE) for paired comparisons.

For a paired design the noise is the standard deviation of the per-item difference, sigma_d, not of the
scores: MDE = (z_{1-alpha/2} + z_{power}) * sigma_d / sqrt(n) (two-sided normal approximation), and the
inverse n = ceil(((z_{1-alpha/2} + z_{power}) * sigma_d / delta)^2). Quantiles are exact normal quantiles.
Reference: Cohen, *Statistical Power Analysis for the Behavioral Sciences* (1988), ch. 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from ragassay.errors import InputError
from ragassay.stats._validate import as_float_vector, as_rng, check_prob

# Normal quantiles and CDF from scipy.special: scipy.stats.norm.ppf and .cdf call these very functions (times
# scale 1 plus loc 0, which changes no bit), and loading scipy.stats costs ~1 s that `compare` and `report`
# would pay for nothing else.


def _z_sum(alpha: float, power: float) -> float:
    check_prob(alpha, "alpha")
    check_prob(power, "power")
    return float(ndtri(1 - alpha / 2) + ndtri(power))


def sigma_d(diffs, *, ddof: int = 1) -> float:
    """Standard deviation of per-item differences; NaN entries are ignored.

    ``ddof=1`` (sample SD) by default; ``ddof=0`` reproduces ``numpy.std``. Needs at least ddof + 1 finite
    values, else InputError.
    """
    d = as_float_vector(diffs, "diffs")
    d = d[~np.isnan(d)]
    if d.size <= ddof:
        raise InputError(f"sigma_d: need at least {ddof + 1} non-NaN differences, got {d.size}")
    return float(np.std(d, ddof=ddof))


def mde_paired(n: int, sigma_d: float, alpha: float = 0.05, power: float = 0.80) -> float:
    """Smallest true mean difference detected with probability ``power`` by a two-sided level-``alpha`` test
    on ``n`` pairs: (z_{1-alpha/2} + z_power) * sigma_d / sqrt(n)."""
    if int(n) != n or n < 1:
        raise InputError(f"n must be a positive integer, got {n}")
    if not (sigma_d >= 0) or not math.isfinite(sigma_d):
        raise InputError(f"sigma_d must be a finite number >= 0, got {sigma_d}")
    return _z_sum(alpha, power) * float(sigma_d) / math.sqrt(n)


def n_for_mde(delta: float, sigma_d: float, alpha: float = 0.05, power: float = 0.80) -> int:
    """Smallest n whose MDE is at most ``delta``: ceil(((z_{1-alpha/2} + z_power) * sigma_d / delta)^2), >= 1."""
    if not (delta > 0) or not math.isfinite(delta):
        raise InputError(f"the target effect (mde) must be a finite number > 0, got {delta}")
    if not (sigma_d >= 0) or not math.isfinite(sigma_d):
        raise InputError(f"sigma_d must be a finite number >= 0, got {sigma_d}")
    raw = (_z_sum(alpha, power) * float(sigma_d) / float(delta)) ** 2
    # Round away float noise of the last ulp before the ceiling so an exact integer is not bumped up.
    return max(1, math.ceil(round(raw, 9)))


def power_paired(n: int, delta: float, sigma_d: float, alpha: float = 0.05) -> float:
    """Power of the two-sided normal test to detect a true mean difference ``delta`` with ``n`` pairs:
    Phi(|delta| sqrt(n) / sigma_d - z_{1-alpha/2}) + Phi(-|delta| sqrt(n) / sigma_d - z_{1-alpha/2})."""
    check_prob(alpha, "alpha")
    if int(n) != n or n < 1:
        raise InputError(f"n must be a positive integer, got {n}")
    if not (sigma_d > 0):
        raise InputError(f"sigma_d must be > 0, got {sigma_d}")
    z = ndtri(1 - alpha / 2)
    shift = abs(delta) * math.sqrt(n) / sigma_d
    return float(ndtr(shift - z) + ndtr(-shift - z))


@dataclass(frozen=True)
class CIWidthPoint:
    n: int
    width_bootstrap: float
    width_normal: float

    def to_dict(self) -> dict:
        return {"n": self.n, "width_bootstrap": self.width_bootstrap, "width_normal": self.width_normal}


def ci_width_curve(
    diffs,
    ns: Sequence[int],
    *,
    confidence: float = 0.95,
    n_resamples: int = 2_000,
    seed: int | np.random.Generator | None = 0,
) -> tuple[CIWidthPoint, ...]:
    """Expected CI width of the mean difference if the set had ``n`` items, for each n in ``ns``.

    For each n, draws ``n_resamples`` sets of n items with replacement from the observed differences (an
    n-out-of-N bootstrap) and reports the central ``confidence`` spread of their means, next to the normal
    width 2 z_{1-(1-c)/2} sigma_d / sqrt(n). Use it to see how many queries a target width costs.
    """
    check_prob(confidence, "confidence")
    d = as_float_vector(diffs, "diffs")
    d = d[~np.isnan(d)]
    if d.size < 2:
        raise InputError(f"ci_width_curve: need at least 2 non-NaN differences, got {d.size}")
    ns = [int(x) for x in ns]
    if not ns or min(ns) < 1:
        raise InputError(f"ns must be a non-empty list of positive sizes, got {ns}")
    rng = as_rng(seed)
    z = ndtri(0.5 + confidence / 2)
    sd = float(d.std(ddof=1))
    alpha = (1 - confidence) / 2
    out = []
    big = d.size
    p = np.full(big, 1.0 / big)
    for n in ns:
        # Multinomial counts over the N observed items: each row is one simulated set of n items.
        means = np.empty(n_resamples)
        rows = max(1, min(n_resamples, (64 * 1024 * 1024) // (8 * big)))
        for start in range(0, n_resamples, rows):
            r = min(rows, n_resamples - start)
            w = rng.multinomial(n, p, size=r).astype(np.float64)
            means[start : start + r] = w @ d / n
        lo, hi = np.quantile(means, [alpha, 1 - alpha])
        out.append(
            CIWidthPoint(n=n, width_bootstrap=float(hi - lo), width_normal=float(2 * z * sd / math.sqrt(n)))
        )
    return tuple(out)
