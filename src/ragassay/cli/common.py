"""Shared CLI plumbing: console, JSON output, and the error contract (one line per problem, exit 2).

User text (run and dataset names, doc ids, questions, answers) must never be read as rich markup: pass it
through :func:`esc` when it goes inside a markup string, or print it with ``markup=False`` / as a
``rich.text.Text``. Both consoles have emoji codes off, so ``:smile:`` in a doc id stays as typed. When the
output is not a terminal, tables keep their full width (``$COLUMNS``, else 200 columns) instead of being cut
at 80; progress bars go to stderr and only to a terminal.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

# Piped or captured output is not cut to rich's 80-column fallback: $COLUMNS when set, else this.
WIDE_DEFAULT = 200


def output_width(stream) -> int | None:
    """The width for a console writing to ``stream``: None (rich measures the terminal) on a TTY, else
    ``$COLUMNS`` when it is a positive integer, else :data:`WIDE_DEFAULT`."""
    if getattr(stream, "isatty", lambda: False)():
        return None
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else WIDE_DEFAULT


def make_console(*, stderr: bool = False, **kwargs) -> Console:
    """A console with emoji codes and highlighting off and the width of :func:`output_width`."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, emoji=False, width=output_width(stream), **kwargs)


console = make_console()
err_console = make_console(stderr=True)


def progress(*, enabled: bool = True):
    """A transient progress bar on stderr, shown only when stderr is a terminal and ``enabled`` (callers pass
    ``not json_out``), so ``--json`` and piped or captured output never carry it."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    show = enabled and sys.stderr.isatty()
    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True, disable=not show)

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2


def esc(text: Any) -> str:
    """``text`` as a string that rich markup shows literally: ``f"[bold]{esc(run.name)}[/]"`` is safe for
    ``--name '[/bold]'``."""
    return escape(str(text))


def print_json(obj: Any) -> None:
    """Machine output: one JSON document on stdout, nothing else. An undefined value (NaN) is ``null``:
    ``json`` would write the bare token ``NaN``, which is not JSON and which strict parsers reject."""
    sys.stdout.write(json.dumps(_nan_to_null(obj), ensure_ascii=False, indent=2, default=_default) + "\n")


def _nan_to_null(o: Any) -> Any:
    # numpy float64 is a float subclass, so json encodes it without ever calling _default.
    if isinstance(o, float):
        return None if o != o else float(o)
    if isinstance(o, dict):
        return {k: _nan_to_null(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_nan_to_null(v) for v in o]
    return o


def _default(o: Any):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        f = float(o)
        return None if f != f else f
    if isinstance(o, np.ndarray):
        return _nan_to_null(o.tolist())
    if hasattr(o, "to_dict"):
        return _nan_to_null(o.to_dict())
    if hasattr(o, "model_dump"):
        return _nan_to_null(o.model_dump(mode="json"))
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
