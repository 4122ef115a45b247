"""Latency compounding (0.99^4, the p99 counterexample, medians that do not add) and self-consistency
(modal 0.8 / pair agreement 0.6, pass@1 and pass^k)."""

import itertools

import numpy as np
import pytest
from tests.analyses._runs import make_run

from ragassay.analysis.consistency import answer_key, consistency_of, consistency_of_run
from ragassay.analysis.latency import (
    any_exceed_independent,
    exceedance,
    latency_analysis,
    load_run,
    percentiles,
    union_bound,
    weighted_quantile,
)
from ragassay.trace import Trace


def test_four_independent_one_percent_stages_give_0_96059601_coverage():
    assert 1 - any_exceed_independent([0.01] * 4) == pytest.approx(0.96059601, abs=1e-15)
    assert any_exceed_independent([0.01] * 4) == pytest.approx(0.03940399, abs=1e-15)
    assert any_exceed_independent([0.01] * 5) == pytest.approx(0.04900995, abs=1e-8)
    assert union_bound([0.01] * 4) == pytest.approx(0.04)


def test_p99_of_the_sum_is_104_although_each_stage_p99_is_1():
    # brute force over the 2^4 outcomes of four independent stages: 1 unit w.p. 0.99, 101 w.p. 0.01
    vals, probs = [], []
    for combo in itertools.product((1, 101), repeat=4):
        vals.append(sum(combo))
        probs.append(np.prod([0.99 if c == 1 else 0.01 for c in combo]))
    assert weighted_quantile([1, 101], [0.99, 0.01], 0.99) == 1
    assert weighted_quantile(vals, probs, 0.99) == 104
    assert sum(p for v, p in zip(vals, probs, strict=True) if v == 4) == pytest.approx(0.96059601)
    # medians do not add either: two stages 0 w.p. 0.6 else 1 each have median 0, their sum median 1
    assert weighted_quantile([0, 1], [0.6, 0.4], 0.5) == 0
    assert weighted_quantile([0, 1, 2], [0.36, 0.48, 0.16], 0.5) == 1


def _traces(d: np.ndarray) -> list[Trace]:
    return [Trace(trace_id=f"t{i}", query_id=f"q{i}", durations_ms={
        **{f"s{j}": float(x) for j, x in enumerate(row)}, "total": float(row.sum())}) for i, row in enumerate(d)]


def test_sampled_stages_show_observed_vs_independent_vs_union():
    rng = np.random.default_rng(1)
    # 0.5% slow per stage keeps each stage p99 at 1 in the sample while the total p99 is 104
    d = np.where(rng.uniform(size=(8_000, 4)) < 0.005, 101.0, 1.0)
    res = latency_analysis(_traces(d), thresholds={f"s{j}": 1.0 for j in range(4)})
    ex = res["exceedance"]
    assert ex["observed_any"] == pytest.approx(np.any(d > 1, axis=1).mean())
    assert ex["observed_any"] == pytest.approx(1 - 0.995**4, abs=0.006)
    assert ex["independent_prediction"] == pytest.approx(any_exceed_independent((d > 1).mean(axis=0)))
    assert ex["lower_bound"] <= ex["observed_any"] <= ex["union_bound"]
    assert res["end_to_end"]["p99"] == 104.0 and res["sum_of_stage_percentiles"]["p99"] == 4.0


def test_fully_dependent_stages_reach_the_lower_bound_not_the_independent_prediction():
    slow = np.zeros((1000, 3))
    slow[:10] = 1  # the same requests are slow at every stage
    ex = exceedance(slow, [0.5, 0.5, 0.5])
    assert ex["observed_any"] == pytest.approx(0.01) == ex["lower_bound"]
    assert ex["independent_prediction"] == pytest.approx(1 - 0.99**3)


def test_percentiles_match_numpy_inverted_cdf_and_load_run_counts_requests():
    x = np.arange(1, 101, dtype=float)
    assert percentiles(x)["p99"] == 99.0 and percentiles(x)["p50"] == 50.0
    res = load_run(lambda q, i: sum(range(1000)), ["a", "b"], concurrency=3, n_requests=12)
    assert res["n_requests"] == 12 and res["end_to_end"]["p50"] > 0 and res["throughput_rps"] > 0


def test_modal_fraction_0_8_and_pair_agreement_0_6_for_counts_4_1():
    answers = {"q": [answer_key(a, "answered") for a in ("Paris", "paris.", "The Paris", "Paris", "Lyon")]}
    res = consistency_of({"q": [True, True, True, True, False]}, answers)
    item = res["items"][0]
    assert item["clusters"] == [4, 1]
    assert item["modal_fraction"] == pytest.approx(0.8) and item["pair_agreement"] == pytest.approx(0.6)
    assert item["pass@1"] == pytest.approx(0.8) and item["pass^5"] == 0.0
    assert item["pass_variance"] == pytest.approx(0.8 * 0.2 * 5 / 4)


def test_stored_trials_give_pass_at_1_and_pass_hat_k(store):
    # 3 queries x 3 trials: always right, right 2 of 3, never right
    vals = np.array([1, 1, 1, 1, 0, 1, 0, 0, 0], dtype=float)
    run = make_run(store, "r", {"answer_f1": vals}, trials=3)
    traces = {(f"q{i:03d}", t): Trace(trace_id=f"{i}{t}", query_id=f"q{i:03d}", trial=t, outcome="answered",
                                      answer="yes" if v else "no")
              for (i, t), v in zip(itertools.product(range(3), range(3)), vals, strict=True)}
    res = consistency_of_run(store, run, traces=traces)
    s = res["summary"]
    assert s["pass@1"] == pytest.approx((1 + 2 / 3 + 0) / 3) and s["pass^3"] == pytest.approx(1 / 3)
    assert s["modal_fraction"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert s["pair_agreement"] == pytest.approx((1 + 1 / 3 + 1) / 3)
    assert res["trials"] == 3 and res["note"] is None
