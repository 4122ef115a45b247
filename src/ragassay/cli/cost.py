"""`ragassay cost`: the eval layer's own cost per stored run (spec §16) — calls, tokens, spend as paid, the
same calls priced sync vs batch with and without the cached prefix, deterministic-first share, a monthly
projection over a CI tier and the labelling cost. With ``--project``, what judging the run's answers with the
``--judge`` LLM config would cost (projected, never mixed with spend as paid). The figures are
:mod:`ragassay.analysis.eval_cost`'s."""

from __future__ import annotations

from pathlib import Path

import typer

from ragassay.cli.common import console, esc, print_json

# Equal to ragassay.analysis.eval_cost's (tests check); this module imports no analysis when it loads.
DEFAULT_TIER = "regression"
DEFAULT_RUNS_PER_MONTH = 30
DEFAULT_OUTPUT_TOKENS = 150
DEFAULT_MIN_CACHED_PREFIX = 1024


def _usd(s: dict) -> str:
    return f"${s['usd']:.4f}" if s["usd"] is not None else f"undefined ({s['undefined']})"


def _share(x: float, what: str) -> str:
    return f"{x:.0%}" if x == x else f"undefined (no {what})"


def _four(f: dict) -> str:
    return (f"sync {_usd(f['sync_uncached'])} uncached, {_usd(f['sync_cached'])} with the cached prefix; batch "
            f"{_usd(f['batch_uncached'])} uncached, {_usd(f['batch_cached'])} with the cached prefix")


def _print_projected(p: dict, proj: dict | None) -> None:
    calls, tok = p["calls"], p["tokens"]
    kinds = ", ".join(f"{n} {k}" for k, n in calls["by_kind"].items())
    console.print(f"  projected judging with {esc(p['judge_model'])} ({esc(p['judge_config'])}): no call made, "
                  "estimates only, not spend")
    console.print(f"    projected calls: {calls['total']} ({esc(kinds) or 'none'}) for {p['answered']} answered of "
                  f"{p['answers']} answers")
    console.print(f"    projected tokens: {tok['input']:,} in ({tok['cacheable_prefix']:,} rubric prefix, "
                  f"{tok['per_item']:,} per item), {tok['output']:,} out ({tok['output_per_call']} per call, "
                  f"{esc(tok['output_basis'])}); counted by {tok['counter']}, the local counter, not the "
                  "provider's tokenizer")
    console.print(f"    projected cost: {esc(_four(p['figures']))}")
    d = p["deterministic_first"]
    if "routes" not in d:
        console.print(f"    projected deterministic-first: {esc(d['undefined'])}")
    else:
        share = "undefined" if d["share"] is None else f"{d['share']:.0%}"
        r = d["routes"]
        console.print(f"    projected deterministic-first: {share} ({d['decided']} of {d['judgements']} support "
                      f"judgements decided by tier 1 {esc(d['tier1'])}: {r['auto_pass']} auto-pass, "
                      f"{r['auto_fail']} auto-fail; band [{d['band']['lo']:g}, {d['band']['hi']:g}])")
        console.print(f"    projected cost with deterministic-first: {esc(_four(p['figures_deterministic_first']))}")
        saved = p["saving_deterministic_first"]["batch_cached"]
        if saved is not None:
            console.print(f"    projected saving of deterministic-first on batch with the cached prefix: ${saved:.4f}")
    for name, label in (("sync_uncached_over_batch_cached", "batch with the cached prefix"),
                        ("sync_uncached_over_batch_cached_deterministic_first",
                         "batch with the cached prefix and deterministic-first")):
        q = p["ratios"][name]
        value = f"{q['value']:.2f}x" if q["value"] is not None else f"undefined ({esc(q['undefined'])})"
        console.print(f"    projected ratio sync uncached / {label}: {value}")
    if p["monthly"] is not None and proj is not None:
        a, b = p["monthly"]["all_calls"], p["monthly"]["deterministic_first"]
        console.print(esc(f"    projected monthly ({proj['tier']} tier, {proj['items']} items x "
                          f"{proj['runs_per_month']} runs): sync uncached {_usd(a['sync_uncached'])}; batch with "
                          f"the cached prefix {_usd(a['batch_cached'])}, with deterministic-first "
                          f"{_usd(b['batch_cached'])}"))
    for note in p["notes"]:
        console.print(f"    projected note: {esc(note)}")


def _print(rep: dict) -> None:
    proj = rep["projection"]
    for r in rep["runs"]:
        c, t = r["calls"], r["tokens"]
        answers = "undefined" if r["judged_answers"] is None else r["judged_answers"]
        console.print(f"[bold]{esc(r['run_name'])}[/] ({r['run_id']}): judge {esc(r['judge_model'] or 'none')}, "
                      f"{answers} judged answers")
        console.print(f"  calls: {c['total']} ({c['llm']} LLM, {c['local']} local; {c['paid']} paid, "
                      f"{c['cache_hits']} store cache hits, {c['errors']} errors, {c['billed_via_batch']} billed "
                      f"via batch); cache-hit share {_share(r['cache_hit_share'], 'calls')}")
        console.print(f"  tokens: {t['input']:,} in ({t['cache_reads']:,} prompt-cache reads, "
                      f"{_share(r['cached_input_share'], 'input tokens')}), {t['output']:,} out")
        spend = "undefined" if r["spend"] is None else f"${r['spend']:.4f}"
        console.print(f"  spend as paid: {spend} ({r['spend_basis']})")
        m = r["modelled"]
        console.print(f"  same calls ({esc(r['modelled_basis'])}): sync {_usd(m['sync_uncached'])} uncached, "
                      f"{_usd(m['sync_cached'])} with the cached prefix; batch {_usd(m['batch_uncached'])} "
                      f"uncached, {_usd(m['batch_cached'])} with the cached prefix")
        d = r["deterministic_first"]
        if d["share"] is None:
            console.print(f"  deterministic-first: {esc(d['undefined'])}")
        else:
            console.print(f"  deterministic-first: {d['share']:.0%} ({d['decided']} of {d['judgements']} support "
                          f"judgements decided by tier 1 {esc(d['tier1'])} without an LLM call)")
        if r["monthly"] is not None:
            mo = r["monthly"]
            console.print(f"  monthly ({proj['tier']} tier, {proj['items']} items x {proj['runs_per_month']} runs): "
                          f"{_usd(mo['as_run'])} as run; batch with the cached prefix {_usd(mo['batch_cached'])}")
        if r["monthly_total"] is not None:
            console.print(f"  monthly total with labelling: ${r['monthly_total']:.2f}")
        for note in r["notes"]:
            console.print(f"  note: {esc(note)}")
        if r["projected"] is not None:
            _print_projected(r["projected"], proj)
    lab = rep["labelling"]
    console.print(f"labelling: {_usd(lab)} per month" if lab["usd"] is not None else f"labelling: {lab['undefined']}",
                  markup=False)


def cost(
    runs: list[str] = typer.Argument(..., help="Runs (id, prefix or name) whose judge calls to cost."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file."),
    judge: Path = typer.Option(None, "--judge", help="Judge config YAML whose prices price the calls."),
    tiers: Path = typer.Option(None, "--tiers", help="Tier file of `golden status --tiers-out` (projection)."),
    tier: str = typer.Option(None, "--tier", help=f"Tier to project (default {DEFAULT_TIER}); needs --tiers."),
    runs_per_month: int = typer.Option(None, "--runs-per-month",
                                       help=f"Runs of the tier per month (default {DEFAULT_RUNS_PER_MONTH}); "
                                            "needs --tiers."),
    labelling_hours: float = typer.Option(None, "--labelling-hours", help="Labelling hours per month."),
    hourly_rate: float = typer.Option(None, "--hourly-rate", help="Labelling USD per hour."),
    project: bool = typer.Option(False, "--project", help="Also project what judging the runs' answers with the "
                                 "--judge LLM config would cost: renders its prompts from the runs' traces, counts "
                                 "their tokens, prices them (labelled projected)."),
    output_tokens: int = typer.Option(None, "--output-tokens", help="Projected output tokens per call (default "
                                      f"{DEFAULT_OUTPUT_TOKENS}, capped at the config's max_tokens); needs --project."),
    min_cached_prefix: int = typer.Option(None, "--min-cached-prefix", help="Smallest prompt prefix the provider "
                                          f"caches, in tokens (default {DEFAULT_MIN_CACHED_PREFIX}; 0: cache any); "
                                          "needs --project."),
    golden: Path = typer.Option(None, "--golden", help="Golden set the runs used (default: bundled); needs "
                                "--project."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus the runs used (default: bundled); needs --project."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """The eval layer's own cost per run: calls, tokens, cache hits, spend as paid, the same calls sync vs
    batch with and without the cached prefix, deterministic-first share, monthly projection, labelling. With
    --project: what judging the runs' answers with the --judge LLM config would cost, labelled projected."""
    from ragassay.analysis.eval_cost import cost_request, eval_cost_report
    from ragassay.store import Store

    # the checks, the files and the report are analysis.eval_cost's, shared with the Python API's Run.cost
    request = cost_request(judge=judge, tiers=tiers, tier=tier, runs_per_month=runs_per_month,
                           labelling_hours=labelling_hours, hourly_rate=hourly_rate, project=project,
                           output_tokens=output_tokens, min_cached_prefix=min_cached_prefix, golden=golden,
                           corpus=corpus)
    with Store.open(store, read_only=True) as st:
        rep = eval_cost_report(st, runs, request)
    if json_out:
        print_json(rep)
        return
    _print(rep)


def register(app: typer.Typer) -> None:
    app.command("cost")(cost)
