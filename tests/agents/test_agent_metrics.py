"""metrics/agent.py against the spec's worked example and hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragassay.metrics import agent as am


def test_cost_per_resolved_task_reproduces_the_spec_worked_example():
    # spec §12: (0.10 + 0.4 x 5) / 0.6 = $3.50 vs (0.30 + 0.05 x 5) / 0.95 = $0.58
    assert am.cost_per_resolved_task(0.10, 0.60, 5.0) == pytest.approx(3.50)
    assert am.cost_per_resolved_task(0.30, 0.95, 5.0) == pytest.approx(0.55 / 0.95)
    assert round(am.cost_per_resolved_task(0.30, 0.95, 5.0), 2) == 0.58


def test_cost_per_resolved_task_is_undefined_without_a_success_and_plain_cost_over_rate_without_fix_cost():
    assert math.isnan(am.cost_per_resolved_task(0.10, 0.0, 5.0))
    assert am.cost_per_resolved_task(0.10, 0.5) == pytest.approx(0.20)
    # from rows: NaN costs and verdicts are left out of their own means
    cost = np.array([0.1, 0.1, np.nan, 0.1, 0.1])
    success = np.array([1, 0, 1, np.nan, 1], dtype=float)
    assert am.cost_per_resolved_rows(cost, success, 5.0) == pytest.approx((0.1 + 0.25 * 5) / 0.75)
    assert math.isnan(am.cost_per_resolved_rows(np.array([np.nan]), np.array([1.0])))


def test_partial_credit_is_the_weighted_share_of_subgoal_scores():
    # row 0: weights 3, 1 scored 1, 0 -> 0.75; row 1: 1, 1, 2 scored 0.5, 1, 0 -> 1.5 / 4; row 2: none
    owner = np.array([0, 0, 1, 1, 1])
    weight = np.array([3, 1, 1, 1, 2], dtype=float)
    score = np.array([1, 0, 0.5, 1, 0])
    out = am.partial_credit(owner, weight, score, 3)
    np.testing.assert_allclose(out[:2], [0.75, 0.375])
    assert math.isnan(out[2])


def test_silent_failure_needs_a_claim_and_a_verdict():
    claimed = np.array([1, 1, 0, np.nan, 1])
    success = np.array([0, 1, 0, 0, np.nan])
    out = am.silent_failure(claimed, success)
    np.testing.assert_array_equal(out[:3], [1, 0, 0])  # claimed and failed; claimed and did; said it failed
    assert np.isnan(out[3:]).all()  # no claim; no verdict


def test_tool_call_f1_by_hand():
    # row 0: calls search(q=a), search(q=b), file(id=1); expected search (any args), file(id=1), notify
    #   matches: file(id=1) exact, search -> one of the searches: m = 2, |calls| 3, |expected| 3 -> F1 2/3
    # row 1: calls file(id=2); expected file(id=1): no match -> 0
    # row 2: no expected tools -> undefined; row 3: expected search, no calls -> 0
    a = am.canonical_args
    owner = np.array([0, 0, 0, 1])
    names = ["search", "search", "file", "file"]
    args = [a({"q": "a"}), a({"q": "b"}), a({"id": 1}), a({"id": 2})]
    eo = np.array([0, 0, 0, 1, 3])
    en = ["search", "file", "notify", "file", "search"]
    ea = [None, a({"id": 1}), None, a({"id": 1}), None]
    out = am.tool_call_f1(owner, names, args, eo, en, ea, 4)
    assert out[0] == pytest.approx(2 / 3)
    assert out[1] == 0.0 and math.isnan(out[2]) and out[3] == 0.0


def test_tool_call_f1_matches_argument_entries_before_name_only_ones():
    # expected: search (any), search(q=b); calls: search(q=b) only. Matching the name-only entry first would
    # take the one call and leave search(q=b) unmatched; the maximum matching is 1 either way, and the
    # argument entry must get it: m = 1, F1 = 2 * 1 / (1 + 2)
    a = am.canonical_args
    out = am.tool_call_f1(np.array([0]), ["search"], [a({"q": "b"})], np.array([0, 0]), ["search", "search"],
                          [None, a({"q": "b"})], 1)
    assert out[0] == pytest.approx(2 / 3)
    # argument order does not matter (canonical JSON)
    assert a({"x": 1, "y": 2}) == a({"y": 2, "x": 1})


def test_loops_count_repeats_with_a_different_step_between_and_not_retries():
    # row 0: A B A B A -> steps 2, 3, 4 repeat with a step between: 3 loops
    # row 1: A A A (retries) -> 0; row 2: A B B A -> step 2 is a retry, step 3 repeats A two back... : 1
    # row 3: no steps -> 0
    owner = np.array([0] * 5 + [1] * 3 + [2] * 4)
    sig = ["A", "B", "A", "B", "A", "A", "A", "A", "A", "B", "B", "A"]
    np.testing.assert_array_equal(am.loop_counts(owner, sig, 4), [3, 0, 1, 0])


def test_redundant_query_rate_canonicalizes_queries_and_is_undefined_without_retrieval():
    owner = np.array([0, 0, 0, 0, 1])
    queries = ["Notice period", "notice   PERIOD ", "warranty", "notice period", "x"]
    out = am.redundant_query_rate(owner, queries, 3)
    assert out[0] == pytest.approx(2 / 4) and out[1] == 0.0 and math.isnan(out[2])


def test_hop_sufficiency_by_hand():
    # row 0 has 2 hops: hop 1 evidence [0, 33) in doc a, hop 2 [0, 29) in doc b.
    # units: hop 1 retrieved a[30, 50) (overlaps [0, 33)); hop 2 retrieved a[0, 29) (wrong doc) and
    # b[29, 40) (touches the end: [29, 40) and [0, 29) do not overlap) -> hop 1 sufficient, hop 2 not: 0.5
    # row 1: one hop, retrieved b[5, 6) under hop 2 (no such hop) -> 0; row 2: no hops -> undefined
    ev_row, ev_hop = np.array([0, 0, 1]), np.array([1, 2, 1])
    ev_doc, ev_s, ev_e = ["a", "b", "b"], np.array([0, 0, 0]), np.array([33, 29, 29])
    u_row, u_hop = np.array([0, 0, 0, 1]), np.array([1, 2, 2, 2])
    u_doc, u_s, u_e = ["a", "a", "b", "b"], np.array([30, 0, 29, 5]), np.array([50, 29, 40, 6])
    hit = am.hop_hits(u_row, u_hop, u_doc, u_s, u_e, ev_row, ev_hop, ev_doc, ev_s, ev_e)
    np.testing.assert_array_equal(hit, [True, False, False])
    frac, per = am.hop_sufficiency(ev_row, ev_hop, hit, 3, np.array([2, 1, 0]))
    assert frac[0] == 0.5 and frac[1] == 0.0 and math.isnan(frac[2])
    np.testing.assert_array_equal(per[0], [1.0, 0.0])
    assert per[1, 0] == 0.0 and math.isnan(per[1, 1]) and np.isnan(per[2]).all()


def test_p95_is_numpys_inverted_cdf_percentile_of_the_defined_values():
    rng = np.random.default_rng(3)
    x = rng.exponential(1000, 97)
    assert am.p95(np.append(x, np.nan)) == np.percentile(x, 95, method="inverted_cdf")
    assert math.isnan(am.p95(np.array([np.nan])))


def test_the_registry_names_directions_and_trajectory_metrics():
    from ragassay.analysis.compare import UNBOUNDED
    from ragassay.analysis.directions import higher_is_better

    assert not higher_is_better("silent_failure") and not higher_is_better("agent_cost")
    assert higher_is_better("task_success") and higher_is_better("hop_sufficiency@hop2")
    assert {"steps", "loops", "agent_wall_ms", "agent_cost"} <= UNBOUNDED
    assert am.is_trajectory("tool_call_f1") and am.is_trajectory("hop_sufficiency@hop1")
    assert not am.is_trajectory("task_success") and not am.is_trajectory("agent_cost")


def test_the_cli_text_spells_the_per_hop_prefix_as_the_metrics_do():
    from ragassay.cli import agent_text

    assert agent_text.HOP_PREFIX == am.HOP_PREFIX
