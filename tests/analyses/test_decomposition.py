"""Evidence-delivery decomposition: the chapter's 400-query runbook example, undefined cells, the exact
delivery/use split, and the oracle ladder over stored runs."""

import numpy as np
import pytest
from tests.analyses._runs import make_run

from ragassay.analysis.decomposition import (
    CorrectRule,
    decompose,
    decomposition_between,
    decomposition_of_run,
    oracle_ladder,
    split_change,
)
from ragassay.errors import InputError


def _system(hits: int, hit_correct: int, miss_correct: int, n: int = 400):
    h = np.zeros(n)
    y = np.zeros(n)
    h[:hits] = 1
    y[:hit_correct] = 1
    y[hits:hits + miss_correct] = 1
    return y, h


def test_runbook_example_reproduces_the_chapter_numbers():
    y1, h1 = _system(340, 255, 9)
    y2, h2 = _system(260, 252, 12)
    q = np.array([f"q{i}" for i in range(400)], dtype=object)
    d1 = decompose(y1, h1, q, n_resamples=200)
    d2 = decompose(y2, h2, q, n_resamples=200)
    assert d1["h"]["value"] == pytest.approx(0.85) and d1["c1"]["value"] == pytest.approx(0.75)
    assert d1["c0"]["value"] == pytest.approx(0.15) and d1["A"]["value"] == pytest.approx(0.66)
    assert d2["h"]["value"] == pytest.approx(0.65) and d2["c1"]["value"] == pytest.approx(63 / 65)
    assert d2["c0"]["value"] == pytest.approx(3 / 35) and d2["A"]["value"] == pytest.approx(0.66)
    # A = h c1 + (1 - h) c0 holds for the point estimates
    for d in (d1, d2):
        h, c1, c0 = d["h"]["value"], d["c1"]["value"], d["c0"]["value"]
        assert d["A"]["value"] == pytest.approx(h * c1 + (1 - h) * c0)
        assert d["c1"]["ci_low"] < d["c1"]["value"] < d["c1"]["ci_high"]
    assert d1["c1"]["n"] == 340 and d1["c0"]["n"] == 60


def test_change_splits_exactly_into_delivery_and_use():
    y1, h1 = _system(340, 255, 9)
    y2, h2 = _system(260, 252, 12)
    q = np.array([f"q{i}" for i in range(400)], dtype=object)
    ch = split_change(y1, h1, y2, h2, q, n_resamples=300)
    u = ((0.75 - 0.15) + (63 / 65 - 3 / 35)) / 2
    assert ch["delta_A"]["value"] == pytest.approx(0.0, abs=1e-12)
    assert ch["delivery"]["value"] == pytest.approx(u * (0.65 - 0.85))
    assert ch["delivery"]["value"] + ch["use"]["value"] == pytest.approx(ch["delta_A"]["value"], abs=1e-12)
    # delivery fell credibly (200 paired resamples of 400 queries)
    assert ch["delivery"]["ci_high"] < 0 < ch["use"]["ci_low"]


def test_empty_cell_is_undefined_not_zero():
    q = np.array(["a", "b", "c"], dtype=object)
    d = decompose([1, 0, 1], [1, 1, 1], q, n_resamples=50)
    assert d["c0"]["defined"] is False and d["c0"]["value"] is None and d["n_miss"] == 0
    assert d["c1"]["value"] == pytest.approx(2 / 3)
    ch = split_change([1, 0, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0], q, n_resamples=50)
    assert ch["delivery"]["value"] is None and ch["use"]["value"] is None
    assert ch["delta_A"]["value"] == pytest.approx(1 / 3)


def test_correct_rule_parses_and_rejects():
    r = CorrectRule.parse("answer_f1>=0.5")
    assert (r.metric, r.threshold) == ("answer_f1", 0.5)
    np.testing.assert_array_equal(r.apply(np.array([0.49, 0.5, np.nan])), [0.0, 1.0, np.nan])
    with pytest.raises(InputError, match="METRIC>=THRESHOLD"):
        CorrectRule.parse("answer_f1 > 0.5")


def _stored_pair(store):
    y1, h1 = _system(340, 255, 9)
    y2, h2 = _system(260, 252, 12)
    strata = ["multi" if i % 4 == 0 else "single" for i in range(400)]
    a = make_run(store, "sys1", {"answer_f1": y1, "recall@context": np.where(h1 == 1, 1.0, 0.5),
                                 "recall@fusion_depth": np.ones(400)}, strata=strata)
    b = make_run(store, "sys2", {"answer_f1": y2, "recall@context": np.where(h2 == 1, 1.0, 0.0),
                                 "recall@fusion_depth": np.full(400, 0.9)}, strata=strata)
    return a, b


def test_stored_runs_decompose_per_stratum_with_stage_columns(store):
    a, b = _stored_pair(store)
    d = decomposition_of_run(store, a, n_resamples=100)
    overall = d["rows"][0]
    assert overall["stratum"] == "all" and overall["A"]["value"] == pytest.approx(0.66)
    assert overall["stages"]["candidate_recall"]["value"] == pytest.approx(1.0)
    assert overall["stages"]["complete_evidence"]["value"] == pytest.approx(0.85)
    assert overall["stages"]["support"]["defined"] is False  # no support metric stored
    assert {r["stratum"] for r in d["rows"]} == {"all", "multi", "single"}
    ch = decomposition_between(store, "sys1", "sys2", n_resamples=100)
    c = ch["rows"][0]["change"]
    assert c["delivery"]["value"] + c["use"]["value"] == pytest.approx(0.0, abs=1e-12)


def test_oracle_ladder_blames_generation_when_the_oracle_rung_is_poor(store):
    n = 60
    rng = np.random.default_rng(3)
    pipe = make_run(store, "pipe", {"answer_f1": rng.uniform(0, 0.3, n), "recall@context": np.ones(n),
                                    "recall@fusion_depth": np.ones(n), "ndcg@final_k": np.ones(n)})
    orc = make_run(store, "orc", {"answer_f1": rng.uniform(0, 0.45, n), "recall@context": np.ones(n)},
                   config={"name": "orc", "oracle": True})
    lad = oracle_ladder(store, [pipe, orc], n_resamples=200)
    assert lad["fault"] == "generation"
    assert [r["oracle"] for r in lad["rungs"]] == [False, True]


def test_oracle_ladder_blames_candidates_when_recall_is_low_and_the_oracle_is_good(store):
    n = 60
    pipe = make_run(store, "pipe", {"answer_f1": np.r_[np.ones(20), np.zeros(40)], "recall@context": np.ones(n),
                                    "recall@fusion_depth": np.full(n, 0.4), "ndcg@final_k": np.full(n, 0.9)})
    orc = make_run(store, "orc", {"answer_f1": np.r_[np.ones(55), np.zeros(5)], "recall@context": np.ones(n)},
                   config={"name": "orc", "oracle": True})
    lad = oracle_ladder(store, [pipe, orc], n_resamples=200)
    assert lad["fault"] == "candidate_generation"
    assert lad["oracle_gap"]["value"] == pytest.approx(35 / 60)
