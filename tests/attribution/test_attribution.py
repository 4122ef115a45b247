"""Leave-one-out and Shapley attribution: brute-force permutations, efficiency, hand-worked toys, the spec's
four-passage example and redundancy blind spot, removal policies, call counting and the extractive generator."""

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ragassay.analysis.attribution import (
    CallCounter,
    RemovalPolicy,
    all_subset_values,
    attribute,
    attribution_report_section,
    contexts_from_traces,
    exact_shapley,
    monte_carlo_shapley,
)
from ragassay.errors import InputError
from ragassay.trace.schema import Unit


def unit(i, text, doc="d", tokens=None):
    return Unit(unit_id=f"u{i}", doc_id=doc, start=10 * i, end=10 * i + len(text), text=text,
                tokens=len(text.split()) if tokens is None else tokens)


def query(qid="q1", ref="alpha beta", answerable=True, evidence=None, stratum="lexical"):
    return SimpleNamespace(query_id=qid, question="what?", reference_answer=ref, answerable=answerable,
                           evidence=evidence, stratum=stratum)


def concat(question, units):
    """Toy generator: the answer is the context's texts joined; nothing packed -> abstain."""
    return " ".join(u.text for u in units) or None


def brute_force_shapley(v, n):
    phi = np.zeros(n)
    perms = list(itertools.permutations(range(n)))
    for order in perms:
        members = set()
        for i in order:
            before = v(frozenset(members))
            members.add(i)
            phi[i] += v(frozenset(members)) - before
    return phi / len(perms)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 3, 5, 6])
def test_exact_shapley_matches_brute_force_permutations_and_is_efficient(seed, n):
    rng = np.random.default_rng(seed)
    table = rng.normal(size=1 << n)

    def v(s):
        return float(table[sum(1 << i for i in s)])

    vals = all_subset_values(v, n)
    phi = exact_shapley(vals, n)
    np.testing.assert_allclose(phi, brute_force_shapley(v, n), rtol=1e-12, atol=1e-12)
    assert math.isclose(phi.sum(), vals[-1] - vals[0], rel_tol=1e-12, abs_tol=1e-12)


def test_redundant_pair_has_zero_loo_but_half_shapley_each():
    # spec 34.4: either passage alone suffices; v(empty) = 0, v(nonempty) = 1
    units = [unit(0, "alpha"), unit(1, "alpha")]

    def first(question, ctx):
        return ctx[0].text if ctx else None

    res = attribute([query(ref="alpha")], {"q1": units}, first, policy=RemovalPolicy(duplicates="first"))
    q = res.queries[0]
    assert [i.loo_delta for i in q.items] == [0.0, 0.0]
    assert [i.shapley for i in q.items] == [0.5, 0.5]
    assert (q.baseline, q.empty) == (1.0, 0.0)


def test_loo_on_concat_generator_matches_hand_worked_f1():
    # full answer "alpha beta gamma" vs "alpha beta": P = 2/3, R = 1, F1 = 0.8; without alpha or beta
    # "beta gamma" / "alpha gamma": P = R = 1/2, F1 = 0.5; without gamma: exact, F1 = 1
    units = [unit(0, "alpha"), unit(1, "beta"), unit(2, "gamma")]
    res = attribute([query()], {"q1": units}, concat)
    q = res.queries[0]
    assert q.baseline == pytest.approx(0.8)
    np.testing.assert_allclose([i.loo_delta for i in q.items], [0.3, 0.3, -0.2], atol=1e-12)
    assert q.method == "exact" and q.calls == 8 and res.calls == 8
    assert sum(i.shapley for i in q.items) == pytest.approx(q.baseline - q.empty)
    # alpha and beta are symmetric, so their Shapley shares are equal (symmetry axiom)
    assert q.items[0].shapley == pytest.approx(q.items[1].shapley)


def test_spec_four_passage_example_deltas():
    # Q0 = 0.90; removals give 0.50, 0.90, 0.80, 1.00 -> deltas 0.40, 0.00, 0.10, -0.10
    units = [unit(i, f"e{i + 1}") for i in range(4)]
    removal_scores = {"e2 e3 e4": 0.5, "e1 e3 e4": 0.9, "e1 e2 e4": 0.8, "e1 e2 e3": 1.0, "e1 e2 e3 e4": 0.9}

    def score(answer, q):
        return removal_scores.get(answer, 0.0)

    res = attribute([query()], {"q1": units}, concat, metric=score, shapley="none")
    q = res.queries[0]
    assert q.method == "loo" and q.calls == 5  # n + 1 generations
    np.testing.assert_allclose([i.loo_delta for i in q.items], [0.4, 0.0, 0.1, -0.1], atol=1e-12)


def test_monte_carlo_shapley_converges_and_each_permutation_is_efficient():
    n = 12
    rng = np.random.default_rng(3)
    weights = rng.uniform(0, 1, n)

    def v(s):  # additive game: phi_i = w_i exactly, and every marginal equals w_i (SE 0)
        return float(sum(weights[i] for i in s))

    phi, se = monte_carlo_shapley(v, n, 20, np.random.default_rng(0))
    np.testing.assert_allclose(phi, weights, atol=1e-12)
    np.testing.assert_allclose(se, 0, atol=1e-12)

    def w(s):  # a non-additive game: efficiency still holds exactly, SE is positive
        return float(len(s) >= 6)

    phi, se = monte_carlo_shapley(w, n, 200, np.random.default_rng(1))
    assert phi.sum() == pytest.approx(1.0)
    assert np.all(se > 0)
    # symmetric players: each true share is 1/12; the estimate lies within 4 SE
    assert np.all(np.abs(phi - 1 / 12) <= 4 * se + 1e-12)


def test_auto_switches_to_monte_carlo_above_max_exact_and_exact_refuses():
    units = [unit(i, f"t{i}") for i in range(5)]
    res = attribute([query(ref="t0 t1")], {"q1": units}, concat, max_exact=3, permutations=30)
    q = res.queries[0]
    assert q.method == "monte_carlo"
    assert sum(i.shapley for i in q.items) == pytest.approx(q.baseline - q.empty)
    assert res.calls <= 1 << 5  # the subset cache: never more than one generation per subset
    with pytest.raises(InputError, match="max_exact"):
        attribute([query()], {"q1": units}, concat, max_exact=3, shapley="exact")


def test_duplicates_all_removes_every_copy_and_counts_one_player():
    units = [unit(0, "alpha"), unit(1, "beta"), unit(2, "alpha")]
    seen = []

    def gen(question, ctx):
        seen.append(tuple(u.unit_id for u in ctx))
        return concat(question, ctx)

    res = attribute([query()], {"q1": units}, gen, shapley="none")
    q = res.queries[0]
    assert q.n_items == 2 and q.items[0].positions == (0, 2)
    assert ("u1",) in seen  # removing "alpha" removed both copies
    res = attribute([query()], {"q1": units}, concat, shapley="none", policy=RemovalPolicy(duplicates="first"))
    assert res.queries[0].n_items == 3


def test_refill_from_reserve_keeps_token_budget_and_rank_order():
    units = [unit(0, "alpha one"), unit(1, "beta two")]
    reserve = [unit(5, "gamma three four", tokens=3), unit(6, "delta five")]
    seen = []

    def gen(question, ctx):
        seen.append(tuple(u.unit_id for u in ctx))
        return concat(question, ctx)

    attribute([query()], {"q1": units}, gen, reserves={"q1": reserve}, shapley="none",
              policy=RemovalPolicy(refill="reserve"))
    # budget 4 tokens: removing u0 leaves 2; gamma (3) does not fit, and the stop policy keeps rank order
    assert ("u1",) in seen and ("u0",) in seen
    seen.clear()
    attribute([query()], {"q1": units}, gen, reserves={"q1": reserve[1:]}, shapley="none",
              policy=RemovalPolicy(refill="reserve"))
    assert ("u1", "u6") in seen and ("u0", "u6") in seen


def test_targets_remove_only_cited_items_and_keep_the_rest():
    units = [unit(0, "alpha"), unit(1, "beta"), unit(2, "gamma")]
    seen = []

    def gen(question, ctx):
        seen.append(tuple(u.unit_id for u in ctx))
        return concat(question, ctx)

    res = attribute([query()], {"q1": units}, gen, targets={"q1": [2]})
    assert res.queries[0].n_items == 1 and res.calls == 2
    assert sorted(seen) == [("u0", "u1"), ("u0", "u1", "u2")]


def test_repeats_give_paired_loo_interval_for_a_stochastic_generator():
    rng = np.random.default_rng(0)

    def noisy(question, ctx):
        words = [u.text for u in ctx]
        if "alpha" in words and rng.uniform() < 0.3:
            words.remove("alpha")
        return " ".join(words) or None

    units = [unit(0, "alpha"), unit(1, "beta")]
    res = attribute([query()], {"q1": units}, noisy, repeats=20, shapley="none", n_resamples=500)
    item = res.queries[0].items[0]
    assert res.calls == 3 * 20
    assert item.loo_ci_low <= item.loo_delta <= item.loo_ci_high
    assert item.loo_ci_low < item.loo_ci_high
    one = attribute([query()], {"q1": units}, noisy, repeats=1, shapley="none")
    assert math.isnan(one.queries[0].items[0].loo_ci_low)  # one repeat: no per-item interval


def test_undefined_metric_is_reported_not_zero_and_groups_bootstrap_over_queries():
    ev = [SimpleNamespace(doc_id="d", start=0, end=5, grade=3)]
    qs = [query(f"q{k}", evidence=ev) for k in range(6)] + [query("neg", ref=None, answerable=False)]
    contexts = {q.query_id: [unit(0, "alpha"), unit(1, "beta"), unit(2, "gamma")] for q in qs}
    res = attribute(qs, contexts, concat, n_resamples=300)
    assert res.n_undefined == 1 and "undefined" in res.queries[-1].reason
    g = {(x.group, x.figure): x for x in res.groups}
    assert g[("relevant", "loo_delta")].mean == pytest.approx(0.3)  # u0 overlaps the evidence span
    assert g[("other", "loo_delta")].mean == pytest.approx((0.3 - 0.2) / 2)
    assert g[("rank:3", "loo_delta")].mean == pytest.approx(-0.2)
    assert g[("rank:1", "loo_delta")].n_queries == 6
    section = attribution_report_section(res)
    assert section["n_undefined"] == 1 and section["calls"] == res.calls
    import json

    json.dumps(section, allow_nan=False)


def test_generator_objects_and_bad_inputs():
    from ragassay.pipeline.generator import Generation

    class Gen:
        name = "toy"

        def generate(self, question, packed):
            if not packed:
                return Generation(None, [], "abstained", 0, 0)
            return Generation(concat(question, packed), [], "answered", 0, 0)

    res = attribute([query()], {"q1": [unit(0, "alpha"), unit(1, "beta")]}, Gen())
    assert res.queries[0].baseline == 1.0 and res.queries[0].empty == 0.0
    with pytest.raises(InputError, match="not a generator"):
        attribute([query()], {"q1": []}, 42)
    with pytest.raises(InputError, match="repeats"):
        attribute([query()], {"q1": []}, concat, repeats=0)
    with pytest.raises(InputError, match="unknown answer metric"):
        attribute([query()], {"q1": []}, concat, metric="bleu")
    counter = CallCounter(concat)
    counter("q", [unit(0, "x")])
    assert counter.calls == 1


def test_extractive_generator_on_bundled_queries(bundled):
    from ragassay.metrics.generation import token_f1

    pipe, golden, traces, corpus = bundled
    qs = [q for q in golden.queries if q.answerable and q.reference_answer][:8]
    contexts, reserves = contexts_from_traces(traces, corpus, stage="final", k=4)
    res = attribute(qs, contexts, pipe._generator, reserves=reserves)
    assert res.calls <= len(qs) * 16
    for q in res.queries:
        assert q.reason is None and q.method == "exact"
        assert sum(i.shapley for i in q.items) == pytest.approx(q.baseline - q.empty, abs=1e-12)
        assert all(u.text == corpus.docs[u.doc_id].text[u.start:u.end] for u in contexts[q.query_id])
    # on the packed context the baseline is the pipeline's own answer F1 (same generator, same input)
    packed, _ = contexts_from_traces(traces, corpus)
    res = attribute(qs, packed, pipe._generator, shapley="none")
    by_id = {t.query_id: t for t in traces}
    for gq, q in zip(qs, res.queries, strict=True):
        t = by_id[gq.query_id]
        own = 0.0 if t.outcome != "answered" else token_f1(t.answer, [gq.reference_answer])
        assert q.baseline == pytest.approx(own) and q.calls == q.n_items + 1


def test_f1_or_abstention_gives_unanswerable_queries_a_utility():
    # unanswerable: abstaining (None) scores 1, answering 0; so the passage that triggers an answer hurts
    neg = query("neg", ref=None, answerable=False)
    res = attribute([neg], {"neg": [unit(0, "alpha")]}, concat, metric="answer_f1_or_abstention")
    q = res.queries[0]
    assert q.reason is None and (q.baseline, q.empty) == (0.0, 1.0)
    assert q.items[0].loo_delta == -1.0 and q.items[0].shapley == -1.0
