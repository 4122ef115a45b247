"""`ragassay score --verifier` stores agent rows beside the other metrics, `ragassay agent report` prints the
spec's cost per resolved task ($3.50 vs $0.58) with intervals, and the gate refuses trajectory metrics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from tests.agents.world import agent_trace, build_world, cheap_and_costly, hop_steps, write_run
from typer.testing import CliRunner

from ragassay.analysis.gate import load_policy
from ragassay.cli import agent as agent_cli
from ragassay.cli import run as run_cli
from ragassay.errors import InputError, PinMismatchError
from ragassay.store import Store

V = f"{Path(__file__).parent / 'verifiers.py'}"


def _app() -> typer.Typer:
    app = typer.Typer()
    run_cli.register(app)
    agent_cli.register(app)
    return app


def cli(*args):
    res = CliRunner().invoke(_app(), [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("agents")
    build_world(root)
    cheap, costly = cheap_and_costly(root)
    db = root / "runs.duckdb"
    for path in (cheap, costly):
        res = cli("score", path, "--golden", root / "golden", "--corpus", root / "docs", "--store", db,
                  "--verifier", f"{V}:from_meta", "--human-fix-cost", "5", "--json")
        assert res.exit_code == 0, res.output
    return root, db, json.loads(res.stdout)


def test_score_with_a_verifier_stores_agent_rows_and_pins(scored):
    root, db, out = scored
    info = out["import"]["agent"]
    assert info["agent_rows"] == 20 and info["verifier_errors"] == 0 and info["agent_missing_traces"] == 0
    import hashlib

    sha = hashlib.sha256(Path(V).read_bytes()).hexdigest()
    assert out["run"]["extra"]["agent"]["verifier"] == {"kind": "python", "spec": f"{V}:from_meta",
                                                        "source_sha256": sha}
    assert out["run"]["extra"]["agent"]["human_fix_cost"] == 5.0
    with Store.open(db, read_only=True) as st:
        metrics = set(st.metrics("costly"))
        assert {"task_success", "partial_credit", "silent_failure", "steps", "agent_cost", "answer_f1"} <= metrics
        wide = st.results_wide("costly", ["task_success", "agent_cost"])
        assert wide.values.shape == (20, 2) and wide.values[:, 0].sum() == 19 and np.all(wide.values[:, 1] == 0.3)
        rows = st.results("cheap", ["task_success"])
        assert rows.num_rows == 20 and set(rows["stratum"].to_pylist()) == {"tickets", "multi_hop"}


def test_agent_report_reproduces_the_spec_cost_per_resolved_task(scored):
    _, db, _ = scored
    res = cli("agent", "report", "cheap", "costly", "--store", db)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "cost per resolved task: $3.50 [" in text and "cost per resolved task: $0.58 [" in text
    assert "task success: 60.0% [" in text and "task success: 95.0% [" in text
    assert "cost per resolved task: $3.50 -> $0.58, delta -$2.92 [" in text
    assert "human fix cost $5.00 per failed task" in text
    assert "diagnostics (not gates):" in text and "§" not in res.stdout


def test_agent_report_json_has_intervals_around_the_point_values(scored):
    _, db, _ = scored
    res = cli("agent", "report", "cheap", "costly", "--store", db, "--json", "--resamples", "500")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    cheap, costly = (r["headline"] for r in rep["runs"])
    assert cheap["cost_per_resolved_task"]["value"] == pytest.approx(3.50)
    assert costly["cost_per_resolved_task"]["value"] == pytest.approx(0.55 / 0.95)
    for fig in (cheap, costly):
        c = fig["cost_per_resolved_task"]
        assert c["lo"] <= c["value"] <= c["hi"]
        assert fig["task_success"]["n"] == 20 and fig["silent_failure"]["value"] is not None
    # p95 wall-clock: walls 100, 200, ..., 2000 ms; the inverted-CDF 95th percentile of 20 values is the 19th
    assert cheap["p95_wall_ms"]["value"] == 1900.0 and costly["p95_wall_ms"]["value"] == 950.0
    d = rep["delta"]["figures"]
    assert d["task_success"]["delta"] == pytest.approx(0.35) and d["task_success"]["lo"] > 0
    assert d["cost_per_resolved_task"]["delta"] == pytest.approx(0.55 / 0.95 - 3.5)
    assert d["cost_per_resolved_task"]["hi"] < 0  # the costly agent is credibly cheaper per resolved task
    assert d["steps"]["diagnostic"] and not d["task_success"]["diagnostic"]
    assert rep["delta"]["n_items"] == 20


def test_paired_cost_interval_matches_an_independent_resampling(scored):
    _, db, _ = scored
    res = cli("agent", "report", "cheap", "costly", "--store", db, "--json", "--resamples", "400", "--seed", "7")
    d = json.loads(res.stdout)["delta"]["figures"]["cost_per_resolved_task"]
    # the same item draws (ragassay.stats.resample_counts, seed 7), the ratio computed by hand per resample
    from ragassay.stats.bootstrap import resample_counts

    rng = np.random.default_rng(7)
    w = np.vstack([resample_counts(rng, 20, 256), resample_counts(rng, 20, 144)])
    order = np.argsort([f"t{i:02d}" for i in range(1, 21)])
    ok_a = (np.arange(1, 21) <= 12).astype(float)[order]
    ok_b = (np.arange(1, 21) <= 19).astype(float)[order]
    ra, rb = w @ ok_a / 20, w @ ok_b / 20
    draws = (0.30 + (1 - rb) * 5) / rb - (0.10 + (1 - ra) * 5) / ra
    lo, hi = np.percentile(draws[np.isfinite(draws)], [2.5, 97.5])
    assert d["lo"] == pytest.approx(lo) and d["hi"] == pytest.approx(hi)


def test_agent_report_per_hop_sufficiency_and_undefined_without_hops(tmp_path):
    build_world(tmp_path)
    traces = [agent_trace("t20", ok=True, cost=0.2, steps=hop_steps(True, False))]
    traces += [agent_trace(f"t{i:02d}", ok=True, cost=0.1) for i in range(1, 20)]
    path = write_run(tmp_path / "hops.jsonl", "hops", traces)
    db = tmp_path / "h.duckdb"
    res = cli("score", path, "--golden", tmp_path / "golden", "--corpus", tmp_path / "docs", "--store", db)
    assert res.exit_code == 0, res.output
    assert "agent rows: 20 (query, trial) rows" in " ".join(res.stdout.split())
    rep = json.loads(cli("agent", "report", "hops", "--store", db, "--json").stdout)
    r = rep["runs"][0]
    assert set(r["headline"]) == {"agent_cost", "p95_wall_ms"}  # no verifier: no outcome figures
    assert [(h["hop"], h["value"], h["n"]) for h in r["hops"]] == [(1, 1.0, 1), (2, 0.0, 1)]
    assert r["diagnostics"]["hop_sufficiency"]["value"] == 0.5 and r["diagnostics"]["hop_sufficiency"]["n"] == 1
    assert r["diagnostics"]["hop_sufficiency"]["undefined"] == 19
    text = " ".join(cli("agent", "report", "hops", "--store", db).stdout.split())
    assert "no verifier (outcome metrics not scored)" in text and "hop 2 sufficiency: 0.0%" in text


def test_score_refuses_conflicting_or_bad_agent_options(scored):
    root, db, _ = scored
    args = ("score", root / "cheap.jsonl", "--golden", root / "golden", "--corpus", root / "docs", "--store", db)
    with pytest.raises(InputError, match="give --verifier or --verifier-cmd, not both"):
        cli(*args, "--verifier", f"{V}:from_meta", "--verifier-cmd", "true")
    with pytest.raises(InputError, match="--human-fix-cost -1.0: give a cost >= 0"):
        cli(*args, "--human-fix-cost", "-1")
    with pytest.raises(InputError, match="missing.duckdb: no such store; score agent traces first"):
        cli("agent", "report", "cheap", "--store", root / "missing.duckdb")
    with pytest.raises(InputError, match="agent report takes one run, or two runs"):
        cli("agent", "report", "cheap", "costly", "cheap", "--store", db)


def test_agent_report_on_a_run_without_agent_rows_says_how_to_get_them(tmp_path):
    build_world(tmp_path)
    from ragassay.trace import Trace

    plain = [Trace(trace_id=f"t{i:02d}", query_id=f"t{i:02d}", outcome="answered", answer="x") for i in range(1, 21)]
    path = write_run(tmp_path / "plain.jsonl", "plain", plain)
    db = tmp_path / "p.duckdb"
    res = cli("score", path, "--golden", tmp_path / "golden", "--corpus", tmp_path / "docs", "--store", db, "--json")
    assert res.exit_code == 0 and "agent" not in json.loads(res.stdout)["import"]
    with pytest.raises(InputError, match=r"has no agent rows; score its traces with `ragassay score TRACES"):
        cli("agent", "report", "plain", "--store", db)


def test_gate_refuses_trajectory_metrics_unless_the_policy_opts_in(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text("metrics:\n  task_success: {min_effect: 0.05}\n  steps:\n    min_effect: 2\n")
    with pytest.raises(InputError) as e:
        load_policy(p)
    msg = str(e.value)
    assert f"{p}:4: metrics.steps.allow_trajectory: steps is an agent trajectory diagnostic" in msg
    assert "add `allow_trajectory: true` under it" in msg
    p.write_text("metrics:\n  hop_sufficiency@hop2: {min_effect: 0.1}\n")
    with pytest.raises(InputError, match="hop_sufficiency@hop2 is an agent trajectory diagnostic"):
        load_policy(p)
    p.write_text("metrics:\n  task_success: {min_effect: 0.05}\n  steps: {min_effect: 2, allow_trajectory: true}\n")
    policy = load_policy(p)
    assert policy.metrics["steps"].allow_trajectory and set(policy.metrics) == {"task_success", "steps"}


def test_gate_and_compare_treat_agent_outcomes_like_any_metric(scored):
    from ragassay.analysis.gate import GatePolicy, MetricPolicy, run_gate

    _, db, _ = scored
    policy = GatePolicy(metrics={"task_success": MetricPolicy(min_effect=0.05),
                                 "agent_cost": MetricPolicy(min_effect=0.05)}, n_resamples=1000)
    with Store.open(db, read_only=True) as st:
        res = run_gate(st, "cheap", "costly", policy)
    checks = {c.name: c for c in res.checks}
    # costly succeeds more (PASS on task_success) and costs 0.20 more a run (agent_cost is lower-is-better: FAIL)
    assert checks["task_success"].verdict == "PASS"
    assert checks["agent_cost"].verdict == "FAIL" and res.verdict == "FAIL"


def test_convert_refuses_agent_traces_instead_of_dropping_their_steps(scored, tmp_path):
    from ragassay.trace.convert import convert_jsonl_to_parquet
    from ragassay.trace.parquet import write_parquet_traces

    root, _, _ = scored
    out = tmp_path / "cheap.parquet"
    with pytest.raises(InputError, match=r"cheap.jsonl:2: trace 't01' trial 0 carries agent steps, which the "
                                         r"Parquet trace format does not hold; nothing was written"):
        convert_jsonl_to_parquet(root / "cheap.jsonl", out)
    assert not out.exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    claim_only = agent_trace("t01", ok=True, cost=0.1, steps=[])
    from ragassay.errors import SchemaError

    with pytest.raises(SchemaError, match="carries agent steps or claimed_success"):
        write_parquet_traces(tmp_path / "x.parquet", None, [claim_only])


def test_score_with_a_verifier_command_and_trials(tmp_path):
    import sys

    build_world(tmp_path)
    # two trials per item: trial 0 succeeds on t01-t10, trial 1 on t01-t05; the command reads meta.resolved
    traces = [agent_trace(f"t{i:02d}", ok=i <= (10 if tr == 0 else 5), cost=0.1 + 0.1 * tr, trial=tr)
              for tr in (0, 1) for i in range(1, 21)]
    path = write_run(tmp_path / "trials.jsonl", "trials", traces)
    check = ("import json, os, sys; t = json.load(open(os.environ['RAGASSAY_TRACE'])); "
             "sys.exit(0 if t['meta']['resolved'] else 1)")
    db = tmp_path / "t.duckdb"
    res = cli("score", path, "--golden", tmp_path / "golden", "--corpus", tmp_path / "docs", "--store", db,
              "--verifier-cmd", f"{sys.executable} -c {check!r}", "--verifier-timeout", "30", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["import"]["agent"]["agent_rows"] == 40
    rep = json.loads(cli("agent", "report", "trials", "--store", db, "--json", "--human-fix-cost", "1").stdout)
    r = rep["runs"][0]
    assert r["n_items"] == 20 and r["n_rows"] == 40 and r["verifier"]["kind"] == "command"
    h = r["headline"]
    assert h["task_success"]["value"] == pytest.approx(15 / 40) and h["task_success"]["n"] == 40
    assert h["cost_per_resolved_task"]["value"] == pytest.approx((0.15 + (1 - 15 / 40) * 1) / (15 / 40))
    # with --human-fix-cost 2 on one side only, two runs pinned differently are refused
    res = cli("score", path, "--golden", tmp_path / "golden", "--corpus", tmp_path / "docs", "--store", db,
              "--name", "again", "--verifier", f"{V}:from_meta", "--human-fix-cost", "2")
    assert res.exit_code == 0, res.output
    # two verifiers are two instruments: refused as compare refuses them, unless rebaselined
    with pytest.raises(PinMismatchError, match="verifier: command"):
        cli("agent", "report", "trials", "again", "--store", db)
    with pytest.raises(InputError, match="different human fix costs"):
        cli("agent", "report", "trials", "again", "--store", db, "--rebaseline")
    rep = json.loads(cli("agent", "report", "trials", "again", "--store", db, "--json", "--human-fix-cost",
                         "2", "--rebaseline").stdout)
    assert rep["delta"]["figures"]["task_success"]["delta"] == 0.0  # the same end states, two verifiers
    assert [d["pin"] for d in rep["pin_differences"]] == ["verifier"]


def test_the_html_report_shows_agent_metrics_beside_the_others(scored, tmp_path):
    from ragassay.cli.app import main

    root, db, _ = scored
    with pytest.raises(SystemExit) as e:
        main(["report", "cheap", "costly", "--store", str(db), "-o", str(tmp_path / "html"), "--golden",
              str(root / "golden"), "--corpus", str(root / "docs")])
    assert e.value.code == 0
    page = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert all(m in page for m in ("task_success", "silent_failure", "agent_cost", "answer_f1"))
