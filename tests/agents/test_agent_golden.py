"""Agent fields of the golden set: hops on evidence, weighted subgoals, expected tools; validated at the
boundary with file:line, carried through the built file and both readers, absent from a plain set's output."""

from __future__ import annotations

import json
import textwrap

import pytest
from tests.agents.world import DOCS, golden_yaml

from ragassay.corpus import load_corpus
from ragassay.errors import GoldenBuildError
from ragassay.golden import build_golden, load_golden


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "docs").mkdir()
    for doc_id, text in DOCS.items():
        (tmp_path / "docs" / f"{doc_id}.txt").write_text(text)
    return load_corpus(tmp_path / "docs")


def _yaml(tmp_path, body: str):
    p = tmp_path / "g.yaml"
    p.write_text(textwrap.dedent(body).lstrip())
    return p


def _problems(tmp_path, corpus, body: str) -> list[str]:
    with pytest.raises(GoldenBuildError) as e:
        build_golden(_yaml(tmp_path, body), corpus)
    return e.value.problems


ITEM = """
queries:
  - query_id: m1
    question: two hops
    stratum: multi_hop
    evidence:
      - {doc_id: a, quote: 'The notice period is thirty days.', grade: 3%s}
      - {doc_id: b, quote: 'The warranty lasts two years.', grade: 3%s}
%s"""


def test_agent_fields_build_and_round_trip_through_both_readers(tmp_path, corpus):
    (tmp_path / "g.yaml").write_text(golden_yaml())
    gs = build_golden(tmp_path / "g.yaml", corpus, tmp_path / "out")
    item = gs["t20"]
    assert [e.hop for e in item.evidence] == [1, 2] and item.hops == 2
    assert [(g.id, g.weight) for g in item.subgoals] == [("found", 3.0), ("filed", 1.0)]
    assert [(t.name, t.arguments) for t in item.expected_tools] == [("search", None), ("file_ticket", {"id": 20})]
    plain = gs["t01"]
    assert plain.hops == 0 and plain.subgoals == [] and plain.expected_tools == []
    lines = (tmp_path / "out" / "golden.jsonl").read_text().splitlines()
    # a plain item's line names none of the agent fields (a plain set's build is byte-for-byte what it was)
    assert all(k not in json.loads(lines[0]) for k in ("subgoals", "expected_tools"))
    assert "hop" not in json.loads(lines[0])["evidence"][0]
    loaded = load_golden(tmp_path / "out")
    assert loaded.queries == gs.queries  # the fast reader (plain lines) and pydantic (agent lines) agree
    assert loaded["t01"].evidence[0].hop is None and loaded["t20"].evidence[1].hop == 2


def test_hops_must_be_on_every_evidence_item_or_none(tmp_path, corpus):
    probs = _problems(tmp_path, corpus, ITEM % (", hop: 1", "", ""))
    assert len(probs) == 1
    assert probs[0].startswith(f"{tmp_path / 'g.yaml'}:2: m1: evidence item(s) [2] have no `hop`")


def test_hops_must_be_numbered_from_one_without_a_gap(tmp_path, corpus):
    probs = _problems(tmp_path, corpus, ITEM % (", hop: 1", ", hop: 3", ""))
    assert probs == [f"{tmp_path / 'g.yaml'}:2: m1: hops must be numbered 1, 2, ... without a gap; hop(s) [2] have "
                     "no evidence (hops given: [1, 3])"]
    probs = _problems(tmp_path, corpus, ITEM % (", hop: 0", ", hop: 1", ""))
    assert len(probs) == 1 and ":6: m1: evidence.0.hop: Input should be greater than or equal to 1" in probs[0]
    probs = _problems(tmp_path, corpus, ITEM % (", hop: '1'", ", hop: 2", ""))
    assert len(probs) == 1 and ":6: m1: evidence.0.hop: Input should be a valid integer" in probs[0]


@pytest.mark.parametrize("subgoals, expected", [
    ("    subgoals: [{id: s1, weight: 0}]", "subgoals.0.weight: Input should be greater than 0"),
    ("    subgoals: [{id: s1, weight: -2}]", "subgoals.0.weight: Input should be greater than 0"),
    ("    subgoals: [{id: s1, weight: .inf}]", "subgoals.0.weight: Input should be a finite number"),
    ("    subgoals: [{id: s1, weight: .nan}]", "subgoals.0.weight: Input should be a finite number"),
    ("    subgoals: [{id: s1, weight: 'heavy'}]", "subgoals.0.weight: Value error, must be a number > 0"),
    ("    subgoals: [{id: s1}, {id: s1, weight: 2}]", "duplicate subgoal ids ['s1']"),
    ("    subgoals: [{id: 'has space'}]", "subgoals.0.id: Value error, must be non-empty, without whitespace"),
    ("    expected_tools: [{arguments: {x: 1}}]", "expected_tools.0.name: Field required"),
])
def test_malformed_subgoals_and_expected_tools_are_named_with_their_line(tmp_path, corpus, subgoals, expected):
    probs = _problems(tmp_path, corpus, ITEM % (", hop: 1", ", hop: 2", subgoals))
    assert len(probs) == 1, probs
    assert probs[0].startswith(f"{tmp_path / 'g.yaml'}:2: m1: ") and expected in probs[0]
