"""`ragassay run --keep-traces` keeps the run's traces beside the store (where `ragassay.evaluate` keeps them),
says where, and `judge RUN` and the report's per-query view read them; `--traces-dir` chooses another folder;
`--judge` keeps them; without any of these none are kept and the summary says how to get them."""

from __future__ import annotations

import json

import pytest
from tests.api.test_api_traces import DOCS, _golden_yaml, cli

from ragassay.analysis.demo import demo_config_dir
from ragassay.corpus import load_corpus
from ragassay.golden import build_golden
from ragassay.store import Store
from ragassay.trace.io import read_traces

BM25 = demo_config_dir() / "bm25.yaml"


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    (root / "docs").mkdir()
    for doc_id, text in DOCS.items():
        (root / "docs" / f"{doc_id}.txt").write_text(text)
    (root / "golden.yaml").write_text(_golden_yaml())
    build_golden(root / "golden.yaml", load_corpus(root / "docs"), root / "golden")
    return root


def _inputs(own):
    return ("--golden", own / "golden", "--corpus", own / "docs")


def test_run_keeps_its_traces_beside_the_store_and_judge_and_report_read_them(own, tmp_path):
    db = tmp_path / "runs.duckdb"
    res = cli("run", BM25, "--store", db, *_inputs(own), "--keep-traces", "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    run_id = out["run"]["run_id"]
    kept = tmp_path / "runs.traces" / f"{run_id}.jsonl"
    assert out["traces"] == str(kept.resolve()) and out["run"]["extra"]["traces_dir"] == str(kept.parent.resolve())
    header, traces, problems = read_traces(kept)
    assert problems == [] and sorted(t.query_id for t in traces) == ["q1", "q2", "q3", "q4", "q5", "q6"]

    res = cli("run", BM25, "--store", db, *_inputs(own), "--name", "again", "--keep-traces")
    assert res.code == 0, res.err
    with Store.open(db, read_only=True) as st:
        again = st.get_run("again").run_id
    assert f"traces: {(tmp_path / 'runs.traces' / f'{again}.jsonl').resolve()} (read by `ragassay judge`" in \
        " ".join(res.out.split())

    judge = tmp_path / "judge.yaml"
    judge.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    res = cli("judge", run_id, "--judge", judge, "--store", db, *_inputs(own), "--json")
    assert res.code == 0, res.err
    judged = json.loads(res.out)
    answered = sum(t.outcome == "answered" for t in traces)
    assert judged["items"] == 6 and judged["metrics"]["faithfulness"]["defined"] == answered

    res = cli("report", run_id, "again", "-o", tmp_path / "report", "--store", db, *_inputs(own), "--resamples",
              "200", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["warnings"] == []
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "Per-query traces unavailable" not in page
    shown = next(t for t in traces if t.outcome == "answered" and t.answer)
    assert shown.answer[:20].replace("'", "&#39;") in page or json.dumps(shown.answer[:20])[1:-1] in page


def test_without_keep_traces_none_are_kept_the_summary_says_how_and_judge_says_why(own, tmp_path):
    db = tmp_path / "r.duckdb"
    res = cli("run", BM25, "--store", db, *_inputs(own), "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["traces"] is None and out["run"]["extra"].get("traces_dir") is None
    assert not (tmp_path / "r.traces").exists()
    res = cli("run", BM25, "--store", db, *_inputs(own), "--name", "plain")
    assert res.code == 0, res.err
    assert "traces: not kept; rerun with --keep-traces (or --traces-dir DIR)" in " ".join(res.out.split())
    judge = tmp_path / "judge.yaml"
    judge.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    res = cli("judge", out["run"]["run_id"], "--judge", judge, "--store", db, *_inputs(own))
    assert res.code == 2
    assert "recorded no traces (run it with --keep-traces" in res.err and "pass the traces with --traces" in res.err


def test_run_with_judge_keeps_the_traces_it_reads(own, tmp_path):
    judge = tmp_path / "judge.yaml"
    judge.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    res = cli("run", BM25, "--store", tmp_path / "r.duckdb", *_inputs(own), "--judge", judge, "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["traces"] == str((tmp_path / "r.traces" / f"{out['run']['run_id']}.jsonl").resolve())


def test_keep_traces_with_traces_dir_is_refused_before_the_store_exists(own, tmp_path):
    db = tmp_path / "r.duckdb"
    res = cli("run", BM25, "--store", db, *_inputs(own), "--keep-traces", "--traces-dir", tmp_path / "t")
    assert res.code == 2 and "--keep-traces keeps them beside the store and --traces-dir in DIR" in res.err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_foreign_folder_where_the_traces_would_go_is_refused_with_the_way_out(own, tmp_path):
    (tmp_path / "r.traces").mkdir()
    (tmp_path / "r.traces" / "notes.txt").write_text("mine\n")
    res = cli("run", BM25, "--store", tmp_path / "r.duckdb", *_inputs(own), "--keep-traces")
    assert res.code == 2
    err = " ".join(res.err.split())
    assert "r.traces: folder is not empty and is not an earlier ragassay traces output" in err
    assert "choose one with --traces-dir DIR, or keep none by leaving out --keep-traces / --judge" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.traces"]  # no store was created
    res = cli("run", BM25, "--store", tmp_path / "r.duckdb", *_inputs(own), "--traces-dir", tmp_path / "elsewhere")
    assert res.code == 0, res.err
    assert sorted(p.name for p in (tmp_path / "r.traces").iterdir()) == ["notes.txt"]


def test_a_resumed_run_keeps_the_folder_it_recorded(own, tmp_path):
    db, chosen = tmp_path / "r.duckdb", tmp_path / "chosen"
    res = cli("run", BM25, "--store", db, *_inputs(own), "--traces-dir", chosen, "--name", "first", "--json")
    assert res.code == 0, res.err
    res = cli("run", BM25, "--store", db, *_inputs(own), "--resume", "first", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["traces"] == str(chosen.resolve() / f"{json.loads(res.out)['run']['run_id']}.jsonl")
    assert not (tmp_path / "r.traces").exists()


def test_readme_own_golden_set_commands_measure_our_own_spans(own, tmp_path):
    """The quick start's sentence: `ragassay parse docs/ --golden golden/` works on your own labels."""
    res = cli("parse", own / "docs", "--golden", own / "golden", "--json")
    assert res.code == 0, res.err
    table_aware = json.loads(res.out)["parsers"][0]
    overall = next(g for g in table_aware["by_stratum"] if g["group"] == "all")
    assert (overall["n"], overall["n_lost"]) == (5, 0)  # the five evidence quotes of our own set
    assert {g["group"] for g in table_aware["by_stratum"]} == {"terms", "goods", "all"}


def test_a_resumed_run_that_kept_no_traces_refuses_to_start_keeping_them(own, tmp_path):
    """A resumed run's trace file would hold only the resumed batches: --keep-traces, --judge and --traces-dir
    are refused before anything runs, and the store and its folder stay as they were."""
    db = tmp_path / "r.duckdb"
    res = cli("run", BM25, "--store", db, *_inputs(own), "--name", "plain", "--json")
    assert res.code == 0, res.err
    judge = tmp_path / "judge.yaml"
    judge.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    for flags, flag in ((("--keep-traces",), "--keep-traces"), (("--judge", judge), "--judge"),
                        (("--traces-dir", tmp_path / "t"), "--traces-dir")):
        res = cli("run", BM25, "--store", db, *_inputs(own), "--resume", "plain", *flags)
        assert res.code == 2, (flag, res.out)
        err = " ".join(res.err.split())
        assert "run plain (" in err and f"kept no traces when it started, so {flag} would keep only the " \
            "resumed part" in err and "start the run again with --keep-traces" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["judge.yaml", "r.duckdb"]
    res = cli("run", BM25, "--store", db, *_inputs(own), "--resume", "plain", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["traces"] is None


def test_a_resumed_run_refuses_another_traces_dir_and_takes_its_own_by_a_relative_path(own, tmp_path, monkeypatch):
    db, chosen = tmp_path / "r.duckdb", tmp_path / "chosen"
    res = cli("run", BM25, "--store", db, *_inputs(own), "--traces-dir", chosen, "--name", "first", "--json")
    assert res.code == 0, res.err
    run_id = json.loads(res.out)["run"]["run_id"]
    res = cli("run", BM25, "--store", db, *_inputs(own), "--resume", "first", "--traces-dir", tmp_path / "other")
    assert res.code == 2
    assert f"keeps its traces in {chosen.resolve()}, not {tmp_path / 'other'}; leave out --traces-dir" in \
        " ".join(res.err.split())
    assert not (tmp_path / "other").exists()
    monkeypatch.chdir(tmp_path)
    res = cli("run", BM25, "--store", db, *_inputs(own), "--resume", "first", "--traces-dir", "chosen", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["traces"] == str(chosen.resolve() / f"{run_id}.jsonl")


@pytest.mark.parametrize("flags", [("--keep-traces",), ("--traces-dir", "t")])
def test_an_imported_trace_file_refuses_a_folder_to_keep_traces_in(own, tmp_path, flags):
    db = tmp_path / "r.duckdb"
    res = cli("run", BM25, "--store", db, *_inputs(own), "--traces-dir", tmp_path / "kept", "--json")
    assert res.code == 0, res.err
    kept = next((tmp_path / "kept").glob("*.jsonl"))
    res = cli("run", BM25, "--store", tmp_path / "imp.duckdb", *_inputs(own), "--traces", kept,
              *[tmp_path / f if f == "t" else f for f in flags])
    assert res.code == 2
    assert f"{flags[0]} keeps the traces a pipeline run makes; a file imported with --traces stays the run's " \
        "traces where it is" in " ".join(res.err.split())
    assert not (tmp_path / "imp.duckdb").exists() and not (tmp_path / "t").exists()
