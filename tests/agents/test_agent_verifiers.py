"""Verifiers (Python callables and commands) and the agent rows they feed: success from the verifier, never
the agent's claim; a broken verifier is a counted error, not a failure."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from tests.agents.world import agent_trace, build_world, hop_steps

from ragassay.analysis.agent import CommandVerifier, load_verifier, score_agent
from ragassay.errors import InputError

HERE = Path(__file__).parent
V = f"{HERE / 'verifiers.py'}"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"))


def _rows(scored, metric):
    c = scored.columns
    return {(q, t): v for q, t, m, v in zip(c["query_id"], c["trial"], c["metric"], c["value"], strict=True)
            if m == metric}


def test_a_verifier_that_disagrees_with_the_agents_claim_counts_a_silent_failure(world):
    _, gs = world
    traces = [agent_trace("t01", ok=False, cost=0.1, claimed=True),   # claimed, failed: silent failure
              agent_trace("t02", ok=True, cost=0.1, claimed=True),    # claimed, succeeded
              agent_trace("t03", ok=False, cost=0.1, claimed=False),  # said it failed: not silent
              agent_trace("t04", ok=False, cost=0.1, claimed=None)]   # no claim: undefined
    scored = score_agent(gs, traces, load_verifier(f"{V}:from_meta"))
    sf, ts = _rows(scored, "silent_failure"), _rows(scored, "task_success")
    assert [ts[(q, 0)] for q in ("t01", "t02", "t03", "t04")] == [0.0, 1.0, 0.0, 0.0]
    assert [sf[(q, 0)] for q in ("t01", "t02", "t03")] == [1.0, 0.0, 0.0] and math.isnan(sf[("t04", 0)])
    # the other 16 golden items have no trace: a failure for the outcome, undefined for silent failure
    assert ts[("t05", 0)] == 0.0 and math.isnan(sf[("t05", 0)])
    assert scored.n_missing == 16 and scored.n_no_claim == 1


def test_partial_credit_uses_weighted_subgoals_and_falls_back_to_success(world):
    _, gs = world
    traces = [agent_trace("t20", ok=False, cost=0.2, steps=hop_steps(True, False)),
              agent_trace("t01", ok=True, cost=0.1)]
    scored = score_agent(gs, traces, load_verifier(f"{V}:with_subgoals"))
    pc = _rows(scored, "partial_credit")
    assert pc[("t20", 0)] == pytest.approx(3 / 4)  # found (weight 3) done, filed (weight 1) not
    assert pc[("t01", 0)] == 1.0  # no subgoals: partial credit is task success
    assert pc[("t02", 0)] == 0.0  # missing trace
    assert scored.n_unscored_subgoals == 0


def test_a_bare_verdict_on_an_item_with_subgoals_gives_partial_credit_equal_to_success(world):
    _, gs = world
    scored = score_agent(gs, [agent_trace("t20", ok=True, cost=0.2)], load_verifier(f"{V}:from_meta"))
    assert _rows(scored, "partial_credit")[("t20", 0)] == 1.0
    assert scored.n_unscored_subgoals == 2  # both of t20's subgoals, counted


def test_trajectory_rows_of_a_two_hop_trace(world):
    _, gs = world
    scored = score_agent(gs, [agent_trace("t20", ok=True, cost=0.2, steps=hop_steps(True, False))])
    assert "task_success" not in scored.metrics  # no verifier: the outcome is not scored from the claim
    r = {m: _rows(scored, m)[("t20", 0)] for m in scored.metrics}
    assert r["steps"] == 3 and r["loops"] == 0 and r["redundant_query_rate"] == 0
    assert r["hop_sufficiency"] == 0.5 and r["hop_sufficiency@hop1"] == 1 and r["hop_sufficiency@hop2"] == 0
    # expected: search (any args), file_ticket(id=20); calls: search, search, file_ticket(id=20): F1 = 4/5
    assert r["tool_call_f1"] == pytest.approx(4 / 5)
    assert r["agent_cost"] == 0.2 and r["agent_wall_ms"] == 1000.0
    other = {m: _rows(scored, m)[("t01", 0)] for m in ("hop_sufficiency", "tool_call_f1", "steps")}
    assert all(math.isnan(v) for v in other.values())  # no trace, no hops, no expected tools


@pytest.mark.parametrize("func, message", [
    ("raises", "the verifier raised RuntimeError: environment unreachable"),
    ("wrong_type", "the verifier returned str"),
    ("unknown_subgoal", "subgoal 'nope' is not one of item t01's subgoals []"),
])
def test_a_broken_python_verifier_is_a_counted_error_not_a_failure(world, func, message):
    _, gs = world
    scored = score_agent(gs, [agent_trace("t01", ok=True, cost=0.1)], load_verifier(f"{V}:{func}"))
    assert math.isnan(_rows(scored, "task_success")[("t01", 0)])
    assert len(scored.verifier_errors) == 1 and message in scored.verifier_errors[0]
    assert scored.info()["verifier_errors"] == 1


def test_verifier_specs_are_checked_before_any_work():
    with pytest.raises(InputError, match="write module:function"):
        load_verifier("no_colon")
    with pytest.raises(InputError, match="has no callable 'missing'"):
        load_verifier(f"{V}:missing")
    with pytest.raises(InputError, match="cannot import no_such_module_xyz"):
        load_verifier("no_such_module_xyz:f")
    with pytest.raises(InputError, match="--verifier-timeout"):
        CommandVerifier("true", 0)


def _cmd(script: str) -> str:
    return f"{sys.executable} -c {script!r}"


def test_command_verifier_exit_codes_env_and_subgoal_json(world, tmp_path):
    _, gs = world
    item = gs["t20"]
    tr = agent_trace("t20", ok=True, cost=0.1)
    tr = tr.model_copy(update={"meta": {"workdir": str(tmp_path)}})
    check = ("import json, os, sys; t = json.load(open(os.environ['RAGASSAY_TRACE'])); "
             "i = json.load(open(os.environ['RAGASSAY_ITEM'])); "
             "assert t['query_id'] == i['query_id'] == 't20' and os.environ['RAGASSAY_WORKDIR'] == t['meta']['workdir']; "
             "print(json.dumps({'subgoals': {'found': True, 'filed': 0.5}})); sys.exit(0)")
    v = CommandVerifier(_cmd(check))
    got = v(tr, item)
    assert got.success == 1.0 and got.subgoals == {"found": 1.0, "filed": 0.5} and got.error is None
    assert CommandVerifier(_cmd("import sys; sys.exit(1)"))(tr, item).success == 0.0
    assert CommandVerifier(_cmd("import sys; sys.exit(3)"))(tr, item).success == 0.0
    crash = CommandVerifier(_cmd("import os; os.abort()"))(tr, item)
    assert math.isnan(crash.success) and "crashed (exit 134, signal 6)" in crash.error
    missing = CommandVerifier("/nonexistent/verifier-binary")(tr, item)
    assert math.isnan(missing.success) and "crashed (exit 127)" in missing.error
    bad_json = CommandVerifier(_cmd("print('{not json')"))(tr, item)
    assert math.isnan(bad_json.success) and "stdout is not JSON" in bad_json.error
    chatter = CommandVerifier(_cmd("print('checking the ticket...')"))(tr, item)
    assert chatter.success == 1.0 and chatter.error is None  # stdout that is not a JSON object is ignored


def test_command_verifier_timeout_is_a_counted_error(world):
    _, gs = world
    v = CommandVerifier(_cmd("import time; time.sleep(5)"), timeout_s=0.3)
    scored = score_agent(gs, [agent_trace("t01", ok=True, cost=0.1)], v)
    assert math.isnan(_rows(scored, "task_success")[("t01", 0)])
    assert scored.verifier_errors == ["query t01 trial 0: the verifier command timed out after 0.3 s"]


def test_no_workdir_in_meta_means_no_workdir_variable(world, monkeypatch):
    _, gs = world
    monkeypatch.setenv("RAGASSAY_WORKDIR", "/stale")
    v = CommandVerifier(_cmd("import os, sys; sys.exit(0 if 'RAGASSAY_WORKDIR' not in os.environ else 1)"))
    assert v(agent_trace("t01", ok=True, cost=0.1), gs["t01"]).success == 1.0
