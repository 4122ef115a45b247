"""run_summary is columnar; a plain per-row Python reference pins every figure it reports."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from ragassay.analysis.summary import run_summary


def _reference(cols: dict) -> dict:
    by_m, by_ms = defaultdict(list), defaultdict(list)
    for m, v, s in zip(cols["metric"], cols["value"], cols["stratum"], strict=True):
        by_m[m].append(v)
        by_ms[(m, s)].append(v)

    def mean(vals):
        ok = [v for v in vals if v is not None and not math.isnan(v)]
        return (sum(ok) / len(ok) if ok else math.nan), len(ok), len(vals) - len(ok)

    first = {}
    for i, key in enumerate(zip(cols["query_id"], cols["trial"], strict=True)):
        first.setdefault(key, i)
    lat = [cols["latency_ms"][i] for i in first.values() if cols["latency_ms"][i] is not None]
    jf = mean([cols["judged_fraction"][i] for i in first.values()])
    return {"metrics": {m: mean(v) for m, v in by_m.items()}, "cells": {k: mean(v) for k, v in by_ms.items()},
            "strata": sorted(set(cols["stratum"])), "lat": lat, "jf": jf, "n_items": len(first)}


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("seed", range(5))
def test_columnar_summary_equals_a_per_row_reference(seed):
    rng = np.random.default_rng(seed)
    n_q, trials = int(rng.integers(1, 40)), int(rng.integers(1, 3))
    metrics = ["recall@10", "ndcg@final_k", "answer_f1", "rerank_kept", "context_tokens"][: rng.integers(1, 6)]
    strata = ["paraphrase", "lexical", "negative", "tabular"]
    cols: dict[str, list] = defaultdict(list)
    q_stratum = {f"q{i}": strata[int(rng.integers(0, len(strata)))] for i in range(n_q)}
    for m in metrics:
        for t in range(trials):
            for q in rng.permutation(list(q_stratum)):
                r = rng.random()
                cols["metric"].append(m)
                cols["query_id"].append(str(q))
                cols["trial"].append(t)
                cols["stratum"].append(q_stratum[q])
                cols["value"].append(None if r < 0.1 else (math.nan if r < 0.2 else float(rng.random())))
                cols["latency_ms"].append(None if (hash((q, t)) % 5 == 0) else float(len(q) * 3 + t))
                cols["judged_fraction"].append(None if r < 0.15 else float(rng.random()))
    table = pa.table({k: pa.array(v, type=pa.int32() if k == "trial" else None) for k, v in cols.items()})
    got, ref = run_summary(table), _reference(cols)
    assert {r["metric"] for r in got["metrics"]} == set(ref["metrics"])
    for r in got["metrics"]:
        mean, n_def, n_undef = ref["metrics"][r["metric"]]
        assert _close(r["mean"], mean) and (r["n_defined"], r["n_undefined"]) == (n_def, n_undef)
    assert got["strata"] == ref["strata"]
    assert len(got["per_stratum"]) == len(ref["cells"])
    for r in got["per_stratum"]:
        mean, n_def, n_undef = ref["cells"][(r["metric"], r["stratum"])]
        assert _close(r["mean"], mean) and (r["n_defined"], r["n_undefined"]) == (n_def, n_undef)
    assert got["n_items"] == ref["n_items"] == n_q * trials
    if ref["lat"]:
        assert got["latency_ms"]["n"] == len(ref["lat"])
        assert got["latency_ms"]["p95"] == pytest.approx(float(np.percentile(ref["lat"], 95)))
    else:
        assert got["latency_ms"] is None
    assert (got["judged_fraction"]["n"], got["judged_fraction"]["n_undefined"]) == ref["jf"][1:]
    if ref["jf"][1]:
        assert got["judged_fraction"]["mean"] == pytest.approx(ref["jf"][0])


def test_summary_orders_metrics_by_stage_then_name():
    table = pa.table({"metric": ["answer_f1", "recall@10", "recall@fusion_depth"], "query_id": ["q"] * 3,
                      "trial": pa.array([0, 0, 0], pa.int32()), "stratum": ["s"] * 3,
                      "value": [0.5, 1.0, float("nan")], "latency_ms": [None] * 3,
                      "judged_fraction": pa.array([None] * 3, pa.float64())})
    got = run_summary(table)
    assert [r["metric"] for r in got["metrics"]] == ["recall@fusion_depth", "recall@10", "answer_f1"]
    assert got["metrics"][0]["mean"] != got["metrics"][0]["mean"] and got["metrics"][0]["n_undefined"] == 1
    assert got["judged_fraction"] == {"mean": None, "n": 0, "n_undefined": 1}


def test_every_judge_metric_is_a_generate_stage_metric():
    from ragassay.analysis.summary import stage_of
    from ragassay.judges.validate import METRIC_KIND

    # but RAGChecker's two retriever diagnostics, which grade the context the generator was handed
    context = {"claim_recall", "context_precision_claims"}
    assert {m: stage_of(m) for m in METRIC_KIND} == {m: "context" if m in context else "generate" for m in METRIC_KIND}


def test_agent_metrics_are_the_agent_stage_after_generate():
    from ragassay.analysis.summary import STAGES, stage_of
    from ragassay.metrics.agent import AGENT_METRICS

    assert STAGES[-2:] == ("generate", "agent")
    assert {stage_of(m) for m in AGENT_METRICS} == {"agent"} and stage_of("hop_sufficiency@hop2") == "agent"
