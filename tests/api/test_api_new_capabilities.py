"""The Python API reaches PPI, agents, claims, cost and the report's --labels / --include: each entry point's
figures equal the CLI's --json for the same store and arguments, with hand-computed values beside them."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.agents.world import build_world, cheap_and_costly
from tests.analyses._runs import make_run
from tests.analyses.test_eval_cost import JUDGE_YAML, TIERS_YAML, _call
from tests.claims.test_claims_run import LOCAL
from tests.claims.test_claims_run import _cli as judge_cli

import ragassay
from ragassay.analysis.demo import demo_config_dir, demo_judge_config, judge_demo_runs
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.cli.app import main
from ragassay.cli.common import _default, _nan_to_null
from ragassay.errors import InputError
from ragassay.metrics.claims import BREAKDOWN
from ragassay.store import Store

VERIFIERS = Path(__file__).parents[1] / "agents" / "verifiers.py"
LLM_JUDGE = {"provider": "anthropic", "model": "m", "max_tokens": 512, "metrics": ["faithfulness"],
             "prices": {"m": {"input": 2.0, "output": 10.0, "cached_input": 0.2, "cache_write": 2.5,
                              "batch_input": 1.0, "batch_output": 5.0}}}


def as_json(obj):
    """``obj`` as the CLI's --json writes it (NaN as null, numpy scalars as numbers), read back."""
    return json.loads(json.dumps(_nan_to_null(obj), default=_default))


def cli_json(capsys, *args, code=0):
    """``ragassay ARGS --json`` through the CLI's own entry point; its stdout parsed."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args] + ["--json"])
    out = capsys.readouterr()
    assert e.value.code == code, out.err
    return json.loads(out.out)


# ------------------------------------------------------------------------------------- the demo store

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's bm25 and hybrid runs of the bundled set, judged for faithfulness by the demo's lexical judge
    and for claims by the local claims judge, plus a PPI labels file on 60 shared answers."""
    out = tmp_path_factory.mktemp("api-new")
    corpus, golden = load_inputs(None, None, out / "golden")
    db = out / "ragassay.duckdb"
    with Store.open(db) as st:
        ids = {n: run_pipeline_into_store(st, demo_config_dir() / f"{n}.yaml", corpus, golden, name=n,
                                          traces_dir=out / "traces", cache_dir=out / "cache")[0]
               for n in ("bm25", "hybrid")}
        judge_demo_runs(st, ids, out / "traces", golden, corpus, demo_judge_config())
        faith = {}
        for n, run_id in ids.items():
            t = st.results(run_id, ["faithfulness"], columns=["query_id", "value"])
            faith[n] = {q: v for q, v in zip(t["query_id"].to_pylist(), t["value"].to_pylist(), strict=True)
                        if v is not None}
    cfg = out / "claims.yaml"
    cfg.write_text(LOCAL)
    claims_json = {n: json.loads(judge_cli("judge", "claims", n, "--judge", cfg, "--store", db, "--golden",
                                           out / "golden", "--json"))
                   for n in ("bm25", "hybrid")}
    # human values: the judge's value thresholded at 0.5, one in five flipped (a judge with known errors)
    rng = np.random.default_rng(3)
    shared = sorted(set(faith["bm25"]) & set(faith["hybrid"]))
    picked = sorted(rng.choice(shared, 60, replace=False).tolist())
    human = {n: {q: float((faith[n][q] >= 0.5) != (rng.random() < 0.2)) for q in picked} for n in faith}
    labels = out / "labels.jsonl"
    labels.write_text("".join(json.dumps({"run": n, "query_id": q, "metric": "faithfulness", "value": v,
                                          "labelled_by": "human"}) + "\n"
                              for n in human for q, v in human[n].items()), encoding="utf-8")
    (out / "gate.yaml").write_text("metrics:\n  faithfulness: {min_effect: 0.05}\n")
    (out / "llm.yaml").write_text(json.dumps(LLM_JUDGE))
    return {"dir": out, "db": db, "labels": labels, "faith": faith, "human": human, "claims": claims_json,
            "golden": golden, "corpus": corpus}


def test_compare_with_labels_equals_compare_labels_json(demo, capsys):
    base = ragassay.load_run("bm25", store=demo["db"])
    cmp = base.compare("hybrid", labels=demo["labels"], n_resamples=500)
    want = cli_json(capsys, "compare", "bm25", "hybrid", "--store", demo["db"], "--labels", demo["labels"],
                    "--resamples", "500")
    assert [e["metric"] for e in cmp.ppi] == ["faithfulness"] and cmp.ppi[0]["mode"] == "shared"
    assert as_json(cmp.ppi) == want["ppi"]
    assert as_json(cmp.to_dict()) == {k: v for k, v in want.items() if k not in ("decomposition",
                                                                                 "decomposition_skipped")}
    # the raw judge means beside the correction are the stored judge values' means over the shared items
    f = demo["faith"]
    keys = sorted(set(f["bm25"]) & set(f["hybrid"]))
    assert cmp.ppi[0]["raw_judge_mean"]["a"] == pytest.approx(np.mean([f["bm25"][q] for q in keys]))
    # without labels nothing is corrected
    assert base.compare("hybrid", n_resamples=200).ppi == []


def test_gate_with_labels_equals_gate_labels_json(demo, capsys):
    base = ragassay.load_run("bm25", store=demo["db"])
    result = base.gate("hybrid", demo["dir"] / "gate.yaml", labels=demo["labels"])
    want = cli_json(capsys, "gate", "bm25", "hybrid", "--store", demo["db"], "--policy", demo["dir"] / "gate.yaml",
                    "--labels", demo["labels"], code=result.exit_code)
    got = result.to_dict()
    got["ppi"] = result.comparison.ppi
    assert as_json(got) == want
    (check,) = [c for c in result.checks if c.name == "faithfulness"]
    assert check.status == "ppi" and check.detail.startswith("PPI-corrected")  # decided on the correction


def test_run_ppi_equals_judge_ppi_json_and_the_closed_form(demo, capsys):
    run = ragassay.load_run("bm25", store=demo["db"])
    one = run.ppi(demo["labels"], "faithfulness", lam="ppi")
    assert as_json(one) == cli_json(capsys, "judge", "ppi", "bm25", "--labels", demo["labels"], "-m",
                                    "faithfulness", "--method", "ppi", "--store", demo["db"])
    # plain PPI (lam = 1): the unlabelled judge mean plus the labelled rectifier mean (ppi_py's ppi_mean_ci)
    f, y = demo["faith"]["bm25"], demo["human"]["bm25"]
    unl = [v for q, v in f.items() if q not in y]
    want = np.mean(unl) + np.mean([y[q] - f[q] for q in y])
    se = math.sqrt(np.var(unl) / len(unl) + np.var([y[q] - f[q] for q in y]) / len(y))
    assert one["ppi"]["estimate"] == pytest.approx(want, abs=1e-12)
    assert one["ppi"]["ci_high"] == pytest.approx(want + 1.959963984540054 * se, abs=1e-12)
    assert (one["n_items"], one["n_labelled"]) == (len(f), 60)
    pair = run.ppi(demo["labels"], "faithfulness", against=ragassay.load_run("hybrid", store=demo["db"]))
    assert as_json(pair) == cli_json(capsys, "judge", "ppi", "bm25", "--labels", demo["labels"], "-m",
                                     "faithfulness", "--against", "hybrid", "--store", demo["db"])
    assert pair["lam_mode"] == "PPI++ (tuned lam)" and pair["mode"] == "shared"


def test_ppi_arguments_are_checked_at_the_boundary(demo):
    run = ragassay.load_run("bm25", store=demo["db"])
    with pytest.raises(InputError) as e:
        run.ppi(demo["labels"], "", lam=1.5, confidence=95)
    lines = str(e.value).splitlines()
    assert [x.split("=")[0] for x in lines] == ["metric", "lam", "confidence"]
    assert lines[1] == "lam=1.5 (float): give 'tuned' (PPI++), 'ppi' (lam = 1) or a number in [0, 1]"
    with pytest.raises(InputError, match=r"^labels=7 \(int\): give a PPI labels JSONL path"):
        run.compare("hybrid", labels=7)
    with pytest.raises(InputError, match="no such labels file"):
        run.gate("hybrid", labels=demo["dir"] / "missing.jsonl")
    with pytest.raises(InputError, match="give another run to compare with"):
        run.report(demo["dir"] / "nope", labels=demo["labels"])
    assert not (demo["dir"] / "nope").exists()


# ------------------------------------------------------------------------------------------ claims

def test_claims_breakdown_equals_judge_claims_json(demo):
    got = ragassay.load_run("bm25", store=demo["db"]).claims_breakdown("hybrid")
    assert got["classes"] == list(BREAKDOWN) and [r["name"] for r in got["runs"]] == ["bm25", "hybrid"]
    for r in got["runs"]:
        want = demo["claims"][r["name"]]
        # judge claims sums the stored table's values in another order: equal to the last bits
        assert r["metrics"].keys() == want["metrics"].keys()
        for m, v in r["metrics"].items():
            w = want["metrics"][m]
            assert (v["defined"], v["undefined"]) == (w["defined"], w["undefined"])
            assert (v["mean"] is None) == (w["mean"] is None) and v["mean"] == pytest.approx(w["mean"], rel=1e-12)
        assert r["claims"] == want["breakdown"]["claims"] == sum(r["counts"].values())
        for b in BREAKDOWN:
            assert r["shares"][b] == pytest.approx(want["breakdown"]["shares"][b])
            assert r["shares"][b] == pytest.approx(r["counts"][b] / r["claims"])


def test_claims_diff_equals_analyze_claims_json(demo, capsys):
    base = ragassay.load_run("bm25", store=demo["db"])
    got = base.claims_diff("hybrid", excerpt=40)
    assert as_json(got) == cli_json(capsys, "analyze", "claims", "bm25", "hybrid", "--excerpt", "40", "--store",
                                    demo["db"])
    t = got["totals"]
    assert sum(len(q["gained"]) for q in got["queries"]) == t["gained"] and got["compared"] == 171
    with pytest.raises(InputError, match=r"^excerpt=5 \(int\): give an integer >= 10"):
        base.claims_diff("hybrid", excerpt=5)


def test_a_run_not_judged_for_claims_is_refused_with_the_command(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as st:
        make_run(st, "plain", {"recall@10": np.ones(2)})
    with pytest.raises(InputError, match="was not judged for claims; run `ragassay judge claims plain"):
        ragassay.load_run("plain", store=tmp_path / "r.duckdb").claims_breakdown()


# ------------------------------------------------------------------------------------------ report

def _section(html: str, pattern: str) -> str:
    found = re.findall(pattern, html, flags=re.S)
    assert len(found) == 1, pattern
    return found[0]


def test_report_labels_and_include_render_as_ragassay_report_renders_them(demo, capsys):
    saved = demo["dir"] / "claims.json"
    saved.write_text(json.dumps(demo["claims"]["bm25"]), encoding="utf-8")
    base = ragassay.load_run("bm25", store=demo["db"])
    index = base.report(demo["dir"] / "api-report", "hybrid", n_resamples=500, labels=demo["labels"],
                        include=saved)
    out = cli_json(capsys, "report", "bm25", "hybrid", "-o", demo["dir"] / "cli-report", "--store", demo["db"],
                   "--resamples", "500", "--labels", demo["labels"], "--include", saved, "--no-analyses")
    api_html = index.read_text(encoding="utf-8")
    cli_html = Path(out["report"]).read_text(encoding="utf-8")
    ppi = r'<table class="data ppi">.*?</table>'
    inc = r'<section id="[^"]*" class="included".*?</section>'
    assert _section(api_html, ppi) == _section(cli_html, ppi)
    assert _section(api_html, inc) == _section(cli_html, inc)
    assert "Claims: bm25" in _section(api_html, inc) and "faithfulness" in _section(api_html, ppi)
    with pytest.raises(InputError, match=r"^include=3 \(int\): give a saved --json file's path"):
        base.report(demo["dir"] / "x", "hybrid", include=3)


# -------------------------------------------------------------------------------------------- cost

@pytest.fixture
def priced(tmp_path):
    """Run ``llm`` of tests/analyses/test_eval_cost.py: spend $0.0071 over 2 judged answers."""
    db = tmp_path / "r.duckdb"
    pins = {"judge_model": "openai:m", "rubric_sha": "r", "prompt_sha": "p", "provider": "openai"}
    with Store.open(db) as st:
        older = make_run(st, "older", {"recall@10": np.ones(2)}, judge_model="openai:m",
                         extra={"judge": pins, "judge_summary": {"items": 1}})
        st.record_judge_calls([_call(older, "q000", "s0", "c", inp=500, out=20, cost=0.0012)])
        run = make_run(st, "llm", {"recall@10": np.ones(2)}, judge_model="openai:m", extra={
            "judge": pins, "judge_summary": {"items": 2, "cascade": {
                "tier1": "local:lexical", "tier2": "openai:m",
                "routes": {"auto_pass": 3, "auto_fail": 1, "escalated": 4}}}})
        st.record_judge_calls([
            _call(run, "q000", "s0", "a", inp=1000, cached=800, out=100, cost=0.0026),
            _call(run, "q001", "s0", "b", inp=2000, out=50, cost=0.0045, outcome="refused"),
            _call(run, "q001", "s1", "c", cache_hit=True),
            _call(run, "q000", "s1", "d", outcome="error"),
            _call(run, "q000", "t1", "e", provider="local", model="lexical"),
        ])
    (tmp_path / "judge.yaml").write_text(JUDGE_YAML)
    (tmp_path / "tiers.yaml").write_text(TIERS_YAML)
    return tmp_path, db


def test_cost_equals_cost_json_and_the_hand_computed_figures(priced, capsys):
    tmp, db = priced
    got = ragassay.load_run("llm", store=db).cost(tmp / "judge.yaml", tiers=tmp / "tiers.yaml", runs_per_month=10,
                                                  labelling_hours=6, hourly_rate=60)
    want = cli_json(capsys, "cost", "llm", "--store", db, "--judge", tmp / "judge.yaml", "--tiers",
                    tmp / "tiers.yaml", "--runs-per-month", "10", "--labelling-hours", "6", "--hourly-rate", "60")
    assert as_json(got) == want
    r = got["runs"][0]
    # spend = 0.0026 + 0.0045 as paid; batch uncached = (1000*1 + 100*5 + 2000*1 + 50*5 + 500*1 + 20*5) / 1e6
    assert r["spend"] == pytest.approx(0.0071) and r["modelled"]["batch_uncached"]["usd"] == pytest.approx(0.00435)
    assert r["monthly_total"] == pytest.approx(6 * 60 + 0.00415 * 4 * 10)
    assert got["projection"]["tier"] == "regression" and got["labelling"]["usd"] == 360


def test_cost_arguments_are_named_as_the_api_names_them(priced):
    tmp, db = priced
    run = ragassay.load_run("llm", store=db)
    with pytest.raises(InputError) as e:
        run.cost(tier="smoke", runs_per_month=0, labelling_hours=6, output_tokens=10)
    assert str(e.value).splitlines() == [
        "tier needs tiers='TIERS.yaml' (written by `ragassay golden status --tiers-out`)",
        "runs_per_month needs tiers='TIERS.yaml' (written by `ragassay golden status --tiers-out`)",
        "runs_per_month=0: give a whole number >= 1",
        "labelling_hours and hourly_rate go together: labelling cost = hours x rate",
        "output_tokens shapes the projection: add project=True (and judge='JUDGE.yaml')"]
    with pytest.raises(InputError, match=r"^project=True needs judge='JUDGE.yaml'"):
        run.cost(project=True)
    with pytest.raises(InputError, match=r"^runs_per_month='3' \(str\): give a whole number, or None"):
        run.cost(runs_per_month="3")


def test_cli_and_analysis_defaults_agree():
    from ragassay.analysis import eval_cost
    from ragassay.cli import cost as cost_cli

    assert (cost_cli.DEFAULT_TIER, cost_cli.DEFAULT_RUNS_PER_MONTH) == (eval_cost.DEFAULT_TIER,
                                                                        eval_cost.DEFAULT_RUNS_PER_MONTH)


def test_projected_cost_equals_cost_project_json(demo, capsys):
    run = ragassay.load_run("bm25", store=demo["db"])
    got = run.cost(demo["dir"] / "llm.yaml", True, output_tokens=100, min_cached_prefix=0,
                   golden=demo["golden"], corpus=demo["corpus"])
    want = cli_json(capsys, "cost", "bm25", "--store", demo["db"], "--judge", demo["dir"] / "llm.yaml",
                    "--project", "--output-tokens", "100", "--min-cached-prefix", "0", "--golden",
                    demo["dir"] / "golden")
    assert as_json(got) == want
    p = got["runs"][0]["projected"]
    assert p["label"] == "projected" and p["tokens"]["output"] == 100 * p["calls"]["total"] > 0
    # spend stays the run's own (a local judge: nothing paid), apart from the projection
    assert got["runs"][0]["spend"] == 0


# ------------------------------------------------------------------------------------------ agents

@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    """The spec's cheap ($0.10, 60%) and costly ($0.30, 95%) agent runs, scored with the file verifier and a
    human fix cost of $5, once by `ragassay score` and once by `evaluate`, into two stores."""
    root = tmp_path_factory.mktemp("agents-api")
    build_world(root)
    cheap, costly = cheap_and_costly(root)
    cli_db, api_db = root / "cli.duckdb", root / "api.duckdb"
    scored = {}
    for path in (cheap, costly):
        with pytest.raises(SystemExit) as e:
            main(["score", str(path), "--golden", str(root / "golden"), "--corpus", str(root / "docs"), "--store",
                  str(cli_db), "--verifier", f"{VERIFIERS}:from_meta", "--human-fix-cost", "5"])
        assert not e.value.code
        scored[path.stem] = ragassay.evaluate(path, golden=root / "golden", corpus=root / "docs", store=api_db,
                                              verifier=f"{VERIFIERS}:from_meta", human_fix_cost=5)
    return {"root": root, "cli": cli_db, "api": api_db, "runs": scored}


def test_evaluate_with_a_verifier_stores_what_score_verifier_stores(agents):
    with Store.open(agents["cli"], read_only=True) as st:
        want = {n: (st.get_run(n).extra["agent"], st.results_wide(n, ["task_success", "agent_cost"]).values)
                for n in ("cheap", "costly")}
    for name, run in agents["runs"].items():
        pins, values = want[name]
        assert run.record.extra["agent"] == pins and pins["human_fix_cost"] == 5.0
        assert run.info["agent"]["agent_rows"] == 20 and run.info["agent"]["verifier_errors"] == 0
        with Store.open(agents["api"], read_only=True) as st:
            np.testing.assert_array_equal(st.results_wide(run.run_id, ["task_success", "agent_cost"]).values, values)
    # the environment's end state decides: 12 of 20 cheap tasks, 19 of 20 costly ones
    assert agents["runs"]["cheap"].metric("task_success") == pytest.approx(0.60)
    assert agents["runs"]["costly"].metric("task_success") == pytest.approx(0.95)


def test_agent_report_equals_agent_report_json(agents, capsys):
    cheap = ragassay.load_run("cheap", store=agents["api"])
    got = cheap.agent_report("costly", n_resamples=300, seed=2)
    want = cli_json(capsys, "agent", "report", "cheap", "costly", "--store", agents["api"], "--resamples", "300",
                    "--seed", "2")
    assert as_json(got) == want
    a, b = (r["headline"]["cost_per_resolved_task"]["value"] for r in got["runs"])
    # the spec's example: (run cost + failures x fix cost) / resolved tasks
    assert a == pytest.approx((0.10 * 20 + 8 * 5) / 12 / 1) and b == pytest.approx((0.30 * 20 + 1 * 5) / 19)
    assert got["human_fix_cost"] == 5.0
    one = cheap.agent_report(human_fix_cost=0, n_resamples=200)
    assert one["delta"] is None and one["runs"][0]["headline"]["cost_per_resolved_task"]["value"] == \
        pytest.approx(0.10 * 20 / 12)


def test_agent_arguments_are_checked_at_the_boundary(agents):
    cheap = ragassay.load_run("cheap", store=agents["api"])
    with pytest.raises(InputError) as e:
        cheap.agent_report("costly", "cheap", human_fix_cost=-1, n_resamples=10, seed=True)
    assert [x.split("=")[0] for x in str(e.value).splitlines()] == ["others", "human_fix_cost", "n_resamples",
                                                                     "seed"]
    root = agents["root"]
    with pytest.raises(InputError, match=r"^verifier=3 \(int\): give 'module:function'.*\nhuman_fix_cost=nan"):
        ragassay.evaluate(root / "cheap.jsonl", golden=root / "golden", corpus=root / "docs",
                          store=root / "x.duckdb", verifier=3, human_fix_cost=float("nan"))
    with pytest.raises(InputError, match="has no callable 'nope'"):
        ragassay.evaluate(root / "cheap.jsonl", golden=root / "golden", corpus=root / "docs",
                          store=root / "x.duckdb", verifier=f"{VERIFIERS}:nope")
    assert not (root / "x.duckdb").exists()  # refused before anything was stored


def test_a_callable_verifier_decides_as_the_file_verifier_does(agents, tmp_path):
    from tests.agents.verifiers import from_meta

    root = agents["root"]
    shutil.copy(root / "cheap.jsonl", tmp_path / "cheap.jsonl")
    run = ragassay.evaluate(tmp_path / "cheap.jsonl", golden=root / "golden", corpus=root / "docs",
                            store=tmp_path / "s.duckdb", verifier=from_meta)
    assert run.metric("task_success") == pytest.approx(0.60)
    assert run.record.extra["agent"]["verifier"]["spec"] == "tests.agents.verifiers:from_meta"
    assert run.record.extra["agent"]["human_fix_cost"] is None
