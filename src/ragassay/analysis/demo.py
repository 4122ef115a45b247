"""The embedded default: four configurations on the bundled license corpus, compared, gated, reported."""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ragassay.analysis.compare import Comparison, compare_runs
from ragassay.analysis.gate import GatePolicy, GateResult, MetricPolicy, run_gate
from ragassay.analysis.report_data import build_report_data
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.analysis.summary import run_summary
from ragassay.store import Store

DEMO_CONFIGS = ("bm25", "hybrid", "hybrid_rerank", "oracle")
BASELINE = "bm25"
GATE_CANDIDATE = "hybrid"


def demo_config_dir() -> Path:
    return Path(str(resources.files("ragassay") / "data" / "configs"))


def demo_gate_policy() -> GatePolicy:
    """The demo's gate: recall at the fusion depth and nDCG@5 may not drop credibly by 0.03 or more."""
    return GatePolicy(metrics={"recall@fusion_depth": MetricPolicy(min_effect=0.03),
                               "ndcg@5": MetricPolicy(min_effect=0.03)})


@dataclass
class DemoResult:
    out: Path
    golden: object
    corpus: object
    run_ids: dict[str, str]
    summaries: dict[str, dict]
    comparisons: list[Comparison]
    gate: GateResult
    ladder: dict
    report: Path | None
    timings: dict[str, float] = field(default_factory=dict)


def oracle_ladder(summaries: dict[str, dict]) -> dict:
    """Spec §8.4: is the bottleneck retrieval or generation? Compare the oracle rung with the pipelines."""
    def mean(run: str, metric: str) -> float | None:
        for m in summaries.get(run, {}).get("metrics", []):
            if m["metric"] == metric:
                return None if math.isnan(m["mean"]) else m["mean"]
        return None

    rows = [{"config": r, "recall@fusion_depth": mean(r, "recall@fusion_depth"),
             "recall@context": mean(r, "recall@context"), "answer_f1": mean(r, "answer_f1"),
             "abstention_recall": mean(r, "abstention_recall"), "over_refusal": mean(r, "over_refusal")}
            for r in summaries]
    pipelines = [r for r in rows if r["config"] != "oracle" and r["answer_f1"] is not None]
    oracle = next((r for r in rows if r["config"] == "oracle"), None)
    if oracle is None or oracle["answer_f1"] is None or not pipelines:
        return {"rows": rows, "diagnosis": "no oracle rung: cannot separate retrieval from generation"}
    best = max(pipelines, key=lambda r: r["answer_f1"])
    gap = oracle["answer_f1"] - best["answer_f1"]
    ceiling = best["recall@fusion_depth"]
    if oracle["answer_f1"] < 0.5:
        diag = (f"generation: even with the golden evidence handed to it (oracle context) answer F1 is only "
                f"{oracle['answer_f1']:.2f}, so tune the generator before retrieval")
    elif gap > 0.05:
        diag = (f"retrieval: with oracle context answer F1 is {oracle['answer_f1']:.2f} against "
                f"{best['answer_f1']:.2f} for the best pipeline ({best['config']}), a gap of {gap:.2f}; "
                f"recall@fusion_depth there is {ceiling:.2f} and recall@context "
                f"{best['recall@context']:.2f}, so the evidence is not reaching the generator")
    else:
        diag = (f"neither dominates: the best pipeline ({best['config']}) is within {gap:.2f} answer F1 of the "
                f"oracle rung ({oracle['answer_f1']:.2f})")
    return {"rows": rows, "diagnosis": diag}


def claim_demo_dir(out: Path) -> None:
    """Refuse a folder that holds anything but an earlier demo (the demo replaces its store and traces
    there), then mark it as demo output so the next run may reuse it."""
    from ragassay.fsio import check_output_dir, is_output_of, make_dir, mark_output_dir

    # A demo folder written before the marker existed is recognised by the ragassay report inside it.
    if not (out.is_dir() and is_output_of(out / "report", "report")):
        check_output_dir(out, "demo")
    make_dir(out)
    mark_output_dir(out, "demo")


def run_demo(out: str | Path = "ragassay-demo", *, n_resamples: int = 10_000, configs=DEMO_CONFIGS,
             corpus_path: str | Path | None = None, golden_path: str | Path | None = None,
             report: bool = True, progress=None) -> DemoResult:
    out = Path(out)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    claim_demo_dir(out)
    db = out / "ragassay.duckdb"
    for stale in (db, out / "ragassay.duckdb.wal", out / "traces"):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    corpus, golden = load_inputs(corpus_path, golden_path, out / "golden")
    timings["golden"] = time.perf_counter() - t0
    run_ids: dict[str, str] = {}
    summaries: dict[str, dict] = {}
    with Store.open(db) as st:
        for name in configs:
            t = time.perf_counter()
            run_id, _ = run_pipeline_into_store(st, demo_config_dir() / f"{name}.yaml", corpus, golden, name=name,
                                                traces_dir=out / "traces", cache_dir=out / "cache",
                                                progress=(lambda d, n, name=name: progress(name, d, n))
                                                if progress else None)
            run_ids[name] = run_id
            summaries[name] = run_summary(st.results(run_id))
            timings[f"run:{name}"] = time.perf_counter() - t
        t = time.perf_counter()
        comparisons = [compare_runs(st, run_ids[BASELINE], run_ids[c], n_resamples=n_resamples)
                       for c in configs if c != BASELINE]
        timings["compare"] = time.perf_counter() - t
        gate = run_gate(st, run_ids[BASELINE], run_ids[GATE_CANDIDATE], demo_gate_policy())
        ladder = oracle_ladder(summaries)
        report_path = None
        if report:
            from ragassay.report import render_report

            t = time.perf_counter()
            data = build_report_data(st, [run_ids[c] for c in configs], golden, corpus, comparisons=comparisons,
                                     gate=gate, oracle_ladder=ladder,
                                     title="ragassay demo: four configurations on the license corpus")
            report_path = render_report(data, out / "report")
            timings["report"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    return DemoResult(out, golden, corpus, run_ids, summaries, comparisons, gate, ladder, report_path, timings)
