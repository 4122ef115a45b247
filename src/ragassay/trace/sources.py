"""Where the streaming scorer gets its batches: one function that opens a trace source by its path.

A source yields :class:`~ragassay.trace.io.TraceBatch` objects and exposes ``header``, ``lines`` (the
(query, trial) keys seen, with where each was found), ``problems``, ``n_traces`` and ``replay(span)``, as
:class:`~ragassay.trace.io.TraceBatchReader` does for a JSONL file and
:class:`~ragassay.trace.parquet.ParquetTraceReader` for a Parquet dataset.
"""

from __future__ import annotations

from pathlib import Path

from ragassay.trace.io import TraceBatchReader
from ragassay.trace.parquet import ParquetTraceReader, is_parquet_source


def open_trace_batches(path: str | Path, batch_size: int) -> TraceBatchReader | ParquetTraceReader:
    """The batch reader for the trace source at ``path``: a Parquet dataset (a ``.parquet`` file or a
    directory of them) or a JSONL trace file."""
    if is_parquet_source(path):
        return ParquetTraceReader(path, batch_size)
    return TraceBatchReader(path, batch_size)
