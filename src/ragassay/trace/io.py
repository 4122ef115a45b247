"""JSONL trace files: a header line, then one trace per line.

Format: line 1 is ``{"type": "header", ...RunHeader}``; every further non-blank line is
``{"type": "trace", ...Trace}``. The reader never drops a record silently: every malformed line is
returned as a :class:`Problem` with its 1-based line number, and strict mode raises on any.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import IO, NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import ValidationError

from ragassay._gc import gc_paused
from ragassay.errors import SchemaError
from ragassay.trace._arrow_batch import LONG_INT, Part, concat_parts, read_lines, select
from ragassay.trace.schema import RunHeader, Trace, TraceFacts, Unit, UnitColumns


class Problem(NamedTuple):
    """A record that could not be used: where (1-based line or row number) and why."""

    line: int
    message: str


def _first_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "(record)"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return "; ".join(parts) + more


def _parse_line(lineno: int, blob: bytes) -> tuple[dict | None, Problem | None, bool]:
    """One JSONL line -> (object, problem, whether it counts as a record), as the standard json module
    reads it: blank lines are not records; a line that is not UTF-8 or not a JSON object is a problem."""
    try:
        raw = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, Problem(lineno, f"not UTF-8 (byte 0x{blob[exc.start]:02x} at column {exc.start + 1}); "
                                     "re-encode the file as UTF-8"), True
    if lineno == 1:
        raw = raw.removeprefix("\ufeff")  # a byte-order mark some editors write
    if not raw.strip():
        return None, None, False
    try:
        rec = json.loads(raw)
    except RecursionError:
        return None, Problem(lineno, "JSON nested too deeply to read"), True
    except ValueError as exc:  # JSONDecodeError, or an integer literal too long to convert
        msg = (f"not valid JSON ({exc.msg} at column {exc.colno})"
               if isinstance(exc, json.JSONDecodeError) else f"not valid JSON ({exc})")
        return None, Problem(lineno, msg), True
    if not isinstance(rec, dict):
        return None, Problem(lineno, f"expected a JSON object, got {type(rec).__name__}"), True
    return rec, None, True


class TraceReader:
    """Stream traces from a JSONL file; ``header`` and ``problems`` fill in as lines are read.

    Duplicate (query_id, trial) keys are reported as problems and the later record is skipped, because a
    resumed run that re-wrote a record must not count a query twice. A line that is not UTF-8 is one
    problem; the lines around it still read. :attr:`lines` maps each trace's (query_id, trial) to its line,
    for :func:`~ragassay.trace.schema.validate_units`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.is_dir():
            inside = sorted(p.name for p in self.path.glob("*.jsonl"))[:3]
            hint = f" (it holds {', '.join(inside)})" if inside else ""
            raise SchemaError(f"{self.path}: is a directory, not a trace file; pass the .jsonl trace file "
                              f"inside it{hint}")
        if not self.path.is_file():
            raise SchemaError(f"{self.path}: trace file not found; pass the path of a .jsonl trace file")
        self.header: RunHeader | None = None
        self.problems: list[Problem] = []
        self.lines: dict[tuple[str, int], int] = {}
        self.n_records = 0

    def __iter__(self) -> Iterator[Trace]:
        seen = self.lines
        header_reported = False
        try:
            fh = self.path.open("rb")
        except OSError as exc:
            raise SchemaError(f"{self.path}: cannot read the trace file ({exc.strerror}); check its "
                              "permissions") from exc
        with fh:
            for lineno, blob in enumerate(fh, start=1):
                rec, problem, counted = _parse_line(lineno, blob)
                self.n_records += counted
                if problem is not None:
                    self.problems.append(problem)
                if rec is None:
                    continue
                kind = rec.pop("type", None)
                if kind == "header":
                    if lineno != 1 or self.header is not None:
                        self.problems.append(Problem(lineno, "header record after the first line; ignored"))
                        continue
                    try:
                        self.header = RunHeader.model_validate(rec)
                    except ValidationError as exc:
                        header_reported = True
                        self.problems.append(Problem(lineno, "bad header: " + _first_error(exc)))
                    continue
                if kind != "trace":
                    self.problems.append(
                        Problem(lineno, f"unknown record type {kind!r}; expected 'header' or 'trace'")
                    )
                    continue
                try:
                    tr = Trace.model_validate(rec)
                except ValidationError as exc:
                    self.problems.append(Problem(lineno, _first_error(exc)))
                    continue
                if tr.key in seen:
                    self.problems.append(
                        Problem(lineno, f"duplicate trace for query {tr.query_id!r} trial {tr.trial} "
                                        f"(first at line {seen[tr.key]}); skipped")
                    )
                    continue
                seen[tr.key] = lineno
                yield tr
        if self.header is None and not header_reported and self.n_records:
            self.problems.insert(0, Problem(1, "no header record on line 1; run pins are unknown"))


def format_problems(path: str | Path, problems: list[Problem], limit: int = 20) -> str:
    lines = [f"{path}:{p.line}: {p.message}" for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"... and {len(problems) - limit} more")
    return "\n".join(lines)


def read_traces(
    path: str | Path, strict: bool = False
) -> tuple[RunHeader | None, list[Trace], list[Problem]]:
    """Read a whole trace file. With ``strict=True`` any problem raises :class:`SchemaError` listing lines."""
    reader = TraceReader(path)
    traces = list(reader)
    if strict and reader.problems:
        raise SchemaError(
            f"{path}: {len(reader.problems)} malformed record(s); fix or remove them, or read with "
            f"strict=False to skip and count them\n" + format_problems(path, reader.problems)
        )
    return reader.header, traces, reader.problems


def _line(kind: str, model) -> str:
    if kind == "trace":
        # pydantic's own serializer at a quarter of the cost (writing traces was most of a run's time): the
        # JSON json.dumps writes of model_dump (compact, UTF-8, NaN kept) but for the spelling of some floats
        # (1e-05 is written 0.00001), which every JSON reader reads as the same number
        return '{"type":"trace",' + model.model_dump_json()[1:] + "\n"
    body = model.model_dump(mode="json")
    return json.dumps({"type": kind, **body}, ensure_ascii=False, separators=(",", ":")) + "\n"


class TraceWriter:
    """Write a trace file as a stream.

    ``mode="w"`` writes to a temporary file in the same folder and moves it into place with
    ``os.replace`` on a clean close, so a crash never leaves a half-written file under the final name.
    ``mode="a"`` appends to an existing file (resumable runs): every line is flushed and fsynced, and the
    existing header must carry the same config_sha. :attr:`done` holds the (query_id, trial) keys already
    present so a caller can skip them.
    """

    def __init__(self, path: str | Path, header: RunHeader, mode: str = "w"):
        if mode not in ("w", "a"):
            raise ValueError("mode must be 'w' (atomic rewrite) or 'a' (append, resumable)")
        self.path = Path(path)
        self.header = header
        self.mode = mode
        self.done: set[tuple[str, int]] = set()
        self._tmp: str | None = None
        self._fh: IO[str]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if mode == "a" and self.path.exists() and self.path.stat().st_size > 0:
            old_header, old, _ = read_traces(self.path)
            if old_header is None or old_header.config_sha != header.config_sha:
                raise SchemaError(
                    f"{self.path}: cannot append, the file was written by a different config "
                    f"(config_sha {getattr(old_header, 'config_sha', None)} vs {header.config_sha}); "
                    "write to a new file"
                )
            self.done = {t.key for t in old}
            self._fh = self.path.open("a", encoding="utf-8")
            self._ensure_newline()
        elif mode == "a":
            self._fh = self.path.open("w", encoding="utf-8")
            self._fh.write(_line("header", header))
            self._sync()
        else:
            fd, self._tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
            self._fh = os.fdopen(fd, "w", encoding="utf-8")
            self._fh.write(_line("header", header))

    def _ensure_newline(self) -> None:
        # A crash mid-line leaves a partial record; start the next record on a fresh line so that only the
        # partial one is reported as malformed.
        with self.path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                self._fh.write("\n")

    def _sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def write(self, trace: Trace) -> None:
        self._fh.write(_line("trace", trace))
        self.done.add(trace.key)
        if self.mode == "a":
            self._sync()

    def write_all(self, traces: Iterable[Trace]) -> None:
        """Write every trace; in append mode the lines are flushed and fsynced once, after the last (a batch
        is one sync, not one per line: a crash mid-batch leaves at most a partial last line, which the next
        append starts after, and traces not yet written are not in :attr:`done`)."""
        lines, keys = [], []
        for t in traces:
            lines.append(_line("trace", t))
            keys.append(t.key)
        self._fh.write("".join(lines))
        self.done.update(keys)  # only once written: a trace that cannot be serialized fails the whole batch
        if self.mode == "a" and lines:
            self._sync()

    def close(self, ok: bool = True) -> None:
        if self._fh.closed:
            return
        self._sync()
        self._fh.close()
        if self._tmp is not None:
            if ok:
                os.replace(self._tmp, self.path)
            else:
                os.unlink(self._tmp)
            self._tmp = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(ok=exc_type is None)


def write_traces(path: str | Path, header: RunHeader, traces: Iterable[Trace]) -> Path:
    """Write header + traces atomically; returns the path."""
    with TraceWriter(path, header, mode="w") as w:
        w.write_all(traces)
    return Path(path)


# ---- streaming, columnar reading ---------------------------------------------------------------------------

_UNIT_KEYS = frozenset(Unit.model_fields)
_LISTS = ("fused", "reranked", "packed", "cut")
_BIG = 2**53


@dataclass
class TraceBatch:
    """Consecutive valid traces of a file, their units as columns.

    ``facts`` hold the validated records' fields as columns and ``traces`` the records themselves, with
    every unit list emptied (``reranked`` keeps None or []), made on first use; ``lines`` their file lines;
    ``units`` hold the units of every non-empty list, trace after trace in
    :meth:`Trace.unit_lists` order; ``list_trace`` gives each list's trace index and ``tokens`` each unit's
    token count (NaN where absent). ``span`` (first byte, end byte, first line) lets a reader replay it.
    """

    facts: TraceFacts
    lines: list[int]
    units: UnitColumns
    list_trace: np.ndarray
    tokens: np.ndarray
    span: tuple[int, int, int]

    @property
    def traces(self) -> list[Trace]:
        return self.facts.traces


def first_of_each_key(seen: dict[tuple[str, int], int], keys: list[tuple[str, int]], lines: list[int],
                      replay: bool, problems: list[Problem]) -> list[int]:
    """Positions of the records to keep: the first of each (query_id, trial) in the source. ``seen`` maps
    each key to its first line so far and is updated; a later record of a key is a problem and skipped. On
    a replay a record is kept when it is the one ``seen`` names, and nothing is recorded."""
    keep = []
    for i, (line, key) in enumerate(zip(lines, keys, strict=True)):
        if replay:
            if seen.get(key) == line:
                keep.append(i)
        elif (first := seen.setdefault(key, line)) != line:
            problems.append(Problem(line, f"duplicate trace for query {key[0]!r} trial {key[1]} "
                                          f"(first at line {first}); skipped"))
        else:
            keep.append(i)
    return keep


def _strip(rec: dict) -> dict:
    """The record with every list of units emptied (values of the wrong kind are kept, to fail validation)."""
    out = dict(rec)
    br = rec.get("branches")
    if isinstance(br, dict) and all(isinstance(v, list) for v in br.values()):
        out["branches"] = dict.fromkeys(br, [])
    for name in _LISTS:
        if isinstance(rec.get(name), list):
            out[name] = []
    return out


def _unit_lists(rec: dict) -> list[tuple[str, list]]:
    out = [("branches." + name, us) for name, us in (rec.get("branches") or {}).items() if us]
    out += [(name, rec[name]) for name in _LISTS if rec.get(name)]
    return out


def _is_int(v: object, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _unit_ok(u: object) -> bool:
    """The unit needs no coercion to pass :class:`Unit` (exact JSON types, in range, no unknown keys)."""
    if type(u) is not dict or not _UNIT_KEYS.issuperset(u):
        return False
    uid, doc, score, text = u.get("unit_id"), u.get("doc_id"), u.get("score"), u.get("text")
    rank, tokens = u.get("rank"), u.get("tokens")
    return (type(uid) is str and bool(uid) and type(doc) is str and bool(doc)
            and _is_int(u.get("start"), -_BIG, _BIG) and _is_int(u.get("end"), -_BIG, _BIG)
            and (score is None or type(score) is float or _is_int(score, -2**63, 2**63 - 1))
            and (rank is None or _is_int(rank, 1, _BIG)) and (text is None or type(text) is str)
            and (tokens is None or _is_int(tokens, 0, _BIG)))


def _column_ok(arr: pa.Array, kinds: tuple[str, ...], lo: int | None = None, hi: int | None = None,
               nullable: bool = True) -> bool:
    if not len(arr):
        return True
    t = arr.type
    kind = ("null" if pa.types.is_null(t) else "int" if pa.types.is_int64(t) else "float"
            if pa.types.is_float64(t) else "str" if pa.types.is_string(t) else "other")
    if kind not in kinds or (not nullable and arr.null_count):
        return False
    if kind == "int" and len(arr) > arr.null_count and lo is not None:
        mm = pc.min_max(arr).as_py()
        return lo <= mm["min"] and mm["max"] <= hi
    return True


def _strings_ok(values: list) -> bool:
    """Every value a non-empty str (a type set and one containment test, both C loops)."""
    return not values or (set(map(type, values)) == {str} and "" not in values)


def _columns(cands: list[tuple[int, dict, Trace]]) -> tuple[UnitColumns, np.ndarray, np.ndarray] | set[int]:
    """Unit columns of the candidate records, or the indices of records whose units need pydantic (a
    whole-column check failed: a value of another JSON type, out of range, missing, or an unknown key)."""
    keys, fields, lens, owners, flat = [], [], [], [], []
    for ti, (_, rec, m) in enumerate(cands):
        for name, us in _unit_lists(rec):
            keys.append(m.key)
            fields.append(name)
            lens.append(len(us))
            owners.append(ti)
            flat.extend(us)
    lengths = np.asarray(lens, dtype=np.int64)
    try:
        ok = all(map(_UNIT_KEYS.issuperset, flat))
        uid, doc = (list(map(itemgetter(k), flat)) for k in ("unit_id", "doc_id"))
        start, end = (pa.array(list(map(itemgetter(k), flat))) for k in ("start", "end"))
        score, rank, text, tokens = (pa.array(list(map(dict.get, flat, repeat(k))))
                                     for k in ("score", "rank", "text", "tokens"))
        ok = (ok and _strings_ok(uid) and _strings_ok(doc)
              and _column_ok(start, ("int",), -_BIG, _BIG, False) and _column_ok(end, ("int",), -_BIG, _BIG, False)
              and _column_ok(score, ("null", "int", "float")) and _column_ok(rank, ("null", "int"), 1, _BIG)
              and _column_ok(text, ("null", "str")) and _column_ok(tokens, ("null", "int"), 0, _BIG))
    except (KeyError, TypeError, ValueError, OverflowError, pa.ArrowException):
        ok = False
    if not ok:
        owner = np.repeat(np.asarray(owners, dtype=np.int64), lengths)
        return {int(owner[i]) for i, u in enumerate(flat) if not _unit_ok(u)}
    has_score = score.is_valid().to_numpy(zero_copy_only=False) if len(score) else np.zeros(0, dtype=bool)
    cols = UnitColumns(keys=keys, fields=fields, lengths=lengths, unit_id=uid, doc_id=doc,
                       start=start.to_numpy(zero_copy_only=False).astype(np.int64),
                       end=end.to_numpy(zero_copy_only=False).astype(np.int64),
                       score=pc.fill_null(pc.cast(score, pa.float64()), math.nan).to_numpy(zero_copy_only=False)
                       if len(score) else np.zeros(0),
                       has_score=has_score, text=text.to_pylist() if text.null_count < len(text) else None,
                       rank=pc.fill_null(pc.cast(rank, pa.float64()), math.nan).to_numpy(zero_copy_only=False)
                       if len(rank) else np.zeros(0))
    tok = (pc.fill_null(pc.cast(tokens, pa.float64()), math.nan).to_numpy(zero_copy_only=False) if len(tokens)
           else np.zeros(0))
    return cols, np.asarray(owners, dtype=np.int64), tok


_UNIT_TYPES = {"unit_id": pa.string(), "doc_id": pa.string(), "start": pa.int64(), "end": pa.int64(),
               "score": pa.float64(), "rank": pa.int64(), "text": pa.string(), "tokens": pa.int64()}


def _unit_field_ok(name: str, arr: pa.Array) -> bool:
    """The check :func:`_columns` makes on one column, on Arrow's inferred type for it."""
    if name in ("unit_id", "doc_id"):
        return (pa.types.is_string(arr.type) and not arr.null_count
                and not (len(arr) and pc.any(pc.equal(arr, "")).as_py()))
    if name in ("start", "end"):
        return _column_ok(arr, ("int",), -_BIG, _BIG, False)
    if name == "score":
        return _column_ok(arr, ("null", "int", "float"))
    if name == "rank":
        return _column_ok(arr, ("null", "int"), 1, _BIG)
    if name == "tokens":
        return _column_ok(arr, ("null", "int"), 0, _BIG)
    return _column_ok(arr, ("null", "str"))


def _arrow_columns(cands: list[tuple[int, dict, Trace]],
                   blobs: dict[int, bytes]) -> tuple[UnitColumns, np.ndarray, np.ndarray] | None:
    """The unit columns of :func:`_columns`, parsed by Arrow's C++ JSON reader from the records' own lines
    so no unit becomes a Python object; None whenever Arrow cannot read the lines, infers a type the
    checks do not accept, or sees a key :class:`Unit` lacks (the caller then takes the dict path, which
    decides which records need pydantic). The list layout (which lists, in which order, how long) comes
    from the parsed records, so it is the dict path's by construction; Arrow's list lengths must agree."""
    keys, fields, lens, owners = [], [], [], []
    for ti, (_, rec, m) in enumerate(cands):
        for name, us in _unit_lists(rec):
            keys.append(m.key)
            fields.append(name)
            lens.append(len(us))
            owners.append(ti)
    if not lens:
        return None
    lines = [blobs[lineno].rstrip(b"\r\n") for lineno, _, _ in cands]
    try:
        table = pj.read_json(pa.BufferReader(b"\n".join(lines)),
                             read_options=pj.ReadOptions(block_size=max(1 << 20, 2 * max(map(len, lines)))))
        if table.num_rows != len(cands):
            return None
        parts, base, n_units = [], {}, 0
        offsets: dict[str, np.ndarray] = {}
        for name in dict.fromkeys(fields):
            if name.startswith("branches."):
                col = table.column("branches").combine_chunks().field(name.removeprefix("branches."))
            else:
                col = table.column(name).combine_chunks()
            if not pa.types.is_list(col.type) or not pa.types.is_struct(col.type.value_type):
                return None
            values = col.values
            if values.null_count or not _UNIT_KEYS.issuperset(f.name for f in values.type):
                return None
            offsets[name] = col.offsets.to_numpy()
            base[name] = n_units
            n_units += len(values)
            parts.append(values)
    except (KeyError, pa.ArrowException):
        return None
    lengths = np.asarray(lens, dtype=np.int64)
    owner_arr = np.asarray(owners, dtype=np.int64)
    first = np.fromiter((base[f] + offsets[f][o] for f, o in zip(fields, owners, strict=True)), dtype=np.int64,
                        count=len(fields))
    arrow_len = np.fromiter((offsets[f][o + 1] - offsets[f][o] for f, o in zip(fields, owners, strict=True)),
                            dtype=np.int64, count=len(fields))
    if not np.array_equal(arrow_len, lengths):
        return None
    take = pa.array(np.repeat(first - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum())))
    cols = {}
    for key, typ in _UNIT_TYPES.items():
        pieces = []
        for values in parts:
            arr = values.field(key) if values.type.get_field_index(key) >= 0 else pa.nulls(len(values))
            if not _unit_field_ok(key, arr):
                return None
            pieces.append(arr.cast(typ))
        cols[key] = pa.concat_arrays(pieces).take(take)
    score, text, tokens, rank = cols["score"], cols["text"], cols["tokens"], cols["rank"]
    units = UnitColumns(keys=keys, fields=fields, lengths=lengths, unit_id=cols["unit_id"].to_pylist(),
                        doc_id=cols["doc_id"].to_pylist(), start=cols["start"].to_numpy(zero_copy_only=False),
                        end=cols["end"].to_numpy(zero_copy_only=False),
                        score=pc.fill_null(score, math.nan).to_numpy(zero_copy_only=False),
                        has_score=score.is_valid().to_numpy(zero_copy_only=False),
                        text=text.to_pylist() if text.null_count < len(text) else None,
                        rank=pc.fill_null(rank.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False))
    return units, owner_arr, pc.fill_null(tokens.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False)


PARSE_THREADS = 2  # batches parsed at once ahead of the one being finished


def _read_fast(pending: list[tuple[int, bytes]]) -> tuple[Part, list[tuple[int, bytes]]]:
    """:func:`read_lines` of a batch's lines, with line 1 (the header, perhaps behind a byte-order mark)
    always handed back: it is read the slow way. Touches no reader state, so it runs on any thread."""
    with gc_paused():  # millions of acyclic objects: generation scans would free nothing
        fast, rest = read_lines([lb for lb in pending if lb[0] != 1])
    if pending and pending[0][0] == 1:
        rest.insert(0, pending[0])
    return fast, rest


class TraceBatchReader:
    """Read a trace file in batches of columns: the problems, header and line map of :class:`TraceReader`,
    record for record, at a fraction of its cost.

    Each line is parsed once, by Arrow's JSON reader, into one table per batch holding the record fields
    and the units (:mod:`ragassay.trace._arrow_batch`), and every record is validated on those columns.
    A line Arrow cannot read, and a record that fails a column check, is handed back: it is parsed with
    orjson, its record without units validated by :class:`Trace` and its units checked as columns, and a
    record that fails that (or a line orjson rejects, e.g. the NaN literal Python's json accepts) goes the
    :class:`TraceReader` way (json module, full pydantic model), so the outcome and every problem message
    are the same. Traces read through Arrow are built without re-validation: they equal the validated
    model (``==``), but their ``model_fields_set`` names every field and ``durations_ms`` keys follow the
    batch's first-seen order. Memory is bounded by the batch (plus the (query, trial) -> line map).
    """

    def __init__(self, path: str | Path, batch_size: int = 2048):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._plain = TraceReader(path)  # path checks and the problem/line bookkeeping
        self.path, self.batch_size = self._plain.path, batch_size
        self.header: RunHeader | None = None
        self.problems: list[Problem] = []
        self.lines: dict[tuple[str, int], int] = {}
        self.n_records = 0
        self.n_traces = 0
        self._header_reported = False
        self._coerced: set[int] = set()  # lines of the batch read the slow way: their dict is not their line

    def _open(self):
        try:
            return self.path.open("rb", buffering=1 << 22)  # 4 MB: readline of long lines is 3x cheaper
        except OSError as exc:
            raise SchemaError(f"{self.path}: cannot read the trace file ({exc.strerror}); check its "
                              "permissions") from exc

    def __iter__(self) -> Iterator[TraceBatch]:
        with self._open() as fh, ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="ragassay-parse") as pool:
            # Arrow's parse releases the GIL: the next batches are parsed on other threads (two cores' worth)
            # while this one is finished here, in file order, where all the reader's state changes
            ahead: collections.deque = collections.deque()
            offset, lineno = 0, 1
            while True:
                blobs = list(itertools.islice(fh, self.batch_size))  # the lines of a batch, read in C
                if blobs:
                    end = offset + sum(map(len, blobs))
                    pending = list(zip(range(lineno, lineno + len(blobs)), blobs, strict=True))
                    ahead.append((pending, (offset, end, lineno), pool.submit(_read_fast, pending)))
                    offset, lineno = end, lineno + len(blobs)
                if ahead and (not blobs or len(ahead) > PARSE_THREADS):
                    pending, span, parsed = ahead.popleft()
                    yield self._batch(pending, span, replay=False, parsed=parsed.result())
                elif not blobs:
                    break
        if self.header is None and not self._header_reported and self.n_records:
            self.problems.insert(0, Problem(1, "no header record on line 1; run pins are unknown"))

    @property
    def extent(self) -> int:
        """Where the last batch's span ends: the file's size in bytes (a span is a byte range)."""
        return self.path.stat().st_size

    def replay(self, span: tuple[int, int, int]) -> TraceBatch:
        """The batch at ``span`` again (the same traces, no new problems), e.g. to score it once more."""
        with self._open() as fh:
            fh.seek(span[0])
            data = fh.read(span[1] - span[0])
        blobs = data.splitlines(keepends=True)
        return self._batch([(span[2] + i, b) for i, b in enumerate(blobs)], span, replay=True)

    def _batch(self, pending: list[tuple[int, bytes]], span: tuple[int, int, int], replay: bool,
               parsed: tuple[Part, list[tuple[int, bytes]]] | None = None) -> TraceBatch:
        problems: list[Problem] = []
        blobs = dict(pending)
        self._coerced = set()
        with gc_paused():  # parsing allocates millions of acyclic objects; generation scans would free nothing
            fast, rest = parsed if parsed is not None else _read_fast(pending)
            if not replay:
                self.n_records += len(fast.facts)
            cands = self._records(rest, problems, blobs, replay)
            if cands:
                cols = self._validated(cands, problems, blobs)  # edits cands: it must run first
                slow = Part(np.asarray([c[0] for c in cands], dtype=np.int64),
                            TraceFacts.from_traces([m for _, _, m in cands]), *cols)
                part = concat_parts([fast, slow])
                if len(fast.facts):
                    part = select(part, np.argsort(part.lines, kind="stable"))
            else:
                part = fast
            keep = first_of_each_key(self.lines, part.facts.keys, part.lines.tolist(), replay, problems)
            if len(keep) < len(part.facts):
                part = select(part, np.asarray(keep, dtype=np.int64))
        if not replay:
            problems.sort(key=lambda p: p.line)
            self.problems.extend(problems)
            self.n_traces += len(part.facts)
        return TraceBatch(part.facts, part.lines.tolist(), part.units, part.list_trace, part.tokens, span)

    def _records(self, lines: list[tuple[int, bytes]], problems: list[Problem], blobs: dict[int, bytes],
                 replay: bool) -> list[tuple[int, dict, Trace]]:
        """The lines Arrow handed back, read with orjson (the json module where orjson refuses) and the
        record without its units validated by :class:`Trace`; a record that fails goes to :meth:`_slow`."""
        cands: list[tuple[int, dict, Trace]] = []
        for lineno, blob in lines:
            try:
                if LONG_INT.search(blob) is not None:
                    raise orjson.JSONDecodeError("an integer may be wider than orjson keeps", "", 0)
                rec = orjson.loads(blob)
                counted = True
            except orjson.JSONDecodeError:
                rec, problem, counted = _parse_line(lineno, blob)
                if problem is not None:
                    problems.append(problem)
            if not replay:
                self.n_records += counted
            if type(rec) is not dict:
                if rec is not None:
                    problems.append(Problem(lineno, f"expected a JSON object, got {type(rec).__name__}"))
                continue
            kind = rec.pop("type", None)
            if kind == "header":
                if not replay:
                    self._read_header(lineno, rec, problems)
                continue
            if kind != "trace":
                problems.append(Problem(lineno, f"unknown record type {kind!r}; expected 'header' or 'trace'"))
                continue
            try:
                cands.append((lineno, rec, Trace.model_validate(_strip(rec))))
            except ValidationError:
                self._slow(lineno, blobs[lineno], cands, problems)
        return cands

    def _read_header(self, lineno: int, rec: dict, problems: list[Problem]) -> None:
        if lineno != 1 or self.header is not None:
            problems.append(Problem(lineno, "header record after the first line; ignored"))
            return
        try:
            self.header = RunHeader.model_validate(rec)
        except ValidationError as exc:
            self._header_reported = True
            problems.append(Problem(lineno, "bad header: " + _first_error(exc)))

    def _slow(self, lineno: int, blob: bytes, cands: list, problems: list[Problem]) -> None:
        """Read one line as :class:`TraceReader` does (the json module: orjson turns integers beyond 64 bits
        into floats) and validate it with the full model: a problem, or its coerced values as JSON types."""
        rec, _, _ = _parse_line(lineno, blob)
        rec.pop("type", None)
        try:
            full = Trace.model_validate(rec)
        except ValidationError as exc:
            problems.append(Problem(lineno, _first_error(exc)))
            return
        dumped = full.model_dump()
        self._coerced.add(lineno)
        cands.append((lineno, dumped, Trace.model_validate(_strip(dumped))))

    def _validated(self, cands: list, problems: list[Problem],
                   blobs: dict[int, bytes]) -> tuple[UnitColumns, np.ndarray, np.ndarray]:
        """Columns of the candidates; records failing a unit or packed-token check are re-validated one by
        one (and ``cands`` edited in place) until every remaining record passes."""
        while True:
            got = None if self._coerced else _arrow_columns(cands, blobs)
            if got is None:
                got = _columns(cands)
            if isinstance(got, set):
                bad = got
                if not bad:  # a column check no single unit fails would loop forever
                    raise RuntimeError("unit columns failed a check that every unit passes")
            else:
                cols, list_trace, tokens = got
                bad = _packed_mismatch(cands, cols, list_trace, tokens)
                if not bad:
                    return got
            keep = [c for i, c in enumerate(cands) if i not in bad]
            for i in sorted(bad):
                self._slow(cands[i][0], blobs[cands[i][0]], keep, problems)
            keep.sort(key=lambda c: c[0])
            cands[:] = keep


def _packed_mismatch(cands: list, cols: UnitColumns, list_trace: np.ndarray, tokens: np.ndarray) -> set[int]:
    """Records whose packed units all carry token counts that do not sum to ``packed_tokens``."""
    packed = np.asarray([f == "packed" for f in cols.fields], dtype=bool)
    if not packed.any():
        return set()
    unit_trace = np.repeat(list_trace, cols.lengths)
    in_packed = np.repeat(packed, cols.lengths)
    n = len(cands)
    tok = np.where(np.isnan(tokens), 0, tokens)
    total = np.bincount(unit_trace[in_packed], weights=tok[in_packed], minlength=n)
    unknown = np.bincount(unit_trace[in_packed], weights=np.isnan(tokens[in_packed]), minlength=n)
    has = np.zeros(n, dtype=bool)
    has[list_trace[packed]] = True
    want = np.fromiter((m.packed_tokens for _, _, m in cands), dtype=np.float64, count=n)
    return {int(i) for i in np.flatnonzero(has & (unknown == 0) & (total != want))}
