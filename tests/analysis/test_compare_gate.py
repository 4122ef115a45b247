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


def test_claim_sentence_names_dataset_n_hit_rule_change_and_interval(store):
    a = np.zeros(240)
    b = np.zeros(240)
    b[:40] = 1
    ra, rb = _pair(store, {"recall@fusion_depth": a}, {"recall@fusion_depth": b})
    comp = compare_runs(store, ra, rb, n_resamples=2000)
    (claim,) = comp.claims
    row = comp.overall("recall@fusion_depth")
    assert claim.startswith("recall@fusion_depth at a 2,000-token budget went from 0.00 to 0.17 (+0.17, 95% "
                            "paired-bootstrap CI [")
    assert f"[+{row.ci_low:.2f}, +{row.ci_high:.2f}]" in claim
    assert "n = 240, 40 wins / 0 losses / 200 ties, any_overlap hit rule, dataset ds@1" in claim
    assert "changed: chunker.size 800 → 400; all else pinned) — improved." in claim
    assert comp.config_diff == [("chunker.size", 800, 400)]


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
    ra = make_run(store, "base", {"ndcg@10": base})
    worse = make_run(store, "worse", {"ndcg@10": base - 0.1 - rng.random(300) * 0.02})
    slightly = make_run(store, "slightly", {"ndcg@10": base - 0.01 - rng.random(300) * 0.002})
    same = make_run(store, "same", {"ndcg@10": base})
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
        make_run(st, "base", {"ndcg@10": base})
        make_run(st, "worse", {"ndcg@10": base - 0.2})
        make_run(st, "same", {"ndcg@10": base})
    pol = tmp_path / "gate.yaml"
    pol.write_text(yaml.safe_dump({"n_resamples": 500, "metrics": {"ndcg@10": {"min_effect": 0.03}}}))
    assert _cli(["gate", "base", "worse", "--store", str(db), "--policy", str(pol), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "FAIL" and out["exit_code"] == 1
    assert _cli(["gate", "base", "same", "--store", str(db), "--policy", str(pol)]) == 0
    assert "gate PASS" in capsys.readouterr().out
    assert _cli(["gate", "base", "nope", "--store", str(db), "--policy", str(pol)]) == 2
    assert _cli(["gate", "base", "same", "--store", str(db), "--policy", str(tmp_path / "missing.yaml")]) == 2
