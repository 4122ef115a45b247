"""``ragassay convert TRACES.jsonl OUT``: a JSONL trace file as a Parquet trace dataset, streaming.

Importing this module loads only typer; pyarrow and the trace reader load when the command runs, rich only
to show a progress line on a terminal.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import typer

EXIT_OK, EXIT_BAD_LINES, EXIT_USAGE = 0, 1, 2
EXAMPLES = 10


@contextmanager
def _sigterm_unwinds():
    """While converting, SIGTERM unwinds like Ctrl-C (the temporary output is removed) instead of ending
    the process on the spot."""
    def stop(signum, frame):
        raise SystemExit(128 + signum)

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _check_has_traces(path: Path) -> None:
    """Refuse a trace file with no line after its header (empty, blank lines, or the header alone) before
    anything is created: converting it would write a dataset of no traces."""
    import json

    from ragassay.errors import InputError

    if not path.is_file():
        return  # the converter names a missing file or a folder itself
    header = False
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = (raw.removeprefix(b"\xef\xbb\xbf") if lineno == 1 else raw).strip()
            if not line:
                continue
            if lineno == 1:
                try:
                    rec = json.loads(line)
                except ValueError:
                    return  # a bad first line is a line to count and name, not an empty file
                if isinstance(rec, dict) and rec.get("type") == "header":
                    header = True
                    continue
            return
    what = "holds only the run header (line 1) and no trace" if header else "is empty (no trace lines)"
    raise InputError(f"{path}: {what}; nothing to convert — pass a JSONL trace file with at least one trace "
                     "(a header line, then one trace per line)")


def register(app: typer.Typer) -> None:
    @app.command("convert")
    def convert(
        traces: Path = typer.Argument(..., help="JSONL trace file (its first line may be the run header)."),
        out: Path = typer.Argument(..., help="Output: a .parquet file, or a directory of part-NNNNN.parquet "
                                   "files (any other name)."),
        rows_per_file: int = typer.Option(None, "--rows-per-file", min=1,
                                          help="Traces per file of a directory dataset (default 100000); "
                                               "each file is one partition of `score --executor ray`."),
        row_group_size: int = typer.Option(8192, "--row-group-size", min=1, help="Traces per Parquet row group."),
        force: bool = typer.Option(False, "--force", help="Replace an existing OUT (a file, or a directory "
                                   "holding only a Parquet dataset)."),
        allow_bad: bool = typer.Option(False, "--allow-bad", help="Exit 0 even when lines were skipped "
                                       "(they are still counted and listed)."),
        json_out: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
    ) -> None:
        """Convert a JSONL trace file to a Parquet trace dataset that `ragassay score` reads as one run.

        Every line is validated as `score` validates it; the valid traces are written, and every line that
        is not (bad JSON, a schema failure, a duplicate (query_id, trial), ...) is counted and named with
        its line number: exit 1 when there is any, unless --allow-bad. OUT appears only when complete."""
        from ragassay.cli.common import console, err_console, esc, print_json, progress
        from ragassay.trace.convert import convert_jsonl_to_parquet

        _check_has_traces(traces)
        size = traces.stat().st_size if traces.is_file() else 0
        with progress(enabled=not json_out) as bar, _sigterm_unwinds():
            task = bar.add_task(f"converting {esc(traces.name)}", total=size or None)

            def tick(done: int, n: int) -> None:
                bar.update(task, completed=done, description=f"converting {esc(traces.name)}: {n:,} traces")

            summary = convert_jsonl_to_parquet(traces, out, rows_per_file=rows_per_file,
                                               row_group_size=row_group_size, force=force,
                                               progress=tick if not bar.disable else None)
        bad = summary.bad_lines
        code = EXIT_BAD_LINES if bad and not allow_bad else EXIT_OK
        if json_out:
            print_json({**summary.as_dict(examples=EXAMPLES), "exit_code": code})
            raise typer.Exit(code)
        for w in summary.warnings:
            err_console.print(f"warning: {traces}:{w.line}: {w.message}", markup=False)
        n_files = len(summary.files)
        console.print(
            f"wrote {summary.traces:,} traces to {out} ({n_files} file{'s' if n_files != 1 else ''}, "
            f"{summary.bytes_written / 1e6:,.1f} MB) in {summary.seconds:.1f} s", markup=False)
        if bad:
            err_console.print(f"{bad:,} bad line{'s' if bad != 1 else ''} skipped (not written):", markup=False)
            for p in summary.problems[:EXAMPLES]:
                err_console.print(f"  {traces}:{p.line}: {p.message}", markup=False)
            if bad > EXAMPLES:
                err_console.print(f"  ... and {bad - EXAMPLES:,} more", markup=False)
            if not allow_bad:
                err_console.print("fix or remove them and convert again, or pass --allow-bad to accept the "
                                  "dataset without them", markup=False)
        raise typer.Exit(code)
