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


def check_inputs_match_runs(recs, golden, corpus, *, given: bool) -> None:
    """The golden set and corpus must be the ones every run was scored against (their pins); a report that
    puts one set's questions beside another set's scores would be silently wrong."""
    wrong = [r for r in recs if r.dataset_version != golden.dataset_version or r.corpus_digest != corpus.digest]
    if not wrong:
        return
    lines = [f"run {r.name} ({r.run_id[:10]}…) was scored on dataset {r.dataset_version} / corpus "
             f"{r.corpus_digest}" for r in wrong]
    if given:
        head = (f"the golden set and corpus given are dataset {golden.dataset_version} / corpus {corpus.digest}, "
                f"not the ones the runs were scored on")
        fix = "pass the --golden and --corpus the runs were scored with"
    else:
        head = (f"runs were scored on dataset {wrong[0].dataset_version} / corpus {wrong[0].corpus_digest}, not "
                f"the bundled set (dataset {golden.dataset_version} / corpus {corpus.digest})")
        fix = "pass --golden and --corpus"
    raise InputError("\n".join([head, *lines, fix]))


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
    from ragassay.analysis.report_data import (
        PARQUET_NAME,
        PrefetchedTraces,
        QueriesParquet,
        build_report_data,
        comparison_resamples,
        read_cached,
        read_runs,
    )
    from ragassay.fsio import atomic_write_bytes
    from ragassay.store import Store

    checks.refuse(checks.resamples(resamples), checks.resamples(analysis_resamples, "--analysis-resamples"))
    if (corpus is None) != (golden is None):
        raise InputError("pass --golden and --corpus together (the golden set is resolved against its corpus)")
    from ragassay.report.include import load_include

    ppi_labels = None
    if labels is not None:
        if len(runs) < 2:
            raise InputError("--labels corrects the comparisons' judge metrics: give two or more runs (or use "
                             "`ragassay judge ppi RUN --labels FILE` for one run)")
        from ragassay.analysis.ppi import load_ppi_labels

        ppi_labels = load_ppi_labels(labels)
    # read before the runs are pivoted: a bad file fails in milliseconds, not after the comparisons
    included = [load_include(p) for p in include or []]
    with Store.open(store, read_only=True) as opened:
        # one pivot of each run's rows serves the comparisons and every section
        st = read_cached(opened)
        recs = [st.get_run(r) for r in runs]
        # the traces are read (mostly Arrow's parse, outside the GIL) while the heavy modules load, the
        # golden set is validated and the comparisons run; nothing below depends on them until the page data
        prefetched = PrefetchedTraces(recs, traces_dir)
        from ragassay.analysis.compare import compare_runs
        from ragassay.analysis.runner import load_inputs
        from ragassay.report import render_report

        corp, gs = load_inputs(corpus, golden)
        check_inputs_match_runs(recs, gs, corp, given=golden is not None)
        # each run's rows are read once (one sort of each run): they give the page's run summaries, the
        # Parquet file (encoded on a thread of its own) and the pivot the comparisons and sections slice
        used = comparison_resamples(resamples, len(gs.queries)) if len(recs) > 1 else resamples
        if len(recs) > 1:
            from ragassay.stats.bootstrap import preload_kernel

            # the compiled bootstrap loads while DuckDB sorts the rows below (it waits outside the interpreter)
            preload_kernel(used * len(gs.queries))
        parquet_rows = QueriesParquet()
        runs_read = read_runs(st, recs, parquet_rows)
        comparisons = [compare_runs(st, recs[0].run_id, r.run_id, n_resamples=used, rebaseline=rebaseline,
                                    labels=ppi_labels)
                       for r in recs[1:]]
        data = build_report_data(st, [r.run_id for r in recs], gs, corp, comparisons=comparisons,
                                 traces_dir=traces_dir, title=f"ragassay report: {', '.join(r.name for r in recs)}",
                                 analyses=analyses, analysis_resamples=analysis_resamples,
                                 requested_resamples=resamples, prefetched=prefetched, runs_read=runs_read)
        # The page first: a folder holding only a Parquet file would not be recognised as a report next time.
        data["parquet"] = PARQUET_NAME
        if included:
            data["includes"] = included
        path = render_report(data, out)
        warnings = data.get("warnings", [])
        del data
        parquet = out / PARQUET_NAME
        atomic_write_bytes(parquet, parquet_rows.finish())
    if json_out:
        print_json({"report": str(path), "bytes": path.stat().st_size, "parquet": str(parquet),
                    "parquet_bytes": parquet.stat().st_size, "runs": [r.run_id for r in recs],
                    "warnings": warnings})
        return
    for w in warnings:
        err_console.print(Text("warning: ", style="yellow") + Text(w))
    console.print(f"report written to [bold]{escape(str(path))}[/] ({path.stat().st_size / 1024:.0f} KB), "
                  f"per-query results in {escape(str(parquet))}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
