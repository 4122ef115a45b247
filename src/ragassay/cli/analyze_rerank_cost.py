"""`ragassay analyze rerank-cost BASELINE CANDIDATE...`: quality per millisecond (spec §9.4, docs/analyses.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ragassay.cli import checks
from ragassay.cli.analyze_causal import JSON_OPT, REBASELINE_OPT, print_rebaselined
from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError

# `analyze` imports this module by name from its table of kinds, so its options are not imported from there
STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")


def _open(store: Path):
    from ragassay.store import Store

    if not store.exists():
        raise InputError(f"{store}: no results store here; run `ragassay run` first or pass --store")
    return Store.open(store, read_only=True)


def _n(x, fmt: str = ".3f", undefined: str = "undefined") -> str:
    return undefined if x is None else format(x, fmt)


def _delta(d: dict | None) -> str:
    if d is None:
        return "baseline"
    if d["value"] is None:
        return f"undefined ({d['reason'] or 'no paired value'})"
    return f"{d['value']:+.3f} [{_n(d['ci_low'], '+.3f')}, {_n(d['ci_high'], '+.3f')}]"


def _latency(lat: dict, baseline: bool) -> str:
    if lat["status"] != "measured":
        return "not measured"
    if baseline:
        return f"p95 {lat['p95_ms']:.1f}"
    return f"{lat['added_p95_ms']:+.1f} [{lat['ci_low']:+.1f}, {lat['ci_high']:+.1f}]"


def rerank_cost(
    runs: list[str] = typer.Argument(..., help="Baseline run first, then the candidate runs (id, prefix or name)."),
    metric: str = typer.Option("ndcg@final_k", "-m", "--metric", help="Quality metric (default nDCG at final_k)."),
    resamples: int = typer.Option(2_000, "--resamples", help="Bootstrap resamples (100 to 1,000,000)."),
    seed: int = typer.Option(0, "--seed"), rebaseline: bool = REBASELINE_OPT,
    store: Path = STORE_OPT, json_out: bool = JSON_OPT,
) -> None:
    """Quality per millisecond: per candidate, Δ quality with its paired CI, added p95 latency, Δ per 100 ms,
    $/1k queries and the Pareto set."""
    from ragassay.analysis.rerank_cost import rerank_cost as table

    checks.refuse(checks.resamples(resamples), checks.seed(seed))
    with _open(store) as st:
        res = table(st, runs, metric=metric, n_resamples=resamples, seed=seed, rebaseline=rebaseline)
    if json_out:
        print_json(res)
        return
    conf = res["settings"]["confidence"]
    console.print(f"[bold]{esc(metric)}[/] per millisecond against [bold]{esc(res['baseline']['name'])}[/] "
                  f"({conf:.0%} bootstrap CIs; * = Pareto set)")
    print_rebaselined(res["pin_differences"])
    t = Table(show_edge=False)
    for c in ("config", "fusion_depth", "reranker", metric, "Δ [CI]", "added p95 ms [CI]", "Δ per 100 ms",
              "$/1k queries", "Pareto"):
        t.add_column(c)
    for r in res["rows"]:
        t.add_row(esc(r["name"]), _n(r["fusion_depth"], ""), esc(str(r["reranker"] or "none")),
                  _n(r["quality"]["value"]), _delta(r["delta"]), _latency(r["latency"], r["role"] == "baseline"),
                  "—" if r["role"] == "baseline" else _n(r["delta_per_100ms"], "+.3f"), _n(r["cost"]["per_1k_queries"], ".4f"),
                  {True: "*", False: "", None: "not placed"}[r["pareto"]])
    console.print(t)
    for note in res["notes"]:
        console.print(f"note: {esc(note)}")
