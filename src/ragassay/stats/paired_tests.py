"""Paired significance tests: sign-flip randomization, paired t, Wilcoxon signed-rank, exact McNemar, and TOST
equivalence.

All take two paired arms ``a`` and ``b`` (same items, same order) and test the difference B - A; passing
``b=None`` means ``a`` already holds the per-item differences. Pairs with NaN in either arm are left out and
counted in ``n_excluded``. Results are :class:`TestResult` records; ``defined=False`` with a ``reason`` marks
an input on which the test has no answer (for example zero variance), instead of a silent NaN.

References: Smucker, Allan & Carterette (CIKM 2007) for randomization vs t vs bootstrap on IR runs;
McNemar (1947); Schuirmann (1987) for two one-sided tests; Wilcoxon (1945). The spec (§17) lists Wilcoxon among
the anti-patterns for IR evaluation (poor power, false detections): it is here as a named alternative for
readers who must report it, never as the default.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from ragassay.errors import InputError
from ragassay.stats._validate import as_float_vector, as_rng, check_prob, same_length

_CHUNK_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class TestResult:
    """One test on one paired comparison. ``extra`` holds test-specific numbers (df, counts, CI, ...)."""

    __test__ = False  # not a pytest class

    test: str
    statistic: float
    p_value: float
    n: int
    n_excluded: int = 0
    defined: bool = True
    reason: str | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "test": self.test,
            "statistic": self.statistic,
            "p_value": self.p_value,
            "n": self.n,
            "n_excluded": self.n_excluded,
            "defined": self.defined,
            "reason": self.reason,
            **self.extra,
        }


def _paired_diffs(a, b) -> tuple[np.ndarray, int]:
    av = as_float_vector(a, "a")
    if b is None:
        d = av
    else:
        bv = as_float_vector(b, "b")
        same_length(av, bv, "a", "b")
        d = bv - av
    keep = ~np.isnan(d)
    return d[keep], int((~keep).sum())


def sign_flip_test(
    a,
    b=None,
    *,
    n_resamples: int = 10_000,
    seed: int | np.random.Generator | None = 0,
    exact: bool | None = None,
    chunk_size: int = 1024,
) -> TestResult:
    """Paired randomization (sign-flip) test of mean difference zero, two-sided.

    Under H0 each difference is symmetric about 0, so its sign is exchangeable. With T = mean(d) and T*
    the mean after random sign flips, p = (1 + #{|T*| >= |T|}) / (R + 1), never 0. ``exact`` enumerates all
    2**n sign vectors (p = #{|T*| >= |T|} / 2**n, identity included); by default it is used when
    2**n <= n_resamples, as scipy.stats.permutation_test does.
    Edge cases: all differences zero gives p = 1; n = 0 is an InputError.
    """
    d, excluded = _paired_diffs(a, b)
    n = d.size
    if n == 0:
        raise InputError("sign_flip_test: no pair has values in both arms; nothing to test")
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise InputError(f"n_resamples must be a positive integer, got {n_resamples}")
    t_obs = float(d.mean())
    # Relative slack so that sign patterns reproducing |T| up to rounding count as "as extreme".
    thresh = abs(t_obs) * (1 - 1e-12)
    use_exact = (2**n <= n_resamples) if exact is None else bool(exact)
    if use_exact:
        if n > 24:
            raise InputError(
                f"sign_flip_test: exact enumeration of 2**{n} sign vectors is too large; use exact=False"
            )
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        t_star = signs @ d / n
        count = int((np.abs(t_star) >= thresh).sum())
        p = count / signs.shape[0]
        resamples = signs.shape[0]
    else:
        rng = as_rng(seed)
        rows = int(max(1, min(chunk_size, _CHUNK_BYTES // (4 * n))))
        count = 0
        for start in range(0, n_resamples, rows):
            r = min(rows, n_resamples - start)
            s = rng.integers(0, 2, size=(r, n), dtype=np.int8).astype(np.float64) * 2.0 - 1.0
            count += int((np.abs(s @ d / n) >= thresh).sum())
        p = (1.0 + count) / (n_resamples + 1.0)
        resamples = int(n_resamples)
    return TestResult(
        test="sign_flip",
        statistic=t_obs,
        p_value=float(min(1.0, p)),
        n=n,
        n_excluded=excluded,
        extra={"n_resamples": resamples, "exact": use_exact},
    )


def paired_t_test(a, b=None, *, confidence: float = 0.95) -> TestResult:
    """Paired t-test: t = mean(d) / (sd(d) / sqrt(n)), sd with ddof=1, df = n - 1, two-sided p.

    ``extra`` holds df, mean, se and the t-based CI. Undefined (``defined=False``) for n < 2 or when every
    difference is the same value (sd = 0), where t is 0/0 or infinite.
    """
    check_prob(confidence, "confidence")
    d, excluded = _paired_diffs(a, b)
    n = d.size
    if n == 0:
        raise InputError("paired_t_test: no pair has values in both arms; nothing to test")
    mean = float(d.mean())
    if n < 2:
        return TestResult(
            "paired_t", np.nan, np.nan, n, excluded, False, "need at least 2 pairs", {"mean": mean}
        )
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return TestResult(
            "paired_t",
            np.nan,
            np.nan,
            n,
            excluded,
            False,
            f"every difference equals {mean!r}: zero variance, t is undefined",
            {"mean": mean, "df": n - 1},
        )
    se = sd / np.sqrt(n)
    t = mean / se
    df = n - 1
    p = float(2 * sps.t.sf(abs(t), df))
    q = sps.t.ppf(0.5 + confidence / 2, df)
    return TestResult(
        "paired_t",
        float(t),
        p,
        n,
        excluded,
        extra={
            "df": df,
            "mean": mean,
            "se": float(se),
            "ci_low": float(mean - q * se),
            "ci_high": float(mean + q * se),
        },
    )


_WILCOXON_EXACT_MAX_N = 50  # scipy's "auto" switches to the normal approximation above this
_WILCOXON_ENUMERATE_MAX_N = 13  # with ties or zeros, up to 2**13 sign patterns are enumerated (as scipy)


def _signed_rank_null(n: int) -> np.ndarray:
    """P(W+ = w) for w = 0..n(n+1)/2 under H0 with untied ranks 1..n: each rank joins W+ with probability 1/2."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    return counts / 2.0**n


def wilcoxon_test(a, b=None) -> TestResult:
    """Wilcoxon signed-rank test of a zero median difference, two-sided.

    Zero differences are dropped (Wilcoxon's convention), the rest ranked by |d| with average ranks for ties;
    W+ and W- sum the ranks of positive and negative differences and the statistic is min(W+, W-). The p-value
    is exact (the null distribution of W+) for up to 50 pairs with no ties and no zeros; with ties or zeros and
    up to 13 pairs it is exact given the observed ranks (every sign pattern enumerated); otherwise it comes from
    the normal approximation with the tie-corrected variance n(n+1)(2n+1)/24 - sum(t^3 - t)/48 and no
    continuity correction. These are the choices of ``scipy.stats.wilcoxon``'s defaults. Undefined when no
    difference is nonzero.
    """
    d, excluded = _paired_diffs(a, b)
    if d.size == 0:
        raise InputError("wilcoxon_test: no pair has values in both arms; nothing to test")
    zeros = int(np.count_nonzero(d == 0))
    nz = d[d != 0]
    n = nz.size
    extra = {"n_zero": zeros}
    if n == 0:
        return TestResult("wilcoxon", np.nan, np.nan, int(d.size), excluded, False,
                          "every difference is zero: no signed rank to test", extra)
    ranks = sps.rankdata(np.abs(nz))
    w_plus = float(ranks[nz > 0].sum())
    w_minus = float(ranks[nz < 0].sum())
    _, tie_counts = np.unique(np.abs(nz), return_counts=True)
    ties = bool((tie_counts > 1).any())
    if d.size <= _WILCOXON_EXACT_MAX_N and not ties and not zeros:
        pmf = _signed_rank_null(n)
        w = int(round(w_plus))
        p = min(1.0, 2.0 * min(pmf[: w + 1].sum(), pmf[w:].sum()))
        method = "exact"
    elif d.size <= _WILCOXON_ENUMERATE_MAX_N:
        # ties or zeros: the null of W+ given these ranks, by enumerating every sign pattern of the nonzero ones
        signs = np.array(list(itertools.product((0.0, 1.0), repeat=n)))
        w_star = signs @ ranks
        slack = 1e-12 * max(1.0, abs(w_plus))
        p = min(1.0, 2.0 * min(float(np.mean(w_star >= w_plus - slack)), float(np.mean(w_star <= w_plus + slack))))
        method = "exact_conditional"
    else:
        mean = n * (n + 1) / 4.0
        var = n * (n + 1) * (2 * n + 1) / 24.0 - float(((tie_counts**3) - tie_counts).sum()) / 48.0
        if var <= 0:
            return TestResult("wilcoxon", min(w_plus, w_minus), np.nan, n, excluded, False,
                              "all nonzero differences tie in magnitude with zero variance", extra)
        z = (w_plus - mean) / np.sqrt(var)
        p = float(2.0 * sps.norm.sf(abs(z)))
        method = "approx"
        extra["z"] = float(z)
    extra.update({"w_plus": w_plus, "w_minus": w_minus, "method": method})
    return TestResult("wilcoxon", min(w_plus, w_minus), float(p), n, excluded, extra=extra)


def mcnemar_exact(a, b) -> TestResult:
    """Exact McNemar test for paired binary outcomes (1 = success, 0 = failure).

    Only discordant pairs carry information: b01 = #(A fails, B succeeds) and b10 = #(A succeeds, B fails).
    Under H0 b01 ~ Binomial(b01 + b10, 1/2); p = min(1, 2 * P[X <= min(b01, b10)]). No discordant pair gives
    p = 1 (no evidence either way). NaN pairs are excluded; any other value than 0/1 is an InputError.
    """
    av = as_float_vector(a, "a")
    bv = as_float_vector(b, "b")
    same_length(av, bv, "a", "b")
    keep = ~(np.isnan(av) | np.isnan(bv))
    av, bv = av[keep], bv[keep]
    for name, v in (("a", av), ("b", bv)):
        bad = ~np.isin(v, (0.0, 1.0))
        if bad.any():
            raise InputError(
                f"mcnemar_exact: {name} must be binary 0/1, found {np.unique(v[bad])[:5].tolist()}"
            )
    if av.size == 0:
        raise InputError("mcnemar_exact: no pair has values in both arms; nothing to test")
    b01 = int(((av == 0) & (bv == 1)).sum())
    b10 = int(((av == 1) & (bv == 0)).sum())
    nd = b01 + b10
    p = 1.0 if nd == 0 else float(min(1.0, 2.0 * sps.binom.cdf(min(b01, b10), nd, 0.5)))
    return TestResult(
        "mcnemar_exact",
        float(min(b01, b10)),
        p,
        int(av.size),
        int((~keep).sum()),
        extra={"b_wins": b01, "b_losses": b10, "discordant": nd},
    )


def tost(a, b=None, *, margin, alpha: float = 0.05) -> TestResult:
    """Two one-sided t-tests for equivalence of the paired mean difference within ``margin``.

    ``margin`` is delta > 0 for the interval (-delta, +delta) or a (low, high) pair with low < high.
    H0_low: mu <= low (p_low from t = (mean - low)/se), H0_high: mu >= high (p_high from (mean - high)/se).
    Equivalent iff max(p_low, p_high) < alpha, which is the same as the (1 - 2 alpha) t interval lying inside
    (low, high). ``statistic`` is the larger p. A non-significant difference test is NOT evidence of
    equivalence: only this test, with a margin declared before looking, supports "no material change".
    Undefined for n < 2 or zero variance.
    """
    check_prob(alpha, "alpha")
    if alpha >= 0.5:
        raise InputError(f"alpha must be below 0.5 for a (1 - 2 alpha) interval, got {alpha}")
    if np.ndim(margin) == 0:
        low, high = -float(margin), float(margin)
    else:
        if len(margin) != 2:
            raise InputError(f"margin must be a number or a (low, high) pair, got {margin!r}")
        low, high = float(margin[0]), float(margin[1])
    if not (low < high) or not np.isfinite([low, high]).all():
        raise InputError(
            f"margin must give low < high (finite); got ({low}, {high}); a scalar margin must be > 0"
        )
    d, excluded = _paired_diffs(a, b)
    n = d.size
    if n == 0:
        raise InputError("tost: no pair has values in both arms; nothing to test")
    mean = float(d.mean())
    base = {"low": low, "high": high, "alpha": alpha, "mean": mean}
    if n < 2:
        return TestResult("tost", np.nan, np.nan, n, excluded, False, "need at least 2 pairs", base)
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return TestResult("tost", np.nan, np.nan, n, excluded, False, "zero variance of differences", base)
    se = sd / np.sqrt(n)
    df = n - 1
    p_low = float(sps.t.sf((mean - low) / se, df))
    p_high = float(sps.t.cdf((mean - high) / se, df))
    q = sps.t.ppf(1 - alpha, df)
    p = max(p_low, p_high)
    return TestResult(
        "tost",
        p,
        p,
        n,
        excluded,
        extra={
            **base,
            "p_low": p_low,
            "p_high": p_high,
            "equivalent": bool(p < alpha),
            "df": df,
            "se": float(se),
            "ci_level": 1 - 2 * alpha,
            "ci_low": float(mean - q * se),
            "ci_high": float(mean + q * se),
        },
    )
