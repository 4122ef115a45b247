"""`ragassay embed-check` and `ragassay index-eval`: JSON output, the golden column against run scoring, errors."""

import json

import numpy as np
import pytest

from ragassay.cli.app import main
from ragassay.cli.index import dense_branch, golden_recall_fn
from ragassay.metrics.ann import IndexConfig, build_with_cost


def _run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture(scope="module")
def branch():
    return dense_branch()


def test_golden_recall_through_a_flat_index_equals_the_scored_dense_run(branch):
    from ragassay.analysis.scoring import score_traces

    header, traces = branch.pipeline.run(branch.golden.queries, progress=False)
    scored = score_traces(branch.golden, traces, header)
    cols = scored.columns
    vals = np.array([v for m, v in zip(cols["metric"], cols["value"], strict=True) if m == "recall@10"],
                    dtype=float)
    flat, _ = build_with_cost("flat", branch.passages)
    got = golden_recall_fn(branch)(flat, IndexConfig("flat", "flat"))
    assert got == pytest.approx(np.nanmean(vals), abs=1e-12)
    assert 0.2 < got < 0.6


def test_embed_check_json_on_the_bundled_corpus(capsys):
    code, out, _ = _run(["embed-check", "--json", "--resamples", "500"], capsys)
    assert code == 0
    res = json.loads(out)
    assert res["n_queries"] == 171
    g = res["gap"]
    assert g["ci_low"] < g["gap"] < g["ci_high"] and g["gap"] > 0
    assert sum(res["top1"]["counts"]) == 171
    assert res["truncation"]["max_tokens"] == 512 and res["truncation"]["truncated"] == 0
    assert 0 <= res["duplicates"]["removable_rate"] <= res["duplicates"]["collapse_rate"] <= 1
    assert "drift" not in res


def test_index_eval_synthetic_json_and_summary(capsys):
    args = ["index-eval", "--synthetic", "3000", "--dim", "32", "--values", "4,64", "--n-queries", "100",
            "--concurrency", "2", "--selectivity", "0.01"]
    code, out, _ = _run(args + ["--json"], capsys)
    assert code == 0
    res = json.loads(out)
    pts = res["curve"]["points"]
    assert [p["value"] for p in pts] == [4, 64] and pts[0]["recall"] < pts[1]["recall"]
    assert res["latency"][0]["concurrency"] == 2
    assert [(f["selectivity"], f["strategy"]) for f in res["filtered"]] == [(0.01, "pre"), (0.01, "post")]
    rows = {r["config"]: r for r in res["pareto"]["rows"]}
    assert rows["flat"]["ann_recall@50"] == 1.0 and rows["flat"]["retrieval_recall@10"] is None
    code, out, _ = _run(args, capsys)
    assert code == 0 and "ANN recall@10 by efSearch" in out and "Pareto" in out


@pytest.mark.parametrize("args, message", [
    (["--kind", "flat"], "--kind must be hnsw or ivf"),
    (["--values", "8,x"], "--values: expected comma-separated integers"),
    (["--selectivity", "2"], "every selectivity must be in (0, 1]"),
    (["--queries", "q.npy"], "--queries needs --vectors"),
    (["--vectors", "missing.npy"], "missing.npy: file not found"),
])
def test_index_eval_bad_flags_exit_2_with_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(["index-eval", *args], capsys)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err


def test_index_eval_reads_npy_vectors(capsys, tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "base.npy", rng.standard_normal((400, 8)).astype(np.float32))
    code, out, _ = _run(["index-eval", "--vectors", str(tmp_path / "base.npy"), "--values", "400", "--kind", "ivf",
                         "--no-pareto", "--n-queries", "50", "--json"], capsys)
    assert code == 0
    res = json.loads(out)
    assert res["n"] == 400 and res["curve"]["knob"] == "nprobe" and res["curve"]["points"][0]["recall"] == 1.0
    assert "pareto" not in res


def test_index_report_section_arranges_both_outputs_as_json_tables(capsys):
    from ragassay.metrics.ann import index_report_section

    code, out, _ = _run(["index-eval", "--synthetic", "500", "--dim", "8", "--values", "4,32", "--n-queries", "30",
                         "--selectivity", "0.001", "--concurrency", "1", "--json"], capsys)
    assert code == 0
    ie = json.loads(out)
    ec = {"drift": {"n": 5, "k": 2, "spearman": float("nan"), "kendall": 0.5, "overlap_at_k": 1.0,
                    "self_cosine": None}}
    sec = index_report_section(ie, ec)
    json.dumps(sec, allow_nan=False)  # strict JSON: undefined values became null
    titles = [t["title"] for t in sec["tables"]]
    assert titles == ["ANN recall@10 vs efSearch (hnsw)", "Query latency", "Build cost", "Filtered ANN recall",
                      "Recall after churn", "Quantization Pareto table", "Drift probe"]
    curve = sec["tables"][0]
    assert [r[0] for r in curve["rows"]] == [4, 32]
    assert curve["rows"][1][1] == ie["curve"]["points"][1]["recall"]
    assert sec["tables"][-1]["rows"] == [[5, 2, None, 0.5, 1.0, None]]
    assert index_report_section() == {"title": "Embeddings and index", "tables": [], "notes": []}
