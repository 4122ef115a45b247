"""JSONL trace file -> Parquet trace dataset, streaming (``ragassay convert``).

The JSONL file is read by :class:`~ragassay.trace.io.TraceBatchReader` (the scorer's reader): every line is
validated as ``ragassay score`` validates it, and every line it cannot use (not JSON, not a trace, a schema
failure, a duplicate (query_id, trial), a late header) is one :class:`~ragassay.trace.io.Problem` with its
line number. The valid traces are written as :data:`~ragassay.trace.parquet.TRACE_SCHEMA` rows, built as
Arrow arrays from each batch's unit columns (no object per unit); the run header goes into every file's
key-value metadata (:data:`~ragassay.trace.parquet.HEADER_KEY`). Memory is bounded by a reader batch plus
one row group.

Output is one ``.parquet`` file, or a directory of ``part-00000.parquet``, ... files of at most
``rows_per_file`` traces each. It is written under a hidden temporary name (``.OUT.<random>.converting``)
in OUT's directory and renamed to OUT only when complete, so a failed or killed conversion never leaves a
partial dataset under OUT (dataset readers skip names starting with ``.``).

Every field is carried, each unit's ``rank`` included (null where the line had none), except an agent's
``steps`` and ``claimed_success``: a file with either is refused with the first such line (never converted
without them). The values written
are the validated ones, so a default (``trial`` 0, empty lists) is written as its value, an empty ``meta``
as null and any other ``meta`` as JSON text (its keys in their order).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ragassay.errors import InputError
from ragassay.trace.io import Problem, TraceBatch, TraceBatchReader
from ragassay.trace.parquet import CITATION_TYPE, HEADER_KEY, TRACE_SCHEMA, UNIT_TYPE, is_parquet_source

DEFAULT_ROWS_PER_FILE = 100_000
DEFAULT_ROW_GROUP_SIZE = 8192
DEFAULT_BATCH_SIZE = 2048
MAX_FILES = 100_000  # part-00000 ... part-99999: names that sort in file order
_LISTS = ("fused", "reranked", "packed", "cut")
_NO_HEADER = "no header record on line 1"


@dataclass
class ConvertSummary:
    """What a conversion did. ``problems`` are the lines not written (every one, in line order);
    ``warnings`` are notes that drop nothing (a file without a header line)."""

    source: Path
    out: Path
    traces: int
    files: list[Path]
    records: int
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    header: bool = False
    bytes_written: int = 0
    seconds: float = 0.0

    @property
    def bad_lines(self) -> int:
        return len(self.problems)

    def as_dict(self, examples: int = 20) -> dict:
        def lines(ps: list[Problem]) -> list[dict]:
            return [{"line": p.line, "message": p.message} for p in ps[:examples]]

        return {"source": str(self.source), "out": str(self.out), "traces": self.traces,
                "files": [str(f) for f in self.files], "n_files": len(self.files), "records": self.records,
                "bad_lines": self.bad_lines, "bad_line_examples": lines(self.problems),
                "warnings": lines(self.warnings), "header": self.header, "bytes_written": self.bytes_written,
                "seconds": round(self.seconds, 3)}


def convert_jsonl_to_parquet(source: str | Path, out: str | Path, *, rows_per_file: int | None = None,
                             row_group_size: int = DEFAULT_ROW_GROUP_SIZE, force: bool = False,
                             batch_size: int = DEFAULT_BATCH_SIZE,
                             progress: Callable[[int, int], None] | None = None) -> ConvertSummary:
    """Convert the JSONL trace file ``source`` to the Parquet trace dataset ``out`` (a ``.parquet`` file
    when ``out`` ends so, else a directory of ``part-NNNNN.parquet`` files of ``rows_per_file`` traces,
    default :data:`DEFAULT_ROWS_PER_FILE`). Refuses an existing ``out`` unless ``force``.

    ``progress(bytes_read, traces_written)`` is called after every batch. Lines that cannot be used are
    skipped and returned as ``problems``; the caller decides whether that is a failure."""
    t0 = time.perf_counter()
    source, out = Path(source), Path(out)
    single = out.suffix.lower() == ".parquet"
    if rows_per_file is not None and rows_per_file < 1:
        raise InputError(f"--rows-per-file {rows_per_file}: must be at least 1")
    if row_group_size < 1:
        raise InputError(f"--row-group-size {row_group_size}: must be at least 1")
    if single and rows_per_file is not None:
        raise InputError(f"{out}: ends in .parquet, so it is one file; --rows-per-file splits a directory "
                         "dataset: drop it, or give an OUT without the .parquet suffix")
    if source.is_file() and is_parquet_source(source):
        raise InputError(f"{source}: is already a Parquet trace dataset; `ragassay score` reads it as it is")
    reader = TraceBatchReader(source, batch_size)  # checks the source exists and is a file
    _check_out(source, out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _hidden_dir(out, "converting")
    try:
        sink = _Sink(tmp / "data.parquet" if single else tmp, single, rows_per_file or DEFAULT_ROWS_PER_FILE,
                     row_group_size)
        traces = 0
        for batch in reader:
            if batch.traces:
                _refuse_agent_fields(source, batch)
                sink.write(batch_table(batch), reader.header)
                traces += len(batch.traces)
            if progress is not None:
                progress(batch.span[1], traces)
        sink.close(reader.header)
        written = sum(f.stat().st_size for f in sink.files)
        if single:
            final = _install(sink.files[0], out)
            files = [final]
            shutil.rmtree(tmp)
        else:
            _install(tmp, out)
            files = [out / f.relative_to(tmp) for f in sink.files]
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    warnings = [p for p in reader.problems if p.line == 1 and p.message.startswith(_NO_HEADER)]
    problems = [p for p in reader.problems if p not in warnings]
    return ConvertSummary(source=source, out=out, traces=traces, files=files, records=reader.n_records,
                          problems=problems, warnings=warnings, header=reader.header is not None,
                          bytes_written=written, seconds=time.perf_counter() - t0)


# ---- the output path -----------------------------------------------------------------------------------


def _check_out(source: Path, out: Path, force: bool) -> None:
    """Refuse an OUT that exists (unless ``force``), that is the source or holds it, or, for ``force``, a
    directory holding anything but a Parquet dataset (so a mistyped OUT never deletes unrelated files)."""
    src = source.resolve()
    dest = out.resolve()
    if dest == src or dest in src.parents:
        raise InputError(f"{out}: is the input file or a directory holding it; choose another OUT")
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise InputError(f"{out}: already exists; pass --force to replace it, or choose another OUT")
    if out.is_dir() and not out.is_symlink():
        for p in out.rglob("*"):
            rel = p.relative_to(out)
            hidden = any(part.startswith(("_", ".")) for part in rel.parts)
            if p.is_file() and not hidden and p.suffix.lower() != ".parquet":
                raise InputError(f"{out}: holds {rel}, which is not part of a Parquet dataset; --force replaces "
                                 "only a dataset directory: remove it yourself or choose another OUT")


def _hidden_dir(out: Path, what: str) -> Path:
    """A new directory ``.OUT.<random>.<what>`` beside ``out``, with the umask's permissions (a dataset
    directory renamed from it keeps them)."""
    while True:
        path = out.parent / f".{out.name}.{secrets.token_hex(4)}.{what}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


def _install(new: Path, out: Path) -> Path:
    """Move the finished ``new`` to ``out``; an existing ``out`` is replaced (a file atomically, a directory
    by moving it aside first, so ``out`` is never a mix of the two)."""
    if new.is_file() and (out.is_file() or out.is_symlink() or not out.exists()):
        os.replace(new, out)
        return out
    if out.exists() or out.is_symlink():
        old = _hidden_dir(out, "replaced")
        aside = old / "old"
        os.rename(out, aside)
        os.rename(new, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, out)
    return out


class _Sink:
    """Writes tables as row groups of ``row_group_size`` rows into files of at most ``rows_per_file``."""

    def __init__(self, where: Path, single: bool, rows_per_file: int, row_group_size: int):
        self.where, self.single = where, single
        self.rows_per_file = 1 << 62 if single else rows_per_file
        self.row_group_size = row_group_size
        self.files: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._in_file = 0  # rows in the open file, buffered ones included
        self._buf: list[pa.Table] = []
        self._buffered = 0

    def _schema(self, header) -> pa.Schema:
        if header is None:
            return TRACE_SCHEMA
        return TRACE_SCHEMA.with_metadata(
            {HEADER_KEY: json.dumps(header.model_dump(mode="json"), ensure_ascii=False)})

    def _open(self, header) -> None:
        if len(self.files) >= MAX_FILES:
            raise InputError(f"more than {MAX_FILES} files of {self.rows_per_file} traces; pass a larger "
                             "--rows-per-file")
        path = self.where if self.single else self.where / f"part-{len(self.files):05d}.parquet"
        self._writer = pq.ParquetWriter(path, self._schema(header))
        self.files.append(path)
        self._in_file = 0

    def write(self, table: pa.Table, header) -> None:
        while table.num_rows:
            if self._writer is None:
                self._open(header)
            take = min(table.num_rows, self.rows_per_file - self._in_file)
            self._buf.append(table.slice(0, take))
            self._buffered += take
            self._in_file += take
            table = table.slice(take)
            self._flush(everything=self._in_file == self.rows_per_file)
            if self._in_file == self.rows_per_file:
                self._writer.close()
                self._writer = None

    def _flush(self, everything: bool) -> None:
        if self._buffered < self.row_group_size and not (everything and self._buffered):
            return
        data = pa.concat_tables(self._buf)
        start = 0
        while data.num_rows - start >= self.row_group_size or (everything and start < data.num_rows):
            n = min(self.row_group_size, data.num_rows - start)
            self._writer.write_table(data.slice(start, n), row_group_size=n)
            start += n
        rest = data.slice(start)
        self._buf = [rest] if rest.num_rows else []
        self._buffered = rest.num_rows

    def close(self, header) -> None:
        if self._writer is None and not self.files:
            self._open(header)  # no trace at all: one empty file, so OUT is still a readable dataset
        if self._writer is not None:
            self._flush(everything=True)
            self._writer.close()
            self._writer = None


# ---- one batch as Arrow columns ------------------------------------------------------------------------


def _offsets(lengths: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32), pa.int32())


def _ranges(first: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Indices first[i] ... first[i] + lengths[i] - 1, range after range."""
    total = int(lengths.sum())
    take = np.repeat(first - (np.cumsum(lengths) - lengths), lengths) + np.arange(total, dtype=np.int64)
    return pa.array(take, pa.int64())


def _units(batch: TraceBatch) -> pa.StructArray:
    """Every unit of the batch as one struct array of :data:`UNIT_TYPE`."""
    u = batch.units
    n = len(u.start)
    tokens = np.asarray(batch.tokens, dtype=np.float64)
    no_tokens = np.isnan(tokens)
    rank = np.asarray(u.ranks(), dtype=np.float64)
    no_rank = np.isnan(rank)
    text = pa.array(u.text, pa.string()) if u.text is not None else pa.nulls(n, pa.string())
    arrays = [pa.array(u.unit_id, pa.string()), pa.array(u.doc_id, pa.string()),
              pa.array(np.asarray(u.start, dtype=np.int64)), pa.array(np.asarray(u.end, dtype=np.int64)),
              pa.array(np.asarray(u.score, dtype=np.float64), mask=~np.asarray(u.has_score, dtype=bool)),
              pa.array(np.where(no_rank, 0, rank).astype(np.int64), mask=no_rank), text,
              pa.array(np.where(no_tokens, 0, tokens).astype(np.int64), mask=no_tokens)]
    return pa.StructArray.from_arrays(arrays, fields=list(UNIT_TYPE))


def _unit_list_columns(batch: TraceBatch, units: pa.StructArray) -> dict[str, pa.Array]:
    """``branches``, ``fused``, ``reranked``, ``packed`` and ``cut`` of every trace, from the unit columns:
    a list the columns do not hold is the trace's (empty or null) list."""
    traces = batch.traces
    n = len(traces)
    u = batch.units
    lengths = np.asarray(u.lengths, dtype=np.int64)
    first = np.cumsum(lengths) - lengths
    owner = np.asarray(batch.list_trace, dtype=np.int64)
    fields = np.asarray(u.fields, dtype=object) if len(u.fields) else np.zeros(0, dtype=object)
    out: dict[str, pa.Array] = {}
    for name in _LISTS:
        sel = np.flatnonzero(fields == name)
        per_trace = np.zeros(n, dtype=np.int64)
        per_trace[owner[sel]] = lengths[sel]
        mask = pa.array([t.reranked is None for t in traces]) if name == "reranked" else None
        out[name] = pa.ListArray.from_arrays(_offsets(per_trace), units.take(_ranges(first[sel], lengths[sel])),
                                             type=pa.list_(UNIT_TYPE), mask=mask)
    # branches: one map entry per (trace, branch) in the trace's order; a branch the columns lack is empty
    entry: dict[tuple[int, str], int] = {}
    keys: list[str] = []
    per_trace = np.zeros(n, dtype=np.int64)
    for i, t in enumerate(traces):
        per_trace[i] = len(t.branches)
        for b in t.branches:
            entry[(i, "branches." + b)] = len(keys)
            keys.append(b)
    sel = np.flatnonzero(np.fromiter((f.startswith("branches.") for f in fields), dtype=bool,
                                     count=len(fields)))
    at = np.fromiter((entry[(int(owner[j]), fields[j])] for j in sel), dtype=np.int64, count=len(sel))
    order = np.argsort(at, kind="stable")
    sel, at = sel[order], at[order]
    entry_len = np.zeros(len(keys), dtype=np.int64)
    entry_len[at] = lengths[sel]
    values = pa.ListArray.from_arrays(_offsets(entry_len), units.take(_ranges(first[sel], lengths[sel])),
                                      type=pa.list_(UNIT_TYPE))
    out["branches"] = pa.MapArray.from_arrays(_offsets(per_trace), pa.array(keys, pa.string()), values,
                                              type=TRACE_SCHEMA.field("branches").type)
    return out


def _citations(traces) -> pa.Array:
    counts = np.fromiter((len(t.citations) for t in traces), dtype=np.int64, count=len(traces))
    cites = [c for t in traces for c in t.citations]
    values = pa.StructArray.from_arrays(
        [pa.array([c.unit_id for c in cites], pa.string()), pa.array([c.doc_id for c in cites], pa.string()),
         pa.array([c.start for c in cites], pa.int64()), pa.array([c.end for c in cites], pa.int64())],
        fields=list(CITATION_TYPE))
    return pa.ListArray.from_arrays(_offsets(counts), values, type=pa.list_(CITATION_TYPE))


def _durations(traces) -> pa.Array:
    counts = np.fromiter((len(t.durations_ms) for t in traces), dtype=np.int64, count=len(traces))
    keys = [k for t in traces for k in t.durations_ms]
    values = [v for t in traces for v in t.durations_ms.values()]
    return pa.MapArray.from_arrays(_offsets(counts), pa.array(keys, pa.string()), pa.array(values, pa.float64()),
                                   type=TRACE_SCHEMA.field("durations_ms").type)


def _refuse_agent_fields(source: Path, batch: TraceBatch) -> None:
    """The Parquet trace format has no columns for an agent's ``steps`` or ``claimed_success``: a file that
    uses them is refused (naming the first such line) rather than converted without them."""
    for t, line in zip(batch.traces, batch.lines, strict=True):
        if t.steps or t.claimed_success is not None:
            raise InputError(f"{source}:{line}: trace {t.query_id!r} trial {t.trial} carries agent "
                             f"{'steps' if t.steps else 'claimed_success'}, which the Parquet trace format does not "
                             f"hold; nothing was written. Score the JSONL file as it is (`ragassay score {source} "
                             "--golden G`)")


def _meta(traces) -> pa.Array:
    # json (not orjson): it writes NaN and integers of any size, which json.loads reads back as they were
    return pa.array([json.dumps(t.meta, ensure_ascii=False) if t.meta else None for t in traces],
                    pa.string())


def batch_table(batch: TraceBatch) -> pa.Table:
    """The batch's traces as a table of :data:`TRACE_SCHEMA` (metadata aside), one row per trace."""
    traces = batch.traces
    units = _units(batch)
    lists = _unit_list_columns(batch, units)

    def plain(name: str, typ: pa.DataType) -> pa.Array:
        return pa.array(list(map(attrgetter(name), traces)), typ)

    cols = {"trace_id": plain("trace_id", pa.string()), "query_id": plain("query_id", pa.string()),
            "trial": plain("trial", pa.int64()), "question": plain("question", pa.string()),
            **lists, "packed_tokens": plain("packed_tokens", pa.int64()), "answer": plain("answer", pa.string()),
            "citations": _citations(traces), "outcome": plain("outcome", pa.string()),
            "error": plain("error", pa.string()), "durations_ms": _durations(traces),
            "tokens_in": plain("tokens_in", pa.int64()), "tokens_out": plain("tokens_out", pa.int64()),
            "cost": plain("cost", pa.float64()), "meta": _meta(traces)}
    return pa.Table.from_arrays([cols[f.name] for f in TRACE_SCHEMA], schema=TRACE_SCHEMA)
