"""The eleven claim metrics against hand computations and against a re-implementation of RAGChecker's formulas
(``ragchecker/computation.py``, version 0.1.9), plus the undefined cases and the five-way breakdown."""

import math

import numpy as np
import pytest

from ragassay.errors import InputError
from ragassay.metrics.claims import (
    BREAKDOWN,
    CLAIM_METRICS,
    RAGCHECKER_NAMES,
    VERDICTS,
    claim_classes,
    claim_metrics,
    claim_table,
    support_of,
    table_from_dict,
    table_to_dict,
)

E, N, C = "entailed", "neutral", "contradicted"
UNITS = [("u0", "d1", 0, 100), ("u1", "d1", 100, 200), ("u2", "d2", 0, 50)]


def quotes_for(matrix, units):
    """A verified span for every entailed cell: the first ten characters of the unit."""
    return [[(units[j][2], units[j][2] + 10) if v == E else None for j, v in enumerate(row)] for row in matrix]


def table(qid="q1", *, units=UNITS, gt_units=None, response_units=None, span_relevant=(True, False, False),
          gt_vs_response=None, response_vs_reference=None, **kw):
    gt_units = [[E, N, N], [N, E, C], [N, N, N]] if gt_units is None else gt_units
    response_units = ([[E, N, N], [N, N, E], [N, C, N], [N, E, N], [N, N, N], [N, N, E]]
                      if response_units is None else response_units)
    gt_vs_response = [E, N, E] if gt_vs_response is None else gt_vs_response
    response_vs_reference = [E, E, N, C, E, N] if response_vs_reference is None else response_vs_reference
    kw.setdefault("gt_claims", [f"g{i}" for i in range(len(gt_units))])
    kw.setdefault("response_claims", [f"r{i}" for i in range(len(response_units))])
    return claim_table(qid, 0, units=units, span_relevant=span_relevant, gt_units=gt_units,
                       response_units=response_units, gt_vs_response=gt_vs_response,
                       response_vs_reference=response_vs_reference, gt_quotes=quotes_for(gt_units, units),
                       response_quotes=quotes_for(response_units, units), **kw)


def values(scores, i=0):
    return dict(zip(CLAIM_METRICS, scores.values[i], strict=True))


# ------------------------------------------------------------------------------ RAGChecker, re-implemented
RC_LABEL = {E: "Entailment", N: "Neutral", C: "Contradiction"}


def _b(x):
    return np.array([[v == "Entailment" for v in row] for row in x], dtype=bool) if x and isinstance(x[0], list) \
        else np.array([v == "Entailment" for v in x], dtype=bool)


def ragchecker(answer2response, response2answer, retrieved2answer, retrieved2response):
    """RAGChecker's per-result metrics; each value with True when its guard passed (False: the fallback 0)."""
    out = {}
    a2r, r2a = _b(answer2response), _b(response2answer)
    ret2a, ret2r = _b(retrieved2answer), _b(retrieved2response)
    out["precision"] = (float(np.mean(a2r)), True) if len(a2r) > 0 else (0.0, False)
    out["recall"] = (float(np.mean(r2a)), True) if len(r2a) > 0 else (0.0, False)
    p, r = out["precision"][0], out["recall"][0]
    out["f1"] = ((2 * p * r / (p + r)) if p > 0 and r > 0 else 0.0, out["precision"][1] and out["recall"][1])
    if len(retrieved2answer) > 0 and len(retrieved2answer[0]) > 0:
        recalled = np.max(ret2a, axis=1)
        out["claim_recall"] = (float(np.mean(recalled)), True)
        out["context_precision"] = (float(np.mean(np.max(ret2a, axis=0))), True)
        if np.sum(recalled) > 0:
            out["context_utilization"] = (float(np.sum(recalled & r2a) / np.sum(recalled)), True)
        else:
            out["context_utilization"] = (0.0, False)
    else:
        out["claim_recall"] = out["context_precision"] = out["context_utilization"] = (0.0, False)
    if len(a2r) > 0 and len(retrieved2response[0]) > 0 and len(retrieved2answer) > 0:
        rel = np.max(ret2a, axis=0, keepdims=True)
        rel_f = np.max(rel & ret2r, axis=1)
        irr_f = np.max(~rel & ret2r, axis=1) & ~rel_f
        out["noise_sensitivity_in_relevant"] = (float(np.mean(rel_f & ~a2r)), True)
        out["noise_sensitivity_in_irrelevant"] = (float(np.mean(irr_f & ~a2r)), True)
    else:
        out["noise_sensitivity_in_relevant"] = out["noise_sensitivity_in_irrelevant"] = (0.0, False)
    if len(a2r) > 0 and len(retrieved2response[0]) > 0:
        unf = ~np.max(ret2r, axis=1)
        out["hallucination"] = (float(np.mean(unf & ~a2r)), True)
        out["self_knowledge"] = (float(np.mean(unf & a2r)), True)
    else:
        out["hallucination"] = out["self_knowledge"] = (0.0, False)
    if len(retrieved2response) > 0 and len(retrieved2response[0]) > 0:
        out["faithfulness"] = (float(np.mean(np.max(ret2r, axis=1))), True)
    else:
        out["faithfulness"] = (0.0, False)
    return out


def ragchecker_of(t):
    d = table_to_dict(t)

    def lab(x):
        return [RC_LABEL[v] if isinstance(v, str) else lab(v) for v in x]

    return ragchecker(lab(d["response_vs_reference"]), lab(d["gt_vs_response"]), lab(d["gt_units"]),
                      lab(d["response_units"]))


# ------------------------------------------------------------------------------ hand computations
def test_each_of_the_eleven_equals_the_hand_computation_under_ragcheckers_relevance():
    v = values(claim_metrics([table()], relevance="claims"))
    # 6 response claims: r0 correct, relevant-supported; r1 correct, only irrelevant-supported; r2 incorrect,
    # unsupported; r3 incorrect (contradicted by the reference), relevant-supported; r4 correct, unsupported;
    # r5 incorrect, irrelevant-supported. Units u0, u1 entail a gt claim (relevant), u2 none.
    assert v["claims_precision"] == pytest.approx(3 / 6)
    assert v["claims_recall"] == pytest.approx(2 / 3)  # g0, g2 held by the response
    assert v["claims_f1"] == pytest.approx(4 / 7)  # 2 * 1/2 * 2/3 / (1/2 + 2/3)
    assert v["claim_recall"] == pytest.approx(2 / 3)  # g0 (u0), g1 (u1); g2 in no unit
    assert v["context_precision_claims"] == pytest.approx(2 / 3)  # u0, u1 of 3
    assert v["context_utilization"] == pytest.approx(1 / 2)  # of g0, g1 recalled only g0 is in the response
    assert v["noise_sensitivity_relevant"] == pytest.approx(1 / 6)  # r3
    assert v["noise_sensitivity_irrelevant"] == pytest.approx(1 / 6)  # r5
    assert v["hallucination"] == pytest.approx(1 / 6)  # r2
    assert v["self_knowledge"] == pytest.approx(1 / 6)  # r4
    assert v["faithfulness_claims"] == pytest.approx(4 / 6)  # r0, r1, r3, r5


def test_golden_span_relevance_moves_context_precision_and_the_noise_split_only():
    v = values(claim_metrics([table()], relevance="spans"))  # only u0 overlaps evidence
    assert v["context_precision_claims"] == pytest.approx(1 / 3)
    assert v["noise_sensitivity_relevant"] == pytest.approx(0.0)
    assert v["noise_sensitivity_irrelevant"] == pytest.approx(2 / 6)  # r3 (u1 is now irrelevant) and r5
    assert v["hallucination"] == pytest.approx(1 / 6) and v["faithfulness_claims"] == pytest.approx(4 / 6)
    cls, _ = claim_classes(table(), "spans")
    assert [BREAKDOWN[c] for c in cls] == ["correct_relevant", "correct_irrelevant", "hallucination", "noise",
                                           "self_knowledge", "noise"]


def test_five_way_breakdown_partitions_the_response_claims_and_matches_the_metrics():
    s = claim_metrics([table()], relevance="claims")
    counts = s.breakdown[0]
    assert counts.tolist() == [1, 1, 1, 2, 1] and counts.sum() == 6
    v = values(s)
    share = counts / counts.sum()
    assert share[2] == pytest.approx(v["self_knowledge"]) and share[4] == pytest.approx(v["hallucination"])
    assert share[3] == pytest.approx(v["noise_sensitivity_relevant"] + v["noise_sensitivity_irrelevant"])
    assert share[0] + share[1] + share[3] == pytest.approx(v["faithfulness_claims"])


def test_contradicted_is_kept_apart_but_only_entailed_counts():
    t = table()
    d = table_to_dict(t)
    assert d["response_vs_reference"][3] == C and d["gt_units"][1][2] == C and d["response_units"][2][1] == C
    # turning the contradictions into neutrals leaves every number as it was (RAGChecker's to_bool)
    neutral = table(gt_units=[[E, N, N], [N, E, N], [N, N, N]],
                    response_units=[[E, N, N], [N, N, E], [N, N, N], [N, E, N], [N, N, N], [N, N, E]],
                    response_vs_reference=[E, E, N, N, E, N])
    np.testing.assert_array_equal(claim_metrics([t]).values, claim_metrics([neutral]).values)


def test_supported_claims_point_to_their_verified_span_preferring_relevant_units():
    t = table(response_units=[[N, E, E]], response_vs_reference=[E], response_claims=["r0"])
    assert support_of(t, "response", 0, "spans") == (1, "d1", 100, 110)  # no relevant unit entails it: first
    t2 = table(response_units=[[N, E, E]], response_vs_reference=[E], response_claims=["r0"],
               span_relevant=(False, False, True))
    assert support_of(t2, "response", 0, "spans") == (2, "d2", 0, 10)
    assert support_of(t, "gt", 2) is None


# ------------------------------------------------------------------------------ undefined, never 0
def test_an_unanswered_query_keeps_its_retriever_metrics_and_leaves_the_rest_undefined():
    t = table(response_units=[], response_vs_reference=[], gt_vs_response=[N, N, N], no_response="not_answered")
    s = claim_metrics([t])
    v, why = values(s), dict(zip(CLAIM_METRICS, s.reasons[0], strict=True))
    assert v["claim_recall"] == pytest.approx(2 / 3) and v["context_precision_claims"] == pytest.approx(2 / 3)
    for m in ("claims_precision", "claims_recall", "claims_f1", "context_utilization", "hallucination",
              "self_knowledge", "faithfulness_claims", "noise_sensitivity_relevant"):
        assert math.isnan(v[m]) and why[m] == "not_answered", m
    assert s.breakdown[0].tolist() == [-1] * 5 and s.breakdown_reasons[0] == "not_answered"
    assert s.undefined[("claims_recall", "not_answered")] == 1


def test_no_retrieved_units_leaves_every_retriever_and_generator_metric_undefined():
    s = claim_metrics([table(units=[], span_relevant=[], gt_units=[[], [], []], response_units=[[]] * 6)])
    v, why = values(s), dict(zip(CLAIM_METRICS, s.reasons[0], strict=True))
    assert v["claims_precision"] == pytest.approx(0.5) and v["claims_recall"] == pytest.approx(2 / 3)
    for m in CLAIM_METRICS[3:]:
        assert math.isnan(v[m]) and why[m] == "no_retrieved_units", m
    # every response claim is unsupported: self-knowledge or hallucination
    assert s.breakdown[0].tolist() == [0, 0, 3, 0, 3]


def test_no_reference_and_no_response_claims_are_undefined_with_their_reasons():
    no_ref = table(gt_units=[], gt_vs_response=[], has_reference=False, response_vs_reference=[N] * 6)
    no_claims = table(response_units=[], response_vs_reference=[])
    s = claim_metrics([no_ref, no_claims])
    w0 = dict(zip(CLAIM_METRICS, s.reasons[0], strict=True))
    assert {m: w0[m] for m in ("claims_precision", "claims_recall", "claim_recall", "context_precision_claims",
                               "hallucination")} == dict.fromkeys(
        ("claims_precision", "claims_recall", "claim_recall", "context_precision_claims", "hallucination"),
        "no_reference")
    assert values(s, 0)["faithfulness_claims"] == pytest.approx(4 / 6)  # needs no reference
    # spans relevance knows the relevant units without gt claims
    assert values(claim_metrics([no_ref], "spans"))["context_precision_claims"] == pytest.approx(1 / 3)
    w1 = dict(zip(CLAIM_METRICS, s.reasons[1], strict=True))
    assert w1["claims_precision"] == "no_response_claims" and w1["faithfulness_claims"] == "no_response_claims"
    assert values(s, 1)["claims_recall"] == pytest.approx(2 / 3)  # the response still holds g0 and g2


def test_a_failed_judge_call_makes_the_whole_item_undefined():
    s = claim_metrics([table(failed="judge_refused")])
    assert np.isnan(s.values).all() and set(s.reasons[0]) == {"judge_refused"}


def test_f1_is_zero_not_undefined_when_precision_and_recall_are_both_zero():
    t = table(response_vs_reference=[N] * 6, gt_vs_response=[N, N, N])
    v = values(claim_metrics([t]))
    assert v["claims_precision"] == 0 and v["claims_recall"] == 0 and v["claims_f1"] == 0


# ------------------------------------------------------------------------------ against RAGChecker
def _random_table(rng, k):
    g, r, u = (int(x) for x in rng.integers(0, 5, size=3))
    units = [(f"u{j}", f"d{j % 2}", 100 * j, 100 * j + 50) for j in range(u)]
    pick = lambda *shape: rng.choice(VERDICTS, size=shape, p=[0.5, 0.35, 0.15]).tolist()  # noqa: E731
    return table(f"q{k}", units=units, span_relevant=rng.random(u) < 0.5, gt_units=pick(g, u),
                 response_units=pick(r, u), gt_vs_response=pick(g), response_vs_reference=pick(r))


def test_matches_a_reimplementation_of_ragchecker_wherever_its_result_is_defined():
    rng = np.random.default_rng(7)
    tables = [_random_table(rng, k) for k in range(400)]
    s = claim_metrics(tables, relevance="claims")
    compared = 0
    for i, t in enumerate(tables):
        rc = ragchecker_of(t)
        for k, m in enumerate(CLAIM_METRICS):
            theirs, defined = rc[RAGCHECKER_NAMES[m]]
            ours = s.values[i, k]
            if defined:
                assert ours == pytest.approx(theirs), (t.query_id, m)
                compared += 1
            else:  # RAGChecker's fallback 0 is undefined here, with a reason
                assert math.isnan(ours) and s.reasons[i][k], (t.query_id, m)
        if s.breakdown[i, 0] >= 0:
            assert s.breakdown[i].sum() == len(t.response_claims)
    assert compared > 2000


def test_the_pooled_breakdown_sums_to_one():
    rng = np.random.default_rng(3)
    s = claim_metrics([_random_table(rng, k) for k in range(50)])
    shares, n = s.pooled_breakdown()
    assert n > 0 and shares.sum() == pytest.approx(1.0)


# ------------------------------------------------------------------------------ validation and storage
def test_an_entailed_cell_without_a_verified_span_is_refused():
    with pytest.raises(InputError, match=r"response_quotes\[0\]\[1\] is entailed but has no verified quote"):
        claim_table("q", 0, units=UNITS, span_relevant=[1, 0, 0], gt_claims=[], response_claims=["r"],
                    gt_units=[], response_units=[[N, E, N]], response_vs_reference=[E], gt_vs_response=[])
    with pytest.raises(InputError, match="not inside unit 1"):
        claim_table("q", 0, units=UNITS, span_relevant=[1, 0, 0], gt_claims=[], response_claims=["r"],
                    gt_units=[], response_units=[[N, E, N]], response_vs_reference=[E], gt_vs_response=[],
                    response_quotes=[[None, (5, 20), None]])
    with pytest.raises(InputError, match="one of"):
        claim_table("q", 0, units=UNITS, span_relevant=[1, 0, 0], gt_claims=[], response_claims=["r"],
                    gt_units=[], response_units=[[N, "supported", N]], response_vs_reference=[E],
                    gt_vs_response=[])


def test_a_table_round_trips_through_its_stored_form():
    t = table()
    back = table_from_dict(table_to_dict(t))
    np.testing.assert_array_equal(claim_metrics([t]).values, claim_metrics([back]).values)
    assert table_to_dict(back) == table_to_dict(t)
