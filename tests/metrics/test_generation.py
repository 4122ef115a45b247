"""Generation metrics: EM/F1, abstention, citation validity, pass@k, nuggets."""

import math

import numpy as np
import pytest
from scipy.special import comb

from ragassay.errors import InputError
from ragassay.metrics.generation import (
    Citation,
    abstention_scores,
    citation_validity,
    exact_match,
    normalize_answer,
    pass_at_k,
    token_f1,
)
from ragassay.metrics.nuggets import Nugget, nugget_scores


def test_squad_normalization_and_exact_match():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An apple, a day") == "apple day"
    assert exact_match("the Eiffel Tower.", ["Eiffel  tower", "Paris"]) == 1.0
    assert exact_match("Paris, France", "Paris") == 0.0


def test_token_f1_bag_of_tokens_max_over_references():
    # pred tokens {new, york, city}, gold {new, york}: P = 2/3, R = 1 -> F1 = 0.8
    assert token_f1("New York City", ["York New", "Boston"]) == pytest.approx(0.8)
    assert token_f1("the", "a") == 1.0  # both normalize to empty
    assert token_f1("", "Paris") == 0.0


def test_abstention_counts_refusals_and_errors_apart():
    outcomes = ["abstained", "abstained", "answered", "answered", "refused", "error", "abstained"]
    answerable = [False, True, False, True, False, True, False]
    s = abstention_scores(outcomes, answerable)
    assert (s.tp, s.fp, s.fn, s.tn, s.n_refused, s.n_error) == (2, 1, 1, 1, 1, 1)
    assert (
        s.precision == pytest.approx(2 / 3)
        and s.recall == pytest.approx(2 / 3)
        and s.over_refusal_rate == 0.5
    )


def test_abstention_empty_denominators_are_nan():
    s = abstention_scores(["answered", "answered"], [True, True])
    assert math.isnan(s.precision) and math.isnan(s.recall) and s.over_refusal_rate == 0.0
    with pytest.raises(InputError, match="unknown outcome"):
        abstention_scores(["declined"], [False])


def test_spec_abstention_example_9_of_40():
    s = abstention_scores(["abstained"] * 9 + ["answered"] * 31, [False] * 40)
    assert s.recall == pytest.approx(0.225)


def test_citation_validity_counts_each_failure():
    docs = {"d1": 100, "d2": 50}
    cites = [
        [Citation("u1", "d1", 0, 10), Citation("u9", "d1", 0, 10), Citation("u2", "d2", 40, 60)],
        [Citation("u3", "dx", 0, 1), Citation("u4", "d2", 5, 5)],
        [],
    ]
    packed = [["u1", "u2"], ["u3", "u4"], ["u5"]]
    v = citation_validity(cites, packed, docs)
    assert v.failures == {"not_in_context": 1, "unknown_doc": 1, "bad_span": 1, "out_of_bounds": 1}
    assert v.per_answer[0] == pytest.approx(1 / 3) and v.per_answer[1] == 0.0 and math.isnan(v.per_answer[2])
    assert v.validity == pytest.approx(1 / 5)


def test_pass_at_k_and_unbiased_pass_hat_k():
    trials = [[1, 1, 1, 1], [1, 0, 1, 1], [0, 0, 0, 1], [1, 1]]
    r = pass_at_k(trials, k=3)
    assert list(r.pass_at_1) == [1.0, 0.75, 0.25, 1.0]
    assert list(r.pass_hat_k[:3]) == [1.0, 0.0, 0.0] and math.isnan(r.pass_hat_k[3])
    assert r.pass_hat_k_unbiased[1] == pytest.approx(comb(3, 3) / comb(4, 3))
    assert r.variance[1] == pytest.approx(np.var([1, 0, 1, 1], ddof=1))
    # the spec's 0.99^4: with per-trial pass rate p, pass^k = p^k in expectation
    assert 0.99**4 == pytest.approx(0.96059601)


def test_nugget_scores_strict_and_lenient():
    nug = [Nugget("n1", True), Nugget("n2", True), Nugget("n3", False), Nugget("n4", False)]
    s = nugget_scores([nug, [Nugget("m", False)]], [{"n1": "support", "n2": "partial", "n3": "partial"}, {}])
    assert s.v_strict[0] == 0.5 and s.v[0] == 0.75
    assert s.a_strict[0] == 0.25 and s.a[0] == pytest.approx(2 / 4)
    assert math.isnan(s.v[1]) and s.a[1] == 0.0
    with pytest.raises(InputError, match="unknown nugget"):
        nugget_scores([nug], [{"zz": "support"}])
