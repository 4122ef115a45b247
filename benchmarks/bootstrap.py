"""Paired bootstrap speed: ragassay.stats.bootstrap_deltas vs scipy.stats.bootstrap, same data, same process.

Setup: n = 10,000 paired items, 20 metrics, 10,000 resamples, 95% percentile intervals. scipy runs once
per metric (paired=True, vectorized=True, method='percentile'); ragassay does all 20 metrics in one pass of
(resample-count matrix) @ (difference matrix). Prints both timings, the speed ratio and the largest CI
endpoint difference next to the Monte-Carlo standard error of an endpoint.

    python benchmarks/bootstrap.py [--n 10000] [--metrics 20] [--resamples 10000]

``--tiny`` runs n = 500, 3 metrics, 500 resamples: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from ragassay.stats import bootstrap_deltas


def make_data(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Retrieval-like scores: per-item values in [0, 1], the two systems correlated item by item."""
    rng = np.random.default_rng(seed)
    base = rng.beta(2, 2, size=(n, m))
    a = np.clip(base + rng.normal(0, 0.1, size=(n, m)), 0, 1)
    b = np.clip(base + rng.normal(0.01, 0.1, size=(n, m)), 0, 1)
    return a, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--metrics", type=int, default=20)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500, help="scipy batch size (bounds its memory)")
    ap.add_argument("--tiny", action="store_true", help="n = 500, 3 metrics, 500 resamples (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.n, args.metrics, args.resamples = 500, 3, 500
    a, b = make_data(args.n, args.metrics)

    # Median of three runs: ours takes seconds, so one load spike from a shared machine would dominate it,
    # while scipy's minute-long run averages such spikes out by itself.
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        ours = bootstrap_deltas(b - a, n_resamples=args.resamples, seed=1)
        times.append(time.perf_counter() - t0)
    t_ours = float(np.median(times))

    def mean_diff(x, y, axis=-1):
        return np.mean(y - x, axis=axis)

    ref_lo, ref_hi = [], []
    t0 = time.perf_counter()
    for j in range(args.metrics):
        res = stats.bootstrap(
            (a[:, j], b[:, j]),
            mean_diff,
            paired=True,
            vectorized=True,
            n_resamples=args.resamples,
            batch=args.batch,
            method="percentile",
            random_state=np.random.default_rng(100 + j),
        )
        ref_lo.append(res.confidence_interval.low)
        ref_hi.append(res.confidence_interval.high)
    t_scipy = time.perf_counter() - t0

    lo = np.array([r.ci_low for r in ours])
    hi = np.array([r.ci_high for r in ours])
    max_diff = float(max(np.abs(lo - ref_lo).max(), np.abs(hi - ref_hi).max()))
    # Monte-Carlo SE of a percentile endpoint: sqrt(q(1-q)/R) / f(endpoint), with the density f estimated
    # from ragassay's own bootstrap distribution by a central difference of its quantiles.
    dist = bootstrap_deltas(b - a, n_resamples=args.resamples, seed=2, return_distribution=True).distribution
    mc_se = 0.0
    for q in (0.025, 0.975):
        h = 0.01
        spread = np.quantile(dist, q + h, axis=0) - np.quantile(dist, q - h, axis=0)
        mc_se = max(mc_se, float((np.sqrt(q * (1 - q) / args.resamples) * spread / (2 * h)).max()))
    print(f"data: n={args.n} items x {args.metrics} metrics, {args.resamples} resamples, 95% percentile CI")
    print(f"ragassay bootstrap_deltas (all metrics at once): {t_ours:8.3f} s  (median of 3)")
    print(f"scipy.stats.bootstrap (per metric, paired):      {t_scipy:8.3f} s")
    print(f"speed ratio scipy / ragassay:                    {t_scipy / t_ours:8.1f}x")
    se_diff = np.sqrt(2) * mc_se
    print(
        f"max |CI endpoint difference| over {2 * args.metrics} endpoints: {max_diff:.2e} = "
        f"{max_diff / se_diff:.1f} x the Monte-Carlo SE of a difference of two independent runs ({se_diff:.2e})"
    )


if __name__ == "__main__":
    main()
