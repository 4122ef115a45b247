"""Quality per millisecond (spec §9.4): a reranker, a deeper fusion, another analyzer or a second branch is a
latency purchase, so each stored candidate run is set against a baseline on one table.

Per candidate: the quality metric (``ndcg@final_k`` by default) and its paired change ``Δ`` against the
baseline with :func:`~ragassay.analysis.compare.compare_runs`' paired bootstrap CI (so the pins are checked,
and mismatches refused, exactly as ``compare`` does); the added p95 latency ``p95(cand) − p95(base)`` over
the (query, trial) requests both runs timed, with a percentile-bootstrap CI that resamples queries (a query's
trials together, the same queries for both runs); ``Δ per 100 ms = 100 · Δ / added p95``, defined only when
the added p95 is above 0 (a config that is no slower buys nothing with latency); ``$/1k queries = 1000 ·``
mean stored cost per request, defined only when every request of the run has a cost; and the Pareto set on
(Δ, added p95), the baseline at (0, 0). Percentiles are ``inverted_cdf``, as in
:mod:`ragassay.analysis.latency`. A run stored with ``--batched`` has no per-request latency: its latency is
"not measured" (None), never 0, and it has no Pareto place.
"""

from __future__ import annotations

import math

import numpy as np

from ragassay.analysis.compare import (
    comparable_runs,
    compare_runs,
    config_diff,
    flatten_config,
)
from ragassay.analysis.directions import higher_is_better
from ragassay.analysis.latency import QUANTILE_METHOD
from ragassay.errors import InputError
from ragassay.stats import adjust_pvalues

DEFAULT_METRIC = "ndcg@final_k"
LATENCY_Q = 95.0
# resampled latency values held at once by the bootstrap (resamples x requests), to bound memory
_CHUNK_VALUES = 4_000_000


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _run_requests(store, rec, metric: str) -> dict[tuple[str, int], tuple[float, float]]:
    """(query_id, trial) -> (latency_ms, cost) of a run, NaN where not stored; the values repeat on every
    metric row of a request, so the quality metric's rows give one per request."""
    t = store.results(rec.run_id, [metric], columns=["query_id", "trial", "latency_ms", "cost"])
    return {(q, tr): (np.nan if lat is None else float(lat), np.nan if c is None else float(c))
            for q, tr, lat, c in zip(*(t[c].to_pylist() for c in ("query_id", "trial", "latency_ms", "cost")),
                                     strict=True)}


def _unmeasured(rec, requests) -> str | None:
    """Why a run has no per-request latency (None when it has some)."""
    if (rec.extra or {}).get("latency") == "not measured (batched)":
        return f"{rec.name} was run with --batched: no per-request latency"
    if not any(math.isfinite(lat) for lat, _ in requests.values()):
        return f"{rec.name} stored no per-request latency"
    return None


def _matrix(keys: list[tuple[str, int]], values: dict) -> np.ndarray:
    """A (queries x trials) latency matrix over ``keys``, queries sorted, NaN where a request is absent."""
    qids = sorted({q for q, _ in keys})
    row = {q: i for i, q in enumerate(qids)}
    trials = sorted({t for _, t in keys})
    col = {t: j for j, t in enumerate(trials)}
    m = np.full((len(qids), len(trials)), np.nan)
    for k in keys:
        m[row[k[0]], col[k[1]]] = values[k][0]
    return m


def added_p95(base: np.ndarray, cand: np.ndarray, *, n_resamples: int, seed: int, confidence: float,
              q: float = LATENCY_Q) -> dict:
    """``p_q(cand) − p_q(base)`` over two (queries x trials) latency matrices of the same requests (NaN where
    a request is absent), with a percentile-bootstrap CI: each resample draws queries with replacement, a
    query's trials together, the same draw for both runs. ``inverted_cdf`` percentiles; no request at all
    is an ``InputError``."""
    ok = np.isfinite(base)
    if base.shape != cand.shape or not ok.any() or not np.array_equal(ok, np.isfinite(cand)):
        raise InputError("added latency needs the same timed requests in both runs")
    b = np.percentile(base[ok], q, method=QUANTILE_METHOD)
    c = np.percentile(cand[ok], q, method=QUANTILE_METHOD)
    rng = np.random.default_rng(seed)
    n = base.shape[0]
    per = max(1, _CHUNK_VALUES // base.size)
    diffs = []
    for start in range(0, n_resamples, per):
        idx = rng.integers(0, n, size=(min(per, n_resamples - start), n))
        rb = base[idx].reshape(len(idx), -1)
        rc = cand[idx].reshape(len(idx), -1)
        diffs.append(np.nanpercentile(rc, q, axis=1, method=QUANTILE_METHOD)
                     - np.nanpercentile(rb, q, axis=1, method=QUANTILE_METHOD))
    d = np.concatenate(diffs)
    alpha = 1 - confidence
    lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2])
    return {"baseline_p95_ms": float(b), "p95_ms": float(c), "added_p95_ms": float(c - b),
            "ci_low": float(lo), "ci_high": float(hi), "n": int(ok.sum()), "n_queries": n}


def pareto_set(quality, latency, higher: bool = True) -> list[bool | None]:
    """Per config, whether it is on the Pareto front: no other config has quality at least as good and
    latency at most as high, strictly better in one. Configs whose quality or latency is None are not placed
    (None); equal points do not dominate each other."""
    pts = [(None if qv is None or lat is None else ((qv if higher else -qv), lat))
           for qv, lat in zip(quality, latency, strict=True)]
    out: list[bool | None] = []
    for i, p in enumerate(pts):
        if p is None:
            out.append(None)
            continue
        out.append(not any(o is not None and j != i and o[0] >= p[0] and o[1] <= p[1] and (o[0] > p[0] or o[1] < p[1])
                           for j, o in enumerate(pts)))
    return out


def _cost(requests: dict) -> dict:
    """$/1k queries = 1000 · mean stored cost per request, undefined unless every request has a cost (a mean
    over the costed ones would understate the bill)."""
    costs = np.asarray([c for _, c in requests.values()], dtype=float)
    missing = int((~np.isfinite(costs)).sum())
    value = float(1000 * costs.mean()) if costs.size and not missing else None
    return {"per_1k_queries": value, "n": int(costs.size), "n_missing": missing}


def _latency(rec_b, rec_c, req_b, req_c, **boot) -> dict:
    why = _unmeasured(rec_b, req_b) or _unmeasured(rec_c, req_c)
    if why:
        return {"status": "not measured", "reason": why, "added_p95_ms": None}
    keys = sorted(k for k in req_c if k in req_b and math.isfinite(req_b[k][0]) and math.isfinite(req_c[k][0]))
    shared = sum(1 for k in req_c if k in req_b)
    if not keys:
        return {"status": "not measured", "reason": "no (query, trial) request timed by both runs",
                "added_p95_ms": None}
    return {"status": "measured", "reason": None, **added_p95(_matrix(keys, req_b), _matrix(keys, req_c), **boot),
            "n_untimed": shared - len(keys)}


def rerank_cost(store, runs, *, metric: str = DEFAULT_METRIC, n_resamples: int = 2_000, seed: int = 0,
                confidence: float = 0.95, rebaseline: bool = False) -> dict:
    """The §9.4 quality-per-millisecond table of ``runs`` (the first is the baseline, the rest candidates).

    Every run must be comparable with the baseline under ``compare``'s pins (``PinMismatchError`` naming each
    differing pin, unless ``rebaseline``); a metric a run lacks, or ``@final_k`` metrics of runs with
    different final_k, are refused as ``compare`` refuses them. JSON-serializable; undefined is None.
    """
    runs = list(runs)
    if len(runs) < 2:
        raise InputError("give a baseline run and at least one candidate run (BASELINE CANDIDATE...)")
    # compare's one check over the pins the metric rests on (a claim or agent outcome metric adds its judge's)
    recs, diffs = comparable_runs(store, runs, [metric], rebaseline=rebaseline)
    ids = [r.run_id for r in recs]
    dup = sorted({r.name for r in recs if ids.count(r.run_id) > 1})
    if dup:
        raise InputError(f"run(s) {', '.join(dup)} given more than once; list each run once, the baseline first")
    base = recs[0]
    higher = higher_is_better(metric)
    boot = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    comps = [compare_runs(store, base.run_id, r.run_id, metrics=[metric], strata=False, rebaseline=rebaseline,
                          **boot).overall(metric) for r in recs[1:]]
    p_adj = adjust_pvalues(np.asarray([c.p for c in comps], dtype=float), "bh")
    req = {r.run_id: _run_requests(store, r, metric) for r in recs}
    base_vals = store.results(base.run_id, [metric], columns=["value"])["value"].to_pylist()
    base_vals = [v for v in base_vals if v is not None and not math.isnan(v)]
    base_why = _unmeasured(base, req[base.run_id])
    base_lat = np.asarray([lat for lat, _ in req[base.run_id].values()], dtype=float)
    base_lat = base_lat[np.isfinite(base_lat)]
    rows = [_describe(base, base) | {
        "role": "baseline", "quality": {"value": float(np.mean(base_vals)) if base_vals else None,
                                        "n": len(base_vals)},
        "delta": None,
        "latency": ({"status": "not measured", "reason": base_why, "added_p95_ms": None} if base_why else
                    {"status": "measured", "reason": None, "p95_ms": float(np.percentile(
                        base_lat, LATENCY_Q, method=QUANTILE_METHOD)), "added_p95_ms": 0.0, "n": int(base_lat.size)}),
        "delta_per_100ms": None, "cost": _cost(req[base.run_id])}]
    for rec, row, pa in zip(recs[1:], comps, p_adj, strict=True):
        lat = _latency(base, rec, req[base.run_id], req[rec.run_id], **boot)
        delta = _num(row.delta) if row.defined else None
        added = lat["added_p95_ms"]
        rows.append(_describe(rec, base) | {
            "role": "candidate", "quality": {"value": _num(row.mean_b), "n": row.n},
            "delta": {"value": delta, "ci_low": _num(row.ci_low), "ci_high": _num(row.ci_high), "p": _num(row.p),
                      "p_adj": _num(float(pa)), "n": row.n, "baseline_mean": _num(row.mean_a),
                      "reason": row.reason},
            "latency": lat,
            "delta_per_100ms": 100 * delta / added if delta is not None and added is not None and added > 0 else None,
            "cost": _cost(req[rec.run_id])})
    front = pareto_set([0.0] + [r["delta"]["value"] for r in rows[1:]],
                       [r["latency"]["added_p95_ms"] for r in rows], higher)
    for r, f in zip(rows, front, strict=True):
        r["pareto"] = f
    notes = []
    unplaced = [r["name"] for r in rows if r["pareto"] is None]
    if unplaced:
        notes.append(f"not placed on the Pareto set (quality or latency undefined): {', '.join(unplaced)}")
    if any(r["cost"]["per_1k_queries"] is None for r in rows):
        notes.append("$/1k queries is undefined for a run with requests that stored no cost")
    return {"kind": "rerank-cost", "metric": metric, "higher_is_better": higher,
            "baseline": {"run_id": base.run_id, "name": base.name}, "rows": rows,
            "pareto": [r["name"] for r in rows if r["pareto"]],
            "settings": {**boot, "latency": f"p{LATENCY_Q:g} ({QUANTILE_METHOD}) over requests both runs timed; "
                                            "bootstrap over queries",
                         "delta_ci": "paired bootstrap (compare_runs); p_adj: Benjamini-Hochberg across candidates",
                         "per_100ms": "100 * delta / added p95, defined when added p95 > 0"},
            "rebaselined": bool(diffs), "pin_differences": diffs, "notes": notes}


def _describe(rec, base) -> dict:
    cfg = flatten_config(rec.config)
    changed = [k for k, _, _ in config_diff(base.config, rec.config)] if rec is not base else []
    return {"run_id": rec.run_id, "name": rec.name, "fusion_depth": cfg.get("fusion.depth"),
            "reranker": cfg.get("reranker.kind"), "changed": changed}


def rerank_cost_report_section(store, runs, **kw) -> dict:
    """Report data for the quality-per-millisecond section (JSON-serializable; ``report --include`` reads
    the same shape from a saved ``analyze rerank-cost --json``)."""
    return rerank_cost(store, runs, **kw)
