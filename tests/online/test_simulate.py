"""`online simulate` writes texts a judge can judge: the context is the text of the retrieved units, a good
answer is supported by it and a failed answer is not (checked by the local lexical judge and by plain string
containment), the same seed writes the same bytes, and judge-on-sample with failures oversampled recovers the
simulator's true faithfulness with its weights while the plain mean of the same verdicts is pulled down."""

from __future__ import annotations

import importlib
import json
import math

import orjson
import pytest
from tests.online.test_judge_sample import LOCAL, judge_file, validated

from ragassay.judges.config import load_judge_config
from ragassay.judges.local import LexicalSupport, local_judge_items
from ragassay.online.ingest import ingest
from ragassay.online.judge import judge_items_of, run_online_judge
from ragassay.online.simulate import simulate
from ragassay.store import Store

sim = importlib.import_module("ragassay.online.simulate")  # the package re-exports the function under this name


def lines(path):
    with open(path, "rb") as fh:
        return [orjson.loads(line) for line in fh]


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "traffic.jsonl"
    summary = simulate(out, records=4000, days=4, seed=3, keep_truth=True)
    return out, summary, lines(out)


def test_the_context_is_the_text_of_the_retrieved_units(month):
    _, s, recs = month
    assert len(recs) == 4000
    empty = 0
    for r in recs:
        assert r["n_retrieved"] == len(r["unit_ids"])
        if r["n_retrieved"] == 0:
            empty += 1
            assert r["context"] == "" and r["answer"] is None and r["outcome"] == "abstained"
            continue
        paragraphs = r["context"].split("\n\n")
        assert len(paragraphs) == r["n_retrieved"]
        for uid, text in zip(r["unit_ids"], paragraphs, strict=True):
            stratum, topic, i = uid.removeprefix("kb-").replace("#", "-").split("-")
            assert stratum == r["stratum"]
            assert sim.KB[stratum, int(topic)][int(i)] == text
    assert empty == s.empty_retrievals > 0
    # no placeholder text is left
    assert not any("Answer to:" in (r["answer"] or "") or "knowledge base" in r["context"] for r in recs)


def test_good_answers_are_sentences_of_their_context_and_failed_ones_are_not(month):
    _, s, recs = month
    answered = [r for r in recs if r["answer"] is not None]
    assert {r["outcome"] for r in answered} == {"answered"}
    failed = [r for r in answered if r["request_id"] in s.truth_failed]
    good = [r for r in answered if r["request_id"] not in s.truth_failed]
    assert len(answered) == s.answered and len(good) == s.supported_answers
    assert len(failed) > 300 and len(good) > 3000
    for r in good:
        assert r["answer"].split(". ")[0].rstrip(".") in r["context"]
        assert all(sent.rstrip(".") + "." in r["context"].split("\n\n")
                   for sent in r["answer"].replace(". ", ".\n").split("\n"))
    # a failed answer is no unit of its topic, retrieved or not
    for r in failed:
        topic = int(r["unit_ids"][0].split("-")[2].split("#")[0])
        assert r["answer"] not in sim.KB[r["stratum"], topic]
        assert r["answer"] not in r["context"]
    # both kinds of failure occur: a wrong figure about the topic and another topic's fact
    other_facts = {u for units in sim.KB.values() for u in units}
    kinds = {r["answer"] in other_facts for r in failed}
    assert kinds == {True, False}
    # a good answer of two sentences occurs too
    assert any(r["answer"].count(". ") == 1 for r in good)


def test_the_local_lexical_judge_scores_good_answers_1_and_failed_answers_0(month):
    _, s, recs = month
    answered = [r for r in recs if r["answer"] is not None]
    texts = {r["request_id"]: r for r in answered}
    ids = [r["request_id"] for r in answered]
    items = judge_items_of(texts, ids, [r["stratum"] for r in answered])
    got = local_judge_items(items, LexicalSupport(0.7), numeric=False)
    c = got.columns
    faith = {q: v for q, m, v in zip(c["query_id"], c["metric"], c["value"], strict=True) if m == "faithfulness"}
    assert len(faith) == len(ids)
    bad = [rid for rid in ids if faith[rid] != (0.0 if rid in s.truth_failed else 1.0)]
    assert bad == []


def test_same_seed_same_bytes_other_seed_other_texts_and_the_texts_leave_the_rest_alone(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    sa = simulate(a, records=1500, days=2, seed=11)
    sb = simulate(b, records=1500, days=2, seed=11)
    assert a.read_bytes() == b.read_bytes() and sa.to_dict() | {"out": ""} == sb.to_dict() | {"out": ""}
    simulate(c, records=1500, days=2, seed=12)
    assert a.read_bytes() != c.read_bytes()
    # the JSON summary keeps every key it had, plus the answered / supported counts
    assert set(sa.to_dict()) == {"out", "records", "sessions", "days", "start", "incident_day", "release_switch_day",
                                 "seed", "true_rephrases", "quick_unrelated_follow_ups", "failures", "thumbs_down",
                                 "escalations", "empty_retrievals", "answered", "supported_answers"}
    json.dumps(sa.to_dict())
    # the knowledge base is the same for every seed
    kb_a = {(r["unit_ids"][0], r["context"].split("\n\n")[0]) for r in lines(a) if r["unit_ids"]}
    kb_c = {(r["unit_ids"][0], r["context"].split("\n\n")[0]) for r in lines(c) if r["unit_ids"]}
    assert all(dict(kb_c).get(uid, text) == text for uid, text in kb_a)


def test_judge_on_sample_with_failures_oversampled_recovers_the_true_faithfulness(tmp_path, month):
    src, s, _ = month
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    ingest([src], db)
    path = judge_file(tmp_path, LOCAL)
    cfg = load_judge_config(path)
    validated(db, cfg)
    out = run_online_judge(db, cfg, str(path), rate=0.05, factor=5.0, seed=0)
    overall = next(r for r in out["quality"] if r["metric"] == "faithfulness" and r["day"] == "all"
                   and r["stratum"] == "all")
    truth = s.supported_answers / s.answered
    assert 0.8 < truth < 0.95
    # the sample over-represents failures (5x), so the plain mean of the verdicts is well below the truth;
    # the weights undo that: the weighted estimate lies within 3 standard errors of the truth
    assert overall["n_defined"] > 150
    assert abs(overall["value"] - truth) < min(0.05, 3 * overall["se"])
    assert overall["unweighted"] < truth - 0.1
    assert not math.isnan(overall["se"]) and overall["se"] > 0
