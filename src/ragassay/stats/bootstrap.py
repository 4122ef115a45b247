"""Paired and clustered bootstrap of mean differences for many metrics at once.

The resampling is matrix algebra: a chunk of resamples is a (chunk x units) matrix ``W`` of multinomial
counts (how often each unit was drawn), and the resampled means of every metric are ``(W @ S) / (W @ c)``
where ``S`` holds per-unit sums of the differences and ``c`` per-unit item counts. For an item bootstrap a
unit is one item (``c = 1``); for a clustered bootstrap a unit is a cluster. Memory is bounded by the chunk,
so 100,000 items run in well under 2 GB.

Exact by construction: ``S`` is centered and rounded to integer multiples of a power of two small enough
that every partial sum of ``W @ S`` is an integer below 2**53, so the float64 product is exact whatever
order BLAS sums in. Results are therefore bit-identical across chunk sizes, thread counts and CPUs (SIMD
kernels); the rounding moves a resampled mean by at most k * 2**-54 of the largest centered unit sum.

Reference: Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13-14 (percentile and BCa
intervals), ch. 16 (bootstrap tests); Field & Welsh (2007) for the cluster bootstrap.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import ndtr, ndtri

from ragassay.errors import InputError
from ragassay.stats._validate import as_float_matrix, as_rng, check_prob, metric_names, same_length

Method = Literal["percentile", "bca"]

# Bytes allowed for one chunk of resample draws + weights; keeps n = 100,000 far below 2 GB. 64 MB, not
# 256: larger chunks cost no less CPU (measured at 100,000 units) but held 130 MB more while the report reads
# traces beside its comparisons. The draw stream and every result do not depend on it.
_CHUNK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class MetricDelta:
    """Bootstrap summary of the paired difference (B - A) for one metric.

    ``defined`` is False when no interval can be formed (all pairs NaN, fewer than two items or clusters);
    ``reason`` then says why, and the interval and p-value are NaN on purpose.
    """

    metric: str
    n: int
    n_excluded: int
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    wins: int
    losses: int
    ties: int
    n_clusters: int | None = None
    defined: bool = True
    reason: str | None = None

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "n": self.n,
            "n_excluded": self.n_excluded,
            "n_clusters": self.n_clusters,
            "delta": self.delta,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_value": self.p_value,
            "wins": self.wins,
            "losses": self.losses,
            "ties": self.ties,
            "defined": self.defined,
            "reason": self.reason,
        }


@dataclass(frozen=True, eq=False)
class BootstrapResult:
    """Per-metric results plus the settings that produced them (enough to reproduce the run)."""

    metrics: tuple[MetricDelta, ...]
    n_resamples: int
    confidence: float
    method: str
    seed: int | None
    tie_tol: float
    clustered: bool
    distribution: np.ndarray | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> MetricDelta:
        for r in self.metrics:
            if r.metric == name:
                return r
        raise KeyError(f"no metric named {name!r}; have {[r.metric for r in self.metrics]}")

    def __len__(self) -> int:
        return len(self.metrics)

    def __iter__(self):
        return iter(self.metrics)

    @property
    def n_undefined(self) -> int:
        return sum(not r.defined for r in self.metrics)

    def to_dict(self) -> dict:
        return {
            "n_resamples": self.n_resamples,
            "confidence": self.confidence,
            "method": self.method,
            "seed": self.seed,
            "tie_tol": self.tie_tol,
            "clustered": self.clustered,
            "n_undefined": self.n_undefined,
            "metrics": [r.to_dict() for r in self.metrics],
        }


def resample_counts(rng: np.random.Generator, k: int, rows: int) -> np.ndarray:
    """(rows, k) float64 multinomial(k, 1/k) counts: row r says how often each unit is drawn in resample r.

    Drawing k uniform integers and counting them row by row is several times faster than
    ``rng.multinomial`` with k categories and gives exactly the same distribution.
    """
    return _counts_from_draws(_draw(rng, k, rows), k)


def _draw(rng: np.random.Generator, k: int, rows: int) -> np.ndarray:
    return rng.integers(0, k, size=(rows, k), dtype=np.int32)


def resampled_sums(rng: np.random.Generator, s: np.ndarray, rows: int) -> np.ndarray:
    """(rows, m) totals ``W @ s`` of the (k, m) integer-valued unit sums ``s`` over ``rows`` resamples, where
    ``W`` is :func:`resample_counts` of the same generator: the same draws and, since the sums are exact
    integers, the same figures, computed without building ``W`` (in one compiled pass when it pays).
    Values that are not integers (or too large to sum exactly) fall back to ``W @ s``."""
    s = np.asarray(s, dtype=np.float64)
    k = s.shape[0]
    exact = np.array_equal(s, np.rint(s)) and k * (np.abs(s).max(initial=0.0)) <= 2.0**52
    kernel = _kernel(rows * k) if exact else None
    state = _pcg64_state(rng) if kernel is not None and k >= 2 else None
    if state is not None:
        # the compiled pass draws from the generator's own stream: no draw array at all
        out = np.empty((rows, s.shape[1]), dtype=np.float64)
        kernel.pcg64_resampled_totals(state, np.ascontiguousarray(s.T), out)
        _set_pcg64_state(rng, state)
        return out
    draws = _draw(rng, k, rows)
    if kernel is None:
        return _counts_from_draws(draws, k) @ s
    out = np.empty((rows, s.shape[1]), dtype=np.float64)
    kernel.resampled_totals(draws, np.ascontiguousarray(s.T), out)
    return out


# The compiled totals (numba) load in about half a second once per process; below this many draws in one
# bootstrap the numpy path is cheaper overall. RAGASSAY_JIT=1 forces the kernel, 0 forbids it.
_JIT_DRAWS = 30_000_000
_KERNEL = None


def _kernel(n_draws: int):
    """The compiled module (:mod:`ragassay.stats._resample_kernel`), or None for the numpy path (both give
    the same values)."""
    global _KERNEL
    setting = os.environ.get("RAGASSAY_JIT", "auto")
    if setting == "0" or (setting != "1" and _KERNEL is None and n_draws < _JIT_DRAWS):
        return None
    if _KERNEL is None:
        try:
            from ragassay.stats import _resample_kernel
        except Exception:  # numba missing, broken, or unable to cache here: the numpy path gives the same values
            return None
        _KERNEL = _resample_kernel
    return _KERNEL


def preload_kernel(n_draws: int) -> None:
    """Start loading the compiled totals (numba and the cached machine code, about half a second of
    interpreter work) on a background thread when a bootstrap of ``n_draws`` draws will use them, so a
    caller can overlap the load with work that waits outside the interpreter (a DuckDB query); the first
    bootstrap then finds them loaded (or waits for the load to finish). Changes no result."""
    setting = os.environ.get("RAGASSAY_JIT", "auto")
    if _KERNEL is not None or setting == "0" or (setting != "1" and n_draws < _JIT_DRAWS):
        return

    def load() -> None:
        kernel = _kernel(n_draws)
        if kernel is not None:
            # zero resamples with the argument types of a real call: loads the cached code, draws nothing
            kernel.pcg64_resampled_totals(np.zeros(6, dtype=np.uint64), np.zeros((1, 2)), np.empty((0, 1)))

    threading.Thread(target=load, daemon=True, name="ragassay-jit").start()


_MASK64 = (1 << 64) - 1


def _pcg64_state(rng: np.random.Generator) -> np.ndarray | None:
    """The generator's PCG64 state as the compiled draws take it (uint64: state high, low, increment high,
    low, has_uint32, uinteger), or None when its bit generator is another kind (the numpy draws serve it)."""
    bg = rng.bit_generator
    if type(bg) is not np.random.PCG64:
        return None
    st = bg.state
    state, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([state >> 64, state & _MASK64, inc >> 64, inc & _MASK64, st["has_uint32"], st["uinteger"]],
                    dtype=np.uint64)


def _set_pcg64_state(rng: np.random.Generator, a: np.ndarray) -> None:
    """Advance the generator to the state the compiled draws left in ``a``, as numpy's own draws would have."""
    rng.bit_generator.state = {"bit_generator": "PCG64",
                               "state": {"state": (int(a[0]) << 64) | int(a[1]), "inc": (int(a[2]) << 64) | int(a[3])},
                               "has_uint32": int(a[4]), "uinteger": int(a[5])}


def _counts_from_draws(draws: np.ndarray, k: int, out: np.ndarray | None = None) -> np.ndarray:
    # ``out``: a buffer reused across chunks; a fresh (rows, k) float64 array per chunk is hundreds of MB
    # of new pages for the kernel to fault in and zero, which cost more than the counting.
    w = np.empty(draws.shape, dtype=np.float64) if out is None else out[: draws.shape[0]]
    for r in range(draws.shape[0]):
        # bincount of an int32 array takes numpy's slow generic path (about 10x slower than on intp):
        # casting the row first is the cheap part.
        w[r] = np.bincount(draws[r].astype(np.intp), minlength=k)
    return w


def _chunk_rows(k: int, chunk_size: int) -> int:
    # Two chunks of int32 draws (current + prefetched) and one float64 weight chunk are alive at once.
    return int(max(1, min(chunk_size, _CHUNK_BYTES // (16 * k))))


def _exact_grid(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round each column of ``s`` (k, m) to integers on a power-of-two grid: (integer-valued s, scale).

    The scale 2**e is the largest with k * max|s_j| * 2**e <= 2**52. A row of ``W`` sums to k, so every
    partial sum of ``W @ (s * scale)`` is an integer of magnitude below 2**53 and float64 holds it exactly:
    the product does not depend on summation order. Dividing by a power of two is exact as well.
    """
    k = s.shape[0]
    peak = np.abs(s).max(axis=0)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(2.0**52 / (k * np.where(peak > 0, peak, 1.0))))
    scale = np.exp2(e)
    return np.rint(s * scale), scale


def _boot_centered(
    s: np.ndarray, c: np.ndarray, n_resamples: int, rng: np.random.Generator, chunk_size: int
) -> np.ndarray:
    """Resampled (mean - observed mean) for each column of the centered unit sums ``s``.

    ``s`` is (k, m) float64 with column sums zero, ``c`` is (k,) integer unit sizes; returns (R, m) float64.
    The products are exact (:func:`_exact_grid`). Compiled, one pass draws, counts and multiplies
    (:func:`ragassay.stats._resample_kernel.pcg64_resampled_totals`, numpy's draws exactly); otherwise one
    helper thread draws the next chunk's integers (numpy releases the GIL there) while this thread counts and
    multiplies. Either way the generator is consumed in order, so results do not depend on timing, chunk
    size, thread count or the CPU's BLAS kernels.
    """
    k, m = s.shape
    s, scale = _exact_grid(s)
    out = np.empty((n_resamples, m), dtype=np.float64)
    rows = _chunk_rows(k, chunk_size)
    starts = list(range(0, n_resamples, rows))
    unit_sizes_equal = bool(np.all(c == c[0]))
    kernel = _kernel(n_resamples * k)
    state = _pcg64_state(rng) if kernel is not None else None
    if kernel is not None:
        # the unit sizes (integers) ride along as one more column, so the denominators are exact sums too
        columns = np.ascontiguousarray(s.T if unit_sizes_equal else np.column_stack([s, c]).T)
        totals = np.empty((min(rows, n_resamples), columns.shape[0]), dtype=np.float64)
    if state is not None:
        # drawn and counted in one compiled pass, on this thread, from the generator's own stream; no draw
        # arrays, so the chunk is only the (chunk_size, m) totals
        totals = np.empty((min(chunk_size, n_resamples), columns.shape[0]), dtype=np.float64)
        for start in range(0, n_resamples, chunk_size):
            t = totals[: min(chunk_size, n_resamples - start)]
            kernel.pcg64_resampled_totals(state, columns, t)
            num = t[:, :m] / scale
            den = float(k * c[0]) if unit_sizes_equal else t[:, m:]
            out[start : start + t.shape[0]] = num / den
        _set_pcg64_state(rng, state)
        return out
    if kernel is None:
        buffer = np.empty((min(rows, n_resamples), k), dtype=np.float64)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_draw, rng, k, min(rows, n_resamples))
        for i, start in enumerate(starts):
            draws = pending.result()
            if i + 1 < len(starts):
                nxt = starts[i + 1]
                pending = pool.submit(_draw, rng, k, min(rows, n_resamples - nxt))
            n_rows = draws.shape[0]
            if kernel is not None:
                t = totals[:n_rows]
                kernel.resampled_totals(draws, columns, t)  # releases the GIL: the next chunk is drawn meanwhile
                num = t[:, :m] / scale
                den = float(k * c[0]) if unit_sizes_equal else t[:, m:]
            else:
                w = _counts_from_draws(draws, k, buffer)
                num = (w @ s) / scale
                den = float(k * c[0]) if unit_sizes_equal else (w @ c)[:, None]
            del draws
            out[start : start + n_rows] = num / den
    return out


def _jackknife_accel(s: np.ndarray, c: np.ndarray) -> np.ndarray:
    """BCa acceleration from leave-one-unit-out means (Efron 1987, eq. 6.6)."""
    tot_s = s.sum(axis=0)
    tot_c = c.sum()
    theta = (tot_s[None, :] - s) / (tot_c - c)[:, None]
    dev = theta.mean(axis=0)[None, :] - theta
    num = (dev**3).sum(axis=0)
    den = 6.0 * (dev**2).sum(axis=0) ** 1.5
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, 0.0)


def _intervals(
    boots: np.ndarray, obs: np.ndarray, accel: np.ndarray | None, confidence: float
) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1.0 - confidence) / 2.0
    if accel is None:
        lo = np.quantile(boots, alpha, axis=0)
        hi = np.quantile(boots, 1 - alpha, axis=0)
        return lo, hi
    r = boots.shape[0]
    # Share of resamples below the estimate, ties counted half (as scipy does); clipped so a one-sided
    # distribution gives the most extreme finite bias correction instead of an infinite one.
    prop = ((boots < obs).sum(axis=0) + (boots <= obs).sum(axis=0)) / (2.0 * r)
    prop = np.clip(prop, 0.5 / r, 1 - 0.5 / r)
    z0 = ndtri(prop)
    lo_pct, hi_pct = [], []
    for z_alpha in (ndtri(alpha), ndtri(1 - alpha)):
        adj = z0 + (z0 + z_alpha) / (1 - accel * (z0 + z_alpha))
        (lo_pct if z_alpha < 0 else hi_pct).append(ndtr(adj))
    lo = np.array([np.quantile(boots[:, j], lo_pct[0][j]) for j in range(boots.shape[1])])
    hi = np.array([np.quantile(boots[:, j], hi_pct[0][j]) for j in range(boots.shape[1])])
    return lo, hi


def _check_settings(
    n_resamples: int, confidence: float, method: str, tie_tol: float, chunk_size: int
) -> None:
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise InputError(f"n_resamples must be a positive integer, got {n_resamples}")
    check_prob(confidence, "confidence")
    if method not in ("percentile", "bca"):
        raise InputError(f"method must be 'percentile' or 'bca', got {method!r}")
    if not tie_tol >= 0:
        raise InputError(f"tie_tol must be >= 0, got {tie_tol}")
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise InputError(f"chunk_size must be a positive integer, got {chunk_size}")


def bootstrap_deltas(
    diffs,
    *,
    metrics: Sequence[str] | None = None,
    clusters=None,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    method: Method = "percentile",
    seed: int | np.random.Generator | None = 0,
    tie_tol: float = 0.0,
    chunk_size: int = 512,
    return_distribution: bool = False,
) -> BootstrapResult:
    """Bootstrap the mean of per-item differences ``diffs`` (n items x m metrics, or 1-D for one metric).

    Per metric: observed mean delta, a two-sided ``confidence`` interval (percentile, or BCa with jackknife
    acceleration), a two-sided p-value for mean zero from the null-shifted bootstrap distribution,
    p = (1 + #{|delta* - delta| >= |delta|}) / (R + 1), which is never 0, and wins / losses / ties where a
    tie is |d| <= ``tie_tol``.

    NaN: items with NaN for a metric are left out of that metric only (``n_excluded`` counts them); metrics
    with the same set of valid items share the same resamples. A metric with fewer than 2 valid items (or
    2 clusters) is returned with ``defined=False`` and a reason.

    ``clusters``: one id per item; whole clusters are resampled with replacement and each resample's mean is
    (sum of drawn cluster sums) / (sum of drawn cluster sizes), so correlated items (trials of one query,
    queries from one document) are not counted as independent evidence.

    Reproducible: the same ``seed`` and input give identical results; a metric's resamples depend only on
    the seed and its own valid items, not on the other columns.
    """
    _check_settings(n_resamples, confidence, method, tie_tol, chunk_size)
    d = as_float_matrix(diffs, "diffs")
    n, m = d.shape
    names = metric_names(metrics, m)
    cluster_codes = None
    if clusters is not None:
        cl = np.asarray(clusters)
        if cl.ndim != 1 or cl.shape[0] != n:
            raise InputError(f"clusters: need one cluster id per item ({n}), got shape {cl.shape}")
        if cl.dtype.kind == "f" and np.isnan(cl).any():
            raise InputError("clusters: contains NaN ids; give every item a cluster id")
        _, cluster_codes = np.unique(cl, return_inverse=True)

    if isinstance(seed, np.random.Generator):
        seed_seq = np.random.SeedSequence(int(seed.integers(2**63)))
        seed_record = None
    else:
        as_rng(seed)  # validates the type with a clear error
        seed_seq = np.random.SeedSequence(seed)
        seed_record = seed
    valid = ~np.isnan(d)
    obs = np.full(m, np.nan)
    lo = np.full(m, np.nan)
    hi = np.full(m, np.nan)
    pv = np.full(m, np.nan)
    reasons: list[str | None] = [None] * m
    n_clusters: list[int | None] = [None] * m
    dist = np.full((n_resamples, m), np.nan) if return_distribution else None

    # Group metrics by their set of valid items (hash of the mask bytes; usually one group).
    groups: dict[bytes, list[int]] = {}
    for j in range(m):
        groups.setdefault(np.packbits(valid[:, j]).tobytes(), []).append(j)
    jobs = []  # (columns, observed means, centered unit sums, unit sizes) of each group that is resampled
    for col_list in groups.values():
        cols = np.asarray(col_list)
        rows = np.flatnonzero(valid[:, cols[0]])
        if rows.size == 0:
            for j in cols:
                reasons[j] = "no item has a value in both arms (all NaN)"
            continue
        dg = d[np.ix_(rows, cols)]
        # correctly rounded sums: a metric's mean does not depend on its neighbours or the SIMD width
        mean = np.array([math.fsum(col) for col in dg.T]) / rows.size
        obs[cols] = mean
        if cluster_codes is None:
            s = dg - mean
            c = np.ones(rows.size)
            k = rows.size
        else:
            _, codes = np.unique(cluster_codes[rows], return_inverse=True)
            k = int(codes.max()) + 1
            c = np.bincount(codes, minlength=k).astype(np.float64)
            s = np.zeros((k, cols.size))
            np.add.at(s, codes, dg - mean)
            for j in cols:
                n_clusters[j] = k
        if k < 2:
            unit = "cluster" if cluster_codes is not None else "item"
            for j in cols:
                reasons[j] = f"only one {unit} with a value: no variability to resample; need at least 2"
            continue
        jobs.append((cols, mean, np.asarray(s, dtype=np.float64), c))

    def resample(job):
        # each group draws from its own generator of the same seed, so groups are independent of each other
        return _boot_centered(job[2], job[3], n_resamples, np.random.default_rng(seed_seq), chunk_size)

    workers = min(len(jobs), os.cpu_count() or 1)
    if workers > 1 and all(_kernel(n_resamples * job[2].shape[0]) is not None for job in jobs):
        # the compiled passes release the GIL and hold no draw arrays: the groups run side by side
        with ThreadPoolExecutor(max_workers=workers) as pool:
            resampled = list(pool.map(resample, jobs))
    else:
        resampled = [resample(job) for job in jobs]
    for (cols, mean, s, c), boots in zip(jobs, resampled, strict=True):
        accel = _jackknife_accel(s, c) if method == "bca" else None
        glo, ghi = _intervals(boots, np.zeros(cols.size), accel, confidence)
        lo[cols] = glo + mean
        hi[cols] = ghi + mean
        # Null-shifted test: the centered distribution stands in for the sampling distribution under H0.
        extreme = (np.abs(boots) >= np.abs(mean)[None, :]).sum(axis=0)
        pv[cols] = (1.0 + extreme) / (n_resamples + 1.0)
        if dist is not None:
            dist[:, cols] = boots + mean

    results = []
    for j in range(m):
        dj = d[valid[:, j], j]
        results.append(
            MetricDelta(
                metric=names[j],
                n=int(dj.size),
                n_excluded=int(n - dj.size),
                delta=float(obs[j]),
                ci_low=float(lo[j]),
                ci_high=float(hi[j]),
                p_value=float(pv[j]),
                wins=int((dj > tie_tol).sum()),
                losses=int((dj < -tie_tol).sum()),
                ties=int((np.abs(dj) <= tie_tol).sum()),
                n_clusters=n_clusters[j],
                defined=reasons[j] is None,
                reason=reasons[j],
            )
        )
    return BootstrapResult(
        metrics=tuple(results),
        n_resamples=int(n_resamples),
        confidence=float(confidence),
        method=method,
        seed=seed_record,
        tie_tol=float(tie_tol),
        clustered=cluster_codes is not None,
        distribution=dist,
    )


def paired_bootstrap(a, b, **kwargs) -> BootstrapResult:
    """Paired bootstrap of B - A: ``a`` and ``b`` are (n items x m metrics) scores of two systems on the
    same items in the same order (1-D for one metric). Keyword arguments as in :func:`bootstrap_deltas`."""
    am = as_float_matrix(a, "a")
    bm = as_float_matrix(b, "b")
    same_length(am, bm, "a", "b")
    return bootstrap_deltas(bm - am, **kwargs)


def clustered_bootstrap(a, b, clusters, **kwargs) -> BootstrapResult:
    """Paired bootstrap of B - A that resamples whole clusters (one id per item); see :func:`bootstrap_deltas`."""
    return paired_bootstrap(a, b, clusters=clusters, **kwargs)
