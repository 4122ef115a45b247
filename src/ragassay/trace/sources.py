"""Where the streaming scorer gets its batches: one function that opens a trace source by its path.

A source yields :class:`~ragassay.trace.io.TraceBatch` objects and exposes ``header``, ``lines`` (the
(query, trial) keys seen, with where each was found), ``problems``, ``n_traces`` and ``replay(span)``, as
:class:`~ragassay.trace.io.TraceBatchReader` does for a JSONL file.
"""

from __future__ import annotations

from pathlib import Path

from ragassay.trace.io import TraceBatchReader


def open_trace_batches(path: str | Path, batch_size: int) -> TraceBatchReader:
    """The batch reader for the trace source at ``path`` (a JSONL trace file)."""
    return TraceBatchReader(path, batch_size)
