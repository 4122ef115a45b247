"""Ranking metrics: the spec's worked examples, undefined handling, names, and independent oracles."""

import math

import ir_measures
import numpy as np
import pytest
from sklearn.metrics import ndcg_score

from ragassay.errors import InputError
from ragassay.metrics import GradeMatrix, Metric, Semantics, evaluate

NAN = float("nan")


def one(ranked, judged, metrics, sem=None):
    gm = GradeMatrix.from_lists(["q"], [ranked], [judged])
    return {str(m): r.values[0] for m, r in evaluate(gm, metrics, sem).items()}


def test_worked_example_recall_precision_rr_ndcg():
    # returned D5, D3, D9, D7, D2; grades D3=3, D7=2, D5=1; relevant (grade >= 2) = {D3, D7}
    ranked = [1, 3, NAN, 2, NAN]
    v = one(ranked, [3, 2, 1], ["recall@5", "precision@5", "rr", "ndcg@5"])
    assert v["recall@5"] == 1.0
    assert v["precision@5"] == pytest.approx(0.4)
    assert v["rr"] == 0.5
    dcg = 1 / math.log2(2) + 7 / math.log2(3) + 3 / math.log2(5)
    idcg = 7 / math.log2(2) + 3 / math.log2(3) + 1 / math.log2(4)
    assert round(dcg, 2) == 6.71 and round(idcg, 2) == 9.39
    assert v["ndcg@5"] == pytest.approx(dcg / idcg)
    assert round(v["ndcg@5"], 2) == 0.71


def test_mrr_over_first_hits_at_1_2_and_none_is_half():
    gm = GradeMatrix.from_lists(["a", "b", "c"], [[2, 0], [0, 2], [0, 0]], [[2, 0], [2, 0], [2, 0]])
    r = evaluate(gm, ["rr"])[Metric("rr")]
    assert list(r.values) == [1.0, 0.5, 0.0]
    assert r.mean() == 0.5


def test_ap_with_hits_at_2_and_4_of_two_relevant_is_half():
    # precision at the hits: 1/2 and 2/4 -> (0.5 + 0.5) / 2
    assert one([0, 2, 0, 2], [2, 2, 0, 0], ["ap"])["ap"] == 0.5


def test_ap_at_k_divides_by_all_relevant_like_map_cut():
    # hit at rank 1 only within k=2; 3 relevant labels in total
    assert one([2, 0, 2], [2, 2, 2], ["ap@2"])["ap@2"] == pytest.approx(1 / 3)


def test_no_relevant_labels_give_nan_and_are_counted_not_zero():
    gm = GradeMatrix.from_lists(["a", "b"], [[2, 0], [0, 1]], [[2], [0, 1]])
    res = evaluate(gm, ["recall@2", "ap", "ndcg@2", "rprec", "bpref", "rr", "success@2", "precision@2"])
    for name in ["recall@2", "ap", "rprec", "bpref", "rr", "success@2"]:
        r = res[Metric.parse(name)]
        assert math.isnan(r.values[1]) and r.n_undefined == 1 and r.n_defined == 1
        assert r.mean() == r.values[0]
    # nDCG is defined while some label has positive gain (grade 1 here), even below the relevance level
    assert res[Metric.parse("ndcg@2")].values[1] == pytest.approx((1 / math.log2(3)) / 1.0)
    assert res[Metric.parse("precision@2")].values[1] == 0.0


def test_precision_divides_by_k_when_fewer_results():
    assert one([2], [2], ["precision@10"])["precision@10"] == pytest.approx(0.1)


def test_missing_query_is_an_empty_ranking_and_counted():
    gm = GradeMatrix.from_lists(["a", "b"], [[2], []], [[2], [2]], missing=[False, True])
    r = evaluate(gm, ["recall@10"])[Metric.parse("recall@10")]
    assert list(r.values) == [1.0, 0.0] and r.n_missing == 1
    j = evaluate(gm, ["judged@10"])[Metric.parse("judged@10")]
    assert j.values[0] == 1.0 and math.isnan(j.values[1])


def test_bpref_ignores_unjudged_and_uses_judged_nonrelevant_from_labels():
    # ranking: nonrel, unjudged, rel, rel; labels: 2 relevant, 3 judged non-relevant (2 never retrieved)
    v = one([0, NAN, 2, 2], [2, 2, 0, 0, 0], ["bpref"])["bpref"]
    assert v == pytest.approx(((1 - 1 / 2) + (1 - 1 / 2)) / 2)


def test_negative_grades_are_judged_nonrelevant_by_default_and_unjudged_in_trec_mode():
    ranked, judged = [-1, 2], [2, -1, 0]
    default = one(ranked, judged, ["bpref", "judged@2"], Semantics(relevance_level=1))
    trec = one(ranked, judged, ["bpref", "judged@2"], Semantics.trec_eval())
    assert default["bpref"] == pytest.approx(1 - 1 / 1) and default["judged@2"] == 1.0
    assert trec["bpref"] == 1.0 and trec["judged@2"] == 0.5


def test_ndcg_matches_sklearn_for_linear_and_exp_gain():
    rng = np.random.default_rng(3)
    for _ in range(30):
        g = rng.integers(0, 4, size=12).astype(float)
        scores = rng.permutation(12).astype(float)
        order = np.argsort(-scores)
        for gain, transform in (("linear", lambda x: x), ("exp", lambda x: 2**x - 1)):
            ours = one(list(g[order]), list(g), ["ndcg@5"], Semantics(relevance_level=1, gain=gain))["ndcg@5"]
            if g.max() == 0:
                assert math.isnan(ours)
                continue
            ref = ndcg_score([transform(g)], [scores], k=5)
            assert ours == pytest.approx(ref, abs=1e-12)


def test_judged_at_k_matches_ir_measures():
    rng = np.random.default_rng(5)
    qrels, run, ranked, judged, qids = [], [], [], [], []
    for q in range(20):
        labels = {f"d{i}": int(rng.integers(0, 3)) for i in rng.choice(30, size=10, replace=False)}
        docs = [f"d{i}" for i in rng.choice(30, size=int(rng.integers(3, 15)), replace=False)]
        qrels += [ir_measures.Qrel(f"q{q}", d, g) for d, g in labels.items()]
        run += [ir_measures.ScoredDoc(f"q{q}", d, float(100 - i)) for i, d in enumerate(docs)]
        ranked.append([labels.get(d, NAN) for d in docs])
        judged.append(list(labels.values()))
        qids.append(f"q{q}")
    ref = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.Judged @ 10], qrels, run)}
    ours = evaluate(GradeMatrix.from_lists(qids, ranked, judged), ["judged@10"])[Metric("judged", 10)]
    for q, v in ours.per_query().items():
        assert v == pytest.approx(ref[q])


def test_metric_names_round_trip_and_reject_other_spellings():
    for name in [
        "recall@10",
        "precision@5",
        "success@10",
        "rr",
        "rr@10",
        "ap",
        "ap@100",
        "ndcg@10",
        "ndcg",
        "rprec",
        "bpref",
        "judged@10",
    ]:
        assert str(Metric.parse(name)) == name
    # other tools' spellings are accepted and mapped to the canonical one
    assert str(Metric.parse("P@5")) == "precision@5" and str(Metric.parse("P_5")) == "precision@5"
    assert str(Metric.parse("mrr")) == "rr"  # ranx's and ir_measures' MRR
    with pytest.raises(InputError, match="ambiguous"):
        Metric.parse("recall")  # trec_eval: nine cutoffs; ranx: the whole ranking
    with pytest.raises(InputError, match="takes no cutoff"):
        Metric.parse("bpref@10")
    # evaluate() reads every measure under the run's semantics: a name pinning a parameter goes elsewhere
    with pytest.raises(InputError, match="metrics.measures.evaluate"):
        Metric.parse("P(rel=2)@5")
    with pytest.raises(InputError, match="metrics.measures.evaluate"):
        evaluate(GradeMatrix.from_lists(["q"], [[1]], [[1]]), ["RBP(p=0.8)"])


def test_results_record_semantics():
    sem = Semantics(relevance_level=1, gain="linear")
    r = evaluate(GradeMatrix.from_lists(["q"], [[1]], [[1]]), ["ndcg@10"], sem)[Metric("ndcg", 10)]
    assert r.semantics == sem and r.summary()["semantics"]["gain"] == "linear"
    assert str(sem) == "rel>=1;gain=linear;ties=given;negatives=nonrelevant"
