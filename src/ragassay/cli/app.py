"""The `ragassay` command line."""

from __future__ import annotations

import sys

import typer

from ragassay import __version__
from ragassay.cli import compare, demo, golden, power, report, run, trec
from ragassay.cli.common import EXIT_USAGE, err_console
from ragassay.errors import RagassayError

app = typer.Typer(
    name="ragassay",
    help="Evaluation instrument for RAG pipelines: span-labelled golden sets, per-stage metrics, "
    "paired statistics and CI gates. Add --debug anywhere for tracebacks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.")) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit()


for _module in (golden, demo, run, compare, report, trec, power):
    _module.register(app)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    try:
        app(args=args, prog_name="ragassay")
    except RagassayError as e:
        if debug:
            raise
        for line in str(e).splitlines():
            err_console.print(f"error: {line}", markup=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
