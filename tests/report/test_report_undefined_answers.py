"""A report of runs whose answer_f1 is undefined on every pair (a golden set without reference answers): the
slices section splits the retrieval metric instead, and the page is written — the report used to stop with
"every item has NaN in one arm"."""

from __future__ import annotations

import json

import numpy as np

from ragassay.analysis.compare import compare_runs
from ragassay.analysis.report_data import FOREST_METRIC, build_report_data
from ragassay.analysis.slicing import slice_analysis
from ragassay.corpus import load_corpus
from ragassay.golden import build_golden
from ragassay.report import render_report
from ragassay.store import RunRecord, Store

N = 12


def test_slices_fall_back_to_the_retrieval_metric_when_answer_f1_is_never_defined(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "doc.txt").write_text(" ".join(f"Sentence {i} names item{i:03d}x." for i in range(N)))
    corpus = load_corpus(tmp_path / "corpus")
    src = tmp_path / "golden.jsonl"
    src.write_text("\n".join([json.dumps({"type": "meta", "dataset": "noref"})] + [
        json.dumps({"query_id": f"q{i:02d}", "question": f"What names item {i}?", "stratum": "ab"[i % 2],
                    "evidence": [{"doc_id": "doc", "quote": f"item{i:03d}x", "grade": 3}]}) for i in range(N)]) + "\n")
    golden = build_golden(src, corpus)
    rng = np.random.default_rng(0)
    st = Store.open(tmp_path / "s.duckdb")
    ids = []
    for name in ("a", "b"):
        rid = st.create_run(RunRecord(
            name=name, dataset_version=golden.dataset_version, corpus_digest=corpus.digest, metric_version="t",
            config={"name": name}, hit_rule="any_overlap", relevance_threshold=2, gain="exp", ties="given",
            trials=1))
        qids = [q.query_id for q in golden.queries]
        st.write_batch(rid, {
            "query_id": qids * 2, "trial": [0] * (2 * N),
            "metric": ["answer_f1"] * N + [FOREST_METRIC] * N,
            "value": [float("nan")] * N + rng.uniform(0, 1, N).tolist(),
            "stratum": [q.stratum for q in golden.queries] * 2, "latency_ms": [10.0] * (2 * N)})
        st.finish_run(rid)
        ids.append(rid)
    comp = compare_runs(st, ids[0], ids[1], n_resamples=200)
    data = build_report_data(st, ids, golden, corpus, comparisons=[comp], analysis_resamples=200)
    (sl,) = data["slices"]
    assert sl["metric"] == FOREST_METRIC
    want = slice_analysis(st, ids[0], ids[1], metric=FOREST_METRIC, golden=golden, n_resamples=200)
    assert sl["keys"][0]["delta"] == want["keys"][0]["delta"]
    assert "Slices" in render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    st.close()
