"""Scoring many trace files (one run per file) or one Parquet trace dataset (one run), locally or as
partitions on an executor's workers.

Each file is scored by :func:`~ragassay.analysis.stream.stream_score_into_store` (the reference). With a
distributed executor a file is a partition scored on a worker into a scratch store; its rows come back as
Arrow and the driver, the only writer, stores them in slices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


WRITE_ROWS = 122_880  # one DuckDB row group per write: the driver holds one such slice at a time


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

    from ragassay.analysis.run_record import _update_extra

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
        from ragassay.errors import InputError
        from ragassay.executors.shared import absolute

        # the workers run in another folder: each file goes by its absolute path, every one checked first
        files = [absolute(p) for p in paths]
        missing = [f"{p}: trace file not found; pass the path of a .jsonl trace file"
                   for p, f in zip(paths, files, strict=True) if not Path(f).is_file()]
        if missing:
            raise InputError("\n".join(missing))
        out = []
        for part in ex.map_ordered(score_partition, files, corpus, golden, options, name, allow_pin_mismatch,
                                   batch_size):
            out.append((store_partition(store, part), part.info))
        return out
    finally:
        if owned:
            ex.close()


# ---- one Parquet dataset, one run, its files scored on the workers ---------------------------------------


@dataclass
class ScoredFile:
    """One file of a Parquet trace dataset scored on a worker: what the driver needs to store its rows and
    to finish the run's totals, without the traces."""

    index: int
    results: bytes  # the rows as an Arrow IPC stream, compressed, in record batches of WRITE_ROWS rows
    done: list
    keys: pa.Table  # query_id, trial, line of every trace kept (any query): cross-file duplicates
    ctx: pa.Table  # query_id, trial, context_tokens of the kept traces of golden queries
    structure: Any
    problems: list
    unit_failures: int
    examples: list[str]
    unknown: set[str]
    trials: set[int]
    n_traces: int


def score_dataset_file(index: int, path: str, corpus, golden: GoldenSet, options: ScoringOptions | None,
                       batch_size: int, floor, seen: dict) -> ScoredFile:
    """Score file ``index`` of the dataset at ``path`` as :func:`stream_score_into_store` scores those rows:
    with at least the metric structure ``floor`` and the keys in ``seen`` (found in earlier files, key ->
    row) counted as duplicates. Rows are returned, not stored: the driver is the only writer."""
    import copy

    from ragassay.analysis.run_record import done_markers
    from ragassay.analysis.scoring import Labels, _doc_lengths, _final_k
    from ragassay.analysis.stream import MAX_EXAMPLES, KnownBatch, score_known
    from ragassay.trace.parquet import ParquetTraceReader
    from ragassay.trace.schema import UnitCheck, validate_unit_columns

    opt = options or ScoringOptions()
    labels, doc_lengths = Labels(golden, opt), _doc_lengths(corpus)
    reader = ParquetTraceReader(path, batch_size, only=index)
    reader.problems.clear()  # the header's problems are the dataset's, reported once by the driver
    reader.lines.update(seen)
    final_k = _final_k(reader.header)
    structure = copy.deepcopy(floor)
    scored: list[tuple[Any, list, Any]] = []  # (span, done markers, structure it was scored with) per batch
    tables: list[pa.Table] = []
    ctx_keys: list[tuple[str, int]] = []
    ctx_vals: list[float] = []
    unknown: set[str] = set()
    trials: set[int] = set()
    n_fail, examples = 0, []

    def rows_of(part, bad) -> tuple[pa.Table, Any]:
        keys = part.facts.keys
        return score_known(golden, labels, part, keys, np.arange(len(keys)), structure, final_k, bad, doc_lengths)

    for batch in reader:
        unknown.update(q for q in batch.facts.query_id if q not in golden)
        trials.update(batch.facts.trial)
        part = KnownBatch.of(batch, golden)
        check = validate_unit_columns(part.units, corpus, reader.lines)
        structure.grow(part)
        table, ctx_tokens = rows_of(part, check)
        tables.append(table)
        facts = part.facts
        scored.append((batch.span, done_markers(facts.keys, facts.outcome, facts.error), copy.deepcopy(structure)))
        ctx_keys.extend(part.facts.keys)
        ctx_vals.extend(ctx_tokens.tolist())
        n_fail += check.count
        examples.extend(check.messages(path, limit=MAX_EXAMPLES - len(examples)))
    for i, (span, _, used) in enumerate(scored):
        if used != structure:  # scored before the file showed all its structure: again, with all of it
            again = KnownBatch.of(reader.replay(span), golden)
            tables[i] = rows_of(again, validate_unit_columns(again.units, corpus, reader.lines))[0]
    lo, hi = reader.first_row[index], reader.first_row[index + 1]
    kept = [(k, ln) for k, ln in reader.lines.items() if lo < ln <= hi]
    results = pa.concat_tables(tables) if tables else rows_of(KnownBatch.empty(), UnitCheck())[0]
    return ScoredFile(index, pack_rows(results), [d for _, done, _ in scored for d in done],
                      pa.table({"query_id": pa.array([k[0] for k, _ in kept], pa.string()),
                                "trial": pa.array([k[1] for k, _ in kept], pa.int64()),
                                "line": pa.array([ln for _, ln in kept], pa.int64())}),
                      pa.table({"query_id": pa.array([k[0] for k in ctx_keys], pa.string()),
                                "trial": pa.array([k[1] for k in ctx_keys], pa.int64()),
                                "context_tokens": pa.array(ctx_vals, pa.float64())}),
                      structure, reader.problems, n_fail, examples, unknown, trials, reader.n_traces)


def pack_rows(table: pa.Table) -> bytes:
    """``table`` as a zstd-compressed Arrow IPC stream in record batches of :data:`WRITE_ROWS` rows: a
    partition's rows take a fraction of the object store's room, and the driver holds one batch at a time."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        for batch in table.to_batches(max_chunksize=WRITE_ROWS):
            w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def unpack_rows(blob: bytes):
    """The record batches of :func:`pack_rows`, decompressed one at a time; at least one (maybe empty)."""
    reader = pa.ipc.open_stream(blob)
    empty = True
    for batch in reader:
        empty = False
        yield batch
    if empty:
        yield pa.RecordBatch.from_pylist([], schema=reader.schema)


def _owned(t: pa.Table) -> pa.Table:
    """``t`` in buffers of its own (``take`` always allocates)."""
    return t.take(pa.array(np.arange(t.num_rows, dtype=np.int64)))


def _joined(t: pa.Table) -> pa.Array:
    joined = pc.binary_join_element_wise(t.column("query_id"), pc.cast(t.column("trial"), pa.string()), "\x00")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def score_dataset_into_store(store, path: str | Path, corpus, golden: GoldenSet, *,
                             options: ScoringOptions | None = None, name: str | None = None,
                             allow_pin_mismatch: bool = False, batch_size: int = BATCH_TRACES, executor=None,
                             resume: str | None = None, progress=None, read_ahead=None) -> tuple[str, dict]:
    """Score a Parquet trace dataset as one run; (run_id, import summary) as :func:`stream_score_into_store`.

    With the local executor this is :func:`stream_score_into_store` (the reference). Otherwise the dataset's
    files are the partitions, scored on the workers (:func:`score_dataset_file`), at most ``2 × workers``
    in flight, and written here in file order, each file's rows and query status in one group of slices.
    The stored rows equal the reference's: a file whose keys appeared in an earlier file is scored again
    knowing them (they are duplicates), files scored with less metric structure than the whole dataset
    has are scored again with all of it (rows replaced), and golden keys without a trace are scored here
    at the end. ``resume`` (a run id) finishes a run whose driver died: files whose query status is
    complete are not written again. ``progress(done, total)`` is called as the work advances: files stored of
    the dataset's files on the workers; with the local executor, bytes (JSONL) or rows (Parquet) scored.
    ``read_ahead`` (local executor only) is a :class:`~ragassay.analysis.stream.TraceReadAhead` of ``path``.
    """
    from ragassay.executors import LocalExecutor, get_executor

    owned = not isinstance(executor, LocalExecutor)
    ex = get_executor(executor)
    try:
        if type(ex) is LocalExecutor:
            return stream_score_into_store(store, path, corpus, golden, options=options, name=name,
                                           allow_pin_mismatch=allow_pin_mismatch, batch_size=batch_size,
                                           resume=resume, read_ahead=read_ahead, progress=progress)
        from ragassay.executors.shared import absolute

        # the workers run in another folder: the dataset goes by its absolute path
        return _score_dataset(store, absolute(path), corpus, golden, options or ScoringOptions(), name,
                              allow_pin_mismatch, batch_size, ex, resume, progress)
    finally:
        if owned:
            ex.close()


def _score_dataset(store, path: str, corpus, golden, opt, name, allow_pin_mismatch, batch_size, ex, resume,
                   progress) -> tuple[str, dict]:
    from ragassay.analysis.run_record import (
        _context_tokens_mean_of,
        _done_markers,
        _pin_error,
        _pin_mismatch,
        _record,
        _update_extra,
        config_warnings,
    )
    from ragassay.analysis.scoring import Labels, _doc_lengths, _final_k
    from ragassay.analysis.stream import MAX_EXAMPLES, KnownBatch, Structure, check_resume_pins, score_known
    from ragassay.errors import InputError
    from ragassay.trace.parquet import ParquetTraceReader
    from ragassay.trace.schema import UnitCheck

    reader = ParquetTraceReader(path, batch_size)
    header = reader.header
    mismatch = _pin_mismatch(header, golden, corpus)
    if mismatch and not allow_pin_mismatch:
        raise InputError(_pin_error(path, mismatch))
    config = header.config if header else {}
    sha = header.config_sha if header else ""
    if resume:
        rec = store.get_run(resume)
        want = _record(rec.name, golden, corpus, config, sha, opt, rec.trials, f"traces:{path}")
        check_resume_pins(rec, want)
        run_id = rec.run_id
        done = store.resume_run(run_id)
    else:
        rec = _record(name or (header.run_name if header else Path(path).stem), golden, corpus, config, sha, opt,
                      1, f"traces:{path}", {"unit_failures": 0, "unit_failure_examples": [], "schema_failures": 0})
        run_id = store.create_run(rec)
        done = set()

    def write(part: ScoredFile, force: bool = False) -> None:
        if not force and part.done and all((q, t) in done for q, t, _, _ in part.done):
            return
        batches = unpack_rows(part.results)
        batch = next(batches)
        for following in batches:  # the done markers go with the last slice
            store.write_batch(run_id, pa.Table.from_batches([batch]))
            batch = following
        store.write_batch(run_id, pa.Table.from_batches([batch]), done=part.done)

    structure = Structure()
    files = list(range(len(reader.files)))
    seen_keys: list[pa.Table] = []
    kept: dict[int, tuple[Any, dict]] = {}  # file -> (structure it was scored with, the duplicates it was told)
    ctx_parts: list[pa.Table] = []
    problems = list(reader.problems)
    n_problems = len(problems)
    n_fail, examples, unknown, trials, n_traces = 0, [], set(), set(), 0
    for part in ex.map_ordered(score_dataset_file, files, path, corpus, golden, opt, batch_size, Structure(), {}):
        seen: dict = {}
        if seen_keys:
            before = pa.concat_tables(seen_keys)
            hit = pc.index_in(_joined(part.keys), value_set=_joined(before))
            if hit.null_count < len(hit):
                for j in pc.drop_null(hit).to_pylist():
                    seen[(before["query_id"][j].as_py(), before["trial"][j].as_py())] = before["line"][j].as_py()
                part = next(ex.map_ordered(score_dataset_file, [part.index], path, corpus, golden, opt, batch_size,
                                           Structure(), seen))
        write(part)
        kept[part.index] = (part.structure, seen)
        structure.branches |= part.structure.branches
        for k in ("retrieval", "rerank", "generation", "outcome"):
            setattr(structure, k, getattr(structure, k) or getattr(part.structure, k))
        # copies: a table fetched from the object store shares its buffers, which would keep the whole
        # partition (its result rows too) pinned there for the rest of the run
        seen_keys.append(_owned(part.keys))
        ctx_parts.append(_owned(part.ctx))
        n_problems += len(part.problems)
        problems.extend(part.problems[:max(0, MAX_EXAMPLES - len(problems))])
        n_fail += part.unit_failures
        examples.extend(part.examples[:max(0, MAX_EXAMPLES - len(examples))])
        unknown |= part.unknown
        trials |= part.trials
        n_traces += part.n_traces
        if progress is not None:
            progress(part.index + 1, len(files))
    for i, (used, seen) in kept.items():
        if used != structure:  # the dataset has metrics this file's traces did not show: rows replaced
            write(next(ex.map_ordered(score_dataset_file, [i], path, corpus, golden, opt, batch_size, structure,
                                      seen)), force=True)
    # golden keys without a trace, scored here as the reference scores them, and the run's totals
    trial_ids = sorted(trials) or [0]
    # every golden (query, trial) as a position trial-major, as the reference orders them; the kept traces'
    # context tokens placed by position in flat arrays (no million-row join on the driver)
    qids = [q.query_id for q in golden.queries]
    n_q = len(qids)
    qpos = {q: i for i, q in enumerate(qids)}
    tpos = {t: i for i, t in enumerate(trial_ids)}
    ctx_all = np.full(n_q * len(trial_ids), math.nan)
    have = np.zeros(n_q * len(trial_ids), dtype=bool)
    for t in ctx_parts:
        q_i = np.fromiter((qpos.get(q, -1) for q in t.column("query_id").to_pylist()), np.int64, t.num_rows)
        t_i = np.fromiter((tpos.get(x, -1) for x in t.column("trial").to_pylist()), np.int64, t.num_rows)
        ok = (q_i >= 0) & (t_i >= 0)
        pos = t_i[ok] * n_q + q_i[ok]
        have[pos] = True
        ctx_all[pos] = t.column("context_tokens").to_numpy(zero_copy_only=False)[ok]
    ctx_parts.clear()
    miss_pos = np.flatnonzero(~have)
    labels, final_k, doc_lengths = Labels(golden, opt), _final_k(header), _doc_lengths(corpus)
    for start in range(0, len(miss_pos), batch_size):
        pos = miss_pos[start:start + batch_size]
        rows = [(qids[p % n_q], trial_ids[p // n_q]) for p in pos.tolist()]
        table, ctx_tokens = score_known(golden, labels, KnownBatch.empty(), rows, np.full(len(rows), -1), structure,
                                        final_k, UnitCheck(), doc_lengths)
        if not all(k in done for k in rows):
            store.write_batch(run_id, table, done=_done_markers(rows, {}))
        ctx_all[pos] = ctx_tokens
    extra = {"schema_failures": n_problems,
             "problems": [f"{path}:{p.line}: {p.message}" for p in problems[:MAX_EXAMPLES]],
             "unknown_queries": sorted(unknown), "unit_failures": n_fail, "unit_failure_examples": examples,
             "context_tokens_mean": _context_tokens_mean_of(ctx_all.tolist() if structure.generation else []),
             "warnings": config_warnings(config)}
    if mismatch:
        extra["pin_mismatch"] = mismatch
    _update_extra(store, run_id, extra)
    store.connection.execute("UPDATE runs SET trials = ? WHERE run_id = ?", [len(trial_ids), run_id])
    store.finish_run(run_id, "complete")
    return run_id, {"n_traces": n_traces, "schema_failures": n_problems, "unknown_queries": sorted(unknown),
                    "missing": len(miss_pos), "problems": extra["problems"], "unit_failures": n_fail,
                    "unit_failure_examples": examples, "warnings": extra["warnings"], "pin_mismatch": mismatch}
