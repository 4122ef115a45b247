"""Pausing the cyclic garbage collector around batch work."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch builds or scores its traces.

    A batch allocates tens of thousands of small acyclic objects (units, their dicts); each allocation burst
    triggers generation scans that cost about a third of a warm run and can free nothing. Reference
    counting still frees everything as usual, and the collector's previous state is restored on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def gc_frozen() -> Iterator[None]:
    """Hide every object alive now from the cyclic collector for the duration of the block.

    A run builds large structures once (golden set, corpus, indexes, label arrays) and then allocates
    heavily batch after batch; each full collection would rescan the long-lived structures and free none
    of them, a cost that grows with the run's size (superlinear in queries). Frozen objects are skipped;
    the collector still runs, and on exit they return to the oldest generation.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
