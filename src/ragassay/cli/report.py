"""`ragassay report RUN... -o DIR`: one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.text import Text

from ragassay.cli import checks
from ragassay.cli.common import console, err_console, print_json
from ragassay.errors import InputError

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")


def report(
    runs: list[str] = typer.Argument(..., help="Runs to report (id, prefix or name); the first is the baseline."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (index.html is written there)."),
    store: Path = STORE_OPT,
    corpus: Path = typer.Option(None, "--corpus", help="Corpus the runs were scored on (default: bundled)."),
    golden: Path = typer.Option(None, "--golden", help="Golden set the runs were scored on (default: bundled)."),
    traces_dir: Path = typer.Option(None, "--traces-dir", help="Where the runs' traces are (default: recorded)."),
    resamples: int = typer.Option(
        10_000, "--resamples",
        help="Bootstrap resamples for the comparisons (100 to 1,000,000); above 20,000 queries the report uses "
             "fewer (never below 2,000) and says so on the page."),
    analysis_resamples: int = typer.Option(
        2_000, "--analysis-resamples",
        help="Bootstrap resamples for the analysis sections (decomposition, ladder, slices; 100 to 1,000,000); "
             "stated on the page."),
    analyses: bool = typer.Option(True, "--analyses/--no-analyses",
                                  help="Add the analysis sections (delivery/use, oracle ladder, slices, stage "
                                       "latency, consistency)."),
    rebaseline: bool = typer.Option(False, "--rebaseline", help="Compare runs despite differing pins."),
    include: list[Path] = typer.Option(
        None, "--include",
        help="A saved --json output of index-eval, embed-check or corpus check to add as a section "
             "(repeatable; the kind is read from the file's keys, see docs/report.md)."),
    labels: Path = typer.Option(
        None, "--labels", metavar="FILE",
        help="Human values of judge metrics on a random subsample of the runs' answers (JSONL, docs/ppi.md): "
             "each comparison shows the PPI-corrected difference beside the raw judge means."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Pins and manifest, stage and stratum tables, forest plot of paired deltas, recall-at-depth curves,
    rerank movement, abstention vs over-refusal, latency, the analysis sections (evidence delivery and use,
    oracle ladder, slices, stage latency, consistency over trials) and a sortable per-query table — no network.

    The golden set and corpus must be the ones the runs were scored on (checked against the runs' pins)."""
    from ragassay.analysis.runner import load_inputs
    from ragassay.api import write_report

    checks.refuse(checks.resamples(resamples), checks.resamples(analysis_resamples, "--analysis-resamples"))
    if (corpus is None) != (golden is None):
        raise InputError("pass --golden and --corpus together (the golden set is resolved against its corpus)")
    written = write_report(store, runs, out, inputs=lambda: load_inputs(corpus, golden), given=golden is not None,
                           traces_dir=traces_dir, resamples=resamples, analysis_resamples=analysis_resamples,
                           analyses=analyses, rebaseline=rebaseline, labels=labels, include=include or [])
    path, parquet, warnings, recs = written.path, written.parquet, written.warnings, written.run_ids
    if json_out:
        print_json({"report": str(path), "bytes": path.stat().st_size, "parquet": str(parquet),
                    "parquet_bytes": parquet.stat().st_size, "runs": recs,
                    "warnings": warnings})
        return
    for w in warnings:
        err_console.print(Text("warning: ", style="yellow") + Text(w))
    console.print(f"report written to [bold]{escape(str(path))}[/] ({path.stat().st_size / 1024:.0f} KB), "
                  f"per-query results in {escape(str(parquet))}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
