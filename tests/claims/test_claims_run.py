"""Claims judging of stored demo runs (`judge claims`), the claim diff (`analyze claims`), its refusals, the
report fragment and claim validation."""

import json
import math
import shutil

import numpy as np
import pytest
import typer
from sklearn.metrics import cohen_kappa_score
from tests.claims import make_claim_examples
from tests.claims.test_claim_judges import scripted
from tests.judges.fake_provider import FakeProvider
from typer.testing import CliRunner

from ragassay.analysis.claims_diff import claim_breakdowns, claims_diff
from ragassay.analysis.demo import demo_config_dir, demo_judge_config, judge_demo_runs
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.cli.analyze_claims import claims as analyze_claims
from ragassay.cli.judge import judge_app
from ragassay.errors import InputError, PinMismatchError
from ragassay.judges.claims import (
    CHECK_CLASSES,
    bundled_claim_labels,
    check_figures,
    extract_figures,
    judge_claims_run,
    load_claim_labels,
    stored_tables,
    validate_claims,
)
from ragassay.judges.config import load_judge_config
from ragassay.judges.kinds import check_judge_for_kind
from ragassay.judges.validate import best_validation
from ragassay.metrics.claims import BREAKDOWN, CLAIM_METRICS, claim_metrics
from ragassay.report.claims import claims_html, claims_report_section
from ragassay.store import Store
from ragassay.trace.io import read_traces

LOCAL = "provider: local\nmodel: lexical\nmetrics: [faithfulness]\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("claims-demo")
    # the demo's first two runs, judged by the demo's lexical faithfulness judge (what `ragassay demo` does
    # before its comparisons), without the demo's comparisons and analyses
    demo_dir = out / "demo"
    corpus, golden = load_inputs(None, None, demo_dir / "golden")
    with Store.open(demo_dir / "ragassay.duckdb") as st:
        run_ids = {name: run_pipeline_into_store(st, demo_config_dir() / f"{name}.yaml", corpus, golden, name=name,
                                                 traces_dir=demo_dir / "traces", cache_dir=demo_dir / "cache")[0]
                   for name in ("bm25", "hybrid")}
        judge_demo_runs(st, run_ids, demo_dir / "traces", golden, corpus, demo_judge_config())
    cfg = out / "judge.yaml"
    cfg.write_text(LOCAL)
    store = out / "demo" / "ragassay.duckdb"
    for run in ("bm25", "hybrid"):
        _cli("judge", "claims", run, "--judge", cfg, "--store", store, "--golden", out / "demo" / "golden", "--json")
    return {"store": store, "cfg": cfg, "golden": out / "demo" / "golden", "dir": out}


def _cli(*args):
    """``ragassay ARGS`` for the judge group, output captured; a typed error is raised as it is."""
    assert args[0] == "judge"
    res = CliRunner().invoke(judge_app, [str(a) for a in args[1:]])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert res.exit_code == 0, res.output
    return res.output


def _analyze(*args):
    app = typer.Typer()
    app.command("claims")(analyze_claims)
    app.command("noop")(lambda: None)
    return CliRunner().invoke(app, ["claims", *map(str, args)])


def copy_store(demo, tmp_path):
    dst = tmp_path / "s.duckdb"
    shutil.copy(demo["store"], dst)
    return dst


def test_judge_claims_stores_the_eleven_metrics_as_ordinary_rows_with_pins(demo):
    with Store.open(demo["store"], read_only=True) as st:
        rec = st.get_run("bm25")
        assert set(CLAIM_METRICS) <= set(st.metrics(rec.run_id))
        assert "faithfulness" in st.metrics(rec.run_id)  # the demo's own judge metrics stay
        pins = rec.extra["claims_judge"]
        assert pins["judge_model"] == "local:lexical" and pins["relevance"] == "claims"
        rows = st.results(rec.run_id, list(CLAIM_METRICS), columns=["query_id", "trial", "metric", "value"])
        tables = stored_tables(st, rec.run_id)
    assert len(tables) == 171 and rows.num_rows == 171 * 11
    # the stored rows are the metrics of the stored tables
    scores = claim_metrics([tables[k] for k in sorted(tables)], "claims")
    got = {(q, m): v for q, m, v in zip(rows["query_id"].to_pylist(), rows["metric"].to_pylist(),
                                        rows["value"].to_pylist(), strict=True)}
    for i, (q, _) in enumerate(sorted(tables)):
        for k, m in enumerate(CLAIM_METRICS):
            want = scores.values[i, k]
            assert (got[(q, m)] is None and math.isnan(want)) or got[(q, m)] == pytest.approx(want)
    # every supported response claim points to a span of its unit's own text
    t = next(t for t in tables.values() if (t.response_units == 1).any())
    i, j = map(int, np.argwhere(t.response_units == 1)[0])
    s, e = t.response_quotes[i, j]
    base = t.unit_spans[j, 0]
    assert t.unit_texts[j][s - base:e - base].strip()


def test_judging_again_needs_resume_and_the_same_pins(demo, tmp_path):
    store = copy_store(demo, tmp_path)
    with pytest.raises(InputError, match="already judged for claims"):
        _cli("judge", "claims", "bm25", "--judge", demo["cfg"], "--store", store, "--golden", demo["golden"])
    other = tmp_path / "spans.yaml"
    other.write_text(LOCAL + "claims: {relevance: spans}\n")
    with pytest.raises(PinMismatchError, match="relevance claims -> spans"):
        _cli("judge", "claims", "bm25", "--judge", other, "--store", store, "--golden", demo["golden"], "--resume")
    out = json.loads(_cli("judge", "claims", "bm25", "--judge", demo["cfg"], "--store", store, "--golden",
                          demo["golden"], "--resume", "--json"))
    assert out["items"] == 171 and out["quote_not_found"] == 0


def test_analyze_claims_diffs_two_demo_runs_claim_by_claim(demo, tmp_path):
    md = tmp_path / "diff.md"
    res = _analyze("bm25", "hybrid", "--store", demo["store"], "--json", "--out", md)
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["compared"] == 171 and d["changed_queries"] == len(d["queries"]) > 0
    assert sum(len(q["gained"]) for q in d["queries"]) == d["totals"]["gained"]
    with Store.open(demo["store"], read_only=True) as st:
        a, b = stored_tables(st, "bm25"), stored_tables(st, "hybrid")
    for q in d["queries"][:20]:
        key = (q["query_id"], q["trial"])
        norm = lambda ts: {" ".join(c.split()).casefold() for c in ts}  # noqa: E731
        ca, cb = norm(a[key].response_claims), norm(b[key].response_claims)
        assert {" ".join(c["claim"].split()).casefold() for c in q["gained"]} == cb - ca
        assert {" ".join(c["claim"].split()).casefold() for c in q["lost"]} == ca - cb
        for c in q["gained"]:
            s = c["support"]
            if s is not None:  # the excerpt is the unit text at the span
                t = b[key]
                j = t.unit_ids.index(s["unit_id"])
                base = t.unit_spans[j, 0]
                assert " ".join(t.unit_texts[j][s["start"] - base:s["end"] - base].split()).startswith(
                    s["excerpt"].rstrip("…"))
    assert md.read_text().startswith("# Claims: bm25 → hybrid")


def test_analyze_claims_refuses_unjudged_mismatched_and_other_golden_runs(demo, tmp_path):
    store = copy_store(demo, tmp_path)
    with Store.open(store) as st:
        con = st.connection
        rid = st.get_run("bm25").run_id
        extra = st.get_run("bm25").extra
        other = {k: v for k, v in extra.items() if k != "claims_judge"}
        con.execute("UPDATE runs SET extra = ?::JSON WHERE run_id = ?", [json.dumps(other), rid])
        with pytest.raises(InputError, match=r"not judged for claims; run `ragassay judge claims bm25"):
            claims_diff(st, "bm25", "hybrid")
        con.execute("UPDATE runs SET extra = ?::JSON WHERE run_id = ?", [json.dumps(extra), rid])
        con.execute("DELETE FROM judge_calls WHERE run_id = ? AND item = 'claim_table' AND query_id = 'lex-001'",
                    [rid])
        with pytest.raises(InputError, match="different queries .*first lex-001"):
            claims_diff(st, "bm25", "hybrid")
        con.execute("UPDATE runs SET dataset_version = 'other' WHERE run_id = ?", [rid])
        with pytest.raises(PinMismatchError, match="different golden-set versions"):
            claims_diff(st, "bm25", "hybrid")
    res = _analyze("bm25", "hybrid", "--store", store, "--out", tmp_path / "x.txt")
    assert isinstance(res.exception, InputError) and "Markdown" in str(res.exception)


def test_report_fragment_stacks_the_breakdown_and_escapes_run_names(demo, tmp_path):
    store = copy_store(demo, tmp_path)
    with Store.open(store) as st:
        st.connection.execute("UPDATE runs SET name = '<script>alert(1)</script>' WHERE name = 'hybrid'")
        data = claim_breakdowns(st, ["bm25", "<script>alert(1)</script>"])
    for r in data["runs"]:
        assert r["claims"] == sum(r["counts"].values()) > 0
        assert sum(r["shares"].values()) == pytest.approx(1.0)
    html = str(claims_html(data))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count("<rect") >= len(BREAKDOWN)  # the legend's swatches at least


# ------------------------------------------------------------------------------ validation
def test_check_figures_match_sklearn_kappa_and_count_cannot_tell(tmp_path):
    human = ["entailed"] * 5 + ["neutral"] * 4 + ["contradicted"] * 3 + ["cannot_tell"]
    judge = ["entailed"] * 4 + ["neutral"] + ["neutral"] * 3 + ["entailed"] + ["contradicted"] * 2 + ["neutral"] + [
        "entailed"]
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps({"claim": f"c{i}", "passage": "p", "label": h}) + "\n"
                            for i, h in enumerate(human)))
    labels = load_claim_labels(path, "claim_check")
    f = check_figures(labels, judge, ["ok"] * len(judge), n_resamples=200)
    assert f["n"] == 12 and f["excluded"] == {"cannot_tell": 1}
    assert f["kappa"]["value"] == pytest.approx(cohen_kappa_score(human[:12], judge[:12],
                                                                  labels=list(CHECK_CLASSES)))


def test_extract_figures_pool_matched_claims_by_hand(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"text": "t", "claims": ["the licence may be copied", "the notice stays"]}) + "\n"
                    + json.dumps({"text": "u", "claims": ["patents are licensed"]}) + "\n")
    labels = load_claim_labels(path, "claim_extract")
    f = extract_figures(labels, [["The licence may be copied freely", "cats purr"], None], n_resamples=200)
    # matched: 1 human claim of 3 (recall), 1 judge claim of 2 (precision); the unanswered text extracts nothing
    assert f["recall"]["value"] == pytest.approx(1 / 3) and f["precision"]["value"] == pytest.approx(1 / 2)
    assert f["unanswered"] == 1 and f["f1"]["value"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))


def test_label_files_are_refused_with_every_problem_and_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"claim": "a", "passage": "p", "label": "supported"}\nnot json\n'
                    '{"claim": "a", "passage": "p", "label": "neutral", "extra": 1}\n')
    with pytest.raises(InputError) as e:
        load_claim_labels(path, "claim_check")
    msg = str(e.value)
    assert "bad.jsonl:1: label 'supported'" in msg and "bad.jsonl:2: not JSON" in msg and "bad.jsonl:3: unknown" in msg


def test_validating_the_local_claims_judge_stores_a_record_under_its_claim_pins(demo, tmp_path):
    store = copy_store(demo, tmp_path)
    cfg = load_judge_config(demo["cfg"])
    with Store.open(store) as st:
        rec = validate_claims(cfg, "claim_check", bundled_claim_labels("claim_check"), st, n_resamples=200)
        ext = validate_claims(cfg, "claim_extract", bundled_claim_labels("claim_extract"), st, n_resamples=200)
        pins = st.get_run("bm25").extra["claims_judge"]
        stored = st.judge_validations(judge_model=pins["judge_model"], rubric_sha=pins["rubric_sha"])
    assert [r["kind"] for r in stored] == ["claim_check", "claim_extract"]
    # the gate's record lookup finds it from the run's claims pins (model, shas, settings) on the three-way scale
    with Store.open(store, read_only=True) as st:
        found, n = best_validation(st, pins, "claim_check", "three_way")
    assert n == 1 and found["validation_id"] == rec["validation_id"]
    assert rec["n"] == 183 and rec["kappa"] > 0.8 and rec["labelled_by"] == "automated"
    assert not rec["meets_floor"] and "automated" in rec["floor_detail"]  # automated labels never earn it
    assert ext["figures"]["recall"]["value"] > 0.8 and not ext["meets_floor"]


def test_the_bundled_claim_examples_are_current():
    check, extract = make_claim_examples.build()
    assert bundled_claim_labels("claim_check").read_text() == make_claim_examples.render(check)
    assert bundled_claim_labels("claim_extract").read_text() == make_claim_examples.render(extract)


def test_judge_validate_hands_the_claim_kinds_to_validate_claims(demo, tmp_path):
    store = copy_store(demo, tmp_path)
    out = _cli("judge", "validate", "--judge", demo["cfg"], "--kind", "claim_extract", "--store", store,
               "--resamples", 200, "--json")
    rec = json.loads(out)
    assert rec["kind"] == "claim_extract" and rec["n"] == 56 and rec["meets_floor"] is False
    text = _cli("judge", "validate-claims", "--judge", demo["cfg"], "--store", store, "--resamples", 200)
    assert "kappa 0.924" in text and "does NOT meet the floor" in text
    with pytest.raises(InputError, match="validate-claims --kind claim_check"):
        check_judge_for_kind(load_judge_config(demo["cfg"]), "claim_check", "judge.yaml")


def test_an_llm_claims_judge_scores_stored_traces_through_the_fake_provider(demo, tmp_path, monkeypatch):
    store = copy_store(demo, tmp_path)
    server = FakeProvider(lifetime_s=120.0)
    server.start()
    try:
        server.responder = scripted
        monkeypatch.setenv("JUDGE_TEST_KEY", "sk-local-test")
        cfg_path = tmp_path / "llm.yaml"
        cfg_path.write_text(json.dumps({
            "provider": "openai", "model": "judge-m", "base_url": server.base_url, "max_tokens": 256,
            "api_key_env": "JUDGE_TEST_KEY", "concurrency": 16, "metrics": ["faithfulness"],
            "retry": {"max_attempts": 2, "timeout_s": 5, "backoff_base_s": 0.001},
            "prices": {"judge-m": {"input": 1.0, "output": 2.0}}, "claims": {"relevance": "spans"}}))
        cfg = load_judge_config(cfg_path)
        corpus, golden = load_inputs(None, demo["golden"])
        with Store.open(store) as st:
            rec = st.get_run("hybrid")
            bare = {k: v for k, v in rec.extra.items() if k != "claims_judge"}  # as if never judged for claims
            st.connection.execute("UPDATE runs SET extra = ?::JSON WHERE run_id = ?", [json.dumps(bare), rec.run_id])
            header, traces, _ = read_traces(demo["dir"] / "demo" / "traces" / f"{rec.run_id}.jsonl")
            some = [t for t in traces if t.outcome == "answered"][:2]
            summary = judge_claims_run(st, rec.run_id, some, golden, corpus, cfg, header=header)
            pins = st.get_run(rec.run_id).extra["claims_judge"]
            tables = stored_tables(st, rec.run_id)
    finally:
        server.stop()
    assert pins["judge_model"] == "openai:judge-m" and pins["relevance"] == "spans"
    # identical questions (one claim against two equal passages) are paid once
    assert summary.items == 2 and summary.judged.spend > 0 and summary.judged.calls["ok"] >= len(server.seen) > 0
    for t in some:
        tab = tables[(t.query_id, t.trial)]
        assert tab.failed is None and tab.response_claims  # the scripted extractor splits the answer at "."
        # every entailed cell's span is the claim itself, verbatim in its unit (what the scripted judge quotes)
        for i, j in np.argwhere(tab.response_units == 1):
            s, e = tab.response_quotes[i, j]
            base = tab.unit_spans[j, 0]
            assert tab.unit_texts[j][s - base:e - base] == tab.response_claims[i]


def test_the_saved_judge_claims_json_becomes_a_generic_report_section(demo, tmp_path):
    store = copy_store(demo, tmp_path)
    d = json.loads(_cli("judge", "claims", "bm25", "--judge", demo["cfg"], "--store", store, "--golden",
                        demo["golden"], "--resume", "--json"))
    sec = claims_report_section(d)
    rows = {r[0]: r for r in sec["tables"][0]["rows"]}
    assert set(rows) == set(CLAIM_METRICS) and rows["claim_recall"][2] + rows["claim_recall"][3] == 171
    assert sum(s for _, s in sec["tables"][1]["rows"]) == pytest.approx(1.0)


def test_the_gate_holds_a_claim_metric_of_an_unvalidated_claims_judge_at_warn(demo, tmp_path):
    # the claim metrics are judge metrics of the claim_check judgement: the gate looks up the run's claims-judge
    # pins (not the answer judge's) and, with no record meeting the floor, cannot PASS or FAIL on them
    from ragassay.analysis.gate import GatePolicy, run_gate
    from ragassay.judges.validate import Floor, judge_status

    store = copy_store(demo, tmp_path)
    with Store.open(store) as st:
        rec = st.get_run("bm25")
        status, why = judge_status(st, rec, "claims_recall", Floor())
        assert status == "unvalidated" and "no validation record" in why and "claim_check" in why
        validate_claims(load_judge_config(demo["cfg"]), "claim_check", bundled_claim_labels("claim_check"), st,
                        n_resamples=200)
        status, why = judge_status(st, rec, "claims_recall", Floor())
        assert status == "unvalidated" and "automated" in why  # the bundled labels never earn the floor
        result = run_gate(st, "bm25", "hybrid", GatePolicy(metrics={"claims_recall": {"min_effect": 0.05}}))
    (check,) = [c for c in result.checks if c.name == "claims_recall"]
    assert (check.verdict, check.status) == ("WARN", "unvalidated")


def test_the_report_shows_the_claim_breakdown_of_runs_judged_for_claims(demo, tmp_path):
    from ragassay.analysis.claims_diff import claim_breakdowns
    from ragassay.cli.app import main

    store = copy_store(demo, tmp_path)
    # the demo's runs are of the bundled golden set and corpus, the report's defaults
    with pytest.raises(SystemExit) as e:
        main(["report", "bm25", "hybrid", "-o", str(tmp_path / "out"), "--store", str(store), "--no-analyses"])
    assert e.value.code == 0
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert '<section class="claims" id="claims"><h2>Claims</h2>' in html and 'href="#claims"' in html
    with Store.open(store, read_only=True) as st:
        want = claim_breakdowns(st, ["bm25", "hybrid"])
    # each run's claim recall as the section prints it
    for r in want["runs"]:
        assert r["name"] in html
    assert str(claims_html(want)) in html


def test_a_saved_judge_claims_json_is_a_report_include_kind(demo, tmp_path):
    from ragassay.report.include import load_include

    store = copy_store(demo, tmp_path)
    saved = tmp_path / "claims.json"
    saved.write_text(_cli("judge", "claims", "bm25", "--judge", demo["cfg"], "--store", store, "--golden",
                          demo["golden"], "--resume", "--json"), encoding="utf-8")
    sec = load_include(saved)
    assert sec["title"] == "Claims: bm25" and sec["kind"] == "judge claims"
