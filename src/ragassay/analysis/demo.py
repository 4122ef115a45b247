"""The embedded default: four configurations on the bundled license corpus, compared, gated, reported."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ragassay.analysis.compare import Comparison, compare_runs
from ragassay.analysis.decomposition import decomposition_between, decomposition_of_run, oracle_ladder
from ragassay.analysis.gate import GatePolicy, GateResult, MetricPolicy, run_gate
from ragassay.analysis.report_data import build_report_data
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.analysis.summary import run_summary
from ragassay.store import Store

DEMO_CONFIGS = ("bm25", "hybrid", "hybrid_rerank", "oracle")
BASELINE = "bm25"
GATE_CANDIDATE = "hybrid"
ATTRIBUTION_RUN = "bm25"
ATTRIBUTION_QUERIES = 6
# The demo's analysis intervals, like the report's, use fewer resamples than its comparisons.
ANALYSIS_RESAMPLES = 2_000


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
    decomposition: dict
    attribution: dict | None
    report: Path | None
    timings: dict[str, float] = field(default_factory=dict)


def demo_attribution(st, run_id: str, corpus, golden, config: Path, cache_dir: Path,
                     n_queries: int = ATTRIBUTION_QUERIES) -> dict:
    """Leave-one-out deltas of each packed item on the first ``n_queries`` answerable queries whose context
    held relevant evidence: regenerate without the item with the run's own generator and re-score answer F1.
    Bounded (a handful of queries, leave-one-out only, no Shapley) so the demo stays about ten seconds."""
    from ragassay.analysis.attribution import attribute, attribution_report_section, contexts_from_traces
    from ragassay.analysis.slicing import run_traces
    from ragassay.pipeline import Pipeline, load_config

    cfg = load_config(config).model_copy(update={"cache_dir": str(cache_dir)})
    pipe = Pipeline.from_config(cfg, corpus)
    traces = run_traces(st, run_id)
    delivered = st.results_wide(run_id, ["recall@context"])
    hit = {q for q, t, v in zip(delivered.query_ids, delivered.trials, delivered.values[:, 0], strict=True)
           if t == 0 and v > 0}
    queries = [q for q in golden.queries if q.answerable and q.reference_answer and q.query_id in hit][:n_queries]
    contexts, _ = contexts_from_traces([traces[(q.query_id, 0)] for q in queries], corpus)
    res = attribute(queries, contexts, pipe._generator, metric="answer_f1", shapley="none", n_resamples=1_000)
    section = attribution_report_section(res, top=n_queries)
    section["limit_note"] = (f"Run {st.get_run(run_id).name}, first {len(queries)} answerable queries whose packed "
                             f"context held relevant evidence (the demo keeps this short; `ragassay analyze "
                             f"attribution` covers every query and adds Shapley shares).")
    return section


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
        t = time.perf_counter()
        ids = [run_ids[c] for c in configs]
        ladder = oracle_ladder(st, ids, n_resamples=ANALYSIS_RESAMPLES)
        decomposition = {"kind": "decomposition", "n_resamples": ANALYSIS_RESAMPLES, "skipped": [],
                         "runs": [decomposition_of_run(st, r, by_stratum=False, n_resamples=ANALYSIS_RESAMPLES)
                                  for r in ids],
                         "changes": [decomposition_between(st, run_ids[BASELINE], run_ids[c],
                                                           n_resamples=ANALYSIS_RESAMPLES)
                                     for c in configs if c != BASELINE]}
        timings["decomposition"] = time.perf_counter() - t
        attribution = None
        if ATTRIBUTION_RUN in run_ids:
            t = time.perf_counter()
            attribution = demo_attribution(st, run_ids[ATTRIBUTION_RUN], corpus, golden,
                                           demo_config_dir() / f"{ATTRIBUTION_RUN}.yaml", out / "cache")
            timings["attribution"] = time.perf_counter() - t
        report_path = None
        if report:
            from ragassay.report import render_report

            t = time.perf_counter()
            sections = {"decomposition": decomposition, "oracle_ladder": ladder}
            if attribution is not None:
                sections["attribution"] = attribution
            data = build_report_data(st, ids, golden, corpus, comparisons=comparisons, gate=gate,
                                     sections=sections, analysis_resamples=ANALYSIS_RESAMPLES,
                                     title="ragassay demo: four configurations on the license corpus")
            report_path = render_report(data, out / "report")
            timings["report"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    return DemoResult(out, golden, corpus, run_ids, summaries, comparisons, gate, ladder, decomposition,
                      attribution, report_path, timings)
