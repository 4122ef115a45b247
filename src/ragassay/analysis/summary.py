"""Aggregates of a stored run, always recomputed from its rows: per-stage and per-stratum means with
defined/undefined counts, the judged fraction, and latency percentiles over the measured requests."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

STAGES = ("retrieve", "rerank", "ranking", "context", "generate")
_GENERATE = {"answer_f1", "answer_em", "abstention_recall", "over_refusal", "refused", "error",
             "citation_validity"}


def stage_of(metric: str) -> str:
    if metric in _GENERATE:
        return "generate"
    if metric.startswith("rerank_") or metric.endswith("@final_k"):
        return "rerank"
    if metric.endswith("_depth"):
        return "retrieve"
    if metric in ("recall@context", "context_tokens"):
        return "context"
    return "ranking"


def _mean(values: list[float]) -> tuple[float, int, int]:
    arr = np.asarray([np.nan if v is None else v for v in values], dtype=float)
    ok = ~np.isnan(arr)
    return (float(arr[ok].mean()) if ok.any() else math.nan), int(ok.sum()), int((~ok).sum())


def run_summary(results) -> dict:
    """``results``: the run's result table (pyarrow). Returns metrics by stage and by stratum."""
    cols = results.to_pydict()
    by_metric: dict[str, list] = defaultdict(list)
    by_metric_stratum: dict[tuple[str, str], list] = defaultdict(list)
    for m, v, s in zip(cols["metric"], cols["value"], cols["stratum"], strict=True):
        by_metric[m].append(v)
        by_metric_stratum[(m, s)].append(v)
    metrics = []
    for m, vals in by_metric.items():
        mean, n_def, n_undef = _mean(vals)
        metrics.append({"metric": m, "stage": stage_of(m), "mean": mean, "n_defined": n_def,
                        "n_undefined": n_undef})
    metrics.sort(key=lambda r: (STAGES.index(r["stage"]), r["metric"]))
    strata = sorted({s for s in cols["stratum"]})
    per_stratum = []
    for m in by_metric:
        for s in strata:
            vals = by_metric_stratum.get((m, s))
            if vals is None:
                continue
            mean, n_def, n_undef = _mean(vals)
            per_stratum.append({"metric": m, "stratum": s, "mean": mean, "n_defined": n_def,
                                "n_undefined": n_undef})
    first = {}
    for i, (q, t) in enumerate(zip(cols["query_id"], cols["trial"], strict=True)):
        first.setdefault((q, t), i)
    lat = np.asarray([cols["latency_ms"][i] for i in first.values() if cols["latency_ms"][i] is not None], float)
    latency = ({"p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95)),
                "p99": float(np.percentile(lat, 99)), "n": int(len(lat))} if len(lat) else None)
    # judged fraction: share of a row's top final_k units touching a labelled span (NULL for an empty list)
    jf_mean, jf_n, jf_undef = _mean([cols["judged_fraction"][i] for i in first.values()])
    return {"metrics": metrics, "strata": strata, "per_stratum": per_stratum, "latency_ms": latency,
            "judged_fraction": {"mean": jf_mean if jf_n else None, "n": jf_n, "n_undefined": jf_undef},
            "n_rows": len(cols["metric"]), "n_items": len(first)}
