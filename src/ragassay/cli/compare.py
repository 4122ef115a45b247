"""`ragassay compare` and `ragassay gate`."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ragassay.analysis.compare import DEFAULT_MIN_EFFECT, compare_runs, coverage_lines, lost_text, number_text
from ragassay.analysis.gate import load_policy, run_gate
from ragassay.cli import checks
from ragassay.cli.common import EXIT_FAIL, console, print_json, progress
from ragassay.errors import InputError
from ragassay.metrics.names import canonical_name
from ragassay.store import Store

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")
FORMATS = ("text", "markdown")
# Tests that may be shown beside the bootstrap (which alone decides the verdicts).
TESTS = ("bootstrap", "wilcoxon", "permutation", "t")
# The delivery/use split is a second look at one figure; 2,000 resamples bound its cost beside the main table.
DECOMPOSITION_RESAMPLES = 2_000


def _f(x, signed: bool = False) -> str:
    return number_text(x, signed, undefined="—")


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
            per[canonical_name(metric)] = v
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
    for line in coverage_lines(comp):
        console.print(Text(line))
    t = Table(show_edge=False)
    for c in ("metric", "stratum", "n", "lost", "A", "B", "Δ", "95% CI", "p", "p(BH)", "W/L/T", "σ_d", "MDE",
              "verdict"):
        t.add_column(c, justify="left" if c in ("metric", "stratum", "verdict") else "right")
    rows = comp.rows if all_strata else [r for r in comp.rows if r.stratum == "all"]
    for r in rows:
        style = "green" if r.verdict == "improved" else "red" if r.verdict == "regressed" else None
        cells = (r.metric, r.stratum, str(r.n), lost_text(r.missing, r.lost, r.gained, r.filled), _f(r.mean_a), _f(r.mean_b), _f(r.delta, True),
                 f"[{_f(r.ci_low, True)}, {_f(r.ci_high, True)}]", _p(r.p), _p(r.p_adj),
                 f"{r.wins}/{r.losses}/{r.ties}", _f(r.sigma_d), _f(r.mde), r.verdict)
        t.add_row(*(Text(c) for c in cells), style=style)
    console.print(t)
    print_ppi(comp.ppi)
    for c in comp.claims:
        console.print("• " + c, markup=False)


def print_ppi(entries: list[dict]) -> None:
    """The PPI-corrected figure of each judge metric the --labels file covers, beside its raw judge means."""
    from ragassay.analysis.ppi import corrected_text

    for e in entries:
        console.print(Text("PPI-corrected: ", style="cyan") + Text(corrected_text(e)))
        for w in e["warnings"]:
            console.print(Text("  warning: ", style="yellow") + Text(w))


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
    missing_worst: list[str] = typer.Option(
        None, "--missing-as-worst", metavar="METRIC",
        help="Score a pair this metric leaves undefined on one side (a lost answer) as the metric's worst value "
             "instead of leaving it out. Repeatable."),
    test: str = typer.Option(
        "bootstrap", "--test",
        help="Also run this paired test on every row, BH-adjusted across the table: wilcoxon (signed-rank), "
             "permutation (sign-flip) or t. The bootstrap still decides the verdicts: Wilcoxon has "
             "poor power on IR differences (docs/stats.md)."),
    fmt: str = typer.Option("text", "--format", help="text (terminal tables) | markdown (a PR comment)."),
    from_parquet: Path = typer.Option(
        None, "--from-parquet", metavar="DIR",
        help="Read the runs from a partitioned export (export --partitioned -o DIR) instead of --store."),
    labels: Path = typer.Option(
        None, "--labels", metavar="FILE",
        help="Human values of judge metrics on a random subsample of each run's answers (JSONL, docs/ppi.md): "
             "each judge metric they cover also gets a PPI-corrected difference beside the raw judge means."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Paired deltas per metric and stratum with bootstrap CIs, W/L/T, MDE, BH-adjusted p and claims.

    Metric names may be spelled as ir_measures or trec_eval do (nDCG@final_k, P@5, recip_rank)."""
    checks.refuse(checks.resamples(resamples), checks.seed(seed))
    if test not in TESTS:
        raise InputError(f"--test {test!r}: use one of {', '.join(TESTS)}")
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: use text or markdown (or --json)")
    effect = parse_min_effect(min_effect)
    wanted = [canonical_name(m) for m in metric] if metric else None
    ppi_labels = _load_labels(labels)
    if from_parquet is not None:
        from ragassay.store.parquet import ParquetResults

        source = ParquetResults.open(from_parquet)
    else:
        source = Store.open(store, read_only=True)
    with source as st, progress(enabled=not json_out and fmt == "text") as bar:
        bar.add_task(f"{resamples:,} paired resamples", total=None)
        comp = compare_runs(st, run_a, run_b, metrics=wanted, min_effect=effect,
                            n_resamples=resamples, seed=seed, rebaseline=rebaseline, strata=not overall_only,
                            missing_worst=[canonical_name(m) for m in missing_worst or ()], labels=ppi_labels)
        split, skipped = decomposition_for(st, comp, seed=seed)
        extra = alternative_tests(st, comp, test, seed=seed) if test != "bootstrap" else []
    if json_out:
        out = {**comp.to_dict(), "decomposition": split, "decomposition_skipped": skipped}
        if extra:
            out["tests"] = extra
        print_json(out)
        return
    if fmt == "markdown":
        from ragassay.report.markdown import comparison_markdown
        from ragassay.report.ppi import ppi_markdown

        # a PR comment carries the overall rows; the strata stay in the terminal, --json and the report
        sys.stdout.write(comparison_markdown(comp) + tests_markdown([x for x in extra if x["stratum"] == "all"])
                         + ppi_markdown(comp.ppi))
        return
    print_comparison(comp)
    print_tests(extra)
    print_decomposition(split, skipped)


def alternative_tests(st, comp, test: str, *, seed: int = 0) -> list[dict]:
    """``test`` (wilcoxon, permutation or t) on every (metric, stratum) row of ``comp``, BH-adjusted across them.

    Pairs are (query_id, trial) as in the comparison; with several trials the trials of a query are averaged
    first, since these tests take independent pairs and trials of one query are not.
    """
    import numpy as np

    from ragassay.stats import adjust_pvalues, paired_t_test, sign_flip_test, wilcoxon_test

    run = {"wilcoxon": wilcoxon_test, "t": paired_t_test,
           "permutation": lambda a, b: sign_flip_test(a, b, seed=seed)}[test]
    metrics = list(dict.fromkeys(r.metric for r in comp.rows))
    qa, ta, sa, va = st.results_wide(comp.run_a.run_id, metrics)
    qb, tb, _, vb = st.results_wide(comp.run_b.run_id, metrics)
    b_at = {key: i for i, key in enumerate(zip(qb, tb, strict=True))}
    pairs = [(i, b_at[key]) for i, key in enumerate(zip(qa, ta, strict=True)) if key in b_at]
    ia = np.array([i for i, _ in pairs], dtype=np.int64)
    ib = np.array([j for _, j in pairs], dtype=np.int64)
    queries = np.asarray(qa, dtype=object)[ia]
    strata = np.asarray(sa, dtype=object)[ia]
    codes = np.unique(queries, return_inverse=True)[1]
    out = []
    for r in comp.rows:
        col = metrics.index(r.metric)
        keep = np.ones(len(ia), dtype=bool) if r.stratum == "all" else strata == r.stratum
        a, b = va[ia[keep], col], vb[ib[keep], col]
        ok = ~(np.isnan(a) | np.isnan(b))
        per_q = np.unique(codes[keep][ok], return_inverse=True)[1]
        counts = np.bincount(per_q)
        mean_a = np.bincount(per_q, a[ok]) / np.where(counts > 0, counts, 1)
        mean_b = np.bincount(per_q, b[ok]) / np.where(counts > 0, counts, 1)
        if not len(mean_a):
            res = {"test": test, "statistic": None, "p_value": float("nan"), "n": 0, "defined": False,
                   "reason": "no paired values"}
        else:
            res = run(mean_a, mean_b).to_dict()
        out.append({"metric": r.metric, "stratum": r.stratum, **res})
    p = np.array([x["p_value"] if x["defined"] else np.nan for x in out], dtype=float)
    adj = np.full(len(p), np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        adj[ok] = adjust_pvalues(p[ok], method="bh")
    for x, q in zip(out, adj, strict=True):
        x["p_adj"] = float(q)
    return out


def print_tests(extra: list[dict]) -> None:
    if not extra:
        return
    t = Table(show_edge=False, title=f"{extra[0]['test']} test (beside the bootstrap; verdicts unchanged)")
    for c in ("metric", "stratum", "n", "statistic", "p", "p(BH)"):
        t.add_column(c, justify="left" if c in ("metric", "stratum") else "right")
    for x in extra:
        t.add_row(Text(x["metric"]), Text(x["stratum"]), str(x["n"]),
                  _f(x["statistic"]) if x["defined"] else Text(f"undefined: {x['reason']}"), _p(x["p_value"]),
                  _p(x["p_adj"]))
    console.print(t)


def tests_markdown(extra: list[dict]) -> str:
    if not extra:
        return ""
    from ragassay.report.markdown import md_escape

    lines = ["", f"{md_escape(extra[0]['test'])} test beside the bootstrap (verdicts unchanged):", "",
             "| metric | stratum | n | p | p(BH) |", "|---|---|---:|---:|---:|"]
    lines += [f"| {md_escape(x['metric'])} | {md_escape(x['stratum'])} | {x['n']} | {_p(x['p_value'])} | "
              f"{_p(x['p_adj'])} |" for x in extra]
    return "\n".join(lines) + "\n"


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
                                 rebaseline=bool(comp.pin_differences),
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
    fmt: str = typer.Option("text", "--format", help="text | markdown (the verdict, checks and comparison as "
                            "a PR comment)."),
    labels: Path = typer.Option(
        None, "--labels", metavar="FILE",
        help="Human values of judge metrics on a random subsample of each run's answers (JSONL, docs/ppi.md): "
             "a gated judge metric they cover is decided on its PPI-corrected difference."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """PASS / WARN / FAIL: fail only on a credible regression at least the minimum effect, or a hard gate;
    WARN when the gate was too weak to see a regression of the minimum effect (underpowered).

    Exit code 0 for PASS and WARN, 1 for FAIL, 2 for usage errors (in every output format)."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: use text or markdown (or --json)")
    pol = load_policy(policy)
    ppi_labels = _load_labels(labels)
    with Store.open(store, read_only=True) as st, progress(enabled=not json_out and fmt == "text") as bar:
        bar.add_task(f"{pol.n_resamples:,} paired resamples", total=None)
        result = run_gate(st, base, cand, pol, rebaseline=rebaseline, labels=ppi_labels)
    if json_out:
        out = result.to_dict()
        if result.comparison is not None and result.comparison.ppi:
            out["ppi"] = result.comparison.ppi
        print_json(out)
    elif fmt == "markdown":
        from ragassay.report.markdown import comparison_markdown
        from ragassay.report.ppi import ppi_markdown

        sys.stdout.write(comparison_markdown(result.comparison, gate=result) + ppi_markdown(result.comparison.ppi))
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
    for e in comp.ppi:
        for w in e["warnings"]:
            console.print(Text("  warning: ", style="yellow") + Text(f"{e['metric']}: {w}"))


def _load_labels(path: Path | None):
    """The --labels file read and checked before any store is opened (None without one)."""
    if path is None:
        return None
    from ragassay.analysis.ppi import load_ppi_labels

    return load_ppi_labels(path)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
    app.command("gate")(gate)
