"""Joint latency (spec 34.5): end-to-end percentiles from per-request totals, per-stage percentiles, and
the any-stage slow-event rate observed against what independence and the union bound say.

Quantiles do not add: the end-to-end p99 is computed from each request's own total, never as a sum of stage
p99s. With ``p_i`` the share of requests whose stage i exceeds its own threshold, the any-stage rate is
``1 - prod(1 - p_i)`` only if the stages are independent; without that, it lies between ``max p_i`` and
``min(1, sum p_i)`` (union bound). Percentiles use numpy's ``inverted_cdf`` (the smallest observed value
with at least the share q of requests at or below it), so a reported p99 is a latency some request had.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ragassay.errors import InputError

PERCENTILES = (50.0, 90.0, 95.0, 99.0)
QUANTILE_METHOD = "inverted_cdf"


def percentiles(x, qs=PERCENTILES) -> dict[str, float | None]:
    """``{"p50": ..., ...}`` over the finite values of ``x``; None when there are none."""
    v = np.asarray(x, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {f"p{q:g}": None for q in qs}
    vals = np.percentile(v, list(qs), method=QUANTILE_METHOD)
    return {f"p{q:g}": float(x) for q, x in zip(qs, vals, strict=True)}


def weighted_quantile(values, weights, q: float) -> float:
    """Quantile of a discrete distribution (value, probability): the smallest value whose CDF reaches q."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    if v.shape != w.shape or v.size == 0 or (w < 0).any():
        raise InputError("weighted_quantile needs equal-length values and non-negative weights")
    order = np.argsort(v, kind="stable")
    cdf = np.cumsum(w[order]) / w.sum()
    return float(v[order][np.searchsorted(cdf, q - 1e-12, side="left")])


def any_exceed_independent(ps) -> float:
    """1 - prod(1 - p_i): the chance that at least one stage is slow, for independent stages only."""
    p = np.asarray(ps, dtype=float)
    if ((p < 0) | (p > 1)).any():
        raise InputError("stage exceedance probabilities must lie in [0, 1]")
    return float(1.0 - np.prod(1.0 - p))


def union_bound(ps) -> float:
    """min(1, sum p_i): an upper bound on the any-stage rate whatever the dependence."""
    return float(min(1.0, np.sum(np.asarray(ps, dtype=float))))


@dataclass(frozen=True)
class StageTimes:
    """Per-request stage durations (requests x stages, NaN where a stage did not run) and totals."""

    stages: tuple[str, ...]
    durations: np.ndarray
    totals: np.ndarray


def stage_times(traces) -> StageTimes:
    """Stage durations and totals from traces; ``total`` is the trace's own end-to-end time, not a sum."""
    traces = list(traces)
    names = sorted({k for t in traces for k in t.durations_ms if k != "total"})
    d = np.full((len(traces), len(names)), np.nan)
    tot = np.full(len(traces), np.nan)
    for i, t in enumerate(traces):
        for j, k in enumerate(names):
            if k in t.durations_ms:
                d[i, j] = t.durations_ms[k]
        if "total" in t.durations_ms:
            tot[i] = t.durations_ms["total"]
    return StageTimes(tuple(names), d, tot)


def exceedance(durations: np.ndarray, thresholds) -> dict:
    """Observed per-stage slow rates p_i, the observed any-stage rate, and its independence prediction and
    dependence-free bounds. A stage missing from a request (NaN) is not slow for it."""
    d = np.asarray(durations, dtype=float)
    t = np.asarray(thresholds, dtype=float)
    if d.ndim != 2 or t.shape != (d.shape[1],):
        raise InputError("exceedance needs a (requests x stages) matrix and one threshold per stage")
    if d.shape[0] == 0:
        raise InputError("exceedance needs at least one request")
    with np.errstate(invalid="ignore"):
        slow = np.nan_to_num(d, nan=-np.inf) > t[None, :]
    p = slow.mean(axis=0)
    return {"p_stage": p.tolist(), "observed_any": float(slow.any(axis=1).mean()),
            "independent_prediction": any_exceed_independent(p), "union_bound": union_bound(p),
            "lower_bound": float(p.max()) if p.size else 0.0, "n": int(d.shape[0])}


def latency_analysis(traces=None, *, totals=None, thresholds: dict[str, float] | None = None,
                     threshold_pct: float = 99.0, latency_source: str | None = None) -> dict:
    """End-to-end and per-stage percentiles and the any-stage exceedance check.

    ``traces`` give stages and totals; ``totals`` alone (the stored per-request ``latency_ms``) give the
    end-to-end figures only. Stage thresholds default to each stage's own ``threshold_pct`` percentile
    (in (0, 100]); a given threshold is a finite number of ms >= 0.
    """
    if not (isinstance(threshold_pct, int | float) and 0 < threshold_pct <= 100):
        raise InputError(f"threshold_pct={threshold_pct!r}: give a percentile in (0, 100], e.g. 99")
    bad = {k: v for k, v in (thresholds or {}).items()
           if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0)}
    if bad:
        raise InputError(f"stage thresholds {bad}: each must be a finite number of ms >= 0")
    out: dict = {"quantile_method": QUANTILE_METHOD, "latency_source": latency_source}
    if traces is not None:
        st = stage_times(traces)
        tot = st.totals
        stages = {}
        for j, name in enumerate(st.stages):
            stages[name] = {"n": int(np.isfinite(st.durations[:, j]).sum()), **percentiles(st.durations[:, j])}
        out["stages"] = stages
        thr = {}
        for j, name in enumerate(st.stages):
            col = st.durations[:, j]
            col = col[np.isfinite(col)]
            given = (thresholds or {}).get(name)
            thr[name] = float(given) if given is not None else (
                float(np.percentile(col, threshold_pct, method=QUANTILE_METHOD)) if col.size else math.inf)
        if st.stages and st.durations.shape[0]:
            ex = exceedance(st.durations, [thr[s] for s in st.stages])
            out["exceedance"] = {"thresholds_ms": thr, "threshold_rule": (
                "given" if thresholds else f"each stage's own p{threshold_pct:g}"),
                **{k: v for k, v in ex.items() if k != "p_stage"},
                "p_stage": dict(zip(st.stages, ex["p_stage"], strict=True))}
            sums = {q: sum(stages[s][q] or 0.0 for s in st.stages) for q in ("p50", "p99")}
            out["sum_of_stage_percentiles"] = sums
    else:
        tot = np.asarray(totals if totals is not None else [], dtype=float)
    if not np.isfinite(tot).any():
        raise InputError("no per-request latency recorded (batched runs store none); rerun without --batched, "
                         "or analyse traces that carry durations_ms.total")
    out["end_to_end"] = {"n": int(np.isfinite(tot).sum()), "n_missing": int((~np.isfinite(tot)).sum()),
                         "mean": float(np.nanmean(tot)), **percentiles(tot)}
    return out


def load_run(run_one, queries, *, concurrency: int, n_requests: int) -> dict:
    """Drive ``run_one(query, i)`` with ``concurrency`` workers for ``n_requests`` requests (cycling through
    ``queries``); per request, the client-side wall time from submission (so queueing counts) to completion."""
    for name, flag, v in (("concurrency", "--concurrency", concurrency), ("n_requests", "--requests", n_requests)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{name}={v!r} ({flag} on the command line): give an integer >= 1")
    queries = list(queries)
    if not queries:
        raise InputError("a load run needs at least one query")
    waits = np.empty(n_requests)
    t0 = time.perf_counter()

    def job(i: int, submitted: float) -> None:
        run_one(queries[i % len(queries)], i)
        waits[i] = (time.perf_counter() - submitted) * 1000.0

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(job, i, time.perf_counter()) for i in range(n_requests)]
        for f in futures:
            f.result()
    wall = time.perf_counter() - t0
    return {"concurrency": concurrency, "n_requests": n_requests, "wall_s": wall,
            "throughput_rps": n_requests / wall if wall > 0 else None, "end_to_end": percentiles(waits),
            "mean_ms": float(waits.mean())}


def latency_report_section(traces=None, *, totals=None, **kw) -> dict:
    """Report data for the latency section (JSON-serializable)."""
    return {"kind": "latency", **latency_analysis(traces, totals=totals, **kw)}
