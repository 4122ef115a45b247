"""`ragassay cost`: the eval layer's own cost per stored run (spec §16) — calls, tokens, spend as paid, the
same calls priced sync vs batch with and without the cached prefix, deterministic-first share, a monthly
projection over a CI tier and the labelling cost. The figures are :mod:`ragassay.analysis.eval_cost`'s."""

from __future__ import annotations

from pathlib import Path

import typer

from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError

DEFAULT_TIER = "regression"
DEFAULT_RUNS_PER_MONTH = 30


def _usd(s: dict) -> str:
    return f"${s['usd']:.4f}" if s["usd"] is not None else f"undefined ({s['undefined']})"


def _share(x: float, what: str) -> str:
    return f"{x:.0%}" if x == x else f"undefined (no {what})"


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
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """The eval layer's own cost per run: calls, tokens, cache hits, spend as paid, the same calls sync vs
    batch with and without the cached prefix, deterministic-first share, monthly projection, labelling."""
    from ragassay.analysis.eval_cost import Projection, cost_report, labelling_cost, load_tier, run_cost
    from ragassay.store import Store

    problems = []
    if tiers is None and tier is not None:
        problems.append("--tier needs --tiers TIERS.yaml (written by `ragassay golden status --tiers-out`)")
    if tiers is None and runs_per_month is not None:
        problems.append("--runs-per-month needs --tiers TIERS.yaml (written by `ragassay golden status "
                        "--tiers-out`)")
    if runs_per_month is not None and runs_per_month < 1:
        problems.append(f"--runs-per-month {runs_per_month}: give a whole number >= 1")
    if (labelling_hours is None) != (hourly_rate is None):
        problems.append("--labelling-hours and --hourly-rate go together: labelling cost = hours x rate")
    for flag, v in (("--labelling-hours", labelling_hours), ("--hourly-rate", hourly_rate)):
        if v is not None and not v >= 0:
            problems.append(f"--{flag.lstrip('-')} {v}: give a number >= 0")
    if problems:
        raise InputError("\n".join(problems))
    labelling = labelling_cost(labelling_hours, hourly_rate)
    projection = None
    if tiers is not None:
        projection = Projection(load_tier(tiers, tier or DEFAULT_TIER), runs_per_month or DEFAULT_RUNS_PER_MONTH)
    prices = None
    if judge is not None:
        from ragassay.judges.config import load_judge_config
        from ragassay.judges.providers import price_table

        prices = price_table(load_judge_config(judge).prices, where=f"{judge}: prices")
    with Store.open(store, read_only=True) as st:
        costs = [run_cost(st, ref, prices, None if judge is None else str(judge)) for ref in runs]
    rep = cost_report(costs, projection, labelling)
    if json_out:
        print_json(rep)
        return
    _print(rep)


def register(app: typer.Typer) -> None:
    app.command("cost")(cost)
