"""The agent verifier and the claims judge are pins: `compare`, `gate` and the analyses refuse two runs whose
outcome metrics came from different verifiers, or whose claim metrics came from different claims judges, naming
the pin and both values, unless `--rebaseline` (which then names the pin); equal pins compare as before.

The runs are stored the way tests/agents and tests/claims store them: agent traces scored with
`ragassay score --verifier FILE.py:function`, demo pipeline runs judged with `ragassay judge claims`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from tests.agents.world import build_world, cheap_and_costly
from tests.verdict.test_fooling import cli, ok, refused

from ragassay.analysis.compare import AGENT_PINS, CLAIMS_PINS, comparable_runs, pins_for
from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.store import Store

VERIFIERS = Path(__file__).resolve().parents[1] / "agents" / "verifiers.py"
LOCAL = "provider: local\nmodel: lexical\nmetrics: [faithfulness]\n"
NOT_COMPARABLE = "are not comparable; differing pins:"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------ agent verifier
@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    root = tmp_path_factory.mktemp("pins-agents")
    build_world(root)
    cheap, costly = cheap_and_costly(root)
    db = root / "runs.duckdb"
    one, two, edited = root / "one" / "verifiers.py", root / "two" / "verifiers.py", root / "edit" / "verifiers.py"
    for p in (one, two, edited):
        p.parent.mkdir()
        shutil.copy(VERIFIERS, p)

    def score(traces, name, *verifier):
        ok(cli("score", traces, "--golden", root / "golden", "--corpus", root / "docs", "--store", db,
               "--name", name, *verifier))

    score(cheap, "cheap", "--verifier", f"{one}:from_meta")
    score(costly, "costly", "--verifier", f"{one}:from_meta")  # the same verifier: equal pins
    score(costly, "costly-two", "--verifier", f"{two}:from_meta")  # the same code under another module path
    score(costly, "plain")  # no verifier: trajectory rows only
    score(cheap, "edit-a", "--verifier", f"{edited}:from_meta")
    sha_a = sha256(edited)
    edited.write_text(edited.read_text() + "\n# a changed verifier is a different instrument\n")
    score(costly, "edit-b", "--verifier", f"{edited}:from_meta")  # the same spec, another module file
    policy = root / "policy.yaml"
    policy.write_text("metrics:\n  task_success: {min_effect: 0.05}\n")
    return {"db": db, "one": f"{one}:from_meta", "two": f"{two}:from_meta", "edited": f"{edited}:from_meta",
            "sha_one": sha256(one), "sha_a": sha_a, "sha_b": sha256(edited), "policy": policy}


def test_compare_refuses_runs_scored_with_another_verifier_and_names_both(agents):
    res = cli("compare", "cheap", "costly-two", "--resamples", "200", "--store", agents["db"])
    refused(res, f"runs cheap (A) and costly-two (B) {NOT_COMPARABLE}",
            f"verifier: {agents['one']} (A) vs {agents['two']} (B)", "--rebaseline")
    # the two module files are byte-identical: the module path alone is the difference
    assert "verifier_source_sha" not in res.err and agents["sha_one"] == sha256(VERIFIERS)


def test_gate_refuses_runs_scored_with_another_verifier(agents):
    res = cli("gate", "cheap", "costly-two", "--policy", agents["policy"], "--store", agents["db"])
    refused(res, NOT_COMPARABLE, f"verifier: {agents['one']} (A) vs {agents['two']} (B)")


def test_an_edited_verifier_module_is_refused_on_its_file_sha(agents):
    assert agents["sha_a"] != agents["sha_b"]
    res = cli("compare", "edit-a", "edit-b", "--resamples", "200", "--store", agents["db"])
    refused(res, NOT_COMPARABLE, f"verifier_source_sha: {agents['sha_a']} (A) vs {agents['sha_b']} (B)")
    assert "  verifier: " not in res.err  # same module:function
    res = cli("gate", "edit-a", "edit-b", "--policy", agents["policy"], "--store", agents["db"])
    refused(res, NOT_COMPARABLE, f"verifier_source_sha: {agents['sha_a']} (A)")


def test_rebaseline_lets_another_verifier_through_and_names_the_pin(agents):
    res = ok(cli("compare", "cheap", "costly-two", "--resamples", "200", "--rebaseline", "--json",
                 "--store", agents["db"]))
    out = json.loads(res.out)
    assert out["pin_differences"] == [{"pin": "verifier", "a": agents["one"], "b": agents["two"]}]
    ts = next(r for r in out["rows"] if r["metric"] == "task_success" and r["stratum"] == "all")
    assert ts["mean_a"] == pytest.approx(12 / 20) and ts["mean_b"] == pytest.approx(19 / 20)
    text = ok(cli("compare", "cheap", "costly-two", "--resamples", "200", "--rebaseline", "--store", agents["db"]))
    assert "rebaselined: verifier:" in text.out and "rebaselined across differing pins: verifier" in text.out
    gate = cli("gate", "cheap", "costly-two", "--policy", agents["policy"], "--rebaseline", "--store", agents["db"])
    assert gate.code == 0, gate.err  # costly succeeds more: PASS
    assert gate.out.startswith("gate PASS: cheap → costly-two") and "note: rebaselined: verifier" in gate.out


def test_equal_verifiers_compare_as_before(agents):
    out = json.loads(ok(cli("compare", "cheap", "costly", "--resamples", "200", "--json",
                            "--store", agents["db"])).out)
    assert out["pin_differences"] == []
    res = ok(cli("gate", "cheap", "costly", "--policy", agents["policy"], "--store", agents["db"]))
    assert res.out.startswith("gate PASS: cheap → costly") and "rebaselined" not in res.out


def test_the_verifier_pin_counts_only_for_the_outcome_metrics_it_decides(agents):
    # steps and agent cost never ask the verifier: comparing them across verifiers needs no rebaseline
    out = json.loads(ok(cli("compare", "cheap", "costly-two", "-m", "steps", "-m", "agent_cost", "--resamples",
                            "200", "--json", "--store", agents["db"])).out)
    assert out["pin_differences"] == []
    res = cli("compare", "cheap", "costly-two", "-m", "silent_failure", "--resamples", "200", "--store", agents["db"])
    refused(res, NOT_COMPARABLE, "verifier:")


def test_a_run_scored_without_a_verifier_conflicts_with_nothing_as_an_unjudged_run(agents):
    with Store.open(agents["db"], read_only=True) as st:
        assert st.get_run("plain").extra["agent"]["verifier"] is None
        assert "task_success" not in st.metrics("plain")
        recs, diffs = comparable_runs(st, ["cheap", "plain"], ["task_success", "steps"])
        assert [r.name for r in recs] == ["cheap", "plain"] and diffs == []
        with pytest.raises(Exception, match=r"verifier: .* \(cheap\) vs .* \(costly-two\)"):
            comparable_runs(st, ["cheap", "costly-two"], ["partial_credit"])
    assert set(AGENT_PINS) <= set(pins_for(["task_success"])) and not set(AGENT_PINS) & set(pins_for(["steps"]))
    out = json.loads(ok(cli("compare", "cheap", "plain", "--resamples", "200", "--json",
                            "--store", agents["db"])).out)
    assert out["pin_differences"] == []


# ------------------------------------------------------------------------------------------ claims judge
@pytest.fixture(scope="module")
def claims(tmp_path_factory):
    out = tmp_path_factory.mktemp("pins-claims")
    demo_dir = out / "demo"
    corpus, golden = load_inputs(None, None, demo_dir / "golden")
    base = demo_dir / "base.duckdb"
    with Store.open(base) as st:
        for name in ("bm25", "hybrid"):
            run_pipeline_into_store(st, demo_config_dir() / f"{name}.yaml", corpus, golden, name=name,
                                    traces_dir=demo_dir / "traces", cache_dir=demo_dir / "cache")
    local, spans = out / "judge.yaml", out / "spans.yaml"
    local.write_text(LOCAL)
    spans.write_text(LOCAL + "claims: {relevance: spans}\n")
    same, other = out / "same.duckdb", out / "other.duckdb"
    for db, judge_b in ((same, local), (other, spans)):
        shutil.copy(base, db)
        for run, judge in (("bm25", local), ("hybrid", judge_b)):
            ok(cli("judge", "claims", run, "--judge", judge, "--store", db, "--golden", demo_dir / "golden"))
    pins = {}
    with Store.open(other, read_only=True) as st:
        for run in ("bm25", "hybrid"):
            pins[run] = st.get_run(run).extra["claims_judge"]
    policy = out / "policy.yaml"
    policy.write_text("metrics:\n  claims_recall: {min_effect: 0.05}\n")
    return {"same": same, "other": other, "pins": pins, "policy": policy}


def test_compare_refuses_runs_judged_by_other_claims_judges_and_names_both(claims):
    a, b = claims["pins"]["bm25"], claims["pins"]["hybrid"]
    assert a["rubric_sha"] != b["rubric_sha"] and a["judge_model"] == b["judge_model"] == "local:lexical"
    res = cli("compare", "bm25", "hybrid", "--resamples", "200", "--store", claims["other"])
    refused(res, f"runs bm25 (A) and hybrid (B) {NOT_COMPARABLE}", "claims_relevance: claims (A) vs spans (B)",
            f"claims_rubric_sha: {a['rubric_sha']} (A) vs {b['rubric_sha']} (B)", "--rebaseline")
    assert "claims_judge_model" not in res.err  # the model is the same: the relevance rule is the difference


def test_gate_refuses_a_claim_metric_of_other_claims_judges(claims):
    res = cli("gate", "bm25", "hybrid", "--policy", claims["policy"], "--store", claims["other"])
    refused(res, NOT_COMPARABLE, "claims_relevance: claims (A) vs spans (B)")


def test_an_analysis_of_a_claim_metric_refuses_other_claims_judges(claims):
    res = cli("analyze", "slices", "bm25", "hybrid", "-m", "claims_recall", "--resamples", "200",
              "--store", claims["other"])
    refused(res, NOT_COMPARABLE, "claims_relevance: claims (bm25) vs spans (hybrid)")
    # a metric no claims judge decided is compared as before
    ok(cli("analyze", "slices", "bm25", "hybrid", "-m", "answer_f1", "--resamples", "200",
           "--store", claims["other"]))


def test_rebaseline_lets_other_claims_judges_through_and_names_the_pins(claims):
    out = json.loads(ok(cli("compare", "bm25", "hybrid", "--resamples", "200", "--rebaseline", "--json",
                            "--store", claims["other"])).out)
    a, b = claims["pins"]["bm25"], claims["pins"]["hybrid"]
    diffs = {d["pin"]: (d["a"], d["b"]) for d in out["pin_differences"]}
    assert diffs == {"claims_rubric_sha": (a["rubric_sha"], b["rubric_sha"]),
                     "claims_prompt_sha": (a["prompt_sha"], b["prompt_sha"]),
                     "claims_relevance": ("claims", "spans")}
    gate = cli("gate", "bm25", "hybrid", "--policy", claims["policy"], "--rebaseline", "--store", claims["other"])
    assert gate.code in (0, 1), gate.err
    assert "note: rebaselined: claims_relevance claims (A) vs spans (B)" in gate.out


def test_a_metric_no_claims_judge_decided_compares_across_claims_judges(claims):
    out = json.loads(ok(cli("compare", "bm25", "hybrid", "-m", "answer_f1", "--resamples", "200", "--json",
                            "--store", claims["other"])).out)
    assert out["pin_differences"] == []
    assert set(CLAIMS_PINS) <= set(pins_for(["claims_f1"])) and not set(CLAIMS_PINS) & set(pins_for(["answer_f1"]))


def test_equal_claims_judges_compare_as_before(claims):
    out = json.loads(ok(cli("compare", "bm25", "hybrid", "--resamples", "200", "--json",
                            "--store", claims["same"])).out)
    assert out["pin_differences"] == [] and any(r["metric"] == "claims_recall" for r in out["rows"])
    res = cli("gate", "bm25", "hybrid", "--policy", claims["policy"], "--store", claims["same"])
    assert res.code in (0, 1) and "rebaselined" not in res.out and res.err == "", res.err


# ------------------------------------------------------------------------------------------ Store.update_run_extra
def test_update_run_extra_merges_keys_and_keeps_the_rest(agents, tmp_path):
    db = tmp_path / "copy.duckdb"
    shutil.copy(agents["db"], db)
    with Store.open(db) as st:
        rec = st.get_run("cheap")
        before = dict(rec.extra)
        got = st.update_run_extra(rec.run_id, {"note": {"x": 1}, "agent": {"verifier": None}})
        assert got == {**before, "note": {"x": 1}, "agent": {"verifier": None}}
        assert st.get_run("cheap").extra == got
        from ragassay.errors import InputError

        with pytest.raises(InputError, match="is not in"):
            st.update_run_extra("NOPE", {"a": 1})
        with pytest.raises(InputError, match="non-empty strings"):
            st.update_run_extra(rec.run_id, {"": 1})
        assert st.get_run("cheap").extra == got  # a refused update changed nothing


def test_the_verifier_pin_of_a_command_names_the_command_and_its_timeout():
    from types import SimpleNamespace

    from ragassay.analysis.compare import claims_judge_pins, verifier_pins

    def rec(agent=None, claims=None):
        return SimpleNamespace(extra={k: v for k, v in (("agent", agent), ("claims_judge", claims)) if v})

    cmd = rec({"verifier": {"kind": "command", "cmd": "./check.sh", "timeout_s": 30.0}})
    assert verifier_pins(cmd) == {"verifier": "command './check.sh' (timeout 30 s)", "verifier_source_sha": None}
    py = rec({"verifier": {"kind": "python", "spec": "m:f", "source_sha256": "ab"}})
    assert verifier_pins(py) == {"verifier": "m:f", "verifier_source_sha": "ab"}
    assert verifier_pins(rec({"verifier": None})) == verifier_pins(rec()) == dict.fromkeys(AGENT_PINS)
    # an LLM claims judge's settings are compared as one value, printed as sorted JSON
    got = claims_judge_pins(rec(claims={"judge_model": "claude", "settings": {"temperature": 0.0, "max_tokens": 9},
                                        "relevance": "spans"}))
    assert got == {"claims_judge_model": "claude", "claims_rubric_sha": None, "claims_prompt_sha": None,
                   "claims_settings": '{"max_tokens": 9, "temperature": 0.0}', "claims_relevance": "spans"}


def test_agent_report_refuses_two_runs_scored_with_another_verifier_unless_rebaselined(agents):
    res = cli("agent", "report", "cheap", "costly-two", "--resamples", "200", "--store", agents["db"])
    refused(res, NOT_COMPARABLE, f"verifier: {agents['one']} (cheap) vs {agents['two']} (costly-two)")
    res = ok(cli("agent", "report", "cheap", "costly-two", "--resamples", "200", "--rebaseline", "--json",
                 "--store", agents["db"]))
    out = json.loads(res.out)
    assert out["rebaselined"] and [d["pin"] for d in out["pin_differences"]] == ["verifier"]
    # the same verifier: no refusal, nothing listed
    out = json.loads(ok(cli("agent", "report", "cheap", "costly", "--resamples", "200", "--json", "--store",
                            agents["db"])).out)
    assert out["pin_differences"] == [] and not out["rebaselined"]
