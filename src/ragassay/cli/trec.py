"""``ragassay trec QRELS RUN``: trec_eval-style scoring of TREC files with ragassay's metric engine.

Importing this module loads only typer; numpy, pyarrow and the metric engine load when the command runs, rich
only to print a table or a progress bar, and nothing else of ragassay (no store, analysis, scipy, rapidfuzz, nor
pandas, which pyarrow would load on its own: see :mod:`ragassay.metrics.arrownp`) is on its path.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import typer

PROGRESS_BYTES = 50_000_000  # run files from this size on get a progress bar on a terminal
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
            ["ndcg@10", "recall@100", "ap", "rr"], "-m", "--metric",
            help="metric as ragassay, trec_eval, ir_measures or ranx spell it: ndcg@10, ndcg_cut.10, P.5,10, "
            "nDCG@10, mrr@10 (repeatable)",
        ),
        per_query: bool = typer.Option(False, "-q", "--per-query", help="print per-query values"),
        as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
        ties: str = typer.Option("trec_eval9", "--ties", help=TIE_HELP),
        relevance_level: float = typer.Option(1, "--relevance-level", help="grade >= N is relevant"),
        gain: str = typer.Option("linear", "--gain", help="nDCG gain: linear (trec_eval) | exp"),
        undefined_as_zero: bool = typer.Option(
            False,
            "--undefined-as-zero",
            help="count undefined per-query values (no relevant label) as 0 in the summary, as trec_eval, "
            "ir_measures and ranx do; the undefined count is still reported",
        ),
    ) -> None:
        """Score a TREC run against qrels; undefined per-query values (no relevant labels) are counted.

        Measure names as ragassay, trec_eval, ir_measures or ranx spell them, each with its tool's meaning:
        ndcg_cut.10, P.5,10, recip_rank, set_F.0.5, num_rel_ret (summed over queries, as trec_eval's `all`
        line), nDCG@10, "P(rel=2)@5", "RBP(p=0.8,rel=1)" (binary; "RBP(p=0.8)" is graded; its residual, the
        most unjudged ranks could add, is printed beside it), ERR@10, mrr@10, hit_rate@10, ndcg_burges@10,
        f1@10, rbp.8, gm_map (geometric mean), ... (docs/metrics.md, "Spellings")."""
        from ragassay.errors import InputError
        from ragassay.metrics.names import parse_measures
        from ragassay.metrics.semantics import Semantics

        try:
            sem = Semantics.trec_eval(relevance_level=relevance_level, gain=gain, ties=ties)
            metrics = list(dict.fromkeys(m for name in metric for m in parse_measures(name)))
            # a bar only where reading and joining take long enough to wonder (and never in --json or a pipe)
            large = run.is_file() and run.stat().st_size >= PROGRESS_BYTES
            results, coverage = _scored(qrels, run, metrics, sem, bar=large and not as_json and sys.stderr.isatty())
        except InputError as exc:
            for line in str(exc).splitlines():
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(code=2) from None

        from ragassay.metrics.measures import summary

        def total(r) -> float:
            # as trec_eval's `all` line: a sum for num_*, a geometric mean for gm_map, else the mean; with
            # --undefined-as-zero an undefined value counts 0 (gm_map: its 1e-5 floor, trec_eval's AP 0)
            return summary(r, undefined_as_zero)

        if as_json:
            out = {
                "semantics": sem.as_dict(),
                "undefined_as_zero": undefined_as_zero,
                "coverage": coverage,
                "metrics": {
                    str(m): {**r.summary(), "mean": _num(summary(r, undefined_as_zero, mean=True)),
                             "aggregate": m.aggregate, "summary": _num(total(r))}
                    for m, r in results.items()
                },
            }
            for m, r in results.items():
                if "residual" in r.extra:  # RBP: how much unjudged ranks could still add
                    out["metrics"][str(m)]["residual_mean"] = _num(float(r.extra["residual"].mean()))
            if per_query:
                for m, r in results.items():
                    out["metrics"][str(m)]["per_query"] = {q: _num(v) for q, v in r.per_query().items()}
                    if "residual" in r.extra:
                        out["metrics"][str(m)]["per_query_residual"] = dict(
                            zip(map(str, r.query_ids), map(float, r.extra["residual"]), strict=True))
            typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
            return
        _print(results, coverage, sem, total, per_query, undefined_as_zero, run, qrels)


def _scored(qrels: Path, run: Path, metrics, sem, bar: bool):
    """Read both files and score: (results, coverage), under a progress bar when ``bar``."""
    from ragassay.metrics.trec import evaluate_trec, read_qrels, read_run

    if not bar:  # rich's progress machinery is ~30 ms of imports, paid only when a bar is shown
        return evaluate_trec(read_qrels(qrels), read_run(run), metrics, sem)
    from ragassay.cli.common import progress

    with progress() as bars:
        step = bars.add_task("reading qrels", total=3)
        q = read_qrels(qrels)
        bars.update(step, advance=1, description="reading run")
        r = read_run(run)
        bars.update(step, advance=1, description="joining and scoring")
        scored = evaluate_trec(q, r, metrics, sem)
        bars.update(step, advance=1)
    return scored


def _print(results, coverage, sem, total, per_query: bool, undefined_as_zero: bool, run: Path, qrels: Path) -> None:
    from rich.table import Table
    from rich.text import Text

    from ragassay.cli.common import console

    # query ids and file names are user text: printed without markup so '[/bold]' in one cannot break rich
    if per_query:
        for m, r in results.items():
            for q, v in r.per_query().items():
                value = "undefined" if math.isnan(v) else f"{v:.4f}"
                console.print(f"{str(m):<14} {q:<16} {value}", markup=False)
    table = Table(title=Text(f"{run.name} vs {qrels.name}  ({sem})"))
    residuals = any("residual" in r.extra for r in results.values())
    for col in ("metric", "all queries", "defined", "undefined") + (("residual",) if residuals else ()):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for m, r in results.items():
        value = total(r)
        shown = "undefined" if math.isnan(value) else f"{value:.0f} (sum)" if m.aggregate == "sum" \
            else f"{value:.4f}" + (" (geometric)" if m.aggregate == "geometric" else "")
        cells = [str(m), shown, str(r.n_defined), str(r.n_undefined)]
        if residuals:
            cells.append(f"{r.extra['residual'].mean():.4f}" if "residual" in r.extra else "")
        table.add_row(*cells)
    console.print(table)
    note = "; undefined values counted as 0" if undefined_as_zero else ""
    console.print(
        f"{coverage['n_queries']} queries scored; {coverage['n_missing']} had no results in the run "
        f"(scored as empty); {coverage['n_run_only']} run-only queries ignored{note}",
        markup=False,
    )
