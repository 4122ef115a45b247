"""`ragassay report RUN... -o DIR`: one self-contained HTML file."""

from __future__ import annotations

from pathlib import Path

import typer

from ragassay.cli.common import console, print_json

STORE_OPT = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file.")


def report(
    runs: list[str] = typer.Argument(..., help="Runs to report (id, prefix or name); the first is the baseline."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (index.html is written there)."),
    store: Path = STORE_OPT,
    corpus: Path = typer.Option(None, "--corpus", help="Corpus the runs were scored on (default: bundled)."),
    golden: Path = typer.Option(None, "--golden", help="Golden set the runs were scored on (default: bundled)."),
    traces_dir: Path = typer.Option(None, "--traces-dir", help="Where the runs' traces are (default: recorded)."),
    resamples: int = typer.Option(10_000, "--resamples", min=100),
    rebaseline: bool = typer.Option(False, "--rebaseline", help="Compare runs despite differing pins."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Pins and manifest, stage and stratum tables, forest plot of paired deltas, recall-at-depth curves,
    rerank movement, abstention vs over-refusal, latency, and a sortable per-query table — no network."""
    from ragassay.analysis.compare import compare_runs
    from ragassay.analysis.report_data import build_report_data
    from ragassay.analysis.runner import load_inputs
    from ragassay.report import render_report
    from ragassay.store import Store

    corp, gs = load_inputs(corpus, golden)
    with Store.open(store, read_only=True) as st:
        recs = [st.get_run(r) for r in runs]
        comparisons = [compare_runs(st, recs[0].run_id, r.run_id, n_resamples=resamples, rebaseline=rebaseline)
                       for r in recs[1:]]
        data = build_report_data(st, [r.run_id for r in recs], gs, corp, comparisons=comparisons,
                                 traces_dir=traces_dir, title=f"ragassay report: {', '.join(r.name for r in recs)}")
    path = render_report(data, out)
    if json_out:
        print_json({"report": str(path), "bytes": path.stat().st_size, "runs": [r.run_id for r in recs]})
        return
    console.print(f"report written to [bold]{path}[/] ({path.stat().st_size / 1024:.0f} KB)")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
