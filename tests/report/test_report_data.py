"""The report's data path: traces read for display (problems counted by line), the full per-query results
written to queries.parquet beside the page, equal to the store's rows, and the comparison claims in the gate
policy's order."""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from ragassay.analysis.compare import compare_runs, coverage_claims
from ragassay.analysis.gate import GatePolicy, MetricPolicy, run_gate
from ragassay.analysis.report_data import build_report_data, read_report_traces
from ragassay.analysis.runner import load_inputs
from ragassay.cli.app import main
from ragassay.report import render_report
from ragassay.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from report_scale import METRICS, build_inputs  # noqa: E402


def test_traces_are_read_for_display_and_bad_records_counted_by_line(tmp_path):
    lines = [
        '{"type":"header","run_name":"x"}',
        '{"type":"trace","trace_id":"a","query_id":"q1","fused":[{"unit_id":"u","doc_id":"d","start":0,"end":5}],'
        '"outcome":"answered","answer":"hi"}',
        "not json",
        "[1]",
        '{"type":"trace","query_id":"q2","reranked":[{"doc_id":"d","start":"0","end":5}]}',
        '{"type":"trace","query_id":"q1"}',
        '{"type":"other"}',
        '{"type":"trace","query_id":"q3","outcome":"answered"}',
        '{"type":"trace","query_id":"q4","packed":[{"doc_id":"d","start":1,"end":2}]}',
        '{"type":"trace","query_id":"q5","trial":1,"fused":[{"doc_id":"d","start":1,"end":2}]}',
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t = read_report_traces(path)
    assert [line for line, _ in t.problems] == [3, 4, 5, 6, 7, 8]
    assert t.problems[2][1] == "reranked[0] needs integer start and end offsets"
    assert t.problems[3][1] == "duplicate trace for query 'q1' trial 0 (first at line 2); skipped"
    assert t.shown == {"q1": ("answered", "hi", [("d", 0, 5, None)]), "q4": (None, None, [("d", 1, 2, None)])}
    assert t.ranked == {"q1": [("d", 0, 5)]}  # packed units are shown but are not a ranking; trial 1 is not shown


def test_report_writes_every_result_row_to_parquet(tmp_path, capsys):
    n = 60
    inputs = build_inputs(tmp_path / "in", n)
    out = tmp_path / "rep"
    try:
        main(["report", *inputs["runs"], "-o", str(out), "--store", str(inputs["store"]), "--corpus",
              str(inputs["corpus"]), "--golden", str(inputs["golden"]), "--resamples", "200", "--json"])
    except SystemExit as e:
        assert e.code in (0, None)
    summary = json.loads(capsys.readouterr().out)
    assert summary["parquet"] == str(out / "queries.parquet") and summary["warnings"] == []
    table = pq.read_table(out / "queries.parquet")
    assert summary["parquet_bytes"] == (out / "queries.parquet").stat().st_size
    assert table.num_rows == 2 * n * len(METRICS)
    assert table.column_names == ["run_id", "run_name", "query_id", "trial", "metric", "value", "stratum",
                                  "latency_ms"]
    with Store.open(inputs["store"], read_only=True) as st:
        for name in inputs["runs"]:
            rec = st.get_run(name)
            want = st.results(rec.run_id)
            got = table.filter(table["run_name"].to_numpy(zero_copy_only=False) == name)
            assert set(got["run_id"].to_pylist()) == {rec.run_id}
            for col in ("query_id", "metric", "stratum"):
                assert got[col].to_pylist() == want[col].to_pylist()
            np.testing.assert_array_equal(got["value"].to_numpy(zero_copy_only=False),
                                          want["value"].to_numpy(zero_copy_only=False))
    page = (out / "index.html").read_text(encoding="utf-8")
    assert 'href="queries.parquet"' in page


def test_report_claims_follow_the_gate_policy_then_the_pipeline_order(tmp_path):
    inputs = build_inputs(tmp_path / "in", 60)
    corpus, golden = load_inputs(inputs["corpus"], inputs["golden"])
    policy = GatePolicy(n_resamples=200, metrics={"answer_f1": MetricPolicy(min_effect=0.03),
                                                  "recall@fusion_depth": MetricPolicy(min_effect=0.03)})
    with Store.open(inputs["store"], read_only=True) as st:
        comp = compare_runs(st, "baseline", "candidate", n_resamples=200)
        ids = [st.get_run(name).run_id for name in inputs["runs"]]
        gated = build_report_data(st, ids, golden, corpus, comparisons=[comp], analyses=False,
                                  gate=run_gate(st, "baseline", "candidate", policy))
        default = build_report_data(st, ids, golden, corpus, comparisons=[comp], analyses=False)

    def claims(metrics):
        return [comp.claim(comp.overall(m)) for m in metrics] + coverage_claims(comp)

    # compare itself writes them in pipeline order
    assert comp.claims == claims(["recall@fusion_depth", "recall@final_k", "ndcg@final_k", "recall@context",
                                  "answer_f1", "abstention_recall", "over_refusal"])
    pipeline = ["recall@final_k", "ndcg@final_k", "recall@context", "abstention_recall", "over_refusal"]
    want = claims(["answer_f1", "recall@fusion_depth", *pipeline])
    assert gated["comparisons"][0]["claims"] == want
    # without a gate the built-in policy (recall@fusion_depth, ndcg@final_k) leads
    assert default["comparisons"][0]["claims"] == claims(
        ["recall@fusion_depth", "ndcg@final_k", "recall@final_k", "recall@context", "answer_f1",
         "abstention_recall", "over_refusal"])
    page = render_report(gated, tmp_path / "rep").read_text(encoding="utf-8")
    assert [html.unescape(s) for s in re.findall(r'<p class="claim">(.*?)</p>', page, flags=re.S)] == want
