"""The bar shown while a trace source is scored (``ragassay score``, ``ragassay.evaluate(..., progress=True)``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def scoring_bar(name: str, *, disable: bool, console=None) -> Iterator[Callable[[int, int], None]]:
    """A transient bar titled ``scoring <name>``; yields the ``progress(done, total)`` callback the streaming
    scorer calls after each batch (bytes of a JSONL file, rows of a Parquet dataset, files on Ray). With
    ``disable`` nothing is drawn and the callback does nothing visible."""
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    cols = (TextColumn("[bold]scoring {task.description}"), BarColumn(), TaskProgressColumn(),
            TimeRemainingColumn())
    with Progress(*cols, transient=True, disable=disable, console=console, refresh_per_second=4) as bar:
        task = bar.add_task(escape(name), total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield tick
