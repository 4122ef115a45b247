"""`ragassay demo`: the embedded default on the bundled license corpus."""

from __future__ import annotations

from pathlib import Path

import typer

from ragassay.cli.common import console, print_json
from ragassay.cli.golden import print_manifest_summary
from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.golden import build_golden, bundled_golden_source


def demo(
    out: Path = typer.Option(Path("ragassay-demo"), "-o", "--out", help="Where to write the demo's outputs."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Build the bundled golden set over the bundled license corpus and summarize it."""
    corpus = load_corpus(bundled_corpus_dir())
    gs = build_golden(bundled_golden_source(), corpus, out / "golden")
    if json_out:
        print_json(gs.manifest)
        return
    console.print(f"corpus: {len(corpus)} documents, {corpus.n_chars:,} canonical characters")
    print_manifest_summary(gs.manifest)
    console.print(f"golden set written to {out / 'golden'}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
