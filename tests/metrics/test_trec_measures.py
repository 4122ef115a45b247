"""The count, set, interpolated, inferred and geometric measures against pytrec_eval (trec_eval's C code) on
random runs; unnormalized DCG against scikit-learn; ERR and RBP reachable through ``measures.evaluate``."""

import math

import numpy as np
import pytest
import pytrec_eval
from sklearn.metrics import dcg_score
from test_trec_differential import arrange, columns, random_case

from ragassay.metrics import GradeMatrix, Metric, Qrels, Run, Semantics, build_grade_matrix, evaluate
from ragassay.metrics.extra import err, rbp
from ragassay.metrics.measures import evaluate as evaluate_measures
from ragassay.metrics.names import parse_measure

LEVELS = [f"{x / 10:.2f}" for x in range(11)]
# pytrec_eval name -> ragassay name, and whether the value is undefined (NaN) in ragassay when R = 0
PAIRS = {
    "num_ret": ("num_ret", False),
    "num_rel": ("num_rel", False),
    "num_rel_ret": ("num_rel_ret", False),
    "set_P": ("set_precision", False),
    "set_recall": ("set_recall", True),
    "set_F": ("set_f", True),
    "11pt_avg": ("11pt_avg", True),
    "infAP": ("infap", True),
    **{f"iprec_at_recall_{x}": (f"iprec(r={float(x):g})", True) for x in LEVELS},
}
MEASURES = {"num_ret", "num_rel", "num_rel_ret", "set_P", "set_recall", "set_F", "11pt_avg", "infAP",
            "iprec_at_recall", "gm_map"}


@pytest.mark.parametrize(("seed", "layout"), [(0, "shuffled"), (1, "ranked"), (2, "shuffled")])
def test_new_measures_match_pytrec_eval_on_random_runs(seed, layout):
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(40):
        qrels, run = random_case(rng)
        level = int(rng.choice([1, 2]))
        sem = Semantics.trec_eval(relevance_level=level)
        ref = pytrec_eval.RelevanceEvaluator(qrels, MEASURES, relevance_level=level).evaluate(run)
        gm = build_grade_matrix(Qrels.from_arrays(*columns(qrels)), Run.from_arrays(*arrange(rng, *columns(run),
                                layout)), ties="trec_eval")
        ours = {str(m): r for m, r in evaluate(gm, [n for n, _ in PAIRS.values()] + ["gm_map"], sem).items()}
        row = {q: i for i, q in enumerate(gm.query_ids)}
        logs = []
        for qid in qrels:
            if qid not in ref:  # pytrec_eval skips queries absent from the run
                continue
            n_rel = sum(g >= level for g in qrels[qid].values())
            for pname, (name, needs_rel) in PAIRS.items():
                value = ours[name].values[row[qid]]
                if needs_rel and n_rel == 0:
                    assert math.isnan(value) and ref[qid][pname] == 0.0, (qid, name)
                else:
                    assert value == pytest.approx(ref[qid][pname], abs=1e-9), (seed, qid, name, qrels, run)
                checked += 1
            logs.append(ref[qid]["gm_map"])  # trec_eval keeps log(max(AP, 1e-5)) per query
            if n_rel:
                assert math.log(ours["gm_map"].values[row[qid]]) == pytest.approx(ref[qid]["gm_map"], abs=1e-9)
        scored = [row[q] for q in qrels if q in ref]
        sub = ours["gm_map"].values[scored]
        # with every scored query defined, the geometric mean is trec_eval's exp(mean of logs)
        if not np.isnan(sub).any():
            assert ours["gm_map"].mean() if len(scored) == len(qrels) else math.exp(np.mean(np.log(sub))) == pytest.approx(math.exp(np.mean(logs)), rel=1e-9)
    assert checked > 2000


def test_gm_map_mean_is_geometric_with_the_trec_eval_floor():
    # AP 1 and AP 0 (relevant never retrieved): exp((log 1 + log 1e-5) / 2)
    gm = GradeMatrix.from_lists(["a", "b"], [[1], [0]], [[1], [1]])
    r = evaluate(gm, ["gm_map"], Semantics.trec_eval())[Metric("gm_map")]
    assert list(r.values) == [1.0, 0.00001]
    assert r.mean() == pytest.approx(math.sqrt(0.00001))


def test_iprec_and_11pt_worked_example():
    # relevant at ranks 1 and 4 of 2 relevant: P = 1 at recall 0.5, 0.5 at recall 1
    gm = GradeMatrix.from_lists(["q"], [[1, 0, 0, 1]], [[1, 1, 0]])
    res = {str(m): r.values[0] for m, r in evaluate(gm, ["iprec(r=0.5)", "IPrec@0.6", "11pt_avg"],
                                                    Semantics.trec_eval()).items()}
    assert res["iprec(r=0.5)"] == 1.0 and res["iprec(r=0.6)"] == 0.5
    assert res["11pt_avg"] == pytest.approx((6 * 1.0 + 5 * 0.5) / 11)


def test_set_measures_undefined_not_zero_and_f_zero_without_hits():
    gm = GradeMatrix.from_lists(["empty", "miss", "norel"], [[], [0, 0], [0]], [[1], [1, 0], [0]],
                                missing=[True, False, False])
    res = {str(m): r.values for m, r in evaluate(gm, ["set_P", "set_recall", "set_F"],
                                                 Semantics(relevance_level=1)).items()}
    assert math.isnan(res["set_precision"][0]) and res["set_precision"][1] == 0.0
    assert res["set_recall"][0] == 0.0 and math.isnan(res["set_recall"][2])
    assert res["set_f"][0] == 0.0 and res["set_f"][1] == 0.0 and math.isnan(res["set_f"][2])


@pytest.mark.parametrize("gain", ["linear", "exp"])
def test_unnormalized_dcg_matches_sklearn(gain):
    rng = np.random.default_rng(11)
    transform = (lambda x: x) if gain == "linear" else (lambda x: 2**x - 1)
    for _ in range(40):
        g = rng.integers(0, 4, size=15).astype(float)
        scores = rng.permutation(15).astype(float)
        order = np.argsort(-scores)
        gm = GradeMatrix.from_lists(["q"], [list(g[order])], [list(g)])
        for k in (3, 10):
            ours = evaluate(gm, [f"dcg@{k}"], Semantics(relevance_level=1, gain=gain))[Metric("dcg", k)]
            assert ours.values[0] == pytest.approx(dcg_score([transform(g)], [scores], k=k), abs=1e-12)


def test_err_and_rbp_reach_measures_evaluate_with_rbp_residual():
    gm = GradeMatrix.from_lists(["q", "r"], [[2, None, 0, 2], [0, 1]], [[2, 2, 0], [1, 0]])
    sem = Semantics(relevance_level=1)
    res = evaluate_measures(gm, ["ERR@10", "RBP(p=0.5,rel=1)", "RBP(p=0.5)"], sem)
    np.testing.assert_array_equal(res[Metric.parse("err@10")].values, err(gm, 10))
    value, residual = rbp(gm, 0.5, relevance_level=1)
    binary = res[parse_measure("rbp(p=0.5,rel=1)")]
    np.testing.assert_array_equal(binary.values, value)
    np.testing.assert_array_equal(binary.extra["residual"], residual)
    assert binary.values[0] == pytest.approx(0.5 * (1 + 0.125))
    graded = res[parse_measure("rbp(p=0.5)")]  # ir_measures' RBP without rel: the grade is the gain
    assert graded.values[0] == pytest.approx(0.5 * (2 + 2 * 0.125))
    np.testing.assert_array_equal(graded.extra["residual"], residual)  # the same unjudged weight
