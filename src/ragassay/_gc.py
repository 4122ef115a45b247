"""Pausing the cyclic garbage collector around batch work."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0  # blocks inside gc_paused now, on any thread
_was_enabled = False  # the collector's state when the first of them began


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch builds or scores its traces.

    A batch allocates tens of thousands of small acyclic objects (units, their dicts); each allocation burst
    triggers generation scans that cost about a third of a warm run and can free nothing. Reference
    counting still frees everything as usual. The collector's switch is one for the whole process, so the
    pauses are counted: threads pausing at once (the trace reader's parse threads beside the scoring loop)
    keep it off until the last of them ends, and only then is the state before the first restored.
    """
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
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
