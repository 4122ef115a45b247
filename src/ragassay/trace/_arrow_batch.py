"""Trace lines read once, by pyarrow's C++ JSON reader: record fields and units from one Arrow table.

:func:`read_lines` parses a batch's lines into one table and validates every record as columns: the
exact JSON types and ranges :class:`~ragassay.trace.schema.Trace` and :class:`Unit` accept without
coercion, required fields, unknown keys and the cross-field rules of ``Trace._consistent``. A record
passes only when the model would accept it with the same values; every other record (and every line of
a piece Arrow cannot read) is handed back, and the caller reads it the slow way (orjson, the json module,
pydantic), which is what decides its problem message.

Arrow cannot tell an absent key from an explicit ``null``; the model can (``"fused": null`` is an error,
no ``fused`` is ``[]``). So a null where the two differ passes only when the line does not contain the
key's quoted name at all, and a line with an escaped key (``"tri\\u0061l"``) is handed back, which makes
that byte test exact.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import BaseModel

from ragassay._arrow_json import (
    ESCAPED_KEY,
    depth,
    filled,
    in_range,
    null_keys,
    open_brackets,
    parse_lines,
    valid,
)
from ragassay._arrow_json import MIN_PIECE as _MIN_PIECE  # a module global: tests shrink it
from ragassay.trace.schema import Citation, CodedStrings, Trace, TraceFacts, UnitColumns, take_strs

_BIG = 2**53
_UNIT_TYPES = {"unit_id": pa.string(), "doc_id": pa.string(), "start": pa.int64(), "end": pa.int64(),
               "score": pa.float64(), "rank": pa.int64(), "text": pa.string(), "tokens": pa.int64()}
_UNIT_LIST = pa.list_(pa.struct(list(_UNIT_TYPES.items())))
_LISTS = ("fused", "reranked", "packed", "cut")
# Record fields whose JSON type is fixed; the free-form ones (branches, citations, durations_ms, meta) are
# inferred per piece and their inferred types checked.
_SCHEMA = pa.schema([("type", pa.string()), ("trace_id", pa.string()), ("query_id", pa.string()),
                     ("trial", pa.int64()), ("question", pa.string()), ("fused", _UNIT_LIST),
                     ("reranked", _UNIT_LIST), ("packed", _UNIT_LIST), ("packed_tokens", pa.int64()),
                     ("cut", _UNIT_LIST), ("answer", pa.string()), ("outcome", pa.string()),
                     ("error", pa.string()), ("tokens_in", pa.int64()), ("tokens_out", pa.int64()),
                     ("cost", pa.float64())])
# agent fields (a trajectory's steps, the agent's claim) are left to the model: a record that names one is
# handed back and read the slow way, which validates every step
_TOP = (frozenset(Trace.model_fields) - {"steps", "claimed_success"}) | {"type"}
# a tuple, made an Arrow array where used: pa.array at import time would import pandas (pyarrow's pandas
# shim), 0.2 s on every command that merely imports the readers
_OUTCOMES = ("answered", "abstained", "refused", "error")
# orjson reads an integer literal wider than 64 bits as a float, where the json module keeps the int: a
# line with a run of 20 digits (in a number or not) is left to the json module.
LONG_INT = re.compile(rb"\d{20}")
# Arrow's type inference is quadratic in nesting depth (a 5,000-deep meta takes seconds); the json module
# stops near 1,000 and traces nest a few levels, so deeper lines go the slow way.
_MAX_DEPTH = 256
_PARSE = pj.ParseOptions(explicit_schema=_SCHEMA, newlines_in_values=False, unexpected_field_behavior="infer")
# Arrow converts to an explicit schema more slowly than it infers one (115 against 200 ms for 2,048 traces
# of 50 units), so a piece is parsed with inferred types first and conformed to _SCHEMA (_conform); only a
# piece whose inferred types differ from it in a way that matters is parsed again with _PARSE.
_INFER = pj.ParseOptions(newlines_in_values=False)
_TRACE_FIELDS_SET = set(Trace.model_fields)  # one shared set, as trusted_units does for Unit
# A model instance as pydantic's validator leaves it, set through BaseModel's own slot descriptors (as the
# golden reader does: half the time of object.__setattr__ by name)
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


@dataclass
class Part:
    """Valid traces (stripped of units, as the batch reader yields them) with their lines and unit columns."""

    lines: np.ndarray
    facts: TraceFacts
    units: UnitColumns
    list_trace: np.ndarray
    tokens: np.ndarray

    @property
    def traces(self) -> list[Trace]:
        return self.facts.traces


def empty_part() -> Part:
    z = np.zeros(0, dtype=np.int64)
    return Part(z, TraceFacts.empty(), UnitColumns([], [], z, [], [], z, z, np.zeros(0), np.zeros(0, dtype=bool), None,
                                   np.zeros(0)), z, np.zeros(0))


def concat_parts(parts: list[Part]) -> Part:
    parts = [p for p in parts if len(p.facts)]
    if len(parts) <= 1:
        return parts[0] if parts else empty_part()
    base = np.cumsum([0] + [len(p.facts) for p in parts])[:-1]
    us = [p.units for p in parts]
    texts = [u.text for u in us]
    text = None if all(t is None for t in texts) else [
        x for u, t in zip(us, texts, strict=True) for x in (t if t is not None else [None] * len(u.start))]
    rank = None if all(u.rank is None for u in us) else np.concatenate([u.ranks() for u in us])
    units = UnitColumns(keys=[k for u in us for k in u.keys], fields=[f for u in us for f in u.fields],
                        lengths=np.concatenate([u.lengths for u in us]),
                        unit_id=[x for u in us for x in u.unit_id], doc_id=[x for u in us for x in u.doc_id],
                        start=np.concatenate([u.start for u in us]), end=np.concatenate([u.end for u in us]),
                        score=np.concatenate([u.score for u in us]),
                        has_score=np.concatenate([u.has_score for u in us]), text=text, rank=rank)
    return Part(np.concatenate([p.lines for p in parts]), TraceFacts.concat([p.facts for p in parts]), units,
                np.concatenate([p.list_trace + b for p, b in zip(parts, base, strict=True)]),
                np.concatenate([p.tokens for p in parts]))


def select(p: Part, idx: np.ndarray) -> Part:
    """The traces ``idx`` of ``p`` in that order, with their lists and units."""
    pos = np.full(len(p.facts), -1, dtype=np.int64)
    pos[idx] = np.arange(len(idx))
    u = p.units
    new_trace = pos[p.list_trace] if len(p.list_trace) else np.zeros(0, dtype=np.int64)
    lists = np.flatnonzero(new_trace >= 0)
    lists = lists[np.argsort(new_trace[lists], kind="stable")]
    lengths = u.lengths[lists]
    first = (np.cumsum(u.lengths) - u.lengths)[lists]
    take = np.repeat(first - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
    text = None if u.text is None else [u.text[i] for i in take]
    units = UnitColumns(keys=[u.keys[i] for i in lists], fields=[u.fields[i] for i in lists], lengths=lengths,
                        unit_id=take_strs(u.unit_id, take), doc_id=take_strs(u.doc_id, take),
                        start=u.start[take], end=u.end[take], score=u.score[take], has_score=u.has_score[take],
                        text=text if text is not None and any(x is not None for x in text) else None,
                        rank=None if u.rank is None else u.rank[take])
    return Part(p.lines[idx], p.facts.select(np.asarray(idx).tolist()), units, new_trace[lists], p.tokens[take])


def read_lines(lines: list[tuple[int, bytes]]) -> tuple[Part, list[tuple[int, bytes]]]:
    """The valid trace records among ``lines`` (line number, bytes) read through Arrow, and the lines
    handed back for the slow path (in their original order)."""
    parts: list[Part] = []
    rest: list[tuple[int, bytes]] = []
    data = b"".join(b for _, b in lines)
    ok = _eligible([b for _, b in lines], data)
    if ok.all():
        _pieces(lines, parts, rest, data)
    else:
        rest.extend(ln for ln, good in zip(lines, ok.tolist(), strict=True) if not good)
        _pieces([ln for ln, good in zip(lines, ok.tolist(), strict=True) if good], parts, rest)
    rest.sort(key=lambda x: x[0])
    part = concat_parts(parts)
    if len(parts) > 1:
        part = select(part, np.argsort(part.lines, kind="stable"))
    return part, rest


def _eligible(blobs: list[bytes], data: bytes) -> np.ndarray:
    """Per line (``data`` is the lines joined): whether it can go to Arrow, a JSON object from its first byte
    to its last (blank lines, a byte-order mark, arrays and the like are the slow path's) nesting at most
    ``_MAX_DEPTH`` deep. The byte tests run as numpy passes over ``data``, without the GIL the scoring loop
    needs; a line that ends otherwise than in ``}\n`` is tested on its own."""
    n = len(blobs)
    lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    b = np.frombuffer(data, dtype=np.uint8)
    nonempty = np.flatnonzero(lengths > 0)
    ok = np.zeros(n, dtype=bool)
    ok[nonempty] = b[starts[nonempty]] == 123  # '{'
    closed = ok & (lengths >= 2)
    closed[closed] = (b[ends[closed] - 2] == 125) & (b[ends[closed] - 1] == 10)  # '}\n'
    for i in np.flatnonzero(ok & ~closed).tolist():  # '}' then other whitespace, or the file's last line
        ok[i] = blobs[i].rstrip(b" \t\r\n")[-1:] == b"}"
    brackets = open_brackets(b, starts, ends)
    for i in np.flatnonzero(ok & (brackets > _MAX_DEPTH)).tolist():
        ok[i] = depth(np.frombuffer(blobs[i], dtype=np.uint8)) <= _MAX_DEPTH
    return ok


def _pieces(lines: list[tuple[int, bytes]], parts: list[Part], rest: list[tuple[int, bytes]],
            data: bytes | None = None) -> None:
    """Parse ``lines`` (``data``: their bytes joined, when at hand) as one table, or split it in halves until
    each half parses (a line Arrow rejects — not UTF-8, a duplicate key, a value of another type — ends up
    in a small piece handed back)."""
    if not lines:
        return
    if data is None:
        data = b"".join(b for _, b in lines)  # each line keeps its newline; only the file's last may lack one
    table = _conform(parse_lines(data, len(lines), _INFER))
    if table is None:
        table = parse_lines(data, len(lines), _PARSE)
    if table is None:
        if len(lines) <= _MIN_PIECE:
            rest.extend(lines)
            return
        half = len(lines) // 2
        _pieces(lines[:half], parts, rest)
        _pieces(lines[half:], parts, rest)
        return
    part, slow = _validate(table, lines, data)
    parts.append(part)
    rest.extend(lines[i] for i in np.flatnonzero(slow))


def _conform(table: pa.Table | None) -> pa.Table | None:
    """A table parsed with inferred types, as the explicit ``_SCHEMA`` parse would have given it: absent and
    all-null fields become null columns of their type, an integer ``cost`` column becomes float (as an
    integer JSON cost is to the model). None when an inferred type differs otherwise (a field Arrow took
    for a timestamp, a float ``trial``, a unit list that is no list): the caller parses the piece again
    with ``_PARSE``, whose answer (a table, or a refusal that splits the piece) is what decides."""
    if table is None:
        return None
    n = table.num_rows
    names = table.column_names
    for f in _SCHEMA:
        if f.name not in names:
            table = table.append_column(f.name, pa.nulls(n, f.type))
            continue
        typ = table.schema.field(f.name).type
        if typ == f.type:
            continue
        if pa.types.is_null(typ):
            col = pa.nulls(n, f.type)
        elif f.type == _UNIT_LIST and pa.types.is_list(typ):
            if not _units_conform(typ.value_type):
                return None
            continue  # _list_units casts the units' fields, as it does after the explicit parse
        elif f.name == "cost" and pa.types.is_int64(typ):
            col = table.column(f.name).cast(pa.float64(), safe=False)  # rounds as float(int) does
        else:
            return None
        table = table.set_column(table.schema.get_field_index(f.name), f.name, col)
    return table


def _units_conform(typ: pa.DataType) -> bool:
    """Whether inferred unit values of type ``typ`` hold what the explicit unit type would: a unit field
    of another type (a float ``start``) would send every row of the piece to the slow path, where the
    explicit parse refuses the piece and splitting it isolates the line."""
    if pa.types.is_null(typ):
        return True
    if not pa.types.is_struct(typ):
        return False
    for f in typ:
        want = _UNIT_TYPES.get(f.name)
        if want is not None and f.type != want and not pa.types.is_null(f.type) and not (
                f.name == "score" and pa.types.is_int64(f.type)):
            return False
    return True


class _Rows:
    """Per-row bookkeeping of one piece: which rows are handed back, and the byte test for a key."""

    def __init__(self, blobs: list[bytes], data: bytes):
        self.blobs, self.data = blobs, data
        self._null_keys: set[bytes] | None = None
        # a key with an escape needs a backslash: one search of the piece (memchr) when it has none
        self.slow = (np.asarray([b"\\" in b and ESCAPED_KEY.search(b) is not None for b in blobs], dtype=bool)
                     if b"\\" in data else np.zeros(len(blobs), dtype=bool))

    def mentions(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Of the rows flagged in ``rows``, those whose line contains the quoted key ``name``."""
        out = np.zeros(len(self.blobs), dtype=bool)
        if not rows.any():
            return out
        if '"' in name or "\\" in name or not name.isprintable():
            out[rows] = True
            return out
        key = b'"' + name.encode() + b'"'
        if key not in self.data:  # one search of the piece; rows only when some line has it
            return out
        for i in np.flatnonzero(rows):
            out[i] = key in self.blobs[i]
        return out

    def null_is_absent(self, name: str, present: np.ndarray) -> None:
        """A null where the model tells an explicit null (an error) from an absent key (a default)."""
        if self._null_keys is None:
            self._null_keys = null_keys(self.data)
        if name.encode() in self._null_keys:
            self.slow |= self.mentions(name, ~present)

    def unknown_children(self, arr: pa.Array, known: frozenset[str], owner: np.ndarray) -> None:
        """Keys the model forbids, in the struct ``arr`` (rows of ``owner``): any row mentioning one."""
        for f in arr.type:
            if f.name not in known:
                self.slow |= self.mentions(f.name, np.ones(len(self.blobs), dtype=bool) if owner is None else owner)


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    col = table.column(name)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _list_units(arr: pa.Array, rows: _Rows) -> tuple[pa.Array, np.ndarray, np.ndarray] | None:
    """A list-of-units column: (flat struct values cast to the unit types, per-row offsets, per-row
    lengths); rows with a unit the model would not take as it is are flagged slow. None when the column's
    type is no list (every row with a value is flagged)."""
    n = len(arr)
    present = valid(arr)
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        rows.slow |= present
        return None
    offsets = arr.offsets.to_numpy().astype(np.int64)
    lengths = np.where(present, np.diff(offsets), 0)
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets = offsets - offsets[0]
    owner = np.repeat(np.arange(n), np.diff(offsets))
    bad = np.zeros(len(values), dtype=bool)
    if pa.types.is_null(values.type):
        bad[:] = True
        values = pa.StructArray.from_arrays([pa.nulls(len(values), t) for t in _UNIT_TYPES.values()],
                                            names=list(_UNIT_TYPES))
    elif not pa.types.is_struct(values.type):
        bad[:] = True
        values = pa.StructArray.from_arrays([pa.nulls(len(values), t) for t in _UNIT_TYPES.values()],
                                            names=list(_UNIT_TYPES))
    else:
        bad |= ~valid(values)
        has_unit = np.zeros(n, dtype=bool)
        has_unit[owner] = True
        rows.unknown_children(values, frozenset(_UNIT_TYPES), has_unit)
        children = {}
        for key, typ in _UNIT_TYPES.items():
            child = values.field(key) if values.type.get_field_index(key) >= 0 else pa.nulls(len(values), typ)
            if child.type != typ and not (pa.types.is_null(child.type)
                                          or (key == "score" and pa.types.is_int64(child.type))):
                bad |= valid(child)  # a value of another JSON type: the model decides
                child = pa.nulls(len(values), typ)
            children[key] = child.cast(typ, safe=False)  # an int score rounds as float(int) does
        for key in ("unit_id", "doc_id"):
            bad |= ~filled(pc.greater(pc.binary_length(children[key]), 0), False)
        for key in ("start", "end"):
            bad |= ~valid(children[key]) | ~in_range(children[key], -_BIG, _BIG)
        bad |= ~in_range(children["rank"], 1, _BIG) | ~in_range(children["tokens"], 0, _BIG)
        score = filled(children["score"], 1.0)
        # a JSON -0 is int 0 to the json module (score 0.0) but -0.0 to Arrow
        bad |= (score == 0) & np.signbit(score)
        values = pa.StructArray.from_arrays(list(children.values()), names=list(children))
    rows.slow |= np.bincount(owner[bad], minlength=n).astype(bool) if len(owner) else np.zeros(n, dtype=bool)
    return values, offsets, lengths


def _validate(table: pa.Table, lines: list[tuple[int, bytes]], data: bytes) -> tuple[Part, np.ndarray]:
    """(the rows that pass, as a Part; per row whether it is handed back)."""
    n = table.num_rows
    rows = _Rows([b for _, b in lines], data)
    col = {name: _column(table, name) for name in table.column_names}
    for name in col:
        if name not in _TOP:
            rows.slow |= rows.mentions(name, np.ones(n, dtype=bool))
    rows.slow |= ~filled(pc.equal(col["type"], "trace"), False)
    for name in ("trace_id", "query_id"):
        rows.slow |= ~filled(pc.greater(pc.binary_length(col[name]), 0), False)
    for name, lo in (("trial", 0), ("packed_tokens", 0)):
        rows.null_is_absent(name, valid(col[name]))
        rows.slow |= ~in_range(col[name], lo, _BIG)
    for name in ("tokens_in", "tokens_out"):
        rows.slow |= ~in_range(col[name], 0, _BIG)
    cost = filled(col["cost"], 0.0)
    rows.slow |= ~(np.isfinite(cost) & (cost >= 0)) | ((cost == 0) & np.signbit(cost))
    outcome = col["outcome"]
    rows.slow |= ~filled(pc.or_(pc.is_null(outcome), pc.is_in(outcome, pa.array(_OUTCOMES, pa.string()))), False)
    # Trace._consistent
    rows.slow |= filled(pc.equal(outcome, "error"), False) & ~filled(pc.greater(pc.binary_length(col["error"]), 0), False)
    rows.slow |= filled(pc.equal(outcome, "answered"), False) & ~valid(col["answer"])

    # the unit lists: (source name, flat values, offsets, lengths); branches first, in the batch's key order
    sources: list[tuple[str, pa.Array, np.ndarray, np.ndarray]] = []
    branch_names: list[str] = []
    branch_present: list[np.ndarray] = []
    branches = col.get("branches")
    if branches is not None:
        present = valid(branches)
        rows.null_is_absent("branches", present)
        if pa.types.is_struct(branches.type):
            for f in branches.type:
                child = branches.field(f.name)
                child_present = present & valid(child)
                rows.null_is_absent(f.name, child_present | ~present)
                got = _list_units(child, rows)
                if got is not None:
                    sources.append(("branches." + f.name, *got))
                branch_names.append(f.name)
                branch_present.append(child_present)
        elif not pa.types.is_null(branches.type):
            rows.slow |= present
    for name in _LISTS:
        arr = col[name]
        if name != "reranked":
            rows.null_is_absent(name, valid(arr))
        sources.append((name, *_list_units(arr, rows)))
    packed_src = sources[-2]
    tok = filled(packed_src[1].field("tokens"), -1)
    seg = np.repeat(np.arange(n), np.diff(packed_src[2]))
    known = np.bincount(seg, weights=tok >= 0, minlength=n)
    total = np.bincount(seg, weights=np.maximum(tok, 0), minlength=n)
    rows.slow |= (packed_src[3] > 0) & (known == packed_src[3]) & (total != filled(col["packed_tokens"], 0))

    citations = _citations(col.get("citations"), rows)
    durations = _durations(col.get("durations_ms"), rows)
    meta = col.get("meta")
    meta_present = np.zeros(n, dtype=bool)
    if meta is not None:
        meta_present = valid(meta)
        rows.null_is_absent("meta", meta_present)
        if not pa.types.is_struct(meta.type):
            rows.slow |= meta_present
    # the order of a record's branches is its own; Arrow keeps the piece's first-seen order, so a record
    # with several reads its key order (and any meta, whose JSON Arrow cannot give back) with orjson
    n_branches = np.sum(branch_present, axis=0) if branch_present else np.zeros(n, dtype=np.int64)
    looked = (~rows.slow) & ((n_branches > 1) | meta_present)
    extra: dict[int, dict] = {}
    for i in np.flatnonzero(looked):
        if LONG_INT.search(rows.blobs[i]) is not None:
            rows.slow[i] = True
            continue
        try:
            rec = orjson.loads(rows.blobs[i])
        except orjson.JSONDecodeError:
            rows.slow[i] = True
            continue
        if meta_present[i] and type(rec.get("meta")) is not dict:
            rows.slow[i] = True
            continue
        extra[int(i)] = rec
    ok = ~rows.slow
    return _build(table, col, lines, ok, sources, branch_names, branch_present, citations, durations, extra), ~ok


def _present(arr: pa.Array | None, rows: _Rows, name: str, is_kind) -> np.ndarray | None:
    """The rows holding column ``name`` when Arrow typed it as ``is_kind`` expects; None when no row has it,
    or when Arrow typed it otherwise (the rows holding it are then handed back to the slow path)."""
    if arr is None:
        return None
    present = valid(arr)
    rows.null_is_absent(name, present)
    if pa.types.is_null(arr.type):
        return None
    if not is_kind(arr.type):
        rows.slow |= present
        return None
    return present


def _citations(arr: pa.Array | None, rows: _Rows) -> list | None:
    """Per row the Citation list (None for a row handed back), or None when no row has the key."""
    n = len(rows.blobs)
    present = _present(arr, rows, "citations", pa.types.is_list)
    if present is None:
        return None
    offsets = arr.offsets.to_numpy().astype(np.int64)
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    owner = np.repeat(np.arange(n), np.diff(offsets))
    vt = values.type
    if pa.types.is_string(vt):
        bad = ~filled(pc.greater(pc.binary_length(values), 0), False)
        fields = [values.to_pylist(), [None] * len(values), [None] * len(values), [None] * len(values)]
        fields_set = {"unit_id"}
    elif pa.types.is_struct(vt):
        bad = ~valid(values)
        has = np.zeros(n, dtype=bool)
        has[owner] = True
        rows.unknown_children(values, frozenset(Citation.model_fields), has)
        kids = {}
        for key, typ in (("unit_id", pa.string()), ("doc_id", pa.string()), ("start", pa.int64()),
                         ("end", pa.int64())):
            child = values.field(key) if vt.get_field_index(key) >= 0 else pa.nulls(len(values), typ)
            if child.type != typ and not pa.types.is_null(child.type):
                bad |= valid(child)
                child = pa.nulls(len(values), typ)
            kids[key] = child.cast(typ)
        bad |= ~filled(pc.greater(pc.binary_length(kids["unit_id"]), 0), False)
        s, e = kids["start"], kids["end"]
        sv, ev = valid(s), valid(e)
        bad |= (sv != ev) | (filled(s, 0) < 0) | (filled(e, 0) < filled(s, 0))
        fields = [kids[k].to_pylist() for k in ("unit_id", "doc_id", "start", "end")]
        fields_set = None
    elif pa.types.is_null(vt):
        bad = np.ones(len(values), dtype=bool)
        fields, fields_set = [[]] * 4, None
    else:
        rows.slow |= present
        return None
    rows.slow |= np.bincount(owner[bad], minlength=n).astype(bool) if len(owner) else np.zeros(n, dtype=bool)
    objs = citation_objects(*fields, fields_set=fields_set, skip=bad.tolist())
    off, pres = (offsets - offsets[0]).tolist(), present.tolist()  # Python ints: no numpy scalar per row
    return [objs[off[i]:off[i + 1]] if pres[i] else [] for i in range(n)]


def citation_objects(unit_id: list, doc_id: list, start: list, end: list, *, fields_set: set | None = None,
                     skip: list[bool] | None = None) -> list[Citation | None]:
    """Citation objects from checked column values, set as pydantic's validator leaves them (None where
    ``skip``). ``fields_set``: the keys every record gave; None takes each citation's non-null fields, the
    keys its record wrote."""
    new = object.__new__
    objs: list[Citation | None] = []
    for k, (uid, doc, s_, e_) in enumerate(zip(unit_id, doc_id, start, end, strict=True)):
        if skip is not None and skip[k]:
            objs.append(None)
            continue
        c = new(Citation)
        _set_dict(c, {"unit_id": uid, "doc_id": doc, "start": s_, "end": e_})
        _set_fields_set(c, fields_set if fields_set is not None else
                        {f for f, v in (("unit_id", uid), ("doc_id", doc), ("start", s_), ("end", e_)) if v is not None})
        _set_extra(c, None)
        _set_private(c, None)
        objs.append(c)
    return objs


def _durations(arr: pa.Array | None, rows: _Rows) -> tuple[Callable[[], list[dict]], list[float | None]] | None:
    """Per row the durations_ms dict (keys in the piece's first-seen order), made when the returned
    function is called, and each row's ``total`` (None where absent); None when no row has durations."""
    n = len(rows.blobs)
    present = _present(arr, rows, "durations_ms", pa.types.is_struct)
    if present is None:
        return None
    names, cols = [], []
    gaps = np.zeros(n, dtype=bool)
    for f in arr.type:
        child = arr.field(f.name)
        child_present = present & valid(child)
        rows.null_is_absent(f.name, child_present | ~present)
        if pa.types.is_int64(child.type) or pa.types.is_null(child.type):
            v = filled(child.cast(pa.float64(), safe=False), math.nan)
        elif pa.types.is_float64(child.type):
            v = filled(child, math.nan)
            rows.slow |= child_present & (v == 0) & np.signbit(v)  # a JSON -0 is 0.0 to the model
        else:
            rows.slow |= child_present
            continue
        rows.slow |= child_present & ~(np.isfinite(v) & (v >= 0))
        names.append(f.name)
        v = np.where(child_present, v, math.nan)
        gaps |= np.isnan(v)
        cols.append(v)
    if "total" in names:
        v = cols[names.index("total")]
        total = pa.array(v, mask=np.isnan(v)).to_pylist()
    else:
        total = [None] * n

    def dicts() -> list[dict]:
        if not cols:
            return [{} for _ in range(n)]
        lists = [v.tolist() for v in cols]
        if not gaps.any():  # every row has every key: no per-value NaN test
            return list(map(dict, map(zip, itertools.repeat(names), zip(*lists, strict=True))))
        isnan = math.isnan
        return [{k: v for k, v in zip(names, vals, strict=True) if not isnan(v)} for vals in zip(*lists, strict=True)]
    return dicts, total


def _build(table, col, lines, ok, sources, branch_names, branch_present, citations, durations, extra) -> Part:
    n = table.num_rows
    idx = np.flatnonzero(ok)
    lineno = np.asarray([ln for ln, _ in lines], dtype=np.int64)
    if not len(idx):
        return empty_part()

    def py(name):
        return col[name].take(idx).to_pylist()

    qid, trial = py("query_id"), [t if t is not None else 0 for t in py("trial")]
    keys = list(zip(qid, trial, strict=True))
    reranked = valid(col["reranked"])[idx].tolist()
    packed_tokens = filled(col["packed_tokens"], 0)[idx].tolist()
    cols_py = {name: py(name) for name in ("trace_id", "question", "answer", "outcome", "error", "tokens_in",
                                           "tokens_out", "cost")}
    present = np.asarray(branch_present, dtype=bool).reshape(len(branch_names), n)
    # per row, the names of the branches it holds (most traces have none: one shared empty tuple)
    row_branches = ([tuple(name for b, name in enumerate(branch_names) if present[b, i]) for i in range(n)]
                    if branch_names else [()] * n)
    tid, question, answer, outcome, error, tokens_in, tokens_out, cost = (
        cols_py[k] for k in ("trace_id", "question", "answer", "outcome", "error", "tokens_in", "tokens_out", "cost"))
    rows_i = idx.tolist()
    # a record with several branches keeps its own key order (read with orjson into ``extra``)
    names_of = [tuple(extra[i]["branches"]) if i in extra and len(extra[i].get("branches") or ()) > 1
                else row_branches[i] for i in rows_i] if extra else [row_branches[i] for i in rows_i]
    cites = [citations[i] for i in rows_i] if citations is not None else [[] for _ in rows_i]
    total = [durations[1][i] for i in rows_i] if durations is not None else [None] * len(rows_i)
    metas = {i: rec["meta"] for i, rec in extra.items() if "meta" in rec}  # not the records: they hold units

    def make() -> list[Trace]:
        """The Trace objects, set as pydantic's validator leaves them (from lists, not the table: a batch
        waiting to be scored holds no Arrow memory)."""
        dicts = durations[0]() if durations is not None else None
        new = object.__new__
        traces = []
        for j, i in enumerate(rows_i):
            t = new(Trace)
            _set_dict(t, {
                "trace_id": tid[j], "query_id": qid[j], "trial": trial[j], "question": question[j],
                "branches": {name: [] for name in names_of[j]}, "fused": [],
                "reranked": [] if reranked[j] else None, "packed": [], "packed_tokens": packed_tokens[j], "cut": [],
                "answer": answer[j], "citations": cites[j], "outcome": outcome[j], "error": error[j],
                "durations_ms": dicts[i] if dicts is not None else {}, "tokens_in": tokens_in[j],
                "tokens_out": tokens_out[j], "cost": cost[j], "steps": [], "claimed_success": None,
                "meta": metas.get(i, {})})
            _set_fields_set(t, _TRACE_FIELDS_SET)
            _set_extra(t, None)
            _set_private(t, None)
            traces.append(t)
        return traces
    facts = TraceFacts(qid, trial, tid, outcome, error, answer, packed_tokens, reranked, names_of, cites, total,
                       tokens_in, tokens_out, cost, make=make)

    # lists: one per (kept row, source) with units, ordered by row, then the record's order of its lists
    pos = np.full(n, -1, dtype=np.int64)
    pos[idx] = np.arange(len(idx))
    branch_rank: dict[tuple[int, str], int] = {}
    for i, rec in extra.items():
        if ok[i] and len(rec.get("branches") or ()) > 1:
            branch_rank.update({(i, name): r for r, name in enumerate(rec["branches"])})
    l_row, l_src, l_rank, l_first, l_len = [], [], [], [], []
    base = 0
    for s, (name, values, offsets, lengths) in enumerate(sources):
        rws = np.flatnonzero(ok & (lengths > 0))
        l_row.append(rws)
        l_src.append(np.full(len(rws), s))
        if name.startswith("branches."):
            fixed = branch_names.index(name.removeprefix("branches."))
            bn = name.removeprefix("branches.")
            l_rank.append(np.fromiter((branch_rank.get((int(r), bn), fixed) for r in rws), dtype=np.int64,
                                      count=len(rws)) if branch_rank else np.full(len(rws), fixed))
        else:
            l_rank.append(np.full(len(rws), 1_000_000 + _LISTS.index(name)))
        l_first.append(base + offsets[rws])
        l_len.append(lengths[rws])
        base += len(values)
    row, src, rank = np.concatenate(l_row), np.concatenate(l_src), np.concatenate(l_rank)
    order = np.lexsort((rank, row))
    row, src = row[order], src[order]
    first, length = np.concatenate(l_first)[order], np.concatenate(l_len)[order]
    take = pa.array(np.repeat(first - (np.cumsum(length) - length), length) + np.arange(int(length.sum())))
    flat = {key: pa.concat_arrays([v.field(key) for _, v, _, _ in sources]).take(take) for key in _UNIT_TYPES}
    names = [name for name, _, _, _ in sources]
    score, text = flat["score"], flat["text"]
    list_trace = pos[row]
    units = UnitColumns(keys=[keys[t] for t in list_trace.tolist()], fields=[names[s] for s in src.tolist()],
                        lengths=length, unit_id=_strs(flat["unit_id"]), doc_id=_strs(flat["doc_id"]),
                        start=flat["start"].to_numpy(zero_copy_only=False),
                        end=flat["end"].to_numpy(zero_copy_only=False),
                        score=filled(score, math.nan), has_score=valid(score),
                        text=text.to_pylist() if text.null_count < len(text) else None,
                        rank=filled(flat["rank"].cast(pa.float64()), math.nan))
    tokens = filled(flat["tokens"].cast(pa.float64()), math.nan)
    return Part(lineno[idx], facts, units, list_trace, tokens)


def _strs(arr: pa.Array) -> CodedStrings:
    """A string column without nulls as its hash encoding's codes and distinct values (ids repeat across
    lists): unit validation and scoring use the codes, and a str per unit is made only if the sequence is
    iterated."""
    d = pc.dictionary_encode(arr)
    distinct = d.dictionary.to_pylist()
    codes = d.indices.to_numpy().astype(np.int64)
    return CodedStrings(codes, distinct)
