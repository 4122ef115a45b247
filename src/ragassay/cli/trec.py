"""``ragassay trec QRELS RUN``: trec_eval-style scoring of TREC files with ragassay's metric engine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ragassay.errors import InputError
from ragassay.metrics.names import Metric
from ragassay.metrics.semantics import Semantics
from ragassay.metrics.trec import evaluate_trec


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
        ties: str = typer.Option("trec_eval", "--ties", help="trec_eval | given"),
        relevance_level: float = typer.Option(1, "--relevance-level", help="grade >= N is relevant"),
        gain: str = typer.Option("linear", "--gain", help="nDCG gain: linear (trec_eval) | exp"),
    ) -> None:
        """Score a TREC run against qrels; undefined per-query values (no relevant labels) are counted."""
        console = Console()
        try:
            base = Semantics.trec_eval(relevance_level=relevance_level, gain=gain)
            sem = Semantics(relevance_level, gain, ties, base.negatives)
            metrics = [Metric.parse(m) for m in metric]
            results, coverage = evaluate_trec(qrels, run, metrics, sem)
        except InputError as exc:
            typer.echo(f"error: {exc}".splitlines()[0], err=True)
            raise typer.Exit(code=2) from None
        if as_json:
            out = {
                "semantics": sem.as_dict(),
                "coverage": coverage,
                "metrics": {str(m): {**r.summary(), "mean": _num(r.mean())} for m, r in results.items()},
            }
            if per_query:
                for m, r in results.items():
                    out["metrics"][str(m)]["per_query"] = {q: _num(v) for q, v in r.per_query().items()}
            typer.echo(json.dumps(out, indent=2))
            return
        if per_query:
            for m, r in results.items():
                for q, v in r.per_query().items():
                    console.print(f"{str(m):<14} {q:<16} {'undefined' if math.isnan(v) else f'{v:.4f}'}")
        table = Table(title=f"{run.name} vs {qrels.name}  ({sem})")
        for col in ("metric", "mean", "defined", "undefined"):
            table.add_column(col, justify="left" if col == "metric" else "right")
        for m, r in results.items():
            mean = r.mean()
            table.add_row(
                str(m),
                "undefined" if math.isnan(mean) else f"{mean:.4f}",
                str(r.n_defined),
                str(r.n_undefined),
            )
        console.print(table)
        console.print(
            f"{coverage['n_queries']} queries scored; {coverage['n_missing']} had no results in the run "
            f"(scored as empty); {coverage['n_run_only']} run-only queries ignored"
        )
