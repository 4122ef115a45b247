"""`ragassay transcripts`: read a stored run's failures (spec §12.5). A fixed-seed sample of failing (query,
trial) rows spread across strata, each as a transcript: question, reference, the agent's claim and the
verifier's verdict, every step with its retrieved units and their text, errors, durations and cost, and the
answer. Printed as plain text, written as a self-contained HTML page or Markdown (``--out``), or ``--json``.
The selection and rendering are :mod:`ragassay.analysis.transcripts`'s."""

from __future__ import annotations

from pathlib import Path

import typer

from ragassay.cli.common import console, print_json
from ragassay.errors import InputError


def transcripts(
    run: str = typer.Argument(..., help="The run (id, prefix or name)."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file."),
    sample: int = typer.Option(10, "--sample", min=1, help="How many failures to show."),
    by: str = typer.Option("stratum", "--by", help="stratum (round-robin across strata) or none."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the sample."),
    metric: str = typer.Option(None, "--metric", help="Metric deciding a failure (default: task_success when "
                               "the run has agent rows, else answer_f1); higher must be better."),
    below: float = typer.Option(0.5, "--below", help="A row fails when its metric is below this."),
    golden: Path = typer.Option(None, "--golden", help="Built golden set dir (or authoring file, with "
                                "--corpus) for the reference answers."),
    corpus: Path = typer.Option(None, "--corpus", help="Corpus of an authoring --golden file."),
    traces: Path = typer.Option(None, "--traces", help="The run's trace file (default: where the run keeps it)."),
    out: Path = typer.Option(None, "--out", help="Write the transcripts here: .html (self-contained page) or .md."),
    json_out: bool = typer.Option(False, "--json", help="Print the transcripts as JSON."),
) -> None:
    """Sample a run's failures across strata and show each as a readable transcript."""
    from ragassay.analysis.transcripts import (
        build_transcripts,
        is_transcripts_file,
        render_html,
        render_markdown,
        render_text,
    )
    from ragassay.fsio import atomic_write_text, check_output_file
    from ragassay.store import Store

    if out is not None:
        if out.suffix.lower() not in (".html", ".htm", ".md"):
            raise InputError(f"--out {out}: name a .html or .md file")
        check_output_file(out, "transcripts", overwrite_ok=is_transcripts_file)
    if not store.is_file():
        raise InputError(f"{store}: no such store; pass the DuckDB file the run was stored in with --store")
    gs = None
    if golden is not None:
        from ragassay.analysis.runner import load_inputs
        from ragassay.golden import load_golden

        if golden.is_dir():
            gs = load_golden(golden)
        elif corpus is None:
            raise InputError(f"--golden {golden}: an authoring file is built against a corpus; give --corpus too, "
                             "or pass a built golden set folder")
        else:
            _, gs = load_inputs(corpus, golden)
    with Store.open(store, read_only=True) as st:
        rep = build_transcripts(st, run, sample=sample, by=by, seed=seed, metric=metric, below=below, golden=gs,
                                traces_path=traces)
    if out is not None:
        text = render_markdown(rep) if out.suffix.lower() == ".md" else render_html(rep)
        atomic_write_text(out, text)
        rep["out"] = str(out)
    if json_out:
        print_json(rep)
        return
    console.print(render_text(rep), markup=False, end="", soft_wrap=True)
    if out is not None:
        console.print(f"wrote {out}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("transcripts")(transcripts)
