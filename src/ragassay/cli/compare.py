"""`ragassay compare` and `ragassay gate`."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ragassay.analysis.compare import DEFAULT_MIN_EFFECT, compare_runs
from ragassay.analysis.gate import load_policy, run_gate
from ragassay.cli.common import EXIT_FAIL, console, print_json
from ragassay.errors import InputError
from ragassay.store import Store

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")
# The delivery/use split is a second look at one figure; 2,000 resamples bound its cost beside the main table.
DECOMPOSITION_RESAMPLES = 2_000


def _f(x, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _p(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return "<0.001" if x < 0.001 else f"{x:.3f}"  # bootstrap p-values are never exactly 0


def parse_min_effect(values: list[str] | None) -> float | dict[str, float]:
    """`--min-effect 0.03` (every metric) and/or `--min-effect ndcg@5=0.05` (one metric), repeatable.

    Returns a float when no per-metric value is given, else a dict whose "*" entry is the default for the
    metrics not named."""
    default = DEFAULT_MIN_EFFECT
    per: dict[str, float] = {}
    for raw in values or []:
        metric, sep, num = str(raw).rpartition("=")
        try:
            v = float(num)
        except ValueError:
            raise InputError(f"--min-effect {raw!r}: not a number; give e.g. 0.03, or METRIC=0.03 for one "
                             f"metric") from None
        if not math.isfinite(v) or v < 0:
            raise InputError(f"--min-effect {raw!r}: the minimum effect must be a finite number >= 0")
        if sep and not metric.strip():
            raise InputError(f"--min-effect {raw!r}: empty metric name; give METRIC=0.03")
        if sep:
            per[metric.strip()] = v
        else:
            default = v
    if not per:
        return default
    return {"*": default, **per}


def print_comparison(comp, *, all_strata: bool = True) -> None:
    a, b = comp.run_a, comp.run_b
    console.print(f"[bold]{escape(a.name)}[/] ({escape(a.run_id[:10])}…) → [bold]{escape(b.name)}[/] "
                  f"({escape(b.run_id[:10])}…)  {comp.settings['n_resamples']:,} paired-bootstrap resamples, "
                  f"{comp.settings['confidence']:.0%} CIs, Benjamini–Hochberg across {len(comp.rows)} rows; "
                  f"credible = CI excludes 0 and p(BH) < {1 - comp.settings['confidence']:.2g}", markup=True)
    if comp.pin_differences:
        console.print(Text("rebaselined: ", style="yellow")
                      + Text("; ".join(f"{k}: {x} → {y}" for k, x, y in comp.pin_differences)))
    for m, why in comp.excluded:
        console.print(Text("not compared: ", style="yellow") + Text(f"{m}: {why}"))
    if comp.config_diff:
        console.print("config diff: " + "; ".join(f"{k}: {x!r} → {y!r}" for k, x, y in comp.config_diff),
                      markup=False)
    else:
        console.print("config diff: none (identical configs)")
    t = Table(show_edge=False)
    for c in ("metric", "stratum", "n", "A", "B", "Δ", "95% CI", "p", "p(BH)", "W/L/T", "σ_d", "MDE", "verdict"):
        t.add_column(c, justify="left" if c in ("metric", "stratum", "verdict") else "right")
    rows = comp.rows if all_strata else [r for r in comp.rows if r.stratum == "all"]
    for r in rows:
        style = "green" if r.verdict == "improved" else "red" if r.verdict == "regressed" else None
        cells = (r.metric, r.stratum, str(r.n), _f(r.mean_a), _f(r.mean_b), _f(r.delta, True),
                 f"[{_f(r.ci_low, True)}, {_f(r.ci_high, True)}]", _p(r.p), _p(r.p_adj),
                 f"{r.wins}/{r.losses}/{r.ties}", _f(r.sigma_d), _f(r.mde), r.verdict)
        t.add_row(*(Text(c) for c in cells), style=style)
    console.print(t)
    for c in comp.claims:
        console.print("• " + c, markup=False)


def compare(
    run_a: str = typer.Argument(..., help="Baseline run (id, unique id prefix, or name)."),
    run_b: str = typer.Argument(..., help="Candidate run."),
    store: Path = STORE_OPT,
    metric: list[str] = typer.Option(None, "-m", "--metric", help="Metrics to compare (default: all shared)."),
    min_effect: list[str] = typer.Option(
        None, "--min-effect",
        help=f"Minimum meaningful effect, >= 0 (default {DEFAULT_MIN_EFFECT}); METRIC=X sets one metric's. "
             "Repeatable."),
    resamples: int = typer.Option(10_000, "--resamples", help="Bootstrap resamples (100 to 1,000,000)."),
    seed: int = typer.Option(0, "--seed"),
    overall_only: bool = typer.Option(False, "--overall-only", help="Skip the per-stratum rows."),
    rebaseline: bool = typer.Option(False, "--rebaseline", help="Compare despite differing pins."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Paired deltas per metric and stratum with bootstrap CIs, W/L/T, MDE, BH-adjusted p and claims."""
    effect = parse_min_effect(min_effect)
    with Store.open(store, read_only=True) as st:
        comp = compare_runs(st, run_a, run_b, metrics=metric or None, min_effect=effect,
                            n_resamples=resamples, seed=seed, rebaseline=rebaseline, strata=not overall_only)
        split, skipped = decomposition_for(st, comp, seed=seed)
    if json_out:
        print_json({**comp.to_dict(), "decomposition": split, "decomposition_skipped": skipped})
        return
    print_comparison(comp)
    print_decomposition(split, skipped)


def decomposition_for(st, comp, *, seed: int = 0) -> tuple[dict | None, str | None]:
    """The change in share correct split into delivery and use (``decomposition_between``), or why not:
    both runs need the correctness metric and ``recall@context``."""
    from ragassay.analysis.decomposition import (
        DEFAULT_CORRECT,
        DELIVERY_METRIC,
        CorrectRule,
        decomposition_between,
    )

    need = {CorrectRule.parse(DEFAULT_CORRECT).metric, DELIVERY_METRIC}
    for run in (comp.run_a, comp.run_b):
        missing = sorted(need - set(st.metrics(run.run_id)))
        if missing:
            return None, f"run {run.name} has no {' or '.join(missing)} rows"
    return decomposition_between(st, comp.run_a.run_id, comp.run_b.run_id, by_stratum=False,
                                 n_resamples=DECOMPOSITION_RESAMPLES, seed=seed), None


def _est(s: dict, signed: bool = True) -> str:
    if not s.get("defined"):
        return f"undefined (n={s.get('n', 0)})"
    return f"{_f(s['value'], signed)} [{_f(s['ci_low'], signed)}, {_f(s['ci_high'], signed)}]"


def print_decomposition(split: dict | None, skipped: str | None) -> None:
    if split is None:
        console.print(Text("delivery/use split skipped: ", style="dim") + Text(f"{skipped}"))
        return
    row = next(r for r in split["rows"] if r["stratum"] == "all")
    ch, a, b = row["change"], row["a"], row["b"]
    console.print(Text(f"share correct ({split['correct_rule']}; evidence delivered = {split['delivery_rule']}; "
                       f"{split['n_resamples']:,} resamples, n={ch['n']}): ΔA {_est(ch['delta_A'])} = delivery "
                       f"{_est(ch['delivery'])} + use {_est(ch['use'])}"))
    console.print(Text("  " + ", ".join(f"{k} {_f(a[k]['value'])} → {_f(b[k]['value'])}"
                                        .replace("—", "undefined") for k in ("h", "c1", "c0"))
                       + "  (delivery: more or less evidence reached the generator; use: what it did with it)"))


def gate(
    base: str = typer.Argument(..., help="Baseline run."),
    cand: str = typer.Argument(..., help="Candidate run."),
    policy: Path = typer.Option(None, "--policy", help="Gate policy YAML (default: built-in)."),
    store: Path = STORE_OPT,
    rebaseline: bool = typer.Option(False, "--rebaseline"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """PASS / WARN / FAIL: fail only on a credible regression at least the minimum effect, or a hard gate;
    WARN when the gate was too weak to see a regression of the minimum effect (underpowered).

    Exit code 0 for PASS and WARN, 1 for FAIL, 2 for usage errors."""
    pol = load_policy(policy)
    with Store.open(store, read_only=True) as st:
        result = run_gate(st, base, cand, pol, rebaseline=rebaseline)
    if json_out:
        print_json(result.to_dict())
    else:
        print_gate(result)
    if result.exit_code:
        raise typer.Exit(EXIT_FAIL)


def print_gate(result) -> None:
    colour = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}
    comp = result.comparison
    console.print(Text("gate ") + Text(result.verdict, style=f"bold {colour[result.verdict]}")
                  + Text(f": {comp.run_a.name} → {comp.run_b.name}"))
    for note in result.notes:
        console.print(Text("  note: ", style="yellow") + Text(note))
    for c in result.checks:
        status = getattr(c, "status", None)  # e.g. "unvalidated": a judge metric that cannot decide the build
        console.print(Text("  ") + Text(f"{c.verdict:4}", style=colour[c.verdict])
                      + (Text(f" [{status}]", style="yellow") if status else Text(""))
                      + Text(f" {c.kind:11} {c.name}: {c.detail}"))


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
    app.command("gate")(gate)
