"""Parquet trace datasets: the JSONL trace record as columns, one row per (query, trial).

A dataset is one ``.parquet`` file or a directory of them (read recursively, files in sorted path order,
names starting with ``_`` or ``.`` skipped, as Spark, Polars and pyarrow do); it is one run, the
equivalent of one JSONL trace file. The columns are the :class:`~ragassay.trace.schema.Trace` fields with
the types of :data:`TRACE_SCHEMA`; a column may be absent, and a null means the field is absent from the
record (its default applies; a null ``trace_id`` is "Field required"). ``meta`` is a JSON object as text.

The run header (:class:`~ragassay.trace.schema.RunHeader` as JSON) is ``_header.json`` in the dataset's
directory when present, else the key-value metadata :data:`HEADER_KEY` of the files (identical in
every file). Row numbers count the dataset's rows from 1 across its files in order and play the role of
line numbers (a header problem is reported at row 0). :class:`ParquetTraceReader` reads row-group
batches into :class:`~ragassay.trace.io.TraceBatch` objects with the JSONL reader's validation: the same
records are kept and the same problems reported.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import ValidationError

from ragassay._arrow_json import filled, in_range, valid
from ragassay.errors import SchemaError
from ragassay.trace._arrow_batch import _OUTCOMES, _strs, citation_objects
from ragassay.trace.io import Problem, TraceBatch, _first_error, first_of_each_key
from ragassay.trace.schema import Citation, RunHeader, Trace, TraceFacts, UnitColumns

HEADER_KEY = b"ragassay.header"
SIDECAR = "_header.json"

UNIT_TYPE = pa.struct([("unit_id", pa.string()), ("doc_id", pa.string()), ("start", pa.int64()),
                       ("end", pa.int64()), ("score", pa.float64()), ("rank", pa.int64()), ("text", pa.string()),
                       ("tokens", pa.int64())])
CITATION_TYPE = pa.struct([("unit_id", pa.string()), ("doc_id", pa.string()), ("start", pa.int64()),
                           ("end", pa.int64())])
TRACE_SCHEMA = pa.schema([
    ("trace_id", pa.string()), ("query_id", pa.string()), ("trial", pa.int64()), ("question", pa.string()),
    ("branches", pa.map_(pa.string(), pa.list_(UNIT_TYPE))), ("fused", pa.list_(UNIT_TYPE)),
    ("reranked", pa.list_(UNIT_TYPE)), ("packed", pa.list_(UNIT_TYPE)), ("packed_tokens", pa.int64()),
    ("cut", pa.list_(UNIT_TYPE)), ("answer", pa.string()), ("citations", pa.list_(CITATION_TYPE)),
    ("outcome", pa.string()), ("error", pa.string()), ("durations_ms", pa.map_(pa.string(), pa.float64())),
    ("tokens_in", pa.int64()), ("tokens_out", pa.int64()), ("cost", pa.float64()), ("meta", pa.string()),
])
_LISTS = ("fused", "reranked", "packed", "cut")
# the map of branches as the list of (key, value) entries it is stored as, which compute kernels take
_ENTRIES = pa.list_(pa.struct([("key", pa.string()), ("value", pa.list_(UNIT_TYPE))]))
_DURATION_ENTRIES = pa.list_(pa.struct([("key", pa.string()), ("value", pa.float64())]))
_BIG = 2**53


def is_parquet_source(path: str | Path) -> bool:
    """A ``.parquet`` file, or a directory holding one (at any depth)."""
    p = Path(path)
    if p.is_dir():
        return any(_data_files(p))
    return p.suffix.lower() == ".parquet"


def _data_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet")
                  if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts))


# ---- writing -------------------------------------------------------------------------------------------


def trace_row(rec: dict) -> dict:
    """A trace record (as in JSONL, without ``type``) as a row of :data:`TRACE_SCHEMA`."""
    row = {k: v for k, v in rec.items() if k != "type"}
    if row.get("steps") or row.get("claimed_success") is not None:
        # the schema has no columns for them, and from_pylist would drop them without a word
        raise SchemaError(f"trace {row.get('query_id')!r} trial {row.get('trial', 0)} carries agent steps or "
                         "claimed_success, which the Parquet trace format does not hold; keep agent traces as "
                         "JSONL")
    row.pop("steps", None)
    row.pop("claimed_success", None)
    for key in ("branches", "durations_ms"):
        if isinstance(row.get(key), dict):
            row[key] = list(row[key].items())
    if "citations" in row and isinstance(row["citations"], list):
        row["citations"] = [{"unit_id": c} if isinstance(c, str) else c for c in row["citations"]]
    if "meta" in row:
        row["meta"] = json.dumps(row["meta"], ensure_ascii=False, sort_keys=True)
    return row


def write_parquet_traces(path: str | Path, header: RunHeader | None, records: Iterable[Trace | dict], *,
                         row_group_size: int = 8192) -> Path:
    """Write one Parquet trace file (``header`` as its key-value metadata); returns the path.

    ``records`` are :class:`Trace` objects or JSONL-style dicts; a dict is written as is (no validation),
    so a dataset can hold the same bad records as a JSONL file."""
    meta = {HEADER_KEY: json.dumps(header.model_dump(mode="json"), ensure_ascii=False)} if header else None
    schema = TRACE_SCHEMA.with_metadata(meta)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, schema) as w:
        chunk: list[dict] = []
        for rec in records:
            chunk.append(trace_row(rec.model_dump(mode="json") if isinstance(rec, Trace) else rec))
            if len(chunk) >= row_group_size:
                w.write_table(pa.Table.from_pylist(chunk, schema=schema), row_group_size=row_group_size)
                chunk = []
        if chunk:
            w.write_table(pa.Table.from_pylist(chunk, schema=schema), row_group_size=row_group_size)
    return path


# ---- reading -------------------------------------------------------------------------------------------


def _drop_nulls(value):
    """A row as a JSON record: a null field is an absent one, in the record, its citations and units."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    if isinstance(value, tuple):  # a map entry
        return tuple(_drop_nulls(v) for v in value)
    return value


def _record(row: dict, problems: list[Problem], line: int) -> dict | None:
    """A dataset row as the equivalent JSONL record (maps as objects, ``meta`` parsed), or None with a
    problem when ``meta`` is not JSON."""
    rec = _drop_nulls(row)
    for key in ("branches", "durations_ms"):
        if key in rec:
            rec[key] = dict(rec[key])
    if "meta" in rec:
        try:
            rec["meta"] = json.loads(rec["meta"])
        except ValueError as exc:
            problems.append(Problem(line, f"meta: not valid JSON ({exc})"))
            return None
    return rec


class ParquetTraceReader:
    """Read a Parquet trace dataset in batches: the interface of :class:`~ragassay.trace.io.TraceBatchReader`
    (``header``, ``problems``, ``lines``, ``n_records``, ``n_traces``, ``replay``), the same records kept and
    the same problems, with row numbers for line numbers.

    ``only`` restricts reading to the dataset's file at that index (a partition); row numbers stay the
    dataset's. Every file's schema is checked when the reader opens: a column that is not a trace field,
    or whose type cannot be cast to :data:`TRACE_SCHEMA`'s, raises :class:`SchemaError` naming the file.
    """

    def __init__(self, path: str | Path, batch_size: int = 2048, only: int | None = None):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.path, self.batch_size = Path(path), batch_size
        if self.path.is_dir():
            self.files = _data_files(self.path)
            if not self.files:
                raise SchemaError(f"{self.path}: no .parquet files in this directory; pass a Parquet trace "
                                  "dataset (a .parquet file or a directory of them)")
        elif self.path.is_file():
            self.files = [self.path]
        else:
            raise SchemaError(f"{self.path}: trace dataset not found; pass a .parquet file or a directory of them")
        self.problems: list[Problem] = []
        self.lines: dict[tuple[str, int], int] = {}
        self.n_records = 0
        self.n_traces = 0
        metas = [self._metadata(f) for f in self.files]
        self.file_rows = [m.num_rows for m in metas]
        self.first_row = np.concatenate([[0], np.cumsum(self.file_rows)]).astype(np.int64).tolist()
        self.header = self._header(metas)
        self.only = only

    @property
    def n_rows(self) -> int:
        return self.first_row[-1]

    @property
    def extent(self) -> int:
        """Where the last batch's span ends: the dataset's rows (a span is a row range)."""
        return self.n_rows

    def _metadata(self, f: Path) -> pq.FileMetaData:
        try:
            meta = pq.read_metadata(f)
        except (OSError, pa.ArrowException) as exc:
            raise SchemaError(f"{f}: not a readable Parquet file ({exc}); pass a Parquet trace dataset") from exc
        schema = meta.schema.to_arrow_schema()
        for field in schema:
            if field.name not in TRACE_SCHEMA.names:
                raise SchemaError(f"{f}: column {field.name!r} is not a trace field; drop it or move it into "
                                  "'meta' (see docs/traces.md, Parquet datasets)")
            want = TRACE_SCHEMA.field(field.name).type
            try:
                pa.array([], field.type).cast(want)
            except (pa.ArrowException, NotImplementedError) as exc:
                raise SchemaError(f"{f}: column {field.name!r} is {field.type}, which does not cast to {want}; "
                                  "write it with the trace schema (ragassay.trace.parquet.TRACE_SCHEMA)") from exc
        return meta

    def _header(self, metas: list[pq.FileMetaData]) -> RunHeader | None:
        sidecar = self.path / SIDECAR if self.path.is_dir() else None
        if sidecar is not None and sidecar.is_file():
            raw, where = sidecar.read_bytes(), sidecar
        else:
            blobs = [(m.metadata or {}).get(HEADER_KEY) for m in metas]
            raw, where = blobs[0], self.files[0]
            for f, b in zip(self.files, blobs, strict=True):
                if b != raw:
                    raise SchemaError(f"{f}: its run header differs from {self.files[0]}'s; a dataset is one run: "
                                      "write the same header to every file, or put it in _header.json")
        if raw is None:
            if self.n_rows:
                self.problems.append(Problem(0, f"no run header (no {SIDECAR}, no {HEADER_KEY.decode()} file "
                                                "metadata); run pins are unknown"))
            return None
        try:
            rec = json.loads(raw)
            rec.pop("type", None)
            return RunHeader.model_validate(rec)
        except (ValueError, AttributeError) as exc:
            msg = _first_error(exc) if isinstance(exc, ValidationError) else f"not a JSON object ({exc})"
            self.problems.append(Problem(0, f"bad header in {where.name}: {msg}"))
            return None

    def _read(self, fi: int, a: int, b: int) -> pa.Table:
        """Rows [a, b) of file ``fi`` with the trace schema's types (absent columns stay absent)."""
        pf = pq.ParquetFile(self.files[fi])
        sizes = np.cumsum([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)])
        g0 = int(np.searchsorted(sizes, a, side="right"))
        g1 = int(np.searchsorted(sizes, b - 1, side="right")) if b > a else g0
        base = int(sizes[g0 - 1]) if g0 else 0
        table = pf.read_row_groups(list(range(g0, g1 + 1))).slice(a - base, b - a)
        return table.cast(pa.schema([TRACE_SCHEMA.field(n) for n in table.column_names]))

    def __iter__(self) -> Iterator[TraceBatch]:
        files = range(len(self.files)) if self.only is None else [self.only]
        for fi in files:
            row = self.first_row[fi]
            for rb in pq.ParquetFile(self.files[fi]).iter_batches(batch_size=self.batch_size):
                table = pa.Table.from_batches([rb])
                table = table.cast(pa.schema([TRACE_SCHEMA.field(n) for n in table.column_names]))
                yield self._batch(table, row + 1, (row, row + len(table), row + 1), replay=False)
                row += len(table)

    def replay(self, span: tuple[int, int, int]) -> TraceBatch:
        """The batch at ``span`` (dataset rows [span[0], span[1]), 0-based) again, with no new problems."""
        fi = bisect.bisect_right(self.first_row, span[0]) - 1
        base = self.first_row[fi]
        return self._batch(self._read(fi, span[0] - base, span[1] - base), span[2], span, replay=True)

    def _batch(self, table: pa.Table, first_line: int, span: tuple[int, int, int], replay: bool) -> TraceBatch:
        n = table.num_rows
        problems: list[Problem] = []
        if not replay:
            self.n_records += n
        plain = [c for c in table.column_names if c not in _LISTS and c != "branches"]
        lists = {c: table.column(c).combine_chunks() for c in (*_LISTS, "branches") if c in table.column_names}
        branch_names = None
        if "branches" in lists:
            lists["branches"] = lists["branches"].cast(_ENTRIES)
            branch_names = _names(lists["branches"])
        # rows whose record fields the columns prove valid are not built one by one (see _plain_ok)
        fast = _plain_ok(table, lists)
        slow = np.flatnonzero(~fast).tolist()
        rows = table.select(plain).take(pa.array(slow, pa.int64())).to_pylist() if slow else []
        cands: list[tuple[int, int, Trace]] = []  # (row in batch, line, record without units)
        valid = {c: arr.is_valid().to_pylist() for c, arr in lists.items()}
        for i, row in zip(slow, rows, strict=True):
            line = first_line + i
            rec = _record(row, problems, line)
            if rec is None:
                continue
            for c, ok in valid.items():
                if ok[i]:
                    rec[c] = dict.fromkeys(branch_names[i], []) if c == "branches" else []
            try:
                cands.append((i, line, Trace.model_validate(rec)))
            except ValidationError:
                self._full(table, i, line, problems)
        bad = _unit_problems(lists, n, table.column("packed_tokens") if "packed_tokens" in table.column_names
                             else None)
        if bad.any():
            for i in np.flatnonzero(bad & fast).tolist():
                self._full(table, i, first_line + i, problems)
            fast &= ~bad
            for i, line, _ in cands:
                if bad[i]:
                    self._full(table, i, line, problems)
            cands = [c for c in cands if not bad[c[0]]]
        fast_rows = np.flatnonzero(fast)
        facts = TraceFacts.concat([_plain_facts(table.select(plain), fast_rows, branch_names, valid),
                                   TraceFacts.from_traces([m for _, _, m in cands])])
        row_of = np.concatenate([fast_rows, np.asarray([i for i, _, _ in cands], dtype=np.int64)])
        order = np.argsort(row_of, kind="stable")
        facts, row_of = facts.select(order.tolist()), row_of[order].tolist()
        keep = first_of_each_key(self.lines, facts.keys, [first_line + i for i in row_of], replay, problems)
        facts = facts.select(keep)
        kept_rows = [row_of[k] for k in keep]
        if not replay:
            problems.sort(key=lambda p: p.line)
            self.problems.extend(problems)
            self.n_traces += len(keep)
        units, list_trace, tokens = _unit_columns(lists, kept_rows, facts.keys, branch_names)
        return TraceBatch(facts, [first_line + i for i in kept_rows], units, list_trace, tokens, span)

    def _full(self, table: pa.Table, i: int, line: int, problems: list[Problem]) -> None:
        """Validate row ``i`` with its units as the JSONL reader does a record it cannot take the fast way;
        the columns' checks mirror the model's, so this always ends in the model's problem."""
        rec = _record(table.slice(i, 1).to_pylist()[0], problems, line)
        if rec is None:
            return
        try:
            Trace.model_validate(rec)
        except ValidationError as exc:
            problems.append(Problem(line, _first_error(exc)))
            return
        raise RuntimeError(f"row {line} failed a unit check its model passes")


def _nonempty(arr: pa.Array | None, n: int) -> np.ndarray:
    """Per row: a string of at least one character."""
    return np.zeros(n, dtype=bool) if arr is None else filled(pc.greater(pc.utf8_length(arr), 0), False)


def _per_row(bad_values: np.ndarray, parent: np.ndarray, n: int) -> np.ndarray:
    """Per row: whether any of its values (``parent`` gives each value's row) is flagged."""
    return np.bincount(parent[bad_values], minlength=n).astype(bool) if len(parent) else np.zeros(n, dtype=bool)


def _plain_ok(table: pa.Table, lists: dict[str, pa.Array]) -> np.ndarray:
    """Per row, True when :class:`Trace` surely accepts its record fields (units aside: ``_unit_problems``
    checks them) as the columns hold them, so the row needs no model of its own: the model's constraints,
    tested on the columns. A row with ``meta`` (JSON text, parsed per row) and any value the test is not
    sure of is False, and goes the model's way."""
    n = table.num_rows
    cols = {c: table.column(c).combine_chunks() for c in table.column_names}
    get = cols.get
    ok = _nonempty(get("trace_id"), n) & _nonempty(get("query_id"), n)
    for name in ("trial", "packed_tokens", "tokens_in", "tokens_out"):
        if name in cols:
            ok &= in_range(cols[name], 0, _BIG)
    if "cost" in cols:
        cost = filled(cols["cost"], 0.0)
        ok &= np.isfinite(cost) & (cost >= 0)
    if "meta" in cols:
        ok &= ~valid(cols["meta"])
    outcome = get("outcome")
    if outcome is not None:
        ok &= filled(pc.or_(pc.is_null(outcome), pc.is_in(outcome, pa.array(_OUTCOMES, pa.string()))), False)
        ok &= ~filled(pc.equal(outcome, "error"), False) | _nonempty(get("error"), n)
        ok &= ~filled(pc.equal(outcome, "answered"), False) | (valid(cols["answer"]) if "answer" in cols
                                                                 else np.zeros(n, dtype=bool))
    cites = get("citations")
    if cites is not None and len(cites):
        values, parent, _ = _flat(cites)
        if len(values):
            s, e = values.field("start"), values.field("end")
            sv, ev = valid(s), valid(e)
            bad = ~valid(values) | ~_nonempty(values.field("unit_id"), len(values)) | (sv != ev)
            bad |= (filled(s, 0) < 0) | (filled(e, 0) < filled(s, 0))
            ok &= ~_per_row(bad, parent, n)
    durations = get("durations_ms")
    if durations is not None and len(durations):
        values, parent, _ = _flat(durations.cast(_DURATION_ENTRIES))
        if len(values):
            v = filled(values.field("value"), math.nan)
            ok &= ~_per_row(~(np.isfinite(v) & (v >= 0)), parent, n)
    branches = lists.get("branches")
    if branches is not None and len(branches):
        values, parent, _ = _flat(branches)
        if len(values):
            ok &= ~_per_row(~valid(values.field("value")), parent, n)
    return ok


def _citation_lists(arr: pa.Array, n: int) -> list[list[Citation]]:
    """Per row its Citation objects (checked by ``_plain_ok``), set as the model leaves them: the keys the
    row gives (its non-null fields) are the ones it records as set."""
    values, parent, lengths = _flat(arr)
    objs = citation_objects(*(values.field(k).to_pylist() for k in ("unit_id", "doc_id", "start", "end")))
    ends = np.cumsum(lengths).tolist()
    return [objs[e - k:e] for e, k in zip(ends, lengths.tolist(), strict=True)]


def _totals(arr: pa.Array, n: int) -> list[float | None]:
    """Per row the last ``total`` of its durations map (a map keeps its last value of a key), None without."""
    values, parent, _ = _flat(arr)
    out = np.full(n, math.nan)
    if len(values):
        at = np.flatnonzero(filled(pc.equal(values.field("key"), "total"), False))
        rows = parent[at]
        last = np.flatnonzero(np.append(rows[1:] != rows[:-1], True)) if len(at) else at
        out[rows[last]] = filled(values.field("value"), math.nan)[at[last]]
    return pa.array(out, mask=np.isnan(out)).to_pylist()


def _plain_facts(plain: pa.Table, rows: np.ndarray, branch_names: list | None, valid_lists: dict[str, list]
                 ) -> TraceFacts:
    """The facts of the rows ``rows`` of ``plain`` (the batch without its unit lists), which ``_plain_ok``
    passed, from the columns; their Trace objects are validated from the rows on first use."""
    if not len(rows):
        return TraceFacts.empty()
    t = plain.take(pa.array(rows, pa.int64()))
    k = t.num_rows
    have = set(t.column_names)

    def py(name: str, fill=None) -> list:
        if name not in have:
            return [fill] * k
        col = t.column(name)
        return (pc.fill_null(col, fill) if fill is not None else col).to_pylist()

    rows_i = rows.tolist()
    names = [tuple(dict.fromkeys(branch_names[i])) if branch_names and branch_names[i] else () for i in rows_i]
    reranked = valid_lists.get("reranked")
    list_valid = {c: [ok[i] for i in rows_i] for c, ok in valid_lists.items()}
    cites = (_citation_lists(t.column("citations").combine_chunks(), k) if "citations" in have
             else [[] for _ in rows_i])
    totals = (_totals(t.column("durations_ms").combine_chunks().cast(_DURATION_ENTRIES), k) if "durations_ms" in have
              else [None] * k)

    def make() -> list[Trace]:
        out = []
        for j, row in enumerate(t.to_pylist()):
            rec = _record(row, [], 0)  # no meta: nothing to report
            for c, ok in list_valid.items():
                if ok[j]:
                    rec[c] = dict.fromkeys(names[j], []) if c == "branches" else []
            out.append(Trace.model_validate(rec))
        return out

    return TraceFacts(py("query_id"), py("trial", 0), py("trace_id"), py("outcome"), py("error"), py("answer"),
                      py("packed_tokens", 0), [reranked[i] for i in rows_i] if reranked else [False] * k, names,
                      cites, totals, py("tokens_in"), py("tokens_out"), py("cost"), make=make)


def _names(arr: pa.Array) -> list[list[str] | None]:
    """Per row, the branch names of its map (None where the map is null)."""
    keys = pc.list_flatten(arr).field("key").to_pylist()
    out: list[list[str] | None] = [[] if v else None for v in arr.is_valid().to_pylist()]
    for row, key in zip(pc.list_parent_indices(arr).to_pylist(), keys, strict=True):
        out[row].append(key)
    return out


def _flat(arr: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """A list array's values (nulls and slicing honoured), each value's parent index, each slot's length."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return pc.list_flatten(arr), pc.list_parent_indices(arr).to_numpy(zero_copy_only=False), lengths


def _branch_lists(arr: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The map's entries as one list array of units, each entry's row, and each entry's position in its row."""
    entries = pc.list_flatten(arr)
    parent = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.searchsorted(parent, parent, side="left")
    return entries.field("value"), parent, np.arange(len(parent)) - starts


def _bad_units(values: pa.Array) -> np.ndarray:
    """Units the :class:`Unit` model rejects: a null unit, an empty or null id, an offset, rank or token
    count out of its range (the column types already are the model's)."""
    def out(col: str, lo: int, hi: int, nullable: bool) -> pa.Array:
        a = values.field(col)
        bad = pc.or_kleene(pc.less(a, lo), pc.greater(a, hi))
        return pc.fill_null(bad, not nullable)
    bad = pc.invert(values.is_valid())
    for col in ("unit_id", "doc_id"):
        bad = pc.or_(bad, pc.fill_null(pc.equal(pc.utf8_length(values.field(col)), 0), True))
    for col, lo, hi, nullable in (("start", -_BIG, _BIG, False), ("end", -_BIG, _BIG, False),
                                  ("rank", 1, _BIG, True), ("tokens", 0, _BIG, True)):
        bad = pc.or_(bad, out(col, lo, hi, nullable))
    return pc.fill_null(bad, True).to_numpy(zero_copy_only=False)


def _unit_problems(lists: dict[str, pa.Array], n: int, packed_tokens: pa.ChunkedArray | None) -> np.ndarray:
    """Per row, whether the model would reject it for a unit or for packed tokens that do not add up."""
    bad = np.zeros(n, dtype=bool)
    for c, arr in lists.items():
        if c == "branches":
            arr, entry_row, _ = _branch_lists(arr)
            if len(arr):
                bad |= np.bincount(entry_row, weights=pc.invert(arr.is_valid()).to_numpy(zero_copy_only=False),
                                   minlength=n) > 0
            values, parent, _ = _flat(arr)
            parent = entry_row[parent] if len(parent) else parent
        else:
            values, parent, _ = _flat(arr)
        if len(values):
            bad |= np.bincount(parent, weights=_bad_units(values), minlength=n) > 0
    if "packed" in lists and len(lists["packed"]):
        values, parent, lengths = _flat(lists["packed"])
        tok = values.field("tokens") if len(values) else pa.array([], pa.int64())
        known = tok.is_valid().to_numpy(zero_copy_only=False)
        total = np.bincount(parent, weights=pc.fill_null(tok, 0).to_numpy(zero_copy_only=False).astype(np.float64),
                            minlength=n)
        unknown = np.bincount(parent, weights=~known, minlength=n)
        want = (np.zeros(n) if packed_tokens is None
                else pc.fill_null(packed_tokens, 0).to_numpy(zero_copy_only=False).astype(np.float64))
        bad |= (lengths > 0) & (unknown == 0) & (total != want)
    return bad


def _unit_columns(lists: dict[str, pa.Array], rows: list[int], keys: list[tuple[str, int]],
                  branch_names: list | None) -> tuple[UnitColumns, np.ndarray, np.ndarray]:
    """The units of the kept rows as :class:`UnitColumns`, list after list in ``Trace.unit_lists`` order."""
    n_rows = max(rows, default=-1) + 1
    new_index = np.full(n_rows, -1, dtype=np.int64)
    new_index[rows] = np.arange(len(rows))
    parts, entries, base = [], [], 0  # entries: (row, order, name, first unit in the concatenation, length)
    names_of: list[str] = []
    for k, c in enumerate(("branches", *_LISTS)):
        if c not in lists:
            continue
        arr = lists[c]
        if c == "branches":
            arr, entry_row, order = _branch_lists(arr)
            entry_name = [f"branches.{name}" for row in branch_names if row for name in row]
        else:
            entry_row, order = np.arange(len(arr), dtype=np.int64), np.full(len(arr), 1 << 40, dtype=np.int64) + k
            entry_name = None
        values, _, lengths = _flat(arr)
        starts = np.cumsum(lengths) - lengths + base
        sel = (lengths > 0) & (entry_row < n_rows)
        sel[sel] &= new_index[entry_row[sel]] >= 0
        idx = np.flatnonzero(sel)
        name_codes = np.full(len(idx), len(names_of), dtype=np.int64)
        if entry_name is not None:
            name_codes = len(names_of) + idx
            names_of.extend(entry_name)
        else:
            names_of.append(c)
        entries.append((new_index[entry_row[idx]], order[idx], name_codes, starts[idx], lengths[idx]))
        parts.append(values.cast(UNIT_TYPE))
        base += len(values)
    if entries:
        trace, order, code, first, length = (np.concatenate(x) for x in zip(*entries, strict=True))
    else:
        trace = order = code = first = length = np.zeros(0, dtype=np.int64)
    perm = np.lexsort((order, trace))
    trace, code, first, length = trace[perm], code[perm], first[perm], length[perm]
    take = np.repeat(first - (np.cumsum(length) - length), length) + np.arange(int(length.sum()))
    units = (pa.concat_arrays(parts) if parts else pa.array([], UNIT_TYPE)).take(pa.array(take, pa.int64()))
    score, text, tokens = units.field("score"), units.field("text"), units.field("tokens")
    cols = UnitColumns(keys=[keys[t] for t in trace.tolist()], fields=[names_of[c] for c in code.tolist()],
                       lengths=length.astype(np.int64), unit_id=_strs(units.field("unit_id")),
                       doc_id=_strs(units.field("doc_id")),
                       start=units.field("start").to_numpy(zero_copy_only=False).astype(np.int64),
                       end=units.field("end").to_numpy(zero_copy_only=False).astype(np.int64),
                       score=pc.fill_null(score, math.nan).to_numpy(zero_copy_only=False).astype(np.float64),
                       has_score=score.is_valid().to_numpy(zero_copy_only=False),
                       text=text.to_pylist() if text.null_count < len(text) else None,
                       rank=pc.fill_null(units.field("rank").cast(pa.float64()), math.nan)
                       .to_numpy(zero_copy_only=False).astype(np.float64))
    tok = pc.fill_null(tokens.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False)
    return cols, trace, tok
