"""`ragassay online`: production requests in (ingest), their daily signals with alarms, and a traffic
simulator. :func:`register` builds the ``online`` typer group (:func:`make_group`) and hands it to
``ragassay.cli.online_flywheel.register`` (judge, gap, promote) when that module is present."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import typer

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXAMPLES = 10

def _pct(r: dict) -> str:
    if r["n"] == 0:
        return "undefined (n=0)"
    return f"{100 * r['rate']:.1f} [{100 * r['lo']:.1f},{100 * r['hi']:.1f}] n={r['n']:,}"


def ingest_cmd(
    files: list[Path] = typer.Argument(..., help="Files of production requests (JSONL, or OTel spans)."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store",
                               help="Store file; records go to <store>.online/records/."),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl (one request per line) or otel (OTLP/JSON spans, "
                            "one request per trace)."),
    release: str = typer.Option(None, "--release", help="Release for records that carry none."),
    rephrase_window: float = typer.Option(60.0, "--rephrase-window",
                                          help="Seconds within which a similar next question of the session "
                                               "counts as a rephrase."),
    similarity: float = typer.Option(60.0, "--rephrase-similarity",
                                     help="Minimum rapidfuzz token_set_ratio (0-100) of a rephrase."),
    allow_bad: bool = typer.Option(False, "--allow-bad", help="Exit 0 even when lines were skipped (they are "
                                   "still counted and listed)."),
    json_out: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Ingest production requests beside the store: validated, deduplicated by request_id, partitioned by
    UTC day, with the rephrase / empty-retrieval / refusal flags derived (docs/online.md).

    Every bad line is counted and named with file:line: exit 1 when there is any, unless --allow-bad; a file
    with no good record stops the ingest with exit 2 and nothing written. A file ingested before (same
    sha256) is skipped."""
    from ragassay.cli.common import console, err_console, esc, print_json, progress
    from ragassay.online.ingest import ingest

    with progress(enabled=not json_out) as bar:
        task = bar.add_task("ingesting", total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        summary = ingest(files, store, fmt=fmt, release=release, rephrase_window=rephrase_window,
                         similarity=similarity, progress=tick if not bar.disable else None)
    bad = summary.bad_lines
    code = EXIT_FAIL if bad and not allow_bad else EXIT_OK
    if json_out:
        print_json({**summary.as_dict(examples=EXAMPLES), "exit_code": code})
        raise typer.Exit(code)
    for f in summary.files:
        if f.skipped:
            console.print(f"{esc(f.path)}: skipped, {esc(f.skipped)}")
            continue
        console.print(f"{esc(f.path)}: {f.records:,} records, {f.written:,} written, {f.duplicates:,} duplicate "
                      f"request_id, {f.already_stored:,} already stored, {f.bad:,} bad")
        if f.unknown_fields:
            names = ", ".join(f"{k} ({v:,})" for k, v in f.unknown_fields.most_common(EXAMPLES))
            err_console.print(f"  fields not read: {names}", markup=False)
    days = sorted(summary.days)
    span = f" over {len(days)} day(s), {days[0]} to {days[-1]}" if days else ""
    console.print(f"wrote {summary.written:,} records{span} to {esc(summary.store)}.online in "
                  f"{summary.seconds:.1f} s", markup=False)
    if summary.stale_rephrase:
        console.print(f"note: {summary.stale_rephrase:,} stored record(s) got a follow-up in this ingest that would "
                      "change their rephrased flag; stored records are not rewritten", markup=False)
    for ex in summary.duplicate_examples[:EXAMPLES]:
        err_console.print(f"  {ex['file']}:{ex['line']}: request_id {ex['request_id']!r} repeats "
                          f"{ex['first']}; not written", markup=False)
    if bad:
        err_console.print(f"{bad:,} bad line{'s' if bad != 1 else ''} skipped (not written):", markup=False)
        shown = 0
        for f in summary.files:
            for p in f.problems:
                if shown < EXAMPLES:
                    err_console.print(f"  {f.path}:{p.line}: {p.message}", markup=False)
                    shown += 1
        if bad > shown:
            err_console.print(f"  ... and {bad - shown:,} more (--json lists more per file)", markup=False)
        if not allow_bad:
            err_console.print("fix them and ingest the file again (stored ids are skipped), or pass --allow-bad",
                              markup=False)
    raise typer.Exit(code)


def signals_cmd(
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="Store file whose records to read."),
    by: str = typer.Option(None, "--by", help="Split each day by stratum or release."),
    date_from: str = typer.Option(None, "--from", help="First UTC day, YYYY-MM-DD (default: the first stored)."),
    date_to: str = typer.Option(None, "--to", help="Last UTC day, YYYY-MM-DD (default: the last stored)."),
    alarm: str = typer.Option(None, "--alarm", help="Thresholds, e.g. empty_retrieval=0.01,refusal=0.2 "
                              "(default empty_retrieval=0.01; '' for none). Only the deterministic signals."),
    fail_on_alarm: bool = typer.Option(False, "--fail-on-alarm", help="Exit 1 when an alarm fires."),
    confidence: float = typer.Option(0.95, "--confidence", help="Level of the Wilson intervals."),
    json_out: bool = typer.Option(False, "--json", help="Print the rates as JSON."),
) -> None:
    """Per-day rates of thumbs-down (among rated), rephrase, escalation, abandonment, empty retrieval and
    refusal, each with n and a Wilson interval; alarms on empty retrieval and refusal (docs/online.md)."""
    from ragassay.cli.common import console, esc, print_json
    from ragassay.errors import InputError
    from ragassay.online.signals import SIGNALS, parse_alarms, signals

    if not 0 < confidence < 1:
        raise InputError(f"--confidence {confidence}: give a level in (0, 1), e.g. 0.95")
    rep = signals(store, by=by, date_from=date_from, date_to=date_to, alarms=parse_alarms(alarm),
                  confidence=confidence)
    fired = rep.fired
    code = EXIT_FAIL if fired and fail_on_alarm else EXIT_OK
    if json_out:
        print_json({**rep.to_dict(), "exit_code": code})
        raise typer.Exit(code)
    from rich.table import Table

    table = Table(title=f"online signals {rep.date_from} to {rep.date_to}: rate % [{confidence:.0%} Wilson interval] "
                        "n; ! marks an alarm")
    table.add_column("day")
    if by:
        table.add_column(by)
    table.add_column("requests", justify="right")
    for name in SIGNALS:
        table.add_column(name, justify="right")
    for r in rep.days:
        cells = [r.date, *([esc(r.group if r.group is not None else "(none)")] if by else []), f"{r.requests:,}"]
        for name in SIGNALS:
            cell = esc(_pct(r.rates[name].to_dict()))
            cells.append(f"[bold red]{cell} ![/]" if name in r.alarms else cell)
        table.add_row(*cells)
    for r in rep.totals:
        cells = ["all", *([esc(r.group if r.group is not None else "(none)")] if by else []), f"{r.requests:,}"]
        cells += [esc(_pct(r.rates[name].to_dict())) for name in SIGNALS]
        table.add_row(*cells, style="bold")
    console.print(table)
    if rep.thresholds:
        watch = ", ".join(f"{k} > {v:g}" for k, v in rep.thresholds.items())
        console.print(f"alarms ({esc(watch)}): {len(fired)} fired", markup=False)
    for a in fired:
        where = f" {by}={a['group'] if a['group'] is not None else '(none)'}" if by else ""
        rate = "undefined" if math.isnan(a["rate"]) else f"{a['rate']:.2%}"
        console.print(f"  ALARM {a['date']}{where}: {a['signal']} {rate} ({a['k']:,} of {a['n']:,}) > "
                      f"{a['threshold']:g}", markup=False)
    raise typer.Exit(code)


def simulate_cmd(
    out: Path = typer.Option(..., "--out", help="JSONL file to write (new, or an earlier simulate output)."),
    records: int = typer.Option(100_000, "--records", min=1, help="Requests to write."),
    days: int = typer.Option(30, "--days", min=1, help="UTC days the traffic spans."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same file)."),
    start: str = typer.Option("2026-03-01", "--start", help="First day, YYYY-MM-DD."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary (with its ground truth) as JSON."),
) -> None:
    """Write a month of synthetic production traffic (sessions, rephrases within 60 s, thumbs biased to
    failures, an empty-retrieval incident, four strata, two releases) for `online ingest`."""
    from ragassay.cli.common import console, print_json
    from ragassay.online.simulate import simulate

    s = simulate(out, records=records, days=days, seed=seed, start=start)
    if json_out:
        print_json(s.to_dict())
        return
    console.print(f"wrote {s.records:,} requests in {s.sessions:,} sessions over {s.days} days from {s.start} to "
                  f"{s.out}; incident on {s.incident_day}, second release from {s.release_switch_day}; "
                  f"{s.true_rephrases:,} true rephrases, {s.quick_unrelated_follow_ups:,} unrelated follow-ups "
                  "within 60 s", markup=False)


def make_group() -> typer.Typer:
    """A new ``online`` group with ingest, signals and simulate, plus the flywheel commands when
    ``ragassay.cli.online_flywheel`` is present (its ``register(group)`` adds them)."""
    group = typer.Typer(help="Production traffic: ingest request records, daily signals with alarms, simulate "
                             "a month of traffic.", no_args_is_help=True)
    group.command("ingest")(ingest_cmd)
    group.command("signals")(signals_cmd)
    group.command("simulate")(simulate_cmd)
    try:
        flywheel = importlib.import_module("ragassay.cli.online_flywheel")
    except ModuleNotFoundError as e:
        if e.name != "ragassay.cli.online_flywheel":
            raise
    else:
        flywheel.register(group)
    return group


def register(app: typer.Typer) -> None:
    """Add the ``online`` group (:func:`make_group`) to ``app``."""
    app.add_typer(make_group(), name="online")
