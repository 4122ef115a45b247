import json

import numpy as np
import pytest
import yaml
from scipy import stats

from ragassay.analysis.compare import compare_runs, config_diff
from ragassay.analysis.gate import (
    GatePolicy,
    HardPolicy,
    MetricPolicy,
    load_policy,
    run_gate,
    statistical_check,
)
from ragassay.cli.app import main
from ragassay.errors import InputError, PinMismatchError
from ragassay.store import RunRecord

from .conftest import make_run


def _pair(store, base, cand, **kw):
    a = make_run(store, "A", base, config={"name": "A", "chunker": {"size": 800}, "packer": {"budget_tokens": 2000}})
    b = make_run(store, "B", cand, config={"name": "B", "chunker": {"size": 400}, "packer": {"budget_tokens": 2000}},
                 **kw)
    return a, b


def test_compare_matches_an_independent_paired_computation(store):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2, 200).astype(float)
    flip = rng.random(200) < 0.25
    b = np.where(flip, 1 - a, a)
    b[:20] = 1
    ra, rb = _pair(store, {"recall@10": a}, {"recall@10": b})
    comp = compare_runs(store, ra, rb, n_resamples=4000, seed=1)
    row = comp.overall("recall@10")
    d = b - a
    assert row.n == 200 and row.delta == pytest.approx(d.mean())
    assert (row.wins, row.losses, row.ties) == (int((d > 0).sum()), int((d < 0).sum()), int((d == 0).sum()))
    assert row.sigma_d == pytest.approx(d.std(ddof=1))
    assert row.mde == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * d.std(ddof=1) / np.sqrt(200))
    ref = stats.bootstrap((d,), np.mean, n_resamples=4000, method="percentile", random_state=0)
    assert row.ci_low == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert row.ci_high == pytest.approx(ref.confidence_interval.high, abs=0.01)
    strata = {r.stratum for r in comp.rows}
    assert strata == {"all", "s1", "s2"}
    s1 = next(r for r in comp.rows if r.stratum == "s1")
    assert s1.n == 100 and s1.delta == pytest.approx(d[1::2].mean())
    # BH across the table: adjusted p >= raw p, and the table is adjusted as one family
    assert all(r.p_adj >= r.p - 1e-12 for r in comp.rows)


def test_claim_sentence_names_dataset_n_hit_rule_change_interval_and_tokens_delivered(store):
    a = np.zeros(240)
    b = np.zeros(240)
    b[:40] = 1
    # the packer delivered about half the budget: the claim must say so, not "at a 2,000-token budget"
    tok_a = np.full(240, 491.0)
    tok_b = np.full(240, 512.0)
    tok_b[0] = np.nan  # one query delivered nothing measurable: the mean is over the defined ones
    ra, rb = _pair(store, {"recall@fusion_depth": a, "context_tokens": tok_a},
                   {"recall@fusion_depth": b, "context_tokens": tok_b})
    comp = compare_runs(store, ra, rb, n_resamples=2000)
    (claim,) = comp.claims
    row = comp.overall("recall@fusion_depth")
    assert comp.delivered_tokens == (491.0, 512.0)
    assert claim.startswith("recall@fusion_depth at 491 (A) / 512 (B) tokens delivered (budget 2,000) went from "
                            "0.00 to 0.17 (+0.17, 95% paired-bootstrap CI [")
    assert f"[+{row.ci_low:.2f}, +{row.ci_high:.2f}], BH-adjusted p < 0.001" in claim
    assert "n = 240, 40 wins / 0 losses / 200 ties, any_overlap hit rule, dataset ds@1" in claim
    assert "changed: chunker.size 800 → 400; all else pinned) — improved." in claim
    assert comp.config_diff == [("chunker.size", 800, 400)]


def test_claim_never_names_a_budget_without_the_tokens_delivered(store):
    a, b = np.zeros(50), np.ones(50)
    ra, rb = _pair(store, {"recall@fusion_depth": a}, {"recall@fusion_depth": b})
    (claim,) = compare_runs(store, ra, rb, n_resamples=500).claims
    assert "budget" not in claim and "tokens" not in claim
    assert claim.startswith("recall@fusion_depth went from 0.00 to 1.00")


def test_config_diff_flattens_and_ignores_the_name():
    assert config_diff({"name": "a", "x": {"y": 1, "z": 2}}, {"name": "b", "x": {"y": 1, "z": 3}, "w": 1}) == [
        ("w", None, 1), ("x.z", 2, 3)]


def test_pin_mismatch_is_refused_unless_rebaselined(store):
    ra = make_run(store, "A", {"m": np.ones(10)})
    rb = make_run(store, "B", {"m": np.ones(10)}, dataset_version="ds@2", metric_version="ragassay-metrics-2")
    with pytest.raises(PinMismatchError) as e:
        compare_runs(store, ra, rb)
    msg = str(e.value)
    assert "dataset_version: ds@1 (A) vs ds@2 (B)" in msg and "metric_version" in msg and "--rebaseline" in msg
    comp = compare_runs(store, ra, rb, rebaseline=True, n_resamples=200)
    assert [p[0] for p in comp.pin_differences] == ["dataset_version", "metric_version"]


def test_runs_without_shared_queries_or_metrics_are_errors(store):
    ra = make_run(store, "A", {"m": np.ones(5)})
    rb = make_run(store, "B", {"other": np.ones(5)})
    with pytest.raises(InputError, match="no metric in common"):
        compare_runs(store, ra, rb)


@pytest.mark.parametrize(
    "delta, lo, hi, metric, verdict",
    [
        (-0.10, -0.15, -0.05, "recall@10", "FAIL"),   # credible and large
        (-0.01, -0.015, -0.005, "recall@10", "WARN"),  # credible but below the minimum effect
        (-0.10, -0.20, 0.01, "recall@10", "PASS"),    # a big drop, but the CI reaches zero
        (0.05, 0.01, 0.09, "recall@10", "PASS"),      # an improvement
        (0.10, 0.05, 0.15, "over_refusal", "FAIL"),   # lower is better: a credible rise is a regression
        (-0.10, -0.15, -0.05, "over_refusal", "PASS"),
    ],
)
def test_statistical_verdicts(delta, lo, hi, metric, verdict):
    assert statistical_check(metric, delta, lo, hi, 0.03).verdict == verdict


def test_gate_fail_warn_pass_on_stored_runs(store):
    rng = np.random.default_rng(0)
    base = rng.random(300)
    clean = {"extra": {"unit_failures": 0}}
    ra = make_run(store, "base", {"ndcg@10": base}, **clean)
    worse = make_run(store, "worse", {"ndcg@10": base - 0.1 - rng.random(300) * 0.02}, **clean)
    slightly = make_run(store, "slightly", {"ndcg@10": base - 0.01 - rng.random(300) * 0.002}, **clean)
    same = make_run(store, "same", {"ndcg@10": base}, **clean)
    pol = GatePolicy(n_resamples=2000, metrics={"ndcg@10": MetricPolicy(min_effect=0.03)},
                     hard=HardPolicy(min_citation_validity=None))
    assert run_gate(store, ra, worse, pol).verdict == "FAIL"
    assert run_gate(store, ra, slightly, pol).verdict == "WARN"
    res = run_gate(store, ra, same, pol)
    assert res.verdict == "PASS" and res.exit_code == 0


@pytest.mark.parametrize(
    "hard, kwargs, values, name",
    [
        ({"max_schema_failures": 0}, {"extra": {"schema_failures": 2}}, {}, "schema_failures"),
        ({"min_citation_validity": 1.0}, {}, {"citation_validity": [1.0] * 9 + [0.5]}, "citation_validity"),
        ({"max_cost_per_query": 0.01}, {"cost": [0.02] * 10}, {}, "cost_per_query"),
        ({"max_p95_latency_ms": 100}, {"latency": [50.0] * 8 + [500.0] * 2}, {}, "p95_latency_ms"),
    ],
)
def test_each_hard_gate_fails_regardless_of_statistics(store, hard, kwargs, values, name):
    vals = {"m": np.ones(10), **{k: np.asarray(v) for k, v in values.items()}}
    ra = make_run(store, "base", {"m": np.ones(10), **{k: np.ones(10) for k in values}})
    rb = make_run(store, "cand", vals, **kwargs)
    full = {"max_schema_failures": None, "min_citation_validity": None, **hard}
    pol = GatePolicy(n_resamples=500, metrics={"m": MetricPolicy(min_effect=0.03)}, hard=HardPolicy(**full))
    res = run_gate(store, ra, rb, pol)
    check = next(c for c in res.checks if c.name == name)
    assert check.kind == "hard" and check.verdict == "FAIL" and res.verdict == "FAIL"
    assert next(c for c in res.checks if c.name == "m").verdict == "PASS"


def test_policy_file_validation(tmp_path):
    p = tmp_path / "gate.yaml"
    p.write_text(yaml.safe_dump({"metrics": {"ndcg@10": {"min_effect": 0.02}}, "hard": {"max_p95_latency_ms": 500}}))
    pol = load_policy(p)
    assert pol.metrics["ndcg@10"].min_effect == 0.02 and pol.hard.max_p95_latency_ms == 500
    p.write_text(yaml.safe_dump({"metrics": {"ndcg@10": {"min_efect": 0.02}}}))
    with pytest.raises(InputError, match=r"metrics.ndcg@10.min_efect: Extra inputs are not permitted"):
        load_policy(p)


def _cli(args):
    with pytest.raises(SystemExit) as e:
        main(args)
    return e.value.code or 0


def test_gate_exit_codes_and_json(tmp_path, capsys):
    from ragassay.store import Store

    db = tmp_path / "g.duckdb"
    rng = np.random.default_rng(1)
    base = rng.random(200)
    with Store.open(db) as st:
        clean = {"extra": {"unit_failures": 0}}
        make_run(st, "base", {"ndcg@10": base}, **clean)
        make_run(st, "worse", {"ndcg@10": base - 0.2}, **clean)
        make_run(st, "same", {"ndcg@10": base}, **clean)
    pol = tmp_path / "gate.yaml"
    pol.write_text(yaml.safe_dump({"n_resamples": 500, "metrics": {"ndcg@10": {"min_effect": 0.03}}}))
    assert _cli(["gate", "base", "worse", "--store", str(db), "--policy", str(pol), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "FAIL" and out["exit_code"] == 1
    assert _cli(["gate", "base", "same", "--store", str(db), "--policy", str(pol)]) == 0
    assert "gate PASS" in capsys.readouterr().out
    assert _cli(["gate", "base", "nope", "--store", str(db), "--policy", str(pol)]) == 2
    assert _cli(["gate", "base", "same", "--store", str(db), "--policy", str(tmp_path / "missing.yaml")]) == 2


# ------------------------------------------------------------------------------------- pins and final_k

def _run(store, name, values, *, config=None, **pins):
    """A stored run like ``make_run``, with any pin overridden (hit_rule, gain, ...)."""
    record = {"hit_rule": "any_overlap", "gain": "exp", "relevance_threshold": 2, "ties": "given",
              "dataset_version": "ds@1", "corpus_digest": "sha256:c", "metric_version": "ragassay-metrics-1",
              **pins}
    n = len(next(iter(values.values())))
    run_id = store.create_run(RunRecord(name=name, config=config or {"name": name}, trials=1, n_queries=n,
                                        extra=pins.pop("extra", {"unit_failures": 0}),
                                        **{k: v for k, v in record.items() if k != "extra"}))
    qids = [f"q{i:03d}" for i in range(n)]
    cols = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": []}
    for m, v in values.items():
        cols["query_id"] += qids
        cols["trial"] += [0] * n
        cols["metric"] += [m] * n
        cols["value"] += [float(x) for x in v]
        cols["stratum"] += ["s1"] * n
    store.write_batch(run_id, cols, done=[(q, 0, "done", None) for q in qids])
    store.finish_run(run_id)
    return run_id


@pytest.mark.parametrize("pin, a, b", [
    ("hit_rule", "any_overlap", "doc"),
    ("gain", "exp", "linear"),
    ("relevance_threshold", 2, 1),
    ("ties", "given", "pessimistic"),
    ("corpus_digest", "sha256:c", "sha256:d"),
])
def test_every_scoring_definition_is_a_pin(store, pin, a, b):
    ra = _run(store, "A", {"recall@5": np.ones(10)}, **{pin: a})
    rb = _run(store, "B", {"recall@5": np.ones(10)}, **{pin: b})
    with pytest.raises(PinMismatchError) as e:
        compare_runs(store, ra, rb, n_resamples=200)
    assert f"{pin}: {a} (A) vs {b} (B)" in str(e.value) and "--rebaseline" in str(e.value)
    comp = compare_runs(store, ra, rb, n_resamples=200, rebaseline=True)
    assert comp.pin_differences == [(pin, a, b)]
    (claim,) = [comp.claim(r) for r in comp.rows if r.stratum == "all"]
    assert "configs identical" not in claim and "all else pinned" not in claim
    assert f"rebaselined across differing pins: {pin} {a} → {b}" in claim


def test_cutoffs_derived_from_metric_names_are_a_pin(store):
    ra = _run(store, "A", {"recall@5": np.ones(10), "recall@10": np.ones(10), "answer_f1": np.ones(10)})
    rb = _run(store, "B", {"recall@5": np.ones(10), "recall@20": np.ones(10), "answer_f1": np.ones(10)})
    with pytest.raises(PinMismatchError, match=r"cutoffs: \(5, 10\) \(A\) vs \(5, 20\) \(B\)"):
        compare_runs(store, ra, rb, n_resamples=200)
    # a run with no ranked metrics at all (oracle context) has no cutoffs, which conflicts with nothing
    rc = _run(store, "C", {"answer_f1": np.ones(10)})
    assert compare_runs(store, ra, rc, n_resamples=200).pin_differences == []


def test_metrics_at_final_k_are_refused_when_final_k_differs(store):
    vals = {"recall@final_k": np.ones(12), "ndcg@final_k": np.ones(12), "rerank_broke": np.zeros(12),
            "recall@5": np.ones(12), "recall@10": np.ones(12)}
    ra = _run(store, "A", vals, config={"reranker": {"final_k": 10}})
    rb = _run(store, "B", vals, config={"reranker": {"final_k": 5}})
    comp = compare_runs(store, ra, rb, n_resamples=200)
    assert {r.metric for r in comp.rows} == {"recall@5", "recall@10"}
    assert sorted(m for m, _ in comp.excluded) == ["ndcg@final_k", "recall@final_k", "rerank_broke"]
    assert comp.excluded[0][1] == ("final_k differs: 10 (A) vs 5 (B), so it measures different depths; compare a "
                                   "fixed depth both runs have instead (@5, @10)")
    assert len(comp.to_dict()["excluded_metrics"]) == 3
    with pytest.raises(InputError, match=r"recall@final_k: not a like-for-like comparison; final_k differs: 10"):
        compare_runs(store, ra, rb, metrics=["recall@final_k"], n_resamples=200)
    # with the same final_k they are compared as usual
    rc = _run(store, "C", vals, config={"reranker": {"final_k": 10}})
    assert "recall@final_k" in {r.metric for r in compare_runs(store, ra, rc, n_resamples=200).rows}


@pytest.mark.parametrize("bad", [-1, -0.01, float("nan"), float("inf"), {"recall@5": -0.5}])
def test_min_effect_must_be_a_finite_number_at_least_zero(store, bad):
    ra = _run(store, "A", {"recall@5": np.ones(10)})
    rb = _run(store, "B", {"recall@5": np.ones(10)})
    with pytest.raises(InputError, match="minimum effect must be a finite number >= 0"):
        compare_runs(store, ra, rb, min_effect=bad, n_resamples=200)


# ------------------------------------------------------------------------------------------- verdicts

def test_verdict_uses_the_adjusted_p_it_prints():
    from ragassay.analysis.compare import _verdict

    # the issue's case: raw p 0.028 but BH-adjusted p 0.32, CI [-0.09, -0.01] excluding zero
    assert _verdict(-0.05, -0.09, -0.01, 0.02, True, True, p_adj=0.32, alpha=0.05) == \
        "no credible change after BH adjustment"
    assert _verdict(-0.05, -0.09, -0.01, 0.02, True, True, p_adj=0.028, alpha=0.05) == "regressed"
    assert _verdict(-0.05, -0.09, -0.01, 0.02, True, True, p_adj=float("nan"), alpha=0.05) != "regressed"


def test_a_raw_significant_regression_lost_to_multiplicity_is_not_called_regressed():
    from ragassay.analysis.compare import compare_wide

    rng = np.random.default_rng(5)
    n = 60
    ids = [(f"q{i}", 0) for i in range(n)]
    a = rng.random((n, 12))
    b = a + rng.normal(0, 0.2, (n, 12))
    noise = rng.normal(0, 0.2, n)
    b[:, 0] = a[:, 0] + noise - noise.mean() - 0.058
    metrics = ["ndcg@5"] + [f"m{j}" for j in range(11)]
    rows = compare_wide(ids, ["s"] * n, a, ids, b, metrics, n_resamples=4000, seed=0, strata=False)
    row = rows[0]
    assert row.ci_high < 0 and row.p < 0.05 < row.p_adj  # the raw evidence alone would say "regressed"
    assert row.p_adj == pytest.approx(min(12 * row.p, 1), rel=0.5)
    assert row.verdict == "no credible change after BH adjustment"


# ----------------------------------------------------------------------------------------------- gate

def test_gate_warns_underpowered_with_the_n_needed_checked_against_statsmodels(store):
    from statsmodels.stats.power import NormalIndPower

    rng = np.random.default_rng(2)
    base = rng.random(22)
    noise = rng.normal(0, 1, 22)
    noise = (noise - noise.mean()) / noise.std(ddof=1)
    sigma = 0.15 * np.sqrt(22) / (stats.norm.ppf(0.975) + stats.norm.ppf(0.8))  # MDE 0.15 at n = 22
    ra = _run(store, "base", {"ndcg@5": base})
    rb = _run(store, "cand", {"ndcg@5": base + sigma * noise})
    pol = GatePolicy(n_resamples=2000, metrics={"ndcg@5": MetricPolicy(min_effect=0.03)},
                     hard=HardPolicy(min_citation_validity=None))
    res = run_gate(store, ra, rb, pol)
    (check,) = [c for c in res.checks if c.name == "ndcg@5"]
    need = int(np.ceil(NormalIndPower().solve_power(effect_size=0.03 / sigma, alpha=0.05, power=0.8, ratio=0)))
    assert need == 550
    assert check.verdict == "WARN" and res.verdict == "WARN" and res.exit_code == 0
    assert check.detail.startswith(f"underpowered: MDE 0.15 > threshold 0.03 at n = 22 (80% power); need n ≈ {need}")


def test_gate_passes_when_the_ci_rules_out_the_minimum_effect_even_at_low_power(store):
    rng = np.random.default_rng(2)
    base = rng.random(22)
    noise = rng.normal(0, 0.25, 22)
    ra = _run(store, "base", {"ndcg@5": base})
    rb = _run(store, "better", {"ndcg@5": base + noise - noise.mean() + 0.3})
    pol = GatePolicy(n_resamples=2000, metrics={"ndcg@5": MetricPolicy(min_effect=0.03)},
                     hard=HardPolicy(min_citation_validity=None))
    (check,) = [c for c in run_gate(store, ra, rb, pol).checks if c.name == "ndcg@5"]
    assert check.verdict == "PASS" and "the CI excludes a drop of the minimum effect" in check.detail


@pytest.mark.parametrize("extra_a, extra_b, verdict, text", [
    ({"unit_failures": 0}, {"unit_failures": 3}, "FAIL",
     "3 retrieved units failed validation against the corpus (candidate B: 3); allowed 0; see `ragassay runs --json`"),
    ({"unit_failures": 2}, {"unit_failures": 0}, "FAIL",
     "2 retrieved units failed validation against the corpus (baseline A: 2)"),
    ({}, {"unit_failures": 0}, "WARN", "unknown for baseline A: the run records no unit_failures"),
    ({"unit_failures": 0}, {"unit_failures": 0}, "PASS", "0 retrieved units failed validation"),
])
def test_unit_failures_are_a_hard_gate_on_both_runs(store, extra_a, extra_b, verdict, text):
    ra = _run(store, "A", {"m": np.ones(10)}, extra=extra_a)
    rb = _run(store, "B", {"m": np.ones(10)}, extra=extra_b)
    pol = GatePolicy(n_resamples=500, metrics={"m": MetricPolicy(min_effect=0.03)},
                     hard=HardPolicy(min_citation_validity=None))
    res = run_gate(store, ra, rb, pol)
    (check,) = [c for c in res.checks if c.name == "unit_failures"]
    assert check.kind == "hard" and check.verdict == verdict and text in check.detail
    assert res.verdict == verdict


def test_judged_fraction_check_reads_the_rows_that_have_one(store):
    ra = _run(store, "A", {"m": np.ones(4)})
    rb = store.create_run(RunRecord(name="B", dataset_version="ds@1", corpus_digest="sha256:c",
                                    metric_version="ragassay-metrics-1", hit_rule="any_overlap", gain="exp",
                                    relevance_threshold=2, ties="given", extra={"unit_failures": 0}))
    # the judged fraction sits on the ranking rows only, not on the first row of each trace
    qids = ["q000", "q001", "q002", "q003"]
    store.write_batch(rb, {"query_id": qids * 2, "trial": [0] * 8, "metric": ["a_first"] * 4 + ["m"] * 4,
                           "value": [1.0] * 8, "judged_fraction": [None] * 4 + [0.5, 0.25, None, 1.0]},
                      done=[(q, 0, "done", None) for q in qids])
    hard = HardPolicy(min_citation_validity=None, min_judged_fraction=0.8)
    res = run_gate(store, ra, rb, GatePolicy(n_resamples=500, metrics={"m": MetricPolicy(min_effect=0.03)},
                                             hard=hard))
    (check,) = [c for c in res.checks if c.name == "judged_fraction"]
    assert check.verdict == "FAIL" and check.value == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    assert "over 3 queries (1 with none: empty lists)" in check.detail
    rc = _run(store, "C", {"m": np.ones(4)})
    (none,) = [c for c in run_gate(store, ra, rc, GatePolicy(n_resamples=500, metrics={
        "m": MetricPolicy(min_effect=0.03)}, hard=hard)).checks if c.name == "judged_fraction"]
    assert none.verdict == "PASS" and none.detail.startswith("not applicable")


@pytest.mark.parametrize("text, fragment", [
    ("metrics:\n  ndcg@5: {min_effect: 9}\n",
     "gate.yaml:2: metrics.ndcg@5.min_effect: 9 is out of range: ndcg@5 lies in [0, 1]"),
    ("confidence: 1.5\n", "gate.yaml:1: confidence: Input should be less than 1 (got 1.5)"),
    ("n_resamples: 5\n", "gate.yaml:1: n_resamples: Input should be greater than or equal to 100 (got 5)"),
    ("hard:\n  min_citation_validity: 2\n",
     "gate.yaml:2: hard.min_citation_validity: Input should be less than or equal to 1 (got 2)"),
    ("hard:\n  max_schema_failures: 'zero'\n", "gate.yaml:2: hard.max_schema_failures: Input should be"),
    ("metrics:\n  ndcg@5: {min_effect: .nan}\n", "gate.yaml:2: metrics.ndcg@5.min_effect: Input should be"),
    ("metrics: {}\n", "gate.yaml:1: metrics: Dictionary should have at least 1 item"),
    ("seed: -1\n", "gate.yaml:1: seed: Input should be greater than or equal to 0 (got -1)"),
    ("- 1\n- 2\n", "a gate policy is a mapping"),
])
def test_policy_values_out_of_range_name_the_file_line_and_field(tmp_path, text, fragment):
    p = tmp_path / "gate.yaml"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_policy(p)
    assert fragment in str(e.value)


def validation_row(*, kappa=(0.8, 0.7, 0.9), recall_low=0.7, n=120, per_class=60, scale="binary",
                   model="openai:m", rubric="r" * 64, prompt="p" * 64, settings="structured_output=json_schema"):
    """A stored validation record with the figures the floor reads (kappa CI, per-class support and recall CI)."""
    ci = {"value": kappa[0], "ci_low": kappa[1], "ci_high": kappa[2], "defined": True}
    classes = ("not_supported", "supported")
    return {"judge_model": model, "rubric_sha": rubric, "prompt_sha": prompt, "judge_settings": settings,
            "kind": "support", "scale": scale, "label_set_version": "ab" * 32, "n_items": n, "n": n,
            "kappa": kappa[0], "kappa_low": kappa[1], "kappa_high": kappa[2], "min_class_recall": recall_low + 0.1,
            "figures": {"scale": scale, "kappa": ci, "per_class": [
                {"label": c, "support": per_class, "recall": {"value": recall_low + 0.1, "ci_low": recall_low,
                                                               "ci_high": 1.0, "defined": True}}
                for c in classes]}}


def _judged(store, name, values, model="openai:m", rubric="r" * 64, prompt="p" * 64):
    run_id = make_run(store, name, values, extra={"unit_failures": 0})
    store.set_judge_pins(run_id, {"judge_model": model, "rubric_sha": rubric, "prompt_sha": prompt})
    return run_id


@pytest.mark.parametrize(("pin", "kw"), [("judge_model", {"model": "anthropic:m"}),
                                         ("rubric_sha", {"rubric": "s" * 64}),
                                         ("judge_prompt_sha", {"prompt": "q" * 64})])
def test_runs_judged_under_different_judge_pins_are_refused_unless_rebaselined(store, pin, kw):
    v = {"faithfulness": np.linspace(0, 1, 40)}
    a, b = _judged(store, "a", v), _judged(store, "b", v, **kw)
    pol = GatePolicy(n_resamples=500, metrics={"faithfulness": MetricPolicy(min_effect=0.05)},
                     hard=HardPolicy(min_citation_validity=None))
    for call in (lambda: compare_runs(store, a, b, n_resamples=200), lambda: run_gate(store, a, b, pol)):
        with pytest.raises(PinMismatchError, match=pin):
            call()
    comp = compare_runs(store, a, b, n_resamples=200, rebaseline=True)
    assert [p for p, _, _ in comp.pin_differences] == [pin]
    # an unjudged run has no judge pins: it conflicts with nothing (its shared metrics compare as before)
    plain = make_run(store, "plain", v)
    assert compare_runs(store, a, plain, n_resamples=200).pin_differences == []


def test_gate_fails_a_credible_regression_in_a_judge_metric(store):
    rng = np.random.default_rng(5)
    base = rng.random(200)
    a = _judged(store, "a", {"faithfulness": base})
    worse = _judged(store, "worse", {"faithfulness": np.clip(base - 0.15, 0, 1)})
    same = _judged(store, "same", {"faithfulness": base})
    pol = GatePolicy(n_resamples=1000, metrics={"faithfulness": MetricPolicy(min_effect=0.05)},
                     hard=HardPolicy(min_citation_validity=None))
    # without a validation record for these judge pins the judge cannot decide the build either way
    unvalidated = [c for c in run_gate(store, a, worse, pol).checks if c.name == "faithfulness"]
    assert [(c.verdict, c.status) for c in unvalidated] == [("WARN", "unvalidated")]
    store.record_judge_validation(validation_row())
    res = run_gate(store, a, worse, pol)
    assert res.verdict == "FAIL"
    assert any(c.name == "faithfulness" and c.verdict == "FAIL" for c in res.checks)
    assert run_gate(store, a, same, pol).verdict == "PASS"
