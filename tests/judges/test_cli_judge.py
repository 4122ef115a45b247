"""`ragassay judge` end to end: score traces, judge them against the fake provider, store rows and pins,
print the cost line, rerun for free, and have compare/gate refuse runs judged under different pins."""

import json
import math

import pytest
from tests.judges.test_metrics import scripted_judge

from ragassay.analysis.runner import load_inputs
from ragassay.cli.app import main as _main
from ragassay.golden import bundled_golden_source
from ragassay.judges.metrics import RUBRICS
from ragassay.store import Store
from ragassay.trace.io import write_traces
from ragassay.trace.schema import Citation, RunHeader, Trace, Unit

QUERIES = ("lex-001", "lex-002", "lex-003", "neg-001")


def responder(system, user):
    """The scripted judge, with claims split at ' || ' (the evidence quotes contain full stops)."""
    if system == RUBRICS["claims"]:
        answer = user.split("<answer>", 1)[1].rsplit("</answer>", 1)[0]
        return {"justification": "scripted", "cannot_judge": False, "claims": answer.split(" || ")}
    return scripted_judge(system, user)


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main(args)
    captured = capsys.readouterr()
    return (e.value.code or 0), captured.out, captured.err


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


def write_run_traces(path, inputs):
    corpus, golden = inputs
    traces = []
    for qid in QUERIES:
        q = golden[qid]
        if not q.answerable:
            traces.append(Trace(trace_id=f"t-{qid}", query_id=qid, question=q.question, outcome="abstained"))
            continue
        ev = q.evidence[0]
        text = corpus[ev.doc_id].text
        unit = Unit(unit_id=f"{ev.doc_id}#0", doc_id=ev.doc_id, start=ev.start, end=ev.end, rank=1,
                    text=text[ev.start:ev.end])
        traces.append(Trace(trace_id=f"t-{qid}", query_id=qid, question=q.question, fused=[unit], packed=[unit],
                            answer=f"{ev.quote} || The moon is made of cheese",
                            citations=[Citation(unit_id=unit.unit_id)], outcome="answered"))
    header = RunHeader(run_name="imported", corpus_digest=corpus.digest, dataset_version=golden.dataset_version)
    write_traces(path, header, traces)
    return path


def judge_yaml(tmp_path, server, model="judge-m", **extra):
    cfg = {"provider": "openai", "model": model, "base_url": server.base_url, "max_tokens": 256,
           "api_key_env": "JUDGE_TEST_KEY", "concurrency": 4,
           "retry": {"max_attempts": 2, "timeout_s": 2, "backoff_base_s": 0.001},
           "prices": {model: {"input": 1.0, "output": 2.0}}, **extra}
    path = tmp_path / f"judge-{model}.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def test_judge_command_stores_metrics_pins_and_cost_and_compare_checks_pins(tmp_path, capsys, inputs,
                                                                            fake_provider, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-judge-SENTINEL-123")
    fake_provider.responder = responder
    db = str(tmp_path / "r.duckdb")
    traces = write_run_traces(tmp_path / "traces.jsonl", inputs)
    for name in ("a", "b"):
        code, _, err = cli(["score", str(traces), "--golden", str(bundled_golden_source()), "--store", db,
                                "--name", name, "--json"], capsys)
        assert code == 0, err
    cfg = judge_yaml(tmp_path, fake_provider)

    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    m = res["metrics"]
    # each answer: the evidence quote (supported, quote found) + one made-up claim (unsupported)
    assert m["faithfulness"] == {"mean": 0.5, "defined": 3, "undefined": 1}
    assert m["citation_precision"]["mean"] == 1.0 and m["citation_recall"]["mean"] == 0.5
    assert m["answer_relevance"]["mean"] == 1.0
    assert m["correctness"]["mean"] == pytest.approx(0.5)
    assert {"metric": "faithfulness", "reason": "not_answered", "count": 1} in res["undefined"]
    cost = res["cost"]
    assert cost["paid_calls"] == cost["calls"] > 0 and cost["cache_hits"] == 0
    assert cost["spend"] > 0 and cost["per_1000_queries"] == pytest.approx(cost["spend"] / 4 * 1000)

    # human output: the cost line
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--resume"], capsys)
    assert code == 0, err
    assert "cost: " in out and "cache hits 100%" in out and "spend $0.0000" in out
    assert "per 1,000 queries" in out and "$0.00 per" not in out  # the projection prices cache hits

    # already judged: refused without --resume
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db], capsys)
    assert code == 2 and "--resume" in err

    with Store.open(db, read_only=True) as st:
        rec = st.get_run("a")
        assert rec.judge_model == "openai:judge-m" and len(rec.rubric_sha) == 64
        assert rec.extra["judge"]["prompt_sha"] and rec.status == "complete"
        rows = {(r["query_id"], r["metric"]): r["value"] for r in st.results("a").to_pylist()}
        assert rows[("lex-001", "faithfulness")] == 0.5 and rows[("neg-001", "faithfulness")] is None
        assert ("lex-001", "recall@context") in rows  # the scored rows are still there
    for f in tmp_path.rglob("*.duckdb*"):
        assert b"sk-judge-SENTINEL-123" not in f.read_bytes()

    # b judged by another model: compare refuses, --rebaseline compares
    other = judge_yaml(tmp_path, fake_provider, model="judge-other")
    code, _, err = cli(["judge", "b", "--judge", str(other), "--store", db], capsys)
    assert code == 0, err
    code, _, err = cli(["compare", "a", "b", "--store", db, "--resamples", "200"], capsys)
    assert code == 2 and "judge_model" in err
    code, out, err = cli(["compare", "a", "b", "--store", db, "--resamples", "200", "--rebaseline", "--json"],
                         capsys)
    assert code == 0, err
    comp = json.loads(out)
    assert {p["pin"] for p in comp["pin_differences"]} == {"judge_model"}
    faith = [r for r in comp["rows"] if r["metric"] == "faithfulness" and r["stratum"] == "all"]
    assert faith and faith[0]["delta"] == 0


def test_local_judge_needs_no_key_and_no_network(tmp_path, capsys, inputs, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    db = str(tmp_path / "r.duckdb")
    traces = write_run_traces(tmp_path / "traces.jsonl", inputs)
    assert cli(["score", str(traces), "--golden", str(bundled_golden_source()), "--store", db, "--name",
                "a"], capsys)[0] == 0
    cfg = tmp_path / "local.yaml"
    cfg.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness, citations]\n")
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["pins"]["judge_model"] == "local:lexical" and res["cost"] is None
    assert res["metrics"]["faithfulness"]["defined"] == 3
    with Store.open(db, read_only=True) as st:
        rows = {(r["query_id"], r["metric"]): r["value"] for r in st.results("a").to_pylist()}
    # "6." and "Conveying Non-Source Forms." are in the context sentence by sentence; the cheese is not
    assert rows[("lex-001", "faithfulness")] == pytest.approx(2 / 3)
    assert rows[("neg-001", "faithfulness")] is None
    assert res["metrics"]["numeric_consistency"]["defined"] >= 1
    assert not math.isnan(res["metrics"]["citation_recall"]["mean"])


@pytest.mark.parametrize(("text", "fragment"), [
    ("provider: openai\nmodel: m\n", "prices: no price for model 'm'"),
    ("provider: openai\nmodel: m\nprices: {m: {input: 1, output: 1}}\nbogus: 1\n", ":4: bogus: Extra inputs"),
    ("provider: local\nmodel: lexical\nmetrics: [nuggets]\n", "need an LLM judge"),
    ("provider: openai\nmodel: m\nprices: {m: {input: -1, output: 1}}\n", "must be a number >= 0"),
    ("- a\n", "a judge config is a mapping"),
])
def test_bad_judge_configs_are_one_line_errors_naming_the_file(tmp_path, capsys, text, fragment):
    cfg = tmp_path / "judge.yaml"
    cfg.write_text(text)
    code, _, err = cli(["judge", "x", "--judge", str(cfg), "--store", str(tmp_path / "none.duckdb")], capsys)
    assert code == 2 and fragment in err and str(cfg) in err


def test_a_judge_run_whose_every_call_errors_is_a_failure_not_a_run_of_undefined_metrics(
        tmp_path, capsys, inputs, fake_provider, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-judge")
    fake_provider.item_of = lambda user: "every"
    fake_provider.plan["every"] = ["400"]  # a bad request every time: not retried, not billed
    db = str(tmp_path / "r.duckdb")
    traces = write_run_traces(tmp_path / "traces.jsonl", inputs)
    code, _, err = cli(["score", str(traces), "--golden", str(bundled_golden_source()), "--store", db,
                        "--name", "a"], capsys)
    assert code == 0, err
    code, out, err = cli(["judge", "a", "--judge", str(judge_yaml(tmp_path, fake_provider)), "--store", db],
                         capsys)
    assert code == 2 and out == ""
    assert "judge call(s) ended in error (first: HTTP 400" in err and "nothing was stored as metrics" in err
    with Store.open(db, read_only=True) as st:
        rec = st.get_run("a")
        assert "judge" not in (rec.extra or {}) and "faithfulness" not in st.metrics("a")
        assert {c["outcome"] for c in st.judge_calls("a")} == {"error"}
