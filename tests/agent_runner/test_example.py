"""The bundled multi-hop example builds with `ragassay golden build`, names its evidence per hop, and the
reference agent on it succeeds on some items and fails on others, some failures silent."""

import json

import pytest

from ragassay.cli.app import main
from ragassay.pipeline.agent import bundled_agent_dir, plan, run_agent, verdicts


def test_example_builds_with_golden_build_and_names_hops(tmp_path):
    d = bundled_agent_dir()
    with pytest.raises(SystemExit) as ex:
        main(["golden", "build", str(d / "golden.yaml"), "--corpus", str(d / "corpus"), "-o", str(tmp_path / "g")])
    assert ex.value.code == 0
    rows = [json.loads(line) for line in (tmp_path / "g" / "golden.jsonl").read_text().splitlines()]
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert manifest["n_queries"] == len(rows) == 32
    assert manifest["strata"] == {"author_birthplace": 6, "founder_birthplace": 8, "headquarters_river": 8,
                                  "three_hop": 10}
    docs = list((d / "corpus").glob("*.txt"))
    assert 20 <= len(docs) <= 41
    for r in rows:
        hops = [e["hop"] for e in r["evidence"]]
        # every item names one evidence span per hop, hops 1..k in order, two or three hops
        assert hops == list(range(1, len(hops) + 1)) and len(hops) in (2, 3)
        assert (len(hops) == 3) == (r["stratum"] == "three_hop")
        assert {s["id"] for s in r["subgoals"]} == {"found-entity", "final-answer"}
        assert r["reference_answer"] and plan(r["question"]) is not None
        assert len(plan(r["question"])[1]) == len(hops)


def test_plan_reads_the_anchor_and_the_relation_chain():
    assert plan("On which river lies the birthplace of the founder of the Hollin Rail Company?") == (
        "Hollin Rail Company", ("founder", "birthplace", "river"))
    assert plan("In which town was the author of The Salt Road born?") == ("The Salt Road", ("author", "birthplace"))
    assert plan("Who painted the harbour?") is None


@pytest.fixture(scope="module")
def outcomes(example, agents, tmp_path_factory):
    _, gs = example
    out = {}
    for name, agent in agents.items():
        _, traces = run_agent(agent, gs.queries, tmp_path_factory.mktemp(name))
        out[name] = (traces, verdicts(traces, gs))
    return out


def test_success_rate_is_strictly_between_0_and_1_with_silent_failures(outcomes):
    for name, (traces, vs) in outcomes.items():
        success = [v["success"] for v in vs]
        silent = [t.claimed_success and not v["success"] for t, v in zip(traces, vs, strict=True)]
        assert 0 < sum(success) < len(success), name
        assert sum(silent) >= 1, name
    # measured on the bundled example (docs/agents.md quotes these): 23 and 28 of 32
    assert sum(v["success"] for v in outcomes["cheap"][1]) == 23
    assert sum(v["success"] for v in outcomes["careful"][1]) == 28
    # cheap never says it failed: every one of its 9 failures is a confident wrong answer
    cheap_traces, cheap_vs = outcomes["cheap"]
    assert sum(t.claimed_success and not v["success"] for t, v in zip(cheap_traces, cheap_vs, strict=True)) == 9


def test_known_traps_fail_the_way_they_were_written_to(outcomes):
    cheap = {t.query_id: t for t in outcomes["cheap"][0]}
    careful = {t.query_id: t for t in outcomes["careful"][0]}
    # a similar-named distractor outranks the anchor for the whole question: cheap follows the wrong founder
    assert cheap["fb-01"].meta["bridges"] == ["Tomas Reide"] and cheap["fb-01"].answer == "Ashcombe"
    assert careful["fb-01"].answer == "Quellmoor"
    # "Mara Ostwick's mother was born in Farrowby": cheap reads the mother's birthplace; careful finds no
    # sentence naming Mara as the one born and abstains, claiming nothing
    assert cheap["fb-02"].answer == "Farrowby" and cheap["fb-02"].claimed_success
    assert careful["fb-02"].outcome == "abstained" and careful["fb-02"].claimed_success is False
    # two people named Oskar Thale: both configurations pick the painter, a silent failure for both
    assert cheap["fb-03"].answer == careful["fb-03"].answer == "Wyncote"


def test_careful_costs_more_per_run_and_less_per_resolved_task(outcomes):
    fix = 5.0
    per = {}
    for name, (traces, vs) in outcomes.items():
        mean_cost = sum(t.cost for t in traces) / len(traces)
        p = sum(v["success"] for v in vs) / len(vs)
        per[name] = (mean_cost, (mean_cost + (1 - p) * fix) / p)  # spec section 12 formula, by hand
        # the trace's cost is the sum of its steps' costs, and its tokens the sum of theirs
        for t in traces:
            assert t.cost == pytest.approx(sum(s.cost for s in t.steps), abs=1e-9)
            assert t.tokens_in == sum(s.tokens_in for s in t.steps)
    assert per["careful"][0] > per["cheap"][0]
    assert per["careful"][1] < per["cheap"][1]


def test_cost_model_charges_each_turn_for_the_transcript_so_far(outcomes):
    t = outcomes["cheap"][0][0]
    ins = [s.tokens_in for s in t.steps]
    assert ins[0] == 300  # the first turn sends the system prompt only
    assert all(b > a for a, b in zip(ins, ins[1:], strict=False))  # the transcript only grows
    s = t.steps[0]
    assert s.cost == pytest.approx((s.tokens_in * 3.0 + s.tokens_out * 15.0) / 1e6)


def test_traces_validate_against_the_corpus_and_hops_are_recorded(example, outcomes):
    from ragassay.trace.schema import validate_units

    corpus, gs = example
    for traces, _ in outcomes.values():
        assert validate_units(traces, corpus).count == 0
        for t in traces:
            hops = sorted({s.hop for s in t.steps if s.kind == "retrieval"})
            assert hops == list(range(1, len(hops) + 1))
            assert {s.name for s in t.steps} <= {"search", "read", "write_answer"}
            assert (t.outcome == "answered") == any(s.name == "write_answer" for s in t.steps)
