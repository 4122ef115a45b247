"""The run -> score -> compare -> report path through the command line, on the bundled example."""

import json

import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.cli.app import main as _main


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main(args)
    out = capsys.readouterr().out
    return (e.value.code or 0), out


def test_run_score_compare_report(tmp_path, capsys):
    db, traces = str(tmp_path / "r.duckdb"), tmp_path / "traces"
    code, out = cli(["run", str(demo_config_dir() / "bm25.yaml"), "--store", db, "--traces-dir", str(traces),
                     "--json"], capsys)
    assert code == 0
    run = json.loads(out)
    assert run["run"]["status"] == "complete" and run["run"]["n_queries"] == 171
    metrics = {m["metric"]: m for m in run["summary"]["metrics"]}
    assert metrics["recall@fusion_depth"]["n_undefined"] == 32  # the negative queries: undefined, not 0
    assert 0 < metrics["recall@fusion_depth"]["mean"] <= 1
    extra = run["run"]["extra"]
    assert extra["unit_failures"] == 0 and run["warnings"] == [] and extra["latency"] == "per query"
    assert 0 < extra["context_tokens_mean"] <= 1000  # tokens delivered, under the 1,000-token budget
    jf = run["summary"]["judged_fraction"]
    assert jf["n"] == 171 and 0 < jf["mean"] < 0.5  # most top-10 units touch no labelled span
    assert run["summary"]["latency_ms"]["n"] == 171

    # re-import the run's own traces, with one malformed record appended: counted, never dropped silently
    (trace_file,) = traces.glob("*.jsonl")
    with trace_file.open("a") as f:
        f.write('{"type": "trace", "query_id": "lex-001"}\n')
    code, out = cli(["score", str(trace_file), "--golden", str(tmp_path / "missing"), "--store", db], capsys)
    assert code == 2
    from ragassay.golden import bundled_golden_source

    code, out = cli(["score", str(trace_file), "--golden", str(bundled_golden_source()), "--store", db,
                     "--name", "reimported", "--json"], capsys)
    assert code == 0
    imported = json.loads(out)
    assert imported["import"]["schema_failures"] == 1 and imported["import"]["missing"] == 0
    assert imported["import"]["unit_failures"] == 0 and imported["run"]["extra"]["unit_failure_examples"] == []
    assert imported["run"]["extra"]["context_tokens_mean"] == pytest.approx(extra["context_tokens_mean"])
    assert imported["run"]["extra"]["problems"][0].startswith(f"{trace_file}:")

    code, out = cli(["compare", "bm25", "reimported", "--store", db, "--resamples", "500", "--json"], capsys)
    assert code == 0
    comp = json.loads(out)
    overall = [r for r in comp["rows"] if r["stratum"] == "all"]
    assert overall and all(r["delta"] == 0 and r["losses"] == 0 and r["wins"] == 0 for r in overall)
    assert comp["config_diff"] == []

    code, out = cli(["runs", "--store", db, "--json"], capsys)
    assert [r["name"] for r in json.loads(out)] == ["bm25", "reimported"]

    code, out = cli(["export", "bm25", "--store", db, "-o", str(tmp_path / "pq"), "--json"], capsys)
    import pyarrow.parquet as pq

    results = pq.read_table(json.loads(out)["results"])
    assert results.num_rows == 171 * len(metrics) and set(results["run_id"].to_pylist()) == {run["run"]["run_id"]}

    code, out = cli(["report", "bm25", "reimported", "--store", db, "-o", str(tmp_path / "rep"),
                     "--resamples", "500", "--json"], capsys)
    assert code == 0
    page = (tmp_path / "rep" / "index.html").read_text()
    assert json.loads(out)["bytes"] == len(page.encode())
    assert 'id="queries"' in page and "plot-recall" in page


def test_summary_prints_measured_figures_and_no_parse_ceiling(tmp_path, capsys):
    code, out = cli(["run", str(demo_config_dir() / "hybrid_rerank.yaml"), "--store", str(tmp_path / "r.duckdb"),
                     "--name", "[/bold]", "--batched"], capsys)
    assert code == 0
    assert "\n[/bold] run " in "\n" + out
    assert "parse ceiling" not in out
    assert "judged fraction: 0." in out and "of the top final_k units overlap a labelled span" in out
    assert "tokens per query on average (budget 1,000)" in out
    assert "latency: not measured (no per-request times in this run)" in out
    code, out = cli(["runs", "--store", str(tmp_path / "r.duckdb"), "--json"], capsys)
    assert [r["name"] for r in json.loads(out)] == ["[/bold]"]


def test_run_profile_accounts_for_the_run_and_its_stages(tmp_path, capsys):
    import time

    t0 = time.perf_counter()
    code, out = cli(["run", str(demo_config_dir() / "bm25.yaml"), "--store", str(tmp_path / "r.duckdb"),
                     "--profile", "--json"], capsys)
    wall = time.perf_counter() - t0
    assert code == 0
    prof = json.loads(out)["profile_s"]
    parts = ("build", "labels", "queries", "score", "traces", "store")
    assert all(prof[p] >= 0 for p in parts) and prof["build"] > 0 and prof["queries"] > 0 and prof["score"] > 0
    assert sum(prof[p] for p in parts) <= wall
    # per-query runs time every stage; the stages happen inside the queries part
    stages = {k.removeprefix("stage:"): v for k, v in prof.items() if k.startswith("stage:")}
    assert {"bm25", "fusion", "pack", "generate"} <= stages.keys()
    assert 0 < sum(stages.values()) <= prof["queries"]


def test_run_without_profile_prints_no_profile(tmp_path, capsys):
    code, out = cli(["run", str(demo_config_dir() / "bm25.yaml"), "--store", str(tmp_path / "r.duckdb"), "--json"],
                    capsys)
    assert code == 0 and "profile_s" not in json.loads(out)
