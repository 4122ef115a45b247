"""Scoring many trace files: one run per file, locally or as partitions on an executor's workers.

Each file is scored by :func:`~ragassay.analysis.stream.stream_score_into_store` (the reference). With a
distributed executor a file is a partition scored on a worker into a scratch store; its rows come back as
Arrow and the driver, the only writer, stores them in slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ragassay.analysis.scoring import ScoringOptions
from ragassay.analysis.stream import BATCH_TRACES, stream_score_into_store
from ragassay.golden import GoldenSet


@dataclass
class ScoredPartition:
    """One trace file scored on a worker: its run record, rows and query status, ready for the driver."""

    record: Any
    results: pa.Table
    status: pa.Table
    info: dict


WRITE_ROWS = 262_144


def score_partition(path: str | Path, corpus, golden: GoldenSet, options: ScoringOptions | None, name: str | None,
                    allow_pin_mismatch: bool, batch_size: int) -> ScoredPartition:
    """Score one trace file exactly as :func:`stream_score_into_store` does, into a scratch store on the
    worker, and hand back what the driver needs to store it (the driver stays the only writer)."""
    import shutil
    import tempfile

    from ragassay.store import Store

    scratch = Path(tempfile.mkdtemp(prefix="ragassay-part-"))
    try:
        with Store.open(scratch / "part.duckdb") as st:
            run_id, info = stream_score_into_store(st, path, corpus, golden, options=options, name=name,
                                                   allow_pin_mismatch=allow_pin_mismatch, batch_size=batch_size)
            return ScoredPartition(st.get_run(run_id), st.results(run_id).drop_columns(["run_id", "defined"]),
                                   st.query_status(run_id), info)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def store_partition(store, part: ScoredPartition) -> str:
    """Write a worker's scored file as a new run: rows in slices of :data:`WRITE_ROWS`, then the query
    status with the last slice, so a run that lost its driver is left 'running' and incomplete, never
    'complete' with missing rows."""
    import dataclasses

    from ragassay.analysis.runner import _update_extra

    rec = dataclasses.replace(part.record, run_id="", status="running", finished_at=None)
    run_id = store.create_run(rec)
    status = part.status.to_pylist()
    done = [(r["query_id"], r["trial"], r["status"], r.get("error")) for r in status]
    n = part.results.num_rows
    for start in range(0, max(n, 1), WRITE_ROWS):
        last = start + WRITE_ROWS >= n
        store.write_batch(run_id, part.results.slice(start, WRITE_ROWS), done=done if last else ())
    _update_extra(store, run_id, part.record.extra or {})
    store.finish_run(run_id, "complete")
    return run_id


def score_files_into_store(store, paths: list[str | Path], corpus, golden: GoldenSet, *,
                           options: ScoringOptions | None = None, name: str | None = None,
                           allow_pin_mismatch: bool = False, batch_size: int = BATCH_TRACES,
                           executor=None) -> list[tuple[str, dict]]:
    """Score several trace files, one run each, in the order given; [(run_id, import summary)].

    With the local executor each file streams into the store as :func:`stream_score_into_store` does
    (the reference). With another executor (``"ray[:ADDRESS]"``) the files are partitions scored on the
    workers with the same code, at most ``2 × workers`` in flight, and each partition's rows are written
    here as it arrives: driver memory is bounded by the in-flight partitions, not by the trace set.
    """
    from ragassay.executors import LocalExecutor, get_executor

    owned = not isinstance(executor, LocalExecutor)
    ex = get_executor(executor)
    try:
        if type(ex) is LocalExecutor:
            return [stream_score_into_store(store, p, corpus, golden, options=options, name=name,
                                            allow_pin_mismatch=allow_pin_mismatch, batch_size=batch_size)
                    for p in paths]
        out = []
        for part in ex.map_ordered(score_partition, [str(p) for p in paths], corpus, golden, options, name,
                                   allow_pin_mismatch, batch_size):
            out.append((store_partition(store, part), part.info))
        return out
    finally:
        if owned:
            ex.close()
