"""``ragassay trec QRELS RUN``: trec_eval-style scoring of TREC files with ragassay's metric engine.

Importing this module loads only typer and rich; numpy, pyarrow and the metric engine load when the command
runs, and nothing else of ragassay (no store, analysis, scipy or rapidfuzz) is on its path.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

TIE_HELP = (
    "tie rule: trec_eval9 (float32 scores, doc id descending: trec_eval 9.x and pytrec_eval; alias "
    "trec_eval) | trec_eval10 (double scores: trec_eval 10.0) | given (file order)"
)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def register(app: typer.Typer) -> None:
    @app.command("trec")
    def trec(
        qrels: Path = typer.Argument(..., help="TREC qrels file: qid iter docid rel"),
        run: Path = typer.Argument(..., help="TREC run file: qid Q0 docid rank score tag"),
        metric: list[str] = typer.Option(
            ["ndcg@10", "recall@100", "ap", "rr"], "-m", "--metric", help="metric, e.g. ndcg@10 (repeatable)"
        ),
        per_query: bool = typer.Option(False, "-q", "--per-query", help="print per-query values"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        ties: str = typer.Option("trec_eval9", "--ties", help=TIE_HELP),
        relevance_level: float = typer.Option(1, "--relevance-level", help="grade >= N is relevant"),
        gain: str = typer.Option("linear", "--gain", help="nDCG gain: linear (trec_eval) | exp"),
        undefined_as_zero: bool = typer.Option(
            False,
            "--undefined-as-zero",
            help="count undefined per-query values (no relevant label) as 0 in the mean, as trec_eval and "
            "pytrec_eval do; the undefined count is still reported",
        ),
    ) -> None:
        """Score a TREC run against qrels; undefined per-query values (no relevant labels) are counted."""
        from ragassay.errors import InputError
        from ragassay.metrics.names import Metric
        from ragassay.metrics.semantics import Semantics
        from ragassay.metrics.trec import evaluate_trec

        try:
            sem = Semantics.trec_eval(relevance_level=relevance_level, gain=gain, ties=ties)
            metrics = [Metric.parse(m) for m in metric]
            results, coverage = evaluate_trec(qrels, run, metrics, sem)
        except InputError as exc:
            for line in str(exc).splitlines():
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(code=2) from None

        def mean(r) -> float:
            # trec_eval's mean divides by every scored query, an undefined value counting 0
            if undefined_as_zero:
                return sum(0.0 if math.isnan(v) else float(v) for v in r.values) / len(r.values)
            return r.mean()

        if as_json:
            out = {
                "semantics": sem.as_dict(),
                "undefined_as_zero": undefined_as_zero,
                "coverage": coverage,
                "metrics": {str(m): {**r.summary(), "mean": _num(mean(r))} for m, r in results.items()},
            }
            if per_query:
                for m, r in results.items():
                    out["metrics"][str(m)]["per_query"] = {q: _num(v) for q, v in r.per_query().items()}
            typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
            return
        _print(results, coverage, sem, mean, per_query, undefined_as_zero, run, qrels)


def _print(results, coverage, sem, mean, per_query: bool, undefined_as_zero: bool, run: Path, qrels: Path) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # query ids and file names are user text: printed without markup so '[/bold]' in one cannot break rich
    console = Console(highlight=False)
    if per_query:
        for m, r in results.items():
            for q, v in r.per_query().items():
                value = "undefined" if math.isnan(v) else f"{v:.4f}"
                console.print(f"{str(m):<14} {q:<16} {value}", markup=False)
    table = Table(title=Text(f"{run.name} vs {qrels.name}  ({sem})"))
    for col in ("metric", "mean", "defined", "undefined"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for m, r in results.items():
        value = mean(r)
        table.add_row(
            str(m), "undefined" if math.isnan(value) else f"{value:.4f}", str(r.n_defined), str(r.n_undefined)
        )
    console.print(table)
    note = "; undefined values counted as 0 in the means" if undefined_as_zero else ""
    console.print(
        f"{coverage['n_queries']} queries scored; {coverage['n_missing']} had no results in the run "
        f"(scored as empty); {coverage['n_run_only']} run-only queries ignored{note}",
        markup=False,
    )
