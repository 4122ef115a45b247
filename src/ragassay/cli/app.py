"""The `ragassay` command line.

Start-up is kept light: the root group knows every command by name and one-line help only, and imports a
command's module (with its numpy, scipy, duckdb, ... imports) when that command runs or shows its own help.
``ragassay --help`` and ``ragassay --version`` import no numeric library at all.
"""

from __future__ import annotations

import errno
import importlib
import sys

import typer
from typer.core import TyperCommand, TyperGroup

try:  # typer >= 0.2x vendors click as typer._click and raises its exceptions; older typer uses click itself
    from typer import _click as click
except ImportError:
    import click

from ragassay import __version__

EXIT_USAGE = 2

# Command name -> (module under ragassay.cli whose register() adds it, one-line help for `ragassay --help`).
# One module may register several commands; loading one of them loads all of its module's commands.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "Run the bundled example end to end: golden set, four configurations, comparisons, "
                     "gate and HTML report."),
    "golden": ("golden", "Build and check span-labelled golden sets."),
    "run": ("run", "Run the reference pipeline on a golden set (or import traces), score every stage, store "
                   "the rows."),
    "score": ("run", "Score another system's traces against a golden set and store them as a run."),
    "runs": ("run", "List the runs in a store."),
    "export": ("run", "Export the store's tables (all runs, or the given ones) to Parquet."),
    "compare": ("compare", "Paired deltas per metric and stratum with bootstrap CIs, W/L/T, MDE, adjusted p "
                           "and claims."),
    "gate": ("compare", "PASS / WARN / FAIL: fail only on a credible regression at least the minimum "
                        "effect, or a hard gate."),
    "report": ("report", "Write a self-contained HTML report of one or more runs."),
    "trec": ("trec", "Score a TREC run against qrels with trec_eval semantics."),
    "power": ("power", "Minimum detectable effect of a paired comparison, or the n needed for a target "
                       "effect."),
    "corpus": ("stages", "Check a corpus's canonicalization: idempotence, offset round trip, token drift."),
    "parse": ("stages", "Span survival and parse-quality proxies per parser (the parse ceiling)."),
    "chunks": ("stages", "Chunking report card: chunk sizes, chunks per answer span, split spans, "
                         "Precision_Omega."),
    "sweep": ("stages", "Run a grid of configs, store each, compare at a fixed token budget against a "
                        "baseline."),
    "embed-check": ("index", "Embedding diagnostics: similarity gap with CI, top-1 similarity, near-duplicates, "
                             "truncation, drift probe."),
    "index-eval": ("index", "ANN index report card: recall vs efSearch/nprobe, latency, memory, filtered recall, "
                            "churn, quantization Pareto table."),
    "judge": ("judge", "Judge a stored run's answers with an LLM or local judge (score), validate a judge "
                       "against human labels, rebaseline a judge change."),
    "analyze": ("analyze", "System analyses: evidence-delivery decomposition, oracle ladder, slices and cases, "
                           "ablations, latency, consistency, attribution, attacks, hygiene, quality per millisecond, "
                           "claim diffs."),
    "import": ("imports", "Import a BEIR dataset (corpus + golden set), OpenTelemetry spans, RAGAS rows or a "
                          "TREC run (traces)."),
    "convert": ("convert", "Convert a JSONL trace file to a Parquet trace dataset, streaming, with every bad "
                           "line counted and named."),
    "cost": ("cost", "The eval layer's own cost per run: calls, tokens, spend, the same calls sync vs batch and "
             "cached, deterministic-first share, monthly projection, labelling."),
    "agent": ("agent", "Agent runs: task success, partial credit, silent failures, cost per resolved task and p95 "
                       "wall-clock with intervals, trajectory diagnostics apart (report); the reference agent (run, "
                       "demo)."),
    "transcripts": ("transcripts", "Sample a run's failures across strata and show each as a readable "
                                   "transcript: the agent's claim vs the verifier's verdict, steps, units, cost."),
    "online": ("online", "Production traffic: ingest request records, daily signals with alarms, simulate a month "
                         "of traffic; judge a sample, the offline-online gap and promote failures to labelling."),
    "doctor": ("doctor", "Check the environment, the store, and a golden set's pins: PASS / WARN / FAIL "
                         "with a fix each."),
}


class _Placeholder(TyperCommand):
    """Stands in for a command in the root help listing until the command is actually run."""

    def __init__(self, name: str, help: str):
        super().__init__(name, help=help, short_help=help)


class LazyGroup(TyperGroup):
    """A typer group whose commands are imported only when resolved for running (or for their own help)."""

    def __init__(self, **attrs):
        super().__init__(**attrs)
        for name, (_, help_text) in COMMANDS.items():
            self.commands.setdefault(name, _Placeholder(name, help_text))

    def load(self, name: str) -> click.Command | None:
        """The real command ``name``, importing its module on first use (None for an unknown name)."""
        cmd = self.commands.get(name)
        if not isinstance(cmd, _Placeholder):
            return cmd
        module = importlib.import_module(f"ragassay.cli.{COMMANDS[name][0]}")
        sub = typer.Typer()
        module.register(sub)
        self.commands.update(typer.main.get_group(sub).commands)
        return self.commands[name]

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args:
            self.load(args[0])
        return super().resolve_command(ctx, args)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


app = typer.Typer(
    name="ragassay",
    cls=LazyGroup,
    help="Evaluation instrument for RAG pipelines: span-labelled golden sets, per-stage metrics, "
    "paired statistics and CI gates. Add --debug anywhere for tracebacks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version and exit."),
) -> None:
    # Root options only (the docstring would replace the app's help); commands come from LazyGroup.
    pass


def _printable(line: str) -> str:
    # Undecodable bytes in argv or file names arrive as lone surrogates, which stderr cannot encode.
    return line.encode("utf-8", "backslashreplace").decode("utf-8")


def _os_error_lines(e: OSError) -> list[str]:
    reason = e.strerror or str(e) or type(e).__name__
    if e.filename is None:
        return [reason]
    where = str(e.filename) + (f" -> {e.filename2}" if e.filename2 is not None else "")
    return [f"{where}: {reason}"]


def _decode_error_lines(e: UnicodeDecodeError) -> list[str]:
    bad = e.object[e.start : e.start + 4]
    return [f"input is not valid {e.encoding} text: byte(s) {bad.hex(' ')} at byte offset {e.start} "
            f"({e.reason}); save the file as UTF-8 (--debug shows which reader failed)"]


def _failure(e: BaseException) -> tuple[list[str], int] | None:
    """The error lines and exit code for an exception that escaped a command; None for a genuine bug."""
    from ragassay.errors import RagassayError

    if isinstance(e, RagassayError):
        return str(e).splitlines() or [type(e).__name__], EXIT_USAGE
    if type(e).__name__ == "NoArgsIsHelpError":
        # click has already printed the help while building this exception.
        return ["missing command; pick one of the commands listed above"], EXIT_USAGE
    if isinstance(e, click.exceptions.UsageError):
        hint = f"; see '{e.ctx.command_path} --help'" if e.ctx is not None else ""
        return [e.format_message().rstrip().rstrip(".") + hint], EXIT_USAGE
    if isinstance(e, click.ClickException):
        return e.format_message().splitlines(), EXIT_USAGE
    if isinstance(e, typer.Abort):
        return ["aborted"], 1
    if isinstance(e, UnicodeDecodeError):
        return _decode_error_lines(e), EXIT_USAGE
    if isinstance(e, OSError):
        return _os_error_lines(e), EXIT_USAGE
    return None


def main(argv: list[str] | None = None) -> None:
    """Run the CLI and exit: 0 on success, 2 with one ``error:`` line per problem on bad input.

    Typed ragassay errors are each command's own contract; the OSError and UnicodeDecodeError cases are a
    last safety net so that a boundary someone missed still ends in a readable line, not a traceback.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if debug:
        args.remove("--debug")
    try:
        rv = app(args=args, prog_name="ragassay", standalone_mode=False)
    except Exception as e:
        failure = _failure(e)
        if failure is None or debug:
            raise
        if isinstance(e, OSError) and e.errno == errno.EPIPE:
            sys.exit(1)
        lines, code = failure
        sys.stderr.write("".join(f"error: {_printable(line)}\n" for line in lines))
        sys.stderr.flush()
        sys.exit(code)
    # Without standalone mode click returns typer.Exit's code, or the command's own (None) return value.
    sys.exit(rv if isinstance(rv, int) else 0)


def console_main() -> None:
    """The ``ragassay`` executable: :func:`main`, then an exit that skips tearing the interpreter down.

    Freeing every module and object one by one at exit (a 100,000-query golden set, numpy, DuckDB, pydantic
    models...) takes up to a second and changes nothing the command did. So once the command has returned,
    the exit handlers run (``atexit``: Ray's shutdown, logging's flush), stdout and stderr are flushed and
    the process ends with the command's exit code. With a non-daemon thread still running (a library's
    worker), or on an uncaught exception, the exit is the ordinary one.
    """
    import atexit
    import os
    import threading

    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, exit status 1, as the interpreter does
        sys.stderr.write(f"{code}\n")
        code = 1
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (| head): what the ordinary exit reports as status 120
        code = code or 1
    os._exit(code)
