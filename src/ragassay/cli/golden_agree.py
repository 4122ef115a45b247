"""`ragassay golden agree`: annotator agreement on the golden labels, with the disagreements to adjudicate."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError


def _fmt(fig: dict) -> str:
    if fig["value"] is None:
        return "undefined"
    ci = "" if fig["ci_low"] is None else f" [{fig['ci_low']:.2f}, {fig['ci_high']:.2f}]"
    return f"{fig['value']:.2f}{ci}"


def _thin_intervals(report: dict) -> list[tuple[str, int]]:
    """(figure, resamples left out) of every defined figure some of whose resamples were undefined."""
    sets = [("", report["overall"])] + [(f"stratum {s} ", f) for s, f in (report["strata"] or {}).items()]
    out = []
    for where, f in sets:
        figs = [(f"{where}{k.replace('_', ' ')}", f[k]) for k in ("kappa_binary", "kappa_graded", "alpha_ordinal",
                                                                   "alpha_nominal")]
        figs += [(f"{where}{p['a']}-{p['b']} {k.replace('_', ' ')}", p[k]) for p in f["pairs"]
                 for k in ("kappa_binary", "kappa", "kappa_linear", "kappa_quadratic")]
        out += [(name, fig["undefined_resamples"]) for name, fig in figs
                if fig["value"] is not None and fig["undefined_resamples"]]
    return out


def _print(report: dict, out: Path | None) -> None:
    o = report["overall"]
    method = "Cohen" if o["kappa_method"] == "cohen" else "Light (mean pairwise)"
    console.print(f"[bold]{len(report['annotators'])} annotators[/] ({esc(', '.join(report['annotators']))}), "
                  f"{o['n_items']} items labelled by two or more, relevant = grade >= {report['threshold']}; "
                  f"{report['confidence']:.0%} bootstrap CIs over items ({report['n_resamples']} resamples)")
    t = Table(title="pairs", show_edge=False)
    for col in ("a", "b", "items", "agreement", "kappa binary", "kappa", "kappa linear", "kappa quadratic"):
        t.add_column(col, justify="left" if col in ("a", "b") else "right")
    for p in o["pairs"]:
        t.add_row(esc(p["a"]), esc(p["b"]), str(p["n_items"]), _fmt(p["agreement"]), _fmt(p["kappa_binary"]),
                  _fmt(p["kappa"]), _fmt(p["kappa_linear"]), _fmt(p["kappa_quadratic"]))
    console.print(t)
    console.print(f"kappa binary ({method}) {_fmt(o['kappa_binary'])}; kappa graded, linear ({method}) "
                  f"{_fmt(o['kappa_graded'])}; Krippendorff's alpha ordinal {_fmt(o['alpha_ordinal'])}, nominal "
                  f"{_fmt(o['alpha_nominal'])}", markup=False)
    if report["strata"]:
        s = Table(title="strata", show_edge=False)
        for col in ("stratum", "items", "kappa binary", "kappa graded", "alpha ordinal", "alpha nominal"):
            s.add_column(col, justify="left" if col == "stratum" else "right")
        for name, f in report["strata"].items():
            s.add_row(esc(name), str(f["n_items"]), _fmt(f["kappa_binary"]), _fmt(f["kappa_graded"]),
                      _fmt(f["alpha_ordinal"]), _fmt(f["alpha_nominal"]))
        console.print(s)
    n_undef = o["n_undefined"] + sum(f["n_undefined"] for f in (report["strata"] or {}).values())
    if n_undef:
        console.print(f"{n_undef} figure(s) undefined (kappa or alpha is 0/0 where every label is the same, or a "
                      "pair shares no item); --json gives each reason", markup=False)
    thin = _thin_intervals(report)
    if thin:
        worst, n_bad = max(thin, key=lambda t: t[1])
        console.print(f"{len(thin)} interval(s) rest on fewer resamples than asked: the figure was undefined (0/0) on "
                      f"some draws, which are left out (most: {worst}, {n_bad} of {report['n_resamples']}); few "
                      "items make an interval look narrower than it is; --json gives each undefined_resamples",
                      markup=False)
    if report["n_single"]:
        shown = "; ".join(f"{s['source']} ({s['annotator']})" for s in report["single_items"][:5])
        more = ", ..." if report["n_single"] > 5 else ""
        console.print(f"left out {report['n_single']} item(s) labelled by only one annotator: {shown}{more}",
                      markup=False)
    d = report["disagreements"]
    splits = sum(r["relevance_split"] for r in d)
    where = f"; written to {out}" if out is not None else "; --out FILE writes them for adjudication"
    console.print(f"{len(d)} disagreement(s), {splits} on relevance{where}", markup=False)
    console.print("manifest fields (computed; paste into the authoring file's meta):")
    console.print(json.dumps(report["manifest_fields"], indent=2), markup=False)


def agree_command(
    labels: list[Path] = typer.Argument(..., help="Two or more annotators' label JSONL files (one per annotator)."),
    golden: Path = typer.Option(None, "--golden", help="Built golden set: strata and relevance threshold."),
    threshold: int = typer.Option(None, "--threshold", help="Relevant means grade >= this (default: the golden "
                                  "set's relevance_threshold, else 2)."),
    skip_single: bool = typer.Option(False, "--skip-single", help="Leave out items only one annotator labelled "
                                     "(counted and listed) instead of failing."),
    resamples: int = typer.Option(1000, "--resamples", help="Bootstrap resamples over items."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence level of the intervals."),
    out: Path = typer.Option(None, "--out", help="Write the disagreements as JSONL (new file, or an earlier one)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Cohen's kappa per annotator pair, Krippendorff's alpha over all, per-stratum agreement, bootstrap CIs,
    the disagreements, and the manifest's kappa fields as computed values."""
    from ragassay.golden.agree import (
        DEFAULT_THRESHOLD,
        agree,
        check_disagreements_path,
        read_labels,
        write_disagreements,
    )

    if out is not None:
        check_disagreements_path(out)  # before any work: a file ragassay did not write is never replaced
    strata = None
    if golden is not None:
        from ragassay.golden import load_golden

        gs = load_golden(golden)
        strata = {q.query_id: q.stratum for q in gs}
        pinned = gs.manifest["relevance_threshold"]
        if threshold is not None and threshold != pinned:
            raise InputError(f"--threshold {threshold} differs from the golden set's relevance_threshold {pinned}; "
                             "drop --threshold so kappa_binary uses the set's own threshold")
        threshold = pinned
    ls = read_labels(labels, query_ids=None if strata is None else strata.__contains__)
    report = agree(ls, strata=strata, threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
                   skip_single=skip_single, n_resamples=resamples, seed=seed, confidence=confidence)
    if out is not None:
        write_disagreements(report["disagreements"], out)
    if json_out:
        print_json(report)
        return
    _print(report, out)


def register(golden_app: typer.Typer) -> None:
    """Add ``agree`` to the ``golden`` command group."""
    golden_app.command("agree")(agree_command)
