"""`ragassay cost`: the eval layer's own cost from stored judge calls, checked against hand computation, the
spec's own napkin formula (§11.7 ``eval_run_cost``) and the demo store (local judges: spend 0)."""

import json
import sys

import numpy as np
import pytest
import typer
from tests.analyses._runs import make_run

from ragassay.analysis.eval_cost import Projection, Tier, labelling_cost, load_tier, run_cost
from ragassay.cli.app import _failure
from ragassay.cli.cost import register
from ragassay.errors import InputError
from ragassay.judges.providers import Price

PRICES = {"m": Price(input=2.0, output=10.0, cached_input=0.2, batch_input=1.0, batch_output=5.0)}
JUDGE_YAML = """provider: openai
model: m
prices:
  m: {input: 2.0, output: 10.0, cached_input: 0.2, batch_input: 1.0, batch_output: 5.0}
"""
TIERS_YAML = """# ragassay golden tiers: written by `ragassay golden status --tiers-out`; ragassay may replace it
dataset_version: ds@1
tiers:
  smoke: {n: 1, expected_ms: 10.0, n_latency_unknown: 0, query_ids: [q000]}
  regression: {n: 4, expected_ms: 40.0, n_latency_unknown: 0, query_ids: [q000, q001, q002, q003]}
  full: {n: 5, expected_ms: 50.0, n_latency_unknown: 0, query_ids: [q000, q001, q002, q003, q004]}
"""


def _call(run_id, qid, item, sha, *, inp=0, cached=0, out=0, cost=0.0, outcome="ok", cache_hit=False,
          provider="openai", model="m"):
    return {"run_id": run_id, "query_id": qid, "trial": 0, "item": item, "judge": "support",
            "request_sha": sha * 64, "provider": provider, "model": model, "outcome": outcome,
            "attempts": 0 if cache_hit else 1, "cache_hit": cache_hit, "input_tokens": inp,
            "cached_tokens": cached, "output_tokens": out, "cost": cost}


def _judged(store, name, summary):
    pins = {"judge_model": "openai:m", "rubric_sha": "r", "prompt_sha": "p", "provider": "openai"}
    return make_run(store, name, {"recall@10": np.ones(2)}, judge_model="openai:m",
                    extra={"judge": pins, "judge_summary": summary})


@pytest.fixture
def priced(store):
    """Run ``llm``: a prompt-cached call, a refused one, a store cache hit of ``older``'s call, an error and a
    local tier-1 record, over 2 judged answers, cascaded 3 auto-pass / 1 auto-fail / 4 escalated."""
    older = _judged(store, "older", {"items": 1})
    store.record_judge_calls([_call(older, "q000", "s0", "c", inp=500, out=20, cost=0.0012)])
    run = _judged(store, "llm", {"items": 2, "cascade": {
        "tier1": "local:lexical", "tier2": "openai:m", "routes": {"auto_pass": 3, "auto_fail": 1, "escalated": 4}}})
    store.record_judge_calls([
        _call(run, "q000", "s0", "a", inp=1000, cached=800, out=100, cost=0.0026),
        _call(run, "q001", "s0", "b", inp=2000, out=50, cost=0.0045, outcome="refused"),
        _call(run, "q001", "s1", "c", cache_hit=True),
        _call(run, "q000", "s1", "d", outcome="error"),
        _call(run, "q000", "t1", "e", provider="local", model="lexical"),
    ])
    return run


def test_counts_spend_and_the_four_modelled_figures_match_hand_computation(store, priced):
    r = run_cost(store, "llm", PRICES, "judge.yaml")
    assert (r.calls, r.llm_calls, r.local_calls, r.paid_calls, r.cache_hits, r.errors) == (5, 4, 1, 3, 1, 1)
    assert (r.input_tokens, r.cached_tokens, r.output_tokens, r.answers) == (3000, 800, 150, 2)
    assert r.cache_hit_share == pytest.approx(1 / 5)
    assert r.cached_input_share == pytest.approx(800 / 3000)
    assert r.spend == pytest.approx(0.0026 + 0.0045)
    # the cache hit is priced at its paid original in older: 0.0012
    assert r.fresh_cost == pytest.approx(0.0083) and r.per_answer == pytest.approx(0.00415)
    # per call (input, cache reads, output): a (1000, 800, 100), b (2000, 0, 50), c's original (500, 0, 20)
    usd = {k: s.usd for k, s in r.scenarios.items()}
    assert usd["sync_uncached"] == pytest.approx((3500 * 2 + 170 * 10) / 1e6)
    assert usd["sync_cached"] == pytest.approx((200 * 2 + 800 * 0.2 + 2500 * 2 + 170 * 10) / 1e6)
    assert usd["batch_uncached"] == pytest.approx(0.0087 / 2)
    assert usd["batch_cached"] == pytest.approx((200 * 1 + 800 * 0.1 + 2500 * 1 + 170 * 5) / 1e6)
    assert r.deterministic_first["share"] == pytest.approx(4 / 8)
    assert (r.deterministic_first["decided"], r.deterministic_first["judgements"]) == (4, 8)


def eval_run_cost(n_items, in_tok, out_tok, price_in, price_out, batch=True, cache_hit_frac=0.0,
                  cached_frac_of_input=0.0):
    """The spec's §11.7 napkin formula, verbatim: the independent oracle."""
    eff_in = in_tok * ((1 - cached_frac_of_input)
                       + cached_frac_of_input * (0.1 * cache_hit_frac + 1.25 * (1 - cache_hit_frac)))
    cost = n_items * (eff_in / 1e6 * price_in + out_tok / 1e6 * price_out)
    return cost * (0.5 if batch else 1.0)


def test_modelled_figures_equal_the_spec_napkin_formula_on_its_opus_example(store):
    # §11.7's example scaled to 40 items: 1,800 input tokens (78% a rubric prefix read from cache), 150 out
    run = _judged(store, "opus", {"items": 40})
    store.record_judge_calls([_call(run, f"q{i:03d}", "s0", f"{i:02x}", inp=1800, cached=1404, out=150)
                              for i in range(40)])
    opus = {"m": Price(input=5.0, output=25.0, cached_input=0.5, batch_input=2.5, batch_output=12.5)}
    usd = {k: s.usd for k, s in run_cost(store, "opus", opus, "opus.yaml").scenarios.items()}
    assert usd["sync_uncached"] == pytest.approx(eval_run_cost(40, 1800, 150, 5.0, 25.0, batch=False))
    assert usd["batch_uncached"] == pytest.approx(eval_run_cost(40, 1800, 150, 5.0, 25.0))
    # every prefix read hit the cache (no write premium to model): cache_hit_frac = 1
    assert usd["batch_cached"] == pytest.approx(
        eval_run_cost(40, 1800, 150, 5.0, 25.0, cache_hit_frac=1.0, cached_frac_of_input=0.78))
    assert usd["sync_uncached"] * 5000 / 40 == pytest.approx(63.75)


def test_without_prices_the_modelled_figures_are_undefined_and_say_why(store, priced):
    r = run_cost(store, "llm")
    assert all(s.usd is None and "pass --judge" in s.undefined for s in r.scenarios.values())
    no_batch = {"m": Price(input=2.0, output=10.0)}
    r = run_cost(store, "llm", no_batch, "j.yaml")
    assert r.scenarios["sync_uncached"].usd == pytest.approx(0.0087)
    assert r.scenarios["batch_cached"].usd is None
    assert r.scenarios["batch_cached"].undefined == "j.yaml has no batch_input/batch_output for model(s) ['m']"
    # a model the run did not call needs no batch prices
    both = run_cost(store, "llm", {**PRICES, "x": Price(input=1.0, output=1.0)}, "j.yaml")
    assert both.scenarios["batch_uncached"].usd == pytest.approx(0.00435)
    other = run_cost(store, "llm", {"x": PRICES["m"]}, "j.yaml")
    assert other.scenarios["sync_cached"].undefined == "j.yaml has no prices for model(s) ['m']"


def test_a_cache_hit_whose_original_is_gone_leaves_fresh_and_modelled_cost_undefined(store):
    run = _judged(store, "orphan", {"items": 1})
    store.record_judge_calls([_call(run, "q000", "s0", "f", cache_hit=True)])
    r = run_cost(store, "orphan", PRICES, "j.yaml")
    assert r.fresh_cost is None and r.per_answer is None and r.spend == 0.0
    assert all(s.usd is None and "no longer in the store" in s.undefined for s in r.scenarios.values())


def test_an_unjudged_run_is_undefined_not_zero(store):
    make_run(store, "plain", {"recall@10": np.ones(2)})
    r = run_cost(store, "plain", PRICES, "j.yaml")
    assert r.spend is None and r.answers is None and r.judge_model is None
    assert r.deterministic_first == {"share": None, "undefined": "not measured: the run was not judged with a cascade"}
    assert Projection(Tier("regression", 4, None, None, "t"), 30).monthly(r)["as_run"].usd is None


def test_projection_and_labelling(store, priced, tmp_path):
    path = tmp_path / "tiers.yaml"
    path.write_text(TIERS_YAML)
    tier = load_tier(path, "regression")
    assert (tier.n_items, tier.expected_ms, tier.dataset_version) == (4, 40.0, "ds@1")
    monthly = Projection(tier, 30).monthly(run_cost(store, "llm", PRICES, "j.yaml"))
    assert monthly["as_run"].usd == pytest.approx(0.0083 / 2 * 4 * 30)
    assert monthly["batch_cached"].usd == pytest.approx(0.00363 / 2 * 4 * 30)
    assert labelling_cost(6, 60).usd == 360
    assert labelling_cost(None, None).usd is None
    with pytest.raises(InputError, match="no tier 'nightly'; pick one of"):
        load_tier(path, "nightly")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tiers:\n  regression: {n: 3, query_ids: [a]}\n")
    with pytest.raises(InputError, match="n = 3 but 1 query ids are listed"):
        load_tier(bad, "regression")


# ------------------------------------------------------------------------------------------- CLI

def cli(args, capsys):
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    register(app)
    try:
        typer.main.get_command(app)(args, standalone_mode=False, prog_name="ragassay")
        code = 0
    except Exception as e:  # the error contract of ragassay.cli.app.main
        lines, code = _failure(e)
        sys.stderr.write("".join(f"error: {line}\n" for line in lines))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def files(store, priced, tmp_path):
    (tmp_path / "judge.yaml").write_text(JUDGE_YAML)
    (tmp_path / "tiers.yaml").write_text(TIERS_YAML)
    store.close()
    return tmp_path, tmp_path / "r.duckdb"


def test_cli_json_states_every_figure_and_its_basis(files, capsys):
    tmp, path = files
    code, out, err = cli(["cost", "llm", "--store", str(path), "--judge", str(tmp / "judge.yaml"), "--tiers",
                          str(tmp / "tiers.yaml"), "--runs-per-month", "10", "--labelling-hours", "6",
                          "--hourly-rate", "60", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    r = rep["runs"][0]
    assert r["spend"] == pytest.approx(0.0071) and r["calls"]["cache_hits"] == 1
    assert r["modelled"]["batch_uncached"]["usd"] == pytest.approx(0.00435)
    assert r["modelled_basis"].endswith("judge.yaml")
    assert r["monthly"]["as_run"]["usd"] == pytest.approx(0.00415 * 4 * 10)
    assert r["monthly_total"] == pytest.approx(360 + 0.00415 * 4 * 10)
    assert rep["projection"]["tier"] == "regression" and rep["projection"]["runs_per_month"] == 10
    assert rep["labelling"]["usd"] == 360


def test_cli_text_summary(files, capsys):
    tmp, path = files
    code, out, _ = cli(["cost", "llm", "--store", str(path), "--tiers", str(tmp / "tiers.yaml"), "--tier",
                        "smoke"], capsys)
    assert code == 0
    assert "spend as paid: $0.0071" in out
    assert "deterministic-first: 50% (4 of 8 support judgements decided by tier 1 local:lexical" in out
    assert "sync undefined (the store records no prices with the calls: pass --judge" in out
    assert "monthly (smoke tier, 1 items x 30 runs): $0.1245 as run" in out
    assert "labelling: not given" in out


@pytest.mark.parametrize("extra, message", [
    (["nope"], "error: no run matches 'nope'"),
    (["llm", "--tier", "smoke"], "error: --tier needs --tiers"),
    (["llm", "--runs-per-month", "3"], "error: --runs-per-month needs --tiers"),
    (["llm", "--tiers", "TIERS", "--runs-per-month", "0"], "error: --runs-per-month 0: give a whole number >= 1"),
    (["llm", "--labelling-hours", "6"], "error: --labelling-hours and --hourly-rate go together"),
    (["llm", "--labelling-hours", "-1", "--hourly-rate", "5"], "error: --labelling-hours -1.0: give a number >= 0"),
    (["llm", "--tiers", "TIERS", "--tier", "nightly"], "no tier 'nightly'; pick one of ['full', 'regression', "),
    (["llm", "--tiers", "missing.yaml"], "missing.yaml: no such tier file"),
    (["llm", "--judge", "missing.yaml"], "missing.yaml: no such judge config file"),
])
def test_cli_bad_input_is_error_lines_exit_2(files, capsys, extra, message):
    tmp, path = files
    extra = [str(tmp / "tiers.yaml") if a == "TIERS" else a for a in extra]
    code, out, err = cli(["cost", *extra, "--store", str(path)], capsys)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert all(line.startswith("error: ") for line in err.splitlines())


def test_cli_missing_store_is_an_error_line(tmp_path, capsys):
    code, _, err = cli(["cost", "x", "--store", str(tmp_path / "none.duckdb")], capsys)
    assert code == 2 and "no results store here" in err


@pytest.mark.slow  # one demo (four pipelines, judge, comparisons): ~8 s
def test_demo_store_judged_by_a_local_judge_costs_nothing_and_says_so(tmp_path, capsys):
    from ragassay.analysis.demo import run_demo

    demo = run_demo(tmp_path / "demo", n_resamples=100, report=None)
    code, out, err = cli(["cost", *demo.run_ids, "--store", str(demo.out / "ragassay.duckdb"), "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert [r["run_name"] for r in rep["runs"]] == list(demo.run_ids)
    for r in rep["runs"]:
        assert r["judge_model"] == "local:lexical" and r["judged_answers"] == len(demo.golden.queries)
        assert r["calls"]["total"] == 0 and r["spend"] == 0 and r["fresh_cost"] == 0
        assert all(s == {"usd": 0.0, "undefined": None} for s in r["modelled"].values())
        assert r["cache_hit_share"] is None  # no calls: undefined, not 0
        assert r["deterministic_first"]["share"] is None
        assert r["notes"] == ["judged by the local judge local:lexical: no LLM call was made, so the spend and "
                              "every modelled figure are $0"]
    code, out, _ = cli(["cost", "bm25", "--store", str(demo.out / "ragassay.duckdb")], capsys)
    assert "spend as paid: $0.0000" in out and "no LLM call was made" in out


def test_a_tier_file_of_another_golden_version_is_noted(store, priced, tmp_path):
    from ragassay.analysis.eval_cost import cost_report

    path = tmp_path / "tiers.yaml"
    path.write_text(TIERS_YAML.replace("ds@1", "ds@2"))
    rep = cost_report([run_cost(store, "llm")], Projection(load_tier(path, "full"), 1), labelling_cost(None, None))
    assert rep["runs"][0]["notes"] == ["the tier file is of golden version ds@2, the run of ds@1: the projection "
                                       "prices that set's items at this run's cost per answer"]
    assert rep["runs"][0]["monthly_total"] is None and rep["labelling"]["usd"] is None
