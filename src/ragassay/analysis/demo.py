"""The embedded default: four configurations on the bundled license corpus, compared, gated, reported.

Before the comparisons the demo validates its local judge on two judgement kinds (spec §11.1: support on the
bundled calibration set, citation support on the bundled citation example), measures a lexical → embedding
cascade on the calibration set (what it saves against the embedding judge alone), and judges every run's
answers with the lexical judge, so faithfulness and the citation metrics exist and every place that shows them
also shows whether the record behind them met the gate floor.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ragassay.analysis.compare import Comparison, compare_runs
from ragassay.analysis.decomposition import decomposition_between, decomposition_of_run, oracle_ladder
from ragassay.analysis.gate import GatePolicy, GateResult, MetricPolicy, run_gate
from ragassay.analysis.golden_status import stored_golden_status
from ragassay.analysis.report_data import build_report_data
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.analysis.summary import stored_run_summary
from ragassay.store import Store

DEMO_CONFIGS = ("bm25", "hybrid", "hybrid_rerank", "oracle")
BASELINE = "bm25"
GATE_CANDIDATE = "hybrid"
ATTRIBUTION_RUN = "bm25"
ATTRIBUTION_QUERIES = 6
# The demo's analysis intervals, like the report's, use fewer resamples than its comparisons.
ANALYSIS_RESAMPLES = 2_000
# The judge the demo validates and then scores every run with: the lexical one needs no model and judges the
# 249 calibration items in about 0.1 s, so the demo can show a real validation without a network.
DEMO_JUDGE = {"provider": "local", "model": "lexical", "metrics": ["faithfulness"]}
# The cascade the demo measures on the calibration set: the lexical judge as tier 1, the embedding judge as
# tier 2 (both local: the saving is in time, since neither costs money).
DEMO_TIER2 = {"provider": "local", "model": "embedding", "metrics": ["faithfulness"]}
# The kinds the demo validates its judge on: a local judge can judge support and citation support.
DEMO_KINDS = ("support", "citation")


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
    # the judge's validation summary (:func:`judge_validation_summary`) and per-run judge metric statuses;
    # ``kinds`` the summary of each kind validated, ``cascade`` the cascade's measured figures
    judge_validation: dict | None = None
    # `golden status` on the demo store (:func:`ragassay.analysis.golden_status.stored_golden_status`, its
    # defaults): saturation and headroom per stratum over the configurations just run
    golden_status: dict | None = None


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


def demo_judge_config():
    from ragassay.judges.config import JudgeConfig

    return JudgeConfig(**DEMO_JUDGE)


def validate_demo_judge(st, cfg, *, kind: str = "support", n_resamples: int = ANALYSIS_RESAMPLES,
                        seed: int = 0) -> dict:
    """Validate ``cfg``'s judge on the bundled labels of ``kind`` (the calibration set for support, the
    bundled example otherwise), store the record and return it with its ``validation_id``, ``meets_floor``
    and ``floor_detail`` (the default floor, as `gate` applies it)."""
    from ragassay.errors import InputError
    from ragassay.judges.kinds import run_kind
    from ragassay.judges.labels import default_labels, load_labels
    from ragassay.judges.validate import Floor, validate_judgements, validation_record

    path = default_labels(kind)
    if path is None:
        raise InputError(f"this ragassay ships no bundled {kind} labels (data/judge_calibration/, "
                         "data/judge_examples/); reinstall the package")
    labels = load_labels(path, kind)
    judged, calls = run_kind(cfg, kind, labels.items, st)
    figures = validate_judgements(labels.items, judged, kind=kind, n_resamples=n_resamples, seed=seed)
    record = validation_record(cfg.pins(), labels, figures, calls=calls, kind=kind)
    record["validation_id"] = st.record_judge_validation(record)
    floor = Floor()
    record["meets_floor"], record["floor_detail"] = floor.check(record)
    record["floor"] = {"min_kappa": floor.min_kappa, "min_class_recall": floor.min_class_recall,
                       "min_per_class": floor.min_per_class, "min_items": floor.min_items}
    return record


def demo_cascade(st, *, n_resamples: int = ANALYSIS_RESAMPLES, seed: int = 0) -> dict:
    """The lexical → embedding cascade on the calibration set (``judge validate --judge embedding.yaml
    --tier1 lexical.yaml``): tier 1 and tier 2 alone and the cascade against the labels on the report split,
    the share escalated, and the time it saves against tier 2 on every item, each with a CI. Stored as the
    embedding judge's validation record with its ``cascade`` figures."""
    from ragassay.judges.cascade import cascade_figures
    from ragassay.judges.config import JudgeConfig
    from ragassay.judges.labels import default_labels, load_labels
    from ragassay.judges.validate import run_judge, validate_judgements, validation_record

    tier1, tier2 = demo_judge_config(), JudgeConfig(**DEMO_TIER2)
    labels = load_labels(default_labels("support"))
    judged2, calls = run_judge(tier2, labels.items, st)
    judged1, _ = run_judge(tier1, labels.items, st)
    figures = validate_judgements(labels.items, judged2, n_resamples=n_resamples, seed=seed)
    cascade = cascade_figures(labels.items, judged1, judged2, n_resamples=n_resamples, seed=seed)
    cascade["tier1"] = tier1.pins()["judge_model"]
    record = validation_record(tier2.pins(), labels, figures, calls=calls, cascade=cascade)
    record["validation_id"] = st.record_judge_validation(record)
    return {"validation_id": record["validation_id"], "tier1": cascade["tier1"], "tier2": record["judge_model"],
            **{k: cascade.get(k) for k in ("n_report", "tiers", "kappa_cascade_minus_tier2", "escalated", "routes",
                                           "cost", "latency", "band", "undefined")}}


def judge_demo_runs(st, run_ids: dict[str, str], traces_dir: Path, golden, corpus, cfg) -> dict[str, dict]:
    """Judge every demo run's answers (its traces in ``traces_dir``) with ``cfg``; the judge metrics' means
    per run name."""
    from ragassay.judges.score import judge_stored_run
    from ragassay.judges.validate import clean
    from ragassay.trace.io import read_traces

    out = {}
    for name, run_id in run_ids.items():
        # the demo wrote these traces itself a moment ago: a malformed record is a bug, not input to skip
        _, traces, _ = read_traces(traces_dir / f"{run_id}.jsonl", strict=True)
        out[name] = clean(judge_stored_run(st, run_id, traces, golden, corpus, cfg).to_dict()["metrics"])
    return out


def judge_metric_statuses(st, run_ids: dict[str, str], metrics) -> dict[str, dict[str, dict]]:
    """{run name: {judge metric: {status, reason}}} for every judge-scored metric among ``metrics``, under the
    default floor: what a table must print beside the metric's number."""
    from ragassay.judges.validate import Floor, judge_status

    floor = Floor()
    out: dict[str, dict[str, dict]] = {}
    for name, run_id in run_ids.items():
        rec = st.get_run(run_id)
        for m in metrics:
            found = judge_status(st, rec, m, floor)
            if found is not None:
                out.setdefault(name, {})[m] = {"status": found[0], "reason": found[1]}
    return out


def judge_validation_summary(record: dict) -> dict:
    """The short form of a validation record the demo prints and `--json` carries: pins, label set, n,
    kappa and agreement with CIs, per-class recall with CIs, and the floor verdict (JSON-serializable)."""
    f = record["figures"]
    return {
        "validation_id": record.get("validation_id"), "judge_model": record["judge_model"],
        "kind": record["kind"], "metrics": record["metrics"], "label_set": record["label_set"],
        "rubric_sha": record["rubric_sha"], "label_set_version": record["label_set_version"],
        "n_items": record["n_items"], "n": record["n"], "excluded": f["excluded"], "scale": f["scale"],
        "passes_kappa": record["passes_kappa"], "kappa": f["kappa"], "agreement": f["agreement"],
        "recall": {c["label"]: c["recall"] for c in f["per_class"]},
        "min_class_recall": record["min_class_recall"], "n_resamples": f["n_resamples"],
        "floor": dict(record["floor"]), "labelled_by": record.get("labelled_by"),
        "meets_floor": record["meets_floor"], "floor_detail": record["floor_detail"],
        "status": "validated" if record["meets_floor"] else "unvalidated",
    }


def judge_validation_section(record: dict, statuses: dict[str, dict[str, dict]],
                             means: dict[str, dict[str, dict]]) -> dict:
    """The report's ``judge_validation`` section (JSON-serializable): everything
    :func:`ragassay.judges.validate.validation_report_section` gives, the floor verdict, and each run's judge
    metric means beside their status, so the page never shows a judge number without it."""
    from ragassay.judges.validate import validation_report_section

    section = validation_report_section(record)
    section["verdict"] = {"meets_floor": record["meets_floor"], "detail": record["floor_detail"],
                          **record["floor"]}
    section["metrics"] = [{"run": name, "metric": m, "mean": means.get(name, {}).get(m, {}).get("mean"),
                           "status": st["status"], "reason": st["reason"]}
                          for name, per in statuses.items() for m, st in sorted(per.items())]
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
             report: Callable[[dict, Path], Path] | None = None, progress=None) -> DemoResult:
    """Run, judge, compare, gate and analyse the demo into ``out``. ``report(data, folder) -> page`` renders
    the demo's report data into ``out/report`` (``ragassay.report.render_report``: the report layer sits above
    analysis, so the caller hands it in); None or False renders no report."""
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
            timings[f"run:{name}"] = time.perf_counter() - t
        # the judge is validated and every run judged before anything compares them, so the comparisons and
        # the tables carry faithfulness with its validation status
        t = time.perf_counter()
        cfg = demo_judge_config()
        records = {kind: validate_demo_judge(st, cfg, kind=kind) for kind in DEMO_KINDS}
        record = records["support"]
        cascade = demo_cascade(st)
        means = judge_demo_runs(st, run_ids, out / "traces", golden, corpus, cfg)
        statuses = judge_metric_statuses(st, run_ids, sorted({m for v in means.values() for m in v}))
        judge_info = {"summary": judge_validation_summary(record), "statuses": statuses,
                      "kinds": {k: judge_validation_summary(r) for k, r in records.items()}, "cascade": cascade,
                      "section": {**judge_validation_section(record, statuses, means),
                                  "kinds": [judge_validation_summary(r) for r in records.values()],
                                  "cascade": cascade}}
        timings["judge"] = time.perf_counter() - t
        for name, run_id in run_ids.items():
            summaries[name] = stored_run_summary(st, run_id)
            for m in summaries[name]["metrics"]:
                if m["metric"] in statuses.get(name, {}):
                    m["judge_status"] = statuses[name][m["metric"]]["status"]
        t = time.perf_counter()
        golden_status = stored_golden_status(st, golden)
        timings["golden_status"] = time.perf_counter() - t
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
            t = time.perf_counter()
            sections = {"decomposition": decomposition, "oracle_ladder": ladder,
                        "judge_validation": judge_info["section"]}
            if attribution is not None:
                sections["attribution"] = attribution
            data = build_report_data(st, ids, golden, corpus, comparisons=comparisons, gate=gate,
                                     sections=sections, analysis_resamples=ANALYSIS_RESAMPLES,
                                     title="ragassay demo: four configurations on the license corpus")
            report_path = report(data, out / "report")
            timings["report"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    return DemoResult(out, golden, corpus, run_ids, summaries, comparisons, gate, ladder, decomposition,
                      attribution, report_path, timings, judge_info, golden_status)
