"""`ragassay agent run`, `agent demo` and `transcripts` on a local app (the lead wires them into cli/app.py):
JSON output, stored runs, written pages, and one-line input errors."""

import json
from pathlib import Path

import pytest

from ragassay.errors import InputError
from ragassay.pipeline.agent import verdicts
from ragassay.trace.io import read_traces


def _json(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.output)


def test_agent_run_writes_traces_workdirs_and_stores_the_run(cli, example, tmp_path):
    _, gs = example
    out = _json(cli(["agent", "run", "--config", "careful", "--out-dir", tmp_path / "runs", "--store",
                     tmp_path / "s.duckdb", "--human-fix-cost", "5", "--json"]))
    path = Path(out["traces_path"])
    assert path == tmp_path / "runs" / "careful" / "traces.jsonl"
    header, traces, problems = read_traces(path)
    assert problems == [] and len(traces) == out["traces"] == 32
    vs = verdicts(traces, gs)
    assert out["verified_success"] == sum(v["success"] for v in vs) == 28
    assert out["silent_failures"] == 1 and out["claimed_success"] == 29
    assert out["workdirs"] == [str((tmp_path / "runs" / "careful" / "work").resolve())]
    assert out["agent_scoring"]["agent_rows"] == 32 and out["agent_scoring"]["verifier_errors"] == 0
    from ragassay.store import Store

    with Store.open(tmp_path / "s.duckdb", read_only=True) as st:
        t = st.results(out["run_id"], metrics=["task_success"])
        assert sum(t["value"].to_pylist()) == 28
        assert (st.get_run(out["run_id"]).extra or {})["agent"]["human_fix_cost"] == 5.0
    # running it again into the same folder replaces ragassay's own earlier run (work folder wiped first)
    again = _json(cli(["agent", "run", "--config", "careful", "--out-dir", tmp_path / "runs", "--json"]))
    assert again["verified_success"] == 28 and "run_id" not in again


def test_agent_run_refuses_bad_input_with_one_line(cli, tmp_path):
    r = cli(["agent", "run", "--config", "reckless", "--out-dir", tmp_path])
    assert isinstance(r.exception, InputError) and "use one of careful, cheap" in str(r.exception)
    r = cli(["agent", "run", "--human-fix-cost", "5", "--out-dir", tmp_path])
    assert isinstance(r.exception, InputError) and "--store" in str(r.exception)
    r = cli(["agent", "run", "--golden", tmp_path / "g.yaml", "--out-dir", tmp_path])
    assert isinstance(r.exception, InputError) and "--corpus and --golden together" in str(r.exception)
    (tmp_path / "runs" / "cheap").mkdir(parents=True)
    (tmp_path / "runs" / "cheap" / "mine.txt").write_text("x")
    r = cli(["agent", "run", "--out-dir", tmp_path / "runs"])
    assert isinstance(r.exception, InputError) and "not empty" in str(r.exception)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsearch: {top_k: 0, rerank: true}\n")
    r = cli(["agent", "run", "--config", bad, "--out-dir", tmp_path / "r2"])
    assert isinstance(r.exception, InputError)
    assert "search.top_k" in str(r.exception) and "search.rerank: unknown key" in str(r.exception)


def test_agent_demo_reports_both_configurations_with_intervals(cli, tmp_path):
    rep = _json(cli(["agent", "demo", "--out-dir", tmp_path / "demo", "--json"]))
    cheap, careful = rep["runs"]
    assert (cheap["name"], careful["name"]) == ("cheap", "careful") and rep["human_fix_cost"] == 5.0
    assert cheap["headline"]["task_success"]["value"] == pytest.approx(23 / 32)
    assert careful["headline"]["task_success"]["value"] == pytest.approx(28 / 32)
    assert cheap["headline"]["silent_failure"]["value"] == pytest.approx(9 / 32)
    for r in (cheap, careful):
        f = r["headline"]["cost_per_resolved_task"]
        assert f["lo"] <= f["value"] <= f["hi"]
        assert [h["hop"] for h in r["hops"]] == [1, 2, 3]
    # cost per resolved task by hand (spec section 12): (mean cost + failure rate x $5) / success rate
    from ragassay.trace.io import read_traces as rt

    for r, n_ok in ((cheap, 23), (careful, 28)):
        _, traces, _ = rt(tmp_path / "demo" / r["name"] / "traces.jsonl")
        mean = sum(t.cost for t in traces) / 32
        p = n_ok / 32
        assert r["headline"]["cost_per_resolved_task"]["value"] == pytest.approx((mean + (1 - p) * 5) / p)
    assert rep["delta"]["figures"]["task_success"]["delta"] == pytest.approx(5 / 32)
    # the kept store feeds `transcripts`
    tr = _json(cli(["transcripts", "careful", "--store", tmp_path / "demo" / "agent-demo.duckdb", "--json"]))
    assert tr["basis"] == "task_success" and tr["n_failures"] == 4 and tr["shown"] == 4
    # a second demo into the same folder replaces its own output
    assert _json(cli(["agent", "demo", "--out-dir", tmp_path / "demo", "--json"]))["runs"][0]["name"] == "cheap"


def test_agent_demo_text_output_names_the_figures(cli):
    r = cli(["agent", "demo"])
    assert r.exit_code == 0, r.output
    for phrase in ("task success: 71.9%", "task success: 87.5%", "cost per resolved task", "hop 2 sufficiency",
                   "paired: careful minus cheap"):
        assert phrase in r.output
    assert "\u00a7" not in r.output


def test_transcripts_cli_writes_html_and_markdown_and_refuses_foreign_files(cli, tmp_path):
    _json(cli(["agent", "run", "--out-dir", tmp_path / "runs", "--store", tmp_path / "s.duckdb", "--json"]))
    out = _json(cli(["transcripts", "cheap", "--store", tmp_path / "s.duckdb", "--sample", "3", "--out",
                     tmp_path / "t.html", "--json"]))
    assert out["shown"] == 3 and sorted({t["stratum"] for t in out["transcripts"]}) == [
        "author_birthplace", "founder_birthplace", "three_hop"]
    page = (tmp_path / "t.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "<link" not in page
    assert all(t["query_id"] in page for t in out["transcripts"])
    # the page is ours: a second run may replace it; a foreign file is refused
    assert cli(["transcripts", "cheap", "--store", tmp_path / "s.duckdb", "--out", tmp_path / "t.html"]).exit_code == 0
    r = cli(["transcripts", "cheap", "--store", tmp_path / "s.duckdb", "--out", tmp_path / "t.md"])
    assert r.exit_code == 0 and (tmp_path / "t.md").read_text().startswith("<!-- ragassay-transcripts -->")
    (tmp_path / "notes.html").write_text("<p>mine</p>")
    r = cli(["transcripts", "cheap", "--store", tmp_path / "s.duckdb", "--out", tmp_path / "notes.html"])
    assert isinstance(r.exception, InputError) and (tmp_path / "notes.html").read_text() == "<p>mine</p>"
    r = cli(["transcripts", "cheap", "--store", tmp_path / "s.duckdb", "--out", tmp_path / "t.pdf"])
    assert isinstance(r.exception, InputError) and ".html or .md" in str(r.exception)
    r = cli(["transcripts", "cheap", "--store", tmp_path / "nope.duckdb"])
    assert isinstance(r.exception, InputError) and "no such store" in str(r.exception)
    text = cli(["transcripts", "cheap", "--store", tmp_path / "s.duckdb", "--sample", "1"]).output
    assert "claim:" in text and "verdict:" in text and "\u00a7" not in text
