"""`ragassay analyze <kind>`: system analyses over stored runs (docs/analyses.md).

Kinds come from :data:`KINDS` (name -> ("module:function", one-line help)); adding an analysis is one line
there plus its command function, which takes ``--json`` and prints a short summary.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import typer
from rich.table import Table

from ragassay.cli import checks
from ragassay.cli.analyze_causal import REBASELINE_OPT, print_rebaselined
from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError

KINDS: dict[str, tuple[str, str]] = {
    "decomposition": ("ragassay.cli.analyze:decomposition",
                      "A = h*c1 + (1-h)*c0 per run and stratum; with two runs, the change split into delivery "
                      "and use."),
    "ladder": ("ragassay.cli.analyze:ladder", "Oracle-context ladder: is the fault in retrieval or generation?"),
    "slices": ("ragassay.cli.analyze:slices",
               "Paired change split by golden field or tag (weighted identity); export cases to read."),
    "ablation": ("ragassay.cli.analyze:ablation",
                 "Run a declared ablation (baseline, intervention, placebo) and check each expectation."),
    "latency": ("ragassay.cli.analyze:latency",
                "End-to-end and per-stage percentiles, any-stage SLO exceedance; --load for a load run."),
    "consistency": ("ragassay.cli.analyze:consistency",
                    "pass@1, pass^k, per-item variance, modal answer fraction and pair agreement over trials."),
    "attribution": ("ragassay.cli.analyze_causal:attribution",
                    "Regenerate without each context item: leave-one-out deltas with CIs and Shapley shares."),
    "attacks": ("ragassay.cli.analyze_causal:attacks",
                "Planted-injection suite: attack success rate per class with exact intervals."),
    "hygiene": ("ragassay.cli.analyze_causal:hygiene",
                "13-gram overlap, keyword-baseline shortcut audit, retrieval bypass, exclusion union and "
                "re-score."),
    "rerank-cost": ("ragassay.cli.analyze_rerank_cost:rerank_cost",
                    "Quality per millisecond: quality delta with paired CI, added p95 latency, delta per 100 ms, "
                    "$/1k queries, Pareto set."),
    "claims": ("ragassay.cli.analyze_claims:claims",
               "Claim-by-claim diff of two runs judged for claims: claims gained, lost and changed verdict, with "
               "their supporting units."),
}

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")
JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of the summary.")
CORRECT_OPT = typer.Option("answer_f1>=0.5", "--correct", help="Correctness rule METRIC>=THRESHOLD.")
RESAMPLES_OPT = typer.Option(2_000, "--resamples", help="Bootstrap resamples (100 to 1,000,000).")


def _v(x, signed: bool = False) -> str:
    if x is None:
        return "undefined"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _ci(s: dict, signed: bool = False) -> str:
    if not s.get("defined"):
        return f"undefined (n={s.get('n', 0)})"
    lo = "—" if s["ci_low"] is None else _v(s["ci_low"], signed)
    hi = "—" if s["ci_high"] is None else _v(s["ci_high"], signed)
    return f"{_v(s['value'], signed)} [{lo}, {hi}]"


def _open(store: Path):
    from ragassay.store import Store

    if not store.exists():
        raise InputError(f"{store}: no results store here; run `ragassay run` first or pass --store")
    return Store.open(store, read_only=True)


def decomposition(
    run: str = typer.Argument(..., help="Run (id, prefix or name); the baseline when RUN_B is given."),
    run_b: str = typer.Argument(None, help="Second run: split the change from RUN to RUN_B."),
    correct: str = CORRECT_OPT, resamples: int = RESAMPLES_OPT, seed: int = typer.Option(0, "--seed"),
    rebaseline: bool = REBASELINE_OPT, store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    from ragassay.analysis.decomposition import CorrectRule, decomposition_between, decomposition_of_run

    checks.refuse(checks.resamples(resamples), checks.seed(seed))
    CorrectRule.parse(correct)  # a bad rule is refused before the store is read
    if rebaseline and run_b is None:
        raise InputError("--rebaseline applies to two runs (RUN RUN_B); one run is compared with nothing")
    with _open(store) as st:
        if run_b is None:
            res = decomposition_of_run(st, run, correct=correct, n_resamples=resamples, seed=seed)
        else:
            res = decomposition_between(st, run, run_b, correct=correct, n_resamples=resamples, seed=seed,
                                        rebaseline=rebaseline)
    if json_out:
        print_json(res)
        return
    console.print(f"correct = {esc(res['correct_rule'])}; evidence delivered = {esc(res['delivery_rule'])}; "
                  f"{res['confidence']:.0%} bootstrap CIs")
    print_rebaselined(res.get("pin_differences", []))
    t = Table(show_edge=False)
    if run_b is None:
        console.print(f"[bold]{esc(res['run']['name'])}[/]")
        for c in ("stratum", "n", "A", "h", "c1 (hit)", "c0 (miss)", "cand. recall", "support"):
            t.add_column(c)
        for r in res["rows"]:
            t.add_row(esc(r["stratum"]), str(r["n"]), _ci(r["A"]), _ci(r["h"]), _ci(r["c1"]), _ci(r["c0"]),
                      _ci(r["stages"]["candidate_recall"]), _ci(r["stages"]["support"]))
    else:
        console.print(f"[bold]{esc(res['run_a']['name'])}[/] → [bold]{esc(res['run_b']['name'])}[/]")
        for c in ("stratum", "n", "ΔA", "delivery", "use", "h A→B", "c1 A→B", "c0 A→B"):
            t.add_column(c)
        for r in res["rows"]:
            ch, a, b = r["change"], r["a"], r["b"]
            t.add_row(esc(r["stratum"]), str(ch["n"]), _ci(ch["delta_A"], True), _ci(ch["delivery"], True),
                      _ci(ch["use"], True), *(f"{_v(a[k]['value'])} → {_v(b[k]['value'])}" for k in ("h", "c1", "c0")))
    console.print(t)


def ladder(
    runs: list[str] = typer.Argument(..., help="Runs to place on the ladder (one may be the oracle)."),
    oracle: str = typer.Option(None, "--oracle", help="The oracle-context run, which must be one (its config says "
                                                       "oracle: true); default: the run whose config says so."),
    correct: str = CORRECT_OPT, resamples: int = RESAMPLES_OPT, rebaseline: bool = REBASELINE_OPT,
    store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    from ragassay.analysis.decomposition import CorrectRule, oracle_ladder

    checks.refuse(checks.resamples(resamples))
    CorrectRule.parse(correct)  # a bad rule is refused before the store is read
    with _open(store) as st:
        res = oracle_ladder(st, runs, oracle=oracle, correct=correct, n_resamples=resamples, rebaseline=rebaseline)
    if json_out:
        print_json(res)
        return
    print_rebaselined(res["pin_differences"])
    t = Table(show_edge=False)
    for c in ("run", "recall@fusion_depth", "ndcg@final_k", "recall@context", "correct"):
        t.add_column(c)
    for r in res["rungs"]:
        t.add_row(esc(r["name"] + (" (oracle)" if r["oracle"] else "")),
                  *(_ci(r[k]) for k in ("recall@fusion_depth", "ndcg@final_k", "recall@context", "correct")))
    console.print(t)
    console.print(f"diagnosis: {esc(res['diagnosis'])}")


def slices(
    run_a: str = typer.Argument(..., help="Baseline run."),
    run_b: str = typer.Argument(..., help="Candidate run."),
    metric: str = typer.Option("answer_f1", "-m", "--metric", help="Per-query metric to split."),
    by: list[str] = typer.Option(None, "--by", help="stratum, source, answerable, created, created:year, "
                                                    "tag:NAME (repeatable; default stratum)."),
    golden: Path = typer.Option(None, "--golden", help="Built golden folder (needed for keys other than stratum)."),
    declared: Path = typer.Option(None, "--declared", help="Slices file declared before the runs."),
    cases: Path = typer.Option(None, "--cases", help="Write the case export here (.md or .jsonl)."),
    top: int = typer.Option(10, "--top", help="Top gains and losses to export (0 for none)."),
    sample: int = typer.Option(10, "--random", help="Random cases to export (0 for none)."),
    resamples: int = RESAMPLES_OPT, seed: int = typer.Option(0, "--seed"), rebaseline: bool = REBASELINE_OPT,
    store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    from ragassay.analysis.slicing import (
        check_cases_path,
        export_cases,
        load_run_golden,
        read_declared,
        slice_analysis,
        write_cases,
    )

    checks.refuse(checks.count("--top", top, 0), checks.count("--random", sample, 0), checks.resamples(resamples),
                  checks.seed(seed))
    if cases is not None:
        check_cases_path(cases)  # before any work: an existing file ragassay did not write is never replaced
    with _open(store) as st:
        g = load_run_golden(st, run_b, golden) if golden else None
        dec = read_declared(declared) if declared else None
        res = slice_analysis(st, run_a, run_b, metric=metric, by=tuple(by or ("stratum",)), golden=g, declared=dec,
                             n_resamples=resamples, seed=seed, rebaseline=rebaseline)
        if cases is not None:
            ex = export_cases(st, run_a, run_b, metric=metric, golden=g, n_top=top, n_random=sample, seed=seed,
                              rebaseline=rebaseline)
            write_cases(ex, cases)
            res["cases"] = {"path": str(cases), "counts": ex["counts"]}
    if json_out:
        print_json(res)
        return
    print_rebaselined(res["pin_differences"])
    for key in res["keys"]:
        flag = "exploratory" if key["exploratory"] else "declared"
        console.print(f"[bold]{esc(metric)}[/] by [bold]{esc(key['by'])}[/] ({flag}): "
                      f"{_v(key['mean_a'])} → {_v(key['mean_b'])}, Δ {_v(key['delta'], True)} "
                      f"= Σ contributions {_v(key['sum_of_contributions'], True)} over {key['n']} queries")
        t = Table(show_edge=False)
        for c in ("slice", "n", "weight", "A", "B", "Δ", "95% CI", "p(BH)", "contribution"):
            t.add_column(c)
        for r in key["slices"]:
            t.add_row(esc(r["name"]), str(r["n"]), f"{r['weight']:.3f}", _v(r["mean_a"]), _v(r["mean_b"]),
                      _v(r["delta"], True), f"[{_v(r['ci_low'], True)}, {_v(r['ci_high'], True)}]",
                      "—" if r["p_adj"] != r["p_adj"] else f"{r['p_adj']:.3f}", _v(r["contribution"], True))
        console.print(t)
    if cases is not None:
        console.print(f"cases written to {esc(cases)}: {res['cases']['counts']}")


def ablation(
    file: Path = typer.Argument(..., help="Ablation YAML (see docs/analyses.md)."),
    golden: Path = typer.Option(None, "--golden", help="Golden set (default: the bundled one)."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus (default: the bundled one)."),
    trials: int = typer.Option(1, "--trials", help="Trials per query and arm."),
    resamples: int = RESAMPLES_OPT, store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    from ragassay.analysis.ablation import load_ablation, run_ablation
    from ragassay.analysis.runner import load_inputs
    from ragassay.cli.run import store_for_runs

    checks.refuse(checks.count("--trials", trials), checks.resamples(resamples))
    spec = load_ablation(file)
    c, g = load_inputs(corpus, golden)
    with store_for_runs(store) as st:
        res = run_ablation(st, spec, c, g, trials=trials, n_resamples=resamples)
    if json_out:
        print_json(res)
        return
    console.print(f"ablation [bold]{esc(res['name'])}[/] on {esc(res['metric'])}, margin ±{res['margin']:g}")
    t = Table(show_edge=False)
    for col in ("stratum", "role", "expect", "n", "Δ", "CI", "verdict"):
        t.add_column(col)
    for r in res["expectations"]:
        t.add_row(esc(r["stratum"]), r["role"], r["expect"], str(r["n"]), _v(r.get("delta"), True),
                  f"[{_v(r.get('ci_low'), True)}, {_v(r.get('ci_high'), True)}]", r["verdict"])
    console.print(t)
    p = res["placebo"]
    console.print(f"placebo: {'equivalent (passed)' if p['passed'] else 'NOT shown equivalent'} "
                  f"(Δ {_v(p.get('delta'), True)})")


def latency(
    run: str = typer.Argument(None, help="Stored run (uses its recorded traces, else its per-request latency)."),
    load: Path = typer.Option(None, "--load", help="Pipeline config: run a load test instead of reading a run."),
    concurrency: int = typer.Option(4, "--concurrency", help="Concurrent requests for --load."),
    requests: int = typer.Option(200, "--requests", help="Requests for --load."),
    golden: Path = typer.Option(None, "--golden"), corpus: Path = typer.Option(None, "--corpus"),
    store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    from ragassay.analysis.latency import latency_analysis, load_run

    checks.refuse(checks.count("--concurrency", concurrency), checks.count("--requests", requests))
    if load is not None:
        from ragassay.analysis.runner import load_inputs
        from ragassay.pipeline import Pipeline, load_config

        c, g = load_inputs(corpus, golden)
        pipe = Pipeline.from_config(load_config(load), c)
        res = load_run(lambda q, i: pipe.run_query(q, 0), g.queries, concurrency=concurrency, n_requests=requests)
    elif run is None:
        raise InputError("give a stored RUN, or --load CONFIG for a load run")
    else:
        from ragassay.analysis.slicing import run_traces

        with _open(store) as st:
            traces = run_traces(st, run)
            if traces:
                res = latency_analysis(list(traces.values()), latency_source="traces")
            else:
                tab = st.results(run)
                qt = {(q, t): v for q, t, v in zip(tab["query_id"].to_pylist(), tab["trial"].to_pylist(),
                                                     tab["latency_ms"].to_pylist(), strict=True)}
                res = latency_analysis(totals=[v if v is not None else float("nan") for v in qt.values()],
                                       latency_source="stored latency_ms")
    if json_out:
        print_json(res)
        return
    e = res["end_to_end"]
    console.print("end to end (ms): " + ", ".join(f"{k} {_v(e[k])}" for k in ("p50", "p90", "p95", "p99")))
    if "throughput_rps" in res:
        console.print(f"concurrency {res['concurrency']}: {res['throughput_rps']:.1f} requests/s")
    for name, s in res.get("stages", {}).items():
        console.print(f"  {esc(name)}: p50 {_v(s['p50'])}  p99 {_v(s['p99'])}  (n={s['n']})")
    if "exceedance" in res:
        x = res["exceedance"]
        console.print(f"any stage over its threshold ({esc(x['threshold_rule'])}): observed {x['observed_any']:.4f}, "
                      f"independence predicts {x['independent_prediction']:.4f}, bounds "
                      f"[{x['lower_bound']:.4f}, {x['union_bound']:.4f}]")
        s = res["sum_of_stage_percentiles"]
        console.print(f"sum of stage p99s {s['p99']:.1f} ms is not the end-to-end p99 ({_v(e['p99'])} ms)")


def consistency(
    run: str = typer.Argument(..., help="A run made with --trials N (N >= 2)."),
    correct: str = CORRECT_OPT, store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    from ragassay.analysis.consistency import consistency_of_run
    from ragassay.analysis.decomposition import CorrectRule
    from ragassay.analysis.slicing import run_traces

    CorrectRule.parse(correct)  # a bad rule is refused before the store is read
    with _open(store) as st:
        res = consistency_of_run(st, run, correct=correct, traces=run_traces(st, run))
    if json_out:
        print_json(res)
        return
    s = res["summary"]
    k = s["k"]
    console.print(f"[bold]{esc(res['run']['name'])}[/]: {s['n_items']} queries x {res['trials']} trials; "
                  f"correct = {esc(res['correct_rule'])}; clusters: {res['cluster_rule']}")
    console.print(f"pass@1 {_v(s['pass@1'])}  pass^{k} {_v(s[f'pass^{k}'])}  modal fraction {_v(s['modal_fraction'])}  "
                  f"pair agreement {_v(s['pair_agreement'])}  items with varying outcome {s['n_high_variance']}")
    if res["note"]:
        console.print(f"note: {res['note']}")


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help=f"System analyses over stored runs and pipelines: {', '.join(KINDS)}.",
                      no_args_is_help=True)
    for name, (target, help_text) in KINDS.items():
        module, func = target.split(":")
        sub.command(name, help=help_text)(getattr(importlib.import_module(module), func))
    app.add_typer(sub, name="analyze")
