"""Ablations: the chapter's calculator buckets, TOST against statsmodels, the placebo, the file checks,
and one real run of the reference pipeline."""

import numpy as np
import pytest
from statsmodels.stats.weightstats import ttost_paired
from tests.analyses._runs import make_run

from ragassay.analysis.ablation import evaluate_ablation, load_ablation, run_ablation, verdict
from ragassay.errors import SchemaError
from ragassay.stats import tost


def _bucket(n: int, base: int, on: int, rng):
    """Paired 0/1 outcomes with the given correct counts: on-correct items include the base-correct ones."""
    a = np.zeros(n)
    b = np.zeros(n)
    a[:base] = 1
    b[:on] = 1
    perm = rng.permutation(n)
    return a[perm], b[perm]


def test_tost_p_values_match_statsmodels_ttost_paired():
    rng = np.random.default_rng(4)
    x = rng.normal(0.5, 0.1, 80)
    y = x + rng.normal(0.01, 0.05, 80)
    ours = tost(x, y, margin=0.03)
    p, lower, upper = ttost_paired(y, x, -0.03, 0.03)
    assert ours.p_value == pytest.approx(p, rel=1e-10)
    assert ours.extra["p_low"] == pytest.approx(lower[1], rel=1e-10)
    assert ours.extra["p_high"] == pytest.approx(upper[1], rel=1e-10)


def test_calculator_buckets_target_confirmed_control_not_proved_equivalent(store, tmp_path):
    rng = np.random.default_rng(0)
    buckets = {"easy": (96, 98), "hard": (41, 83), "factual": (57, 58)}
    a, b, strata = [], [], []
    for name, (base, on) in buckets.items():
        x, y = _bucket(100, base, on, rng)
        a.append(x)
        b.append(y)
        strata += [name] * 100
    a, b = np.concatenate(a), np.concatenate(b)
    assert a.mean() == pytest.approx(194 / 300) and b.mean() == pytest.approx(239 / 300)
    base = make_run(store, "off", {"answer_f1": a}, strata=strata)
    on = make_run(store, "on", {"answer_f1": b}, strata=strata)
    placebo = make_run(store, "placebo", {"answer_f1": a}, strata=strata)
    cfg = tmp_path / "base.yaml"
    cfg.write_text("name: base\n")
    f = tmp_path / "abl.yaml"
    f.write_text("name: calc\nbaseline: base.yaml\nintervention: {tool: calculator}\nmargin: 0.02\n"
                 "expectations:\n  - {stratum: hard, expect: help}\n  - {stratum: easy, expect: hurt}\n"
                 "  - {stratum: factual, expect: none}\n")
    res = evaluate_ablation(store, load_ablation(f), base, on, placebo, n_resamples=500)
    v = {r["stratum"]: r for r in res["expectations"]}
    assert v["hard"]["verdict"] == "confirmed" and v["hard"]["delta"] == pytest.approx(0.42)
    assert v["easy"]["verdict"] == "inconclusive"  # +2 points: not credibly the predicted harm
    # one point of movement in the control does not prove equivalence within 2 points (with a 3-point margin TOST would confirm it)
    assert v["factual"]["verdict"] == "inconclusive" and v["factual"]["delta"] == pytest.approx(0.01)
    assert res["placebo"]["passed"] is True  # identical outcomes: all differences 0, inside the margin


def test_none_expectation_confirmed_only_by_tost_and_contradicted_outside_margin():
    rng = np.random.default_rng(2)
    tiny = rng.normal(0.0, 0.01, 400)
    assert verdict(tiny, "none", margin=0.02, alpha=0.05)["verdict"] == "confirmed"
    big = rng.normal(0.2, 0.01, 400)
    assert verdict(big, "none", margin=0.02, alpha=0.05)["verdict"] == "contradicted"
    assert verdict(big, "hurt", margin=0.02, alpha=0.05)["verdict"] == "contradicted"
    assert verdict(np.full(10, 0.5), "none", margin=0.02, alpha=0.05)["verdict"] == "contradicted"


def test_ablation_file_problems_are_listed(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("baseline: 3\nmargin: -1\nexpectations:\n  - {stratum: x, expect: maybe}\n")
    with pytest.raises(SchemaError) as e:
        load_ablation(f)
    msg = str(e.value)
    for part in ("baseline:", "intervention:", "margin:", "expectations[1]"):
        assert part in msg


@pytest.mark.slow
def test_reference_pipeline_ablation_runs_three_arms_and_the_placebo_is_equivalent(store, tmp_path):
    from ragassay.analysis.runner import load_inputs

    corpus, golden = load_inputs(None, None, tmp_path / "golden")
    (tmp_path / "base.yaml").write_text(
        "name: b\nchunker: {kind: recursive, size: 128}\nbm25: {enabled: true, depth: 20}\n"
        "fusion: {method: rrf, k: 60, depth: 20}\nreranker: {kind: none, final_k: 5}\n"
        "packer: {budget_tokens: 1000, policy: stop}\ngenerator: {kind: extractive}\n")
    f = tmp_path / "abl.yaml"
    f.write_text("name: rr\nbaseline: base.yaml\nintervention: {reranker: {kind: lexical, final_k: 5}}\n"
                 "metric: recall@context\nexpectations:\n  - {stratum: all, expect: help}\n")
    res = run_ablation(store, load_ablation(f), corpus, golden, n_resamples=200)
    assert set(res["runs"]) == {"baseline", "intervention", "placebo"}
    assert res["placebo"]["passed"] is True and res["placebo"]["delta"] == 0.0
    assert res["expectations"][0]["n"] > 100
