"""`ragassay judge ppi`: a stored run's judge mean corrected by human labels of a random subsample of its
answers (prediction-powered inference), or the corrected paired difference against a second run
(``--against``). The figures are :mod:`ragassay.analysis.ppi`'s; docs/ppi.md."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from ragassay.cli import checks
from ragassay.cli.common import console, print_json
from ragassay.errors import InputError

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")
METHODS = ("tuned", "ppi")


def _figure(d: dict) -> str:
    if not d["defined"]:
        return f"undefined ({d['reason']})"
    return f"{d['estimate']:.3f} [{d['ci_low']:.3f}, {d['ci_high']:.3f}]"


def _signed(d: dict) -> str:
    if not d["defined"]:
        return f"undefined ({d['reason']})"
    return f"{d['estimate']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def _labels_only(d: dict, signed: bool = False) -> str:
    if d["classical"] is None or d["classical_low"] is None:
        return "undefined"
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(d['classical'])} [{f.format(d['classical_low'])}, {f.format(d['classical_high'])}]"


def _eff(d: dict) -> str:
    return "undefined" if d["effective_n"] is None else f"{d['effective_n']:,.0f}"


def _lam(lam) -> str:
    return " / ".join(f"{x:.2f}" for x in lam) if isinstance(lam, list) else f"{lam:.2f}"


def _print_single(out: dict) -> None:
    d = out["ppi"]
    unit = "queries (trials averaged)" if out["unit"] == "query" else "answers"
    console.print(Text(f"{out['metric']} of run {out['run']['name']}: raw judge mean {out['raw_judge_mean']:.3f} "
                       f"over {out['n_items']} {unit}"))
    console.print(Text(f"  PPI-corrected (n labelled = {out['n_labelled']}, {out['labelled_share']:.1%} of the "
                       f"items; {out['lam_mode']}, lam {_lam(d['lam'])}): {_figure(d)} at {d['confidence']:.0%}"))
    console.print(Text(f"  labels only: {_labels_only(d)}; the correction is worth {_eff(d)} labels "
                       "(effective sample size)"))
    _print_tail(out["not_used"], out["warnings"], out["labels"])


def _print_pair(out: dict) -> None:
    d, raw, n = out["difference"], out["raw_judge_mean"], out["n_labelled"]
    unit = "queries (trials averaged)" if out["unit"] == "query" else "answers"
    console.print(Text(f"{out['metric']}: {out['a']['name']} → {out['b']['name']} over {out['n_items']} {unit} both "
                       f"runs scored; raw judge {raw['a']:.3f} → {raw['b']:.3f} (Δ {raw['b'] - raw['a']:+.3f})"))
    ma, mb = out["means"]["a"], out["means"]["b"]
    console.print(Text(f"  PPI-corrected (n labelled = {n['a']}/{n['b']}, {out['mode']} labels; {out['lam_mode']}, "
                       f"lam {_lam(d['lam'])}): {out['a']['name']} {_figure(ma)}, {out['b']['name']} {_figure(mb)}; "
                       f"Δ {_signed(d)} at {d['confidence']:.0%}"))
    console.print(Text(f"  labels only: Δ {_labels_only(d, signed=True)}"))
    if any(out["items_one_run_only"].values()):
        only = out["items_one_run_only"]
        console.print(Text(f"  items one run scored only, left out: {only['a']} of {out['a']['name']}, {only['b']} "
                           f"of {out['b']['name']}"))
    nu = out["not_used"]
    merged = {k: nu["a"].get(k, 0) + nu["b"].get(k, 0) for k in set(nu["a"]) | set(nu["b"])}
    _print_tail(merged, out["warnings"], out["labels"])


def _print_tail(not_used: dict, warnings: list[str], labels: dict) -> None:
    if not_used:
        console.print(Text("  labels not used: " + ", ".join(f"{k.replace('_', ' ')} {v}"
                                                             for k, v in sorted(not_used.items()))))
    for w in warnings:
        console.print(Text("  warning: ", style="yellow") + Text(w))
    console.print(Text(f"  labels {labels['path']} (version {labels['version'][:12]}); the labelled answers must "
                       "be a random subsample of the run's answers"))


def ppi(
    run: str = typer.Argument(..., help="Stored run whose judge metric is corrected (run_id, prefix or name)."),
    labels: Path = typer.Option(..., "--labels", help="Human values of the judge metric for a random subsample of "
                                                      "the run's answers (JSONL; docs/ppi.md)."),
    metric: str = typer.Option(..., "--metric", "-m", help="The judge metric (faithfulness, answer_relevance, "
                                                           "correctness, ...)."),
    against: str = typer.Option(None, "--against", help="A second run: the corrected paired difference "
                                                        "(--against minus RUN)."),
    store: Path = STORE_OPT,
    method: str = typer.Option("tuned", "--method", help="tuned: PPI++ (lam estimated from the data, clipped "
                                                          "to [0, 1]; never much worse than labels only); ppi: "
                                                          "plain PPI (lam = 1)."),
    confidence: float = typer.Option(0.95, "--confidence"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """A judge metric's mean corrected by human labels (prediction-powered inference), beside the raw
    judge mean and the labels-only mean; with --against, the corrected paired difference of two runs."""
    checks.refuse(checks.number("--confidence", confidence, 0, 1, low_open=True, high_open=True))
    if method not in METHODS:
        raise InputError(f"--method {method!r}: use tuned (PPI++) or ppi (lam = 1)")
    from ragassay.analysis.ppi import load_ppi_labels, paired_ppi, run_ppi
    from ragassay.metrics.names import canonical_name
    from ragassay.store import Store

    got = load_ppi_labels(labels)  # a bad labels file is refused before the store is opened
    name = canonical_name(metric)
    if not store.is_file():
        raise InputError(f"{store}: no such store; pass the store the runs are in with --store")
    with Store.open(store, read_only=True) as st:
        if against is None:
            out = run_ppi(st, run, got, name, lam=method, confidence=confidence)
        else:
            out = paired_ppi(st, run, against, got, name, lam=method, confidence=confidence)
    if json_out:
        print_json(out)
    elif against is None:
        _print_single(out)
    else:
        _print_pair(out)
