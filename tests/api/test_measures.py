"""Metric names in ir_measures / trec_eval spellings, and ERR / RBP against ir_measures (gdeval) and ranx."""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest

from ragassay.errors import InputError
from ragassay.metrics.extra import err, rbp
from ragassay.metrics.matrix import GradeMatrix
from ragassay.metrics.names import Metric, canonical_name, parse_measure

IR_MEASURES_NAMES = ["nDCG@10", "nDCG", "R@100", "P@5", "AP", "AP@100", "RR", "RR@10", "ERR@10", "RBP(p=0.8)",
                     "RBP(p=0.5)", "Success@10", "Judged@10", "Rprec", "Bpref"]
TREC_EVAL_NAMES = {"ndcg_cut_10": "ndcg@10", "map": "ap", "map_cut_100": "ap@100", "recip_rank": "rr",
                   "P_5": "precision@5", "recall_100": "recall@100", "Rprec": "rprec", "bpref": "bpref",
                   "ndcg": "ndcg", "success_10": "success@10"}


@pytest.mark.parametrize("name", IR_MEASURES_NAMES)
def test_ir_measures_names_round_trip_through_ir_measures_parser(name):
    ours = parse_measure(name)
    assert ir_measures.parse_measure(ours.ir_measures_name()) == ir_measures.parse_measure(name)
    assert parse_measure(str(ours)) == ours  # the canonical spelling parses to the same identity


@pytest.mark.parametrize(("name", "canonical"), sorted(TREC_EVAL_NAMES.items()))
def test_trec_eval_names_map_to_canonical_and_to_ir_measures_trec_parser(name, canonical):
    ours = Metric.parse(name)
    assert str(ours) == canonical
    theirs = ir_measures.parse_trec_measure(name)
    assert [ir_measures.parse_measure(ours.ir_measures_name())] == theirs


def test_canonical_spellings_and_depth_names():
    assert str(parse_measure("RBP(p=0.8)")) == "rbp(p=0.8)"
    assert str(parse_measure("rbp")) == "rbp(p=0.8)"  # ir_measures' default persistence
    assert str(parse_measure("RBP(p=0.95)@20")) == "rbp(p=0.95)@20"
    # RBP with rel= is ir_measures' binary RBP; without it, graded (ir_measures' meaning)
    assert str(parse_measure("RBP(rel=2)")) == "rbp(p=0.8,rel=2)"
    assert str(parse_measure("mrr")) == "rr"  # ranx's name for reciprocal rank
    assert canonical_name("nDCG@final_k") == "ndcg@final_k"
    assert canonical_name("R@fusion_depth") == "recall@fusion_depth"
    assert canonical_name("answer_f1") == "answer_f1"
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        parse_measure("RBP(p=1.5)")


def _random_run(seed: int, n_q: int = 40, max_grade: int = 3):
    """Random qrels and runs (numeric qids, as gdeval needs) with unjudged and past-the-end documents."""
    rng = np.random.default_rng(seed)
    qrels, run, ranked, judged, qids = [], [], [], [], []
    for q in range(1, n_q + 1):
        qid = str(q)
        n_docs = int(rng.integers(5, 30))
        grades = {f"d{i}": int(rng.integers(0, max_grade + 1)) for i in range(n_docs) if rng.random() < 0.6}
        if q % 7 == 0:  # some queries with nothing relevant
            grades = {d: 0 for d in grades}
        if not grades:
            grades = {"d0": 0}
        order = rng.permutation(n_docs)[: int(rng.integers(1, n_docs + 1))]
        docs = [f"d{i}" for i in order]
        for d, g in grades.items():
            qrels.append(ir_measures.Qrel(qid, d, g))
        for r, d in enumerate(docs):
            run.append(ir_measures.ScoredDoc(qid, d, float(len(docs) - r)))
        qids.append(qid)
        ranked.append([grades.get(d) for d in docs])
        judged.append(list(grades.values()))
    return qids, qrels, run, GradeMatrix.from_lists(qids, ranked, judged)


@pytest.mark.parametrize("k", [5, 10, 20])
def test_err_matches_ir_measures_gdeval_on_random_runs(k):
    qids, qrels, run, gm = _random_run(seed=k)
    ours = err(gm, k)
    theirs = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.ERR @ k], qrels, run)}
    has_rel = np.array([any(q.relevance > 0 for q in qrels if q.query_id == qid) for qid in qids])
    assert np.isnan(ours[~has_rel]).all()  # undefined, where gdeval writes 0
    for i, qid in enumerate(qids):
        if has_rel[i]:
            assert ours[i] == pytest.approx(theirs[qid], abs=1e-5)  # gdeval prints 5 decimals


@pytest.mark.slow  # ranx compiles its numba kernels on first use (about 10 s)
def test_rbp_matches_ranx_on_binary_labels_and_brute_force_residual():
    from ranx import Qrels, Run
    from ranx import evaluate as ranx_evaluate

    qids, qrels, run, gm = _random_run(seed=3, max_grade=1)
    value, residual = rbp(gm, 0.8, relevance_level=1)
    rq: dict = {}
    for q in qrels:
        rq.setdefault(q.query_id, {})[q.doc_id] = q.relevance
    rr: dict = {}
    for d in run:
        rr.setdefault(d.query_id, {})[d.doc_id] = d.score
    theirs = ranx_evaluate(Qrels(rq), Run(rr), "rbp.8", return_mean=False)
    order = np.argsort(np.array(qids))  # ranx returns queries in sorted id order
    np.testing.assert_allclose(value[order], theirs, atol=1e-12)
    # residual by enumeration: unjudged ranks' weight plus p^len for everything past the list
    for i, qid in enumerate(qids):
        docs = sorted(rr[qid], key=lambda d: -rr[qid][d])
        want = sum(0.2 * 0.8**r for r, d in enumerate(docs) if d not in rq[qid]) + 0.8 ** len(docs)
        assert residual[i] == pytest.approx(want, abs=1e-12)


def test_rbp_worked_example_and_cutoff():
    # ranks: relevant, unjudged, non-relevant, relevant; p = 0.5
    gm = GradeMatrix.from_lists(["q"], [[2, None, 0, 2]], [[2, 2, 0]])
    value, residual = rbp(gm, 0.5, relevance_level=1)
    assert value[0] == pytest.approx(0.5 * (1 + 0.125))
    assert residual[0] == pytest.approx(0.5 * 0.5 + 0.5**4)
    value2, residual2 = rbp(gm, 0.5, relevance_level=1, k=2)
    assert value2[0] == pytest.approx(0.5) and residual2[0] == pytest.approx(0.25 + 0.25)


NEW_IR_MEASURES = {"NumRet": "num_ret", "NumRel": "num_rel", "NumRelRet": "num_rel_ret", "SetP": "set_precision",
                   "SetR": "set_recall", "SetF": "set_f", "IPrec@0.5": "iprec(r=0.5)", "infAP": "infap"}
NEW_TREC_EVAL = {"num_ret": "num_ret", "num_rel": "num_rel", "num_rel_ret": "num_rel_ret", "set_P": "set_precision",
                 "set_recall": "set_recall", "set_F": "set_f", "iprec_at_recall_0.50": "iprec(r=0.5)",
                 "11pt_avg": "11pt_avg", "infAP": "infap", "gm_map": "gm_map"}


@pytest.mark.parametrize(("name", "canonical"), sorted(NEW_IR_MEASURES.items()))
def test_new_measures_parse_from_ir_measures_names_and_write_them_back(name, canonical):
    ours = Metric.parse(name)
    assert str(ours) == canonical and Metric.parse(canonical) == ours
    assert ir_measures.parse_measure(ours.ir_measures_name()) == ir_measures.parse_measure(name)


@pytest.mark.parametrize(("name", "canonical"), sorted(NEW_TREC_EVAL.items()))
def test_new_measures_parse_from_trec_eval_names(name, canonical):
    assert str(Metric.parse(name)) == canonical
    assert canonical_name(name) == canonical


def test_measures_without_an_ir_measures_twin_say_so():
    for name in ("dcg@10", "11pt_avg", "gm_map"):
        with pytest.raises(InputError, match="no ir_measures equivalent"):
            Metric.parse(name).ir_measures_name()
    with pytest.raises(InputError, match="recall level"):
        Metric.parse("IPrec@1.5")
