"""Built golden-set lines read by pyarrow's C++ JSON reader and checked as columns.

:func:`read_lines` parses the lines of ``golden.jsonl`` a piece at a time into Arrow tables and checks
every record as columns: the exact JSON types :class:`~ragassay.golden.schema.GoldenQuery`,
:class:`Evidence` and :class:`Nugget` take as they are (a string where the model wants ``str``, an integer
within int64 where it wants ``int``, ``true``/``false`` where it wants ``bool``), required fields, unknown
keys, the ``match`` literal and the nugget id and text rules. A record that passes is built without
pydantic, with the values, ``model_fields_set`` and types that ``GoldenQuery.model_validate_json`` gives
it. Every other record (and every line of a piece Arrow cannot read: a duplicate key, a float or an
integer beyond int64 where an int goes, ``NaN``, a bad escape) is handed back, and the caller validates
it with pydantic, which decides its problem message.

Arrow cannot tell an absent key from an explicit ``null``; the model can (``"tags": null`` is an error, no
``tags`` is ``[]``; ``"created": null`` is in ``model_fields_set``, no ``created`` is not). A line with an
escaped key (``"cr\\u0065ated"``) is handed back, so every key of a line that stays is written literally,
and ``"name"`` followed by a colon is that key and nothing else: inside a string a quote is escaped, so
``name"`` can only end a string token, and one followed by ``:`` is a key. Keys are counted that way.
"""

from __future__ import annotations

import re
import typing

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import BaseModel

from ragassay._arrow_json import ESCAPED_KEY, count_in_lines, depth, filled, open_brackets, parse_lines, valid
from ragassay._arrow_json import MIN_PIECE as _MIN_PIECE  # a module global: tests shrink it
from ragassay.golden.schema import Evidence, GoldenQuery, Nugget, _identifier, _not_blank

_EV_TYPES = {"doc_id": pa.string(), "start": pa.int64(), "end": pa.int64(), "grade": pa.int64(),
             "quote": pa.string(), "match": pa.string()}
_NU_TYPES = {"id": pa.string(), "text": pa.string(), "vital": pa.bool_()}
_SCHEMA = pa.schema([("query_id", pa.string()), ("question", pa.string()), ("stratum", pa.string()),
                     ("tags", pa.list_(pa.string())), ("answerable", pa.bool_()),
                     ("evidence", pa.list_(pa.struct(list(_EV_TYPES.items())))),
                     ("reference_answer", pa.string()),
                     ("nuggets", pa.list_(pa.struct(list(_NU_TYPES.items())))),
                     ("source", pa.string()), ("created", pa.string())])
# The agent fields (spec §12: sub-goals, expected tools, evidence hops) are left out of the schema on purpose: a
# record that writes one looks like one with an unknown key and is handed to pydantic (agent sets are small);
# a record that does not gets their defaults.
_Q_AGENT = ("subgoals", "expected_tools")
_EV_AGENT = ("hop",)
_Q_FIELDS = tuple(f for f in GoldenQuery.model_fields if f not in _Q_AGENT)
_EV_FIELDS = tuple(f for f in Evidence.model_fields if f not in _EV_AGENT)
_NU_FIELDS = tuple(Nugget.model_fields)
# the schema above must name exactly the models' other fields (a field added to a model without adding it here
# would make every record that has it look like one with an unknown key: slow, never wrong)
assert set(_SCHEMA.names) == set(_Q_FIELDS) and set(_EV_TYPES) == set(_EV_FIELDS) and set(_NU_TYPES) == set(_NU_FIELDS)
assert all(GoldenQuery.model_fields[f].default_factory is list for f in _Q_AGENT)
assert all(Evidence.model_fields[f].default is None for f in _EV_AGENT)
_MATCHES = typing.get_args(Evidence.model_fields["match"].annotation)
_MATCH_DEFAULT = Evidence.model_fields["match"].default
_SOURCE_DEFAULT = GoldenQuery.model_fields["source"].default
_VITAL_DEFAULT = Nugget.model_fields["vital"].default
# Arrow's type inference (of an unknown key's value) is quadratic in nesting depth; a built record nests
# three levels, so deeper lines go the slow way.
_MAX_DEPTH = 64
_JSON_SPACE = np.frombuffer(b" \t\r\n", dtype=np.uint8)
_PIECE_BYTES = 1 << 21  # lines are parsed about 2 MB at a time: Arrow's copy of a piece stays small
# A model instance as pydantic's validator leaves it (extra="forbid": no extras; no private attributes), set
# through BaseModel's own slot descriptors (half the time of object.__setattr__ by name)
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_PARSE = pj.ParseOptions(explicit_schema=_SCHEMA, newlines_in_values=False, unexpected_field_behavior="infer")


class Shared:
    """One shared set object per distinct ``model_fields_set`` (see ``set._share_fields_sets``), looked up
    by a bit mask of the optional fields a record gave."""

    def __init__(self, shared: dict[frozenset[str], set[str]]):
        self.shared = shared
        self._by_mask: dict[tuple[str, int], set[str]] = {}

    def get(self, kind: str, required: tuple[str, ...], optional: tuple[str, ...], mask: int) -> set[str]:
        s = self._by_mask.get((kind, mask))
        if s is None:
            names = set(required) | {f for b, f in enumerate(optional) if mask >> b & 1}
            s = self._by_mask[(kind, mask)] = self.shared.setdefault(frozenset(names), names)
        return s


def read_lines(data: bytes, shared: dict[frozenset[str], set[str]]
               ) -> tuple[list[int], list[GoldenQuery], list[tuple[int, bytes]]]:
    """The records of ``data`` (the built file's UTF-8 bytes) that pass, as (line numbers, queries), and
    the other non-empty lines (line number, bytes without the newline) for pydantic, both in line order.
    Line numbers count ``\\n`` alone, as ``str.split("\\n")`` does."""
    sh = Shared(shared)
    linenos: list[int] = []
    queries: list[GoldenQuery] = []
    rest: list[tuple[int, bytes]] = []
    pos, first_line = 0, 1
    while pos < len(data):
        end = data.find(b"\n", pos + _PIECE_BYTES)
        end = len(data) if end < 0 else end + 1
        piece = data[pos:end]
        first_line += _piece(piece, first_line, sh, linenos, queries, rest)
        pos = end
    rest.sort(key=lambda x: x[0])
    return linenos, queries, rest


def _piece(piece: bytes, first_line: int, sh: Shared, linenos: list[int], queries: list[GoldenQuery],
           rest: list[tuple[int, bytes]]) -> int:
    """Read one piece (whole lines); returns how many newlines it holds."""
    b = np.frombuffer(piece, dtype=np.uint8)
    nl = np.flatnonzero(b == 10)
    starts = np.concatenate([[0], nl + 1])
    ends = np.concatenate([nl, [len(b)]])
    if len(b) and b[-1] == 10:  # the empty piece after the last newline is no line
        starts, ends = starts[:-1], ends[:-1]
    lines = np.arange(len(starts), dtype=np.int64) + first_line
    nonempty = ends > starts
    first = np.where(nonempty, b[np.minimum(starts, len(b) - 1)], 0)
    last = np.where(nonempty, b[np.maximum(ends - 1, 0)], 0)
    # one JSON object per line, from its first byte to its last; anything else (blank, leading or trailing
    # whitespace, a carriage return, arrays) is the slow path's
    ok = nonempty & (first == 123) & (last == 125)
    depth_bound = open_brackets(b, starts, ends)
    for i in np.flatnonzero(ok & (depth_bound > _MAX_DEPTH)):
        ok[i] = depth(b[starts[i]:ends[i]]) <= _MAX_DEPTH
    slow_idx = np.flatnonzero(nonempty & ~ok)
    for i in slow_idx.tolist():
        rest.append((int(lines[i]), piece[starts[i]:ends[i]]))
    idx = np.flatnonzero(ok)
    if len(idx):
        _pieces(piece, starts[idx], ends[idx], lines[idx], sh, linenos, queries, rest)
    return len(nl)


def _pieces(src: bytes, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray, sh: Shared,
            linenos: list[int], queries: list[GoldenQuery], rest: list[tuple[int, bytes]]) -> None:
    """Parse lines ``[starts, ends)`` of ``src`` as one table, or split them in halves until each half
    parses (a line Arrow rejects ends up in a small piece handed back). Output stays in line order."""
    n = len(starts)
    contiguous = bool(np.all(starts[1:] == ends[:-1] + 1))
    if contiguous:
        buf = src[int(starts[0]):int(ends[-1])] + b"\n"
        row_starts = starts - starts[0]
    else:
        buf = b"\n".join(src[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)) + b"\n"
        lengths = ends - starts + 1
        row_starts = np.cumsum(lengths) - lengths
    table = parse_lines(buf, n, _PARSE)
    if table is None:
        if n <= _MIN_PIECE:
            rest.extend((int(ln), src[s:e]) for ln, s, e in zip(lines, starts, ends, strict=True))
            return
        half = n // 2
        _pieces(src, starts[:half], ends[:half], lines[:half], sh, linenos, queries, rest)
        _pieces(src, starts[half:], ends[half:], lines[half:], sh, linenos, queries, rest)
        return
    row_ends = row_starts + (ends - starts)
    slow, built = _check_and_build(table, buf, row_starts, row_ends, sh)
    keep = np.flatnonzero(~slow)
    linenos.extend(lines[keep].tolist())
    queries.extend(built)
    for i in np.flatnonzero(slow).tolist():
        rest.append((int(lines[i]), src[int(starts[i]):int(ends[i])]))




def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _item_type(table: pa.Table, name: str) -> pa.StructType:
    """The item type of a list-of-objects column."""
    return table.schema.field(name).type.value_type






class _Rows:
    """Where the rows of one parsed piece lie in its buffer, and counts of literal keys per row."""

    def __init__(self, buf: bytes, starts: np.ndarray, ends: np.ndarray):
        self.buf, self.starts, self.ends = buf, starts, ends
        self.n = len(starts)
        self.slow = np.zeros(self.n, dtype=bool)
        self.known_keys_only = True  # cleared when the table holds a column or child no model has
        # lines holding a backslash: handed back when one of their keys has an escape
        bs = count_in_lines(np.frombuffer(buf, dtype=np.uint8) == 92, starts, ends)
        for i in np.flatnonzero(bs).tolist():
            if ESCAPED_KEY.search(buf, int(starts[i]), int(ends[i])) is not None:
                self.slow[i] = True

    def _rows_of(self, at) -> np.ndarray:
        row = np.searchsorted(self.starts, np.asarray(at, dtype=np.int64), side="right") - 1
        return np.bincount(row, minlength=self.n)

    def key_count(self, name: str, top: bool = False) -> np.ndarray:
        """Per row: how many times ``name`` (a model field) is written as a key, at any level: the quoted
        name followed by a colon (by whitespace first: the regex decides).

        ``top``: a top-level field. When the piece has no key the models do not know, such a key can only
        be written at the top (a nested object's keys are its model's fields, an unknown key's value does
        not exist) and at most once (Arrow refuses a duplicate key); so when the piece holds as many
        ``"name":`` as rows and no ``"name"`` otherwise, every row writes it once."""
        quoted = b'"' + name.encode() + b'"'
        if top and self.known_keys_only and self.buf.count(quoted) == self.n == self.buf.count(quoted + b":"):
            return np.ones(self.n, dtype=np.int64)
        parts = self.buf.split(quoted)  # one pass in C; the occurrences sit between the parts
        if len(parts) == 1:
            return np.zeros(self.n, dtype=np.int64)
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        at = np.cumsum(lengths[:-1]) + np.arange(len(parts) - 1, dtype=np.int64) * len(quoted)
        after = np.frombuffer(self.buf, dtype=np.uint8)[at + len(quoted)]  # the buffer ends in a newline
        if np.isin(after, _JSON_SPACE).any():
            return self._rows_of([m.start() for m in re.finditer(re.escape(quoted) + rb"[ \t\r\n]*:", self.buf)])
        return self._rows_of(at[after == 58])  # ':'

    def mentions(self, name: str) -> np.ndarray:
        """Per row: whether the line holds the quoted text ``name`` anywhere (every row, for a name
        that must be escaped in JSON)."""
        if '"' in name or "\\" in name or not name.isprintable():
            return np.ones(self.n, dtype=bool)
        key = b'"' + name.encode() + b'"'
        if key not in self.buf:
            return np.zeros(self.n, dtype=bool)
        at = []
        pos = self.buf.find(key)
        while pos >= 0:
            at.append(pos)
            pos = self.buf.find(key, pos + 1)
        return self._rows_of(at).astype(bool)


def _list_column(arr: pa.Array, rows: _Rows, name: str, types: dict[str, pa.DataType] | None
                 ) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """A list column: (per-row present flag, per-row offsets into the flat values, flat values). A null
    is an error where the key was written (slow) and the default where it was not."""
    present = valid(arr)
    offsets = arr.offsets.to_numpy().astype(np.int64)
    if not present.all():
        # a null written as such is an error; a null list must also hold no items (the default is [])
        rows.slow |= ~present & ((rows.key_count(name, top=True) > 0) | (np.diff(offsets) > 0))
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets = offsets - offsets[0]
    owner = np.repeat(np.arange(rows.n), np.diff(offsets))
    bad = ~valid(values)  # a null item: the model wants a string or an object there
    if types is not None:
        for f in values.type:
            if f.name not in types:  # a key the model forbids
                rows.slow |= rows.mentions(f.name)
                rows.known_keys_only = False
    if len(owner):
        rows.slow |= np.bincount(owner[bad], minlength=rows.n).astype(bool)
    return present, offsets, values


def _check_and_build(table: pa.Table, buf: bytes, starts: np.ndarray, ends: np.ndarray, sh: Shared
                     ) -> tuple[np.ndarray, list[GoldenQuery]]:
    """(per row whether it is handed back, the queries of the rows that pass, in row order)."""
    rows = _Rows(buf, starts, ends)
    n = rows.n
    for name in table.column_names:
        if name not in _SCHEMA.names:
            rows.slow |= rows.mentions(name)
            rows.known_keys_only = False
    # (the children of evidence and nuggets are checked before any top-level key is counted)
    ev_types, nu_types = _item_type(table, "evidence"), _item_type(table, "nuggets")
    if any(f.name not in _EV_TYPES for f in ev_types) or any(f.name not in _NU_TYPES for f in nu_types):
        rows.known_keys_only = False
    col = {name: _column(table, name) for name in _SCHEMA.names}
    for name in ("query_id", "question", "stratum", "answerable"):
        rows.slow |= ~valid(col[name])  # required: absent and null are both errors
    src_present = valid(col["source"])
    if not src_present.all():
        rows.slow |= ~src_present & (rows.key_count("source", top=True) > 0)
    opt_present = {}
    for name in ("reference_answer", "created"):  # None is a value: a null counts as given when written
        given = valid(col[name])
        opt_present[name] = given | ((rows.key_count(name, top=True) > 0) if not given.all() else False)

    tags_present, tags_off, tags_values = _list_column(col["tags"], rows, "tags", None)
    ev_present, ev_off, ev = _list_column(col["evidence"], rows, "evidence", _EV_TYPES)
    nu_present, nu_off, nu = _list_column(col["nuggets"], rows, "nuggets", _NU_TYPES)

    # evidence: required children non-null; `match` one of the literals where given, and a null one only
    # where the record's evidence does not write the key (an explicit null is an error)
    ev_owner = np.repeat(np.arange(n), np.diff(ev_off))
    ev_bad = np.zeros(len(ev), dtype=bool)
    for key in ("doc_id", "start", "end", "grade", "quote"):
        ev_bad |= ~valid(ev.field(key))
    match = ev.field("match")
    match_given = valid(match)
    ev_bad |= match_given & ~filled(pc.is_in(match, pa.array(_MATCHES, pa.string())), False)
    if len(ev_owner):
        rows.slow |= np.bincount(ev_owner[ev_bad], minlength=n).astype(bool)
        if not match_given.all():
            given = np.bincount(ev_owner, weights=match_given, minlength=n)
            rows.slow |= rows.key_count("match") != given
    # nuggets: the id and text rules, run by the model's own functions; `vital` as `match`
    nu_owner = np.repeat(np.arange(n), np.diff(nu_off))
    vital = nu.field("vital")
    vital_given = valid(vital)
    nu_ids, nu_texts = nu.field("id").to_pylist(), nu.field("text").to_pylist()
    if len(nu_owner):
        nu_bad = np.fromiter((not (_ok(_identifier, i) and _ok(_not_blank, t)) for i, t in zip(nu_ids, nu_texts, strict=True)),
                             dtype=bool, count=len(nu_ids))
        rows.slow |= np.bincount(nu_owner[nu_bad], minlength=n).astype(bool)
        if not vital_given.all():
            given = np.bincount(nu_owner, weights=vital_given, minlength=n)
            rows.slow |= rows.key_count("vital") != given

    ok = ~rows.slow
    keep = np.flatnonzero(ok)
    if not len(keep):
        return rows.slow, []
    # evidence and nuggets of the kept rows, as objects (one str per distinct short value, as pydantic's
    # string cache shares them)
    evs = _evidence(ev, match_given, sh)
    nus = _nuggets(nu_ids, nu_texts, vital, vital_given, sh)
    tag_strs = _strs(tags_values)

    take = pa.array(keep)

    def py(name):
        return col[name].take(take).to_pylist()

    opt = ("tags", "evidence", "reference_answer", "nuggets", "source", "created")
    bits = (tags_present, ev_present, opt_present["reference_answer"], nu_present, src_present,
            opt_present["created"])
    masks = sum(np.asarray(b, dtype=np.int64) << k for k, b in enumerate(bits))[keep].tolist()
    required = ("query_id", "question", "stratum", "answerable")
    fsets = {m: sh.get("q", required, opt, m) for m in set(masks)}
    columns = (
        py("query_id"), py("question"), _strs(col["stratum"].take(take)), _slices(tag_strs, tags_off, keep),
        py("answerable"), _slices(evs, ev_off, keep), py("reference_answer"), _slices(nus, nu_off, keep),
        [_SOURCE_DEFAULT if x is None else x for x in _strs(col["source"].take(take))],
        _strs(col["created"].take(take)), [fsets[m] for m in masks])
    new = object.__new__
    out = []
    for qid, question, stratum, tags, answerable, evidence, ref, nuggets, source, created, fs in zip(*columns,
                                                                                                    strict=True):
        q = new(GoldenQuery)
        _set_dict(q, {"query_id": qid, "question": question, "stratum": stratum, "tags": tags,
                      "answerable": answerable, "evidence": evidence, "reference_answer": ref, "nuggets": nuggets,
                      "source": source, "created": created, "subgoals": [], "expected_tools": []})
        _set_fields_set(q, fs)
        _set_extra(q, None)
        _set_private(q, None)
        out.append(q)
    return rows.slow, out


def _slices(items: list, offsets: np.ndarray, rows: np.ndarray) -> list[list]:
    """Per row of ``rows``, a new list of its ``items`` (``offsets`` per row of the piece)."""
    return [items[a:b] for a, b in zip(offsets[rows].tolist(), offsets[rows + 1].tolist(), strict=True)]


def _ok(check, v) -> bool:
    if v is None:
        return False
    try:
        check(v)
    except ValueError:
        return False
    return True


def _strs(arr: pa.Array) -> list:
    """A string column as a list of str (None for null), one object per distinct value."""
    if len(arr) == 0:
        return []
    d = pc.dictionary_encode(arr)
    distinct = np.asarray(d.dictionary.to_pylist() + [None], dtype=object)
    codes = filled(d.indices, len(d.dictionary))
    return distinct[codes].tolist()


def _evidence(ev: pa.Array, match_given: np.ndarray, sh: Shared) -> list[Evidence]:
    """Every evidence item of the piece as an Evidence (items of rows handed back too: they are not used)."""
    if len(ev) == 0:
        return []
    doc, quote = _strs(ev.field("doc_id")), ev.field("quote").to_pylist()
    start, end, grade = (ev.field(k).to_pylist() for k in ("start", "end", "grade"))
    match = _strs(ev.field("match"))
    required = ("doc_id", "start", "end", "grade", "quote")
    fs_given = sh.get("e", required, ("match",), 1)
    fs_default = sh.get("e", required, ("match",), 0)
    new = object.__new__
    out = []
    for d, s, e, g, qt, m in zip(doc, start, end, grade, quote, match, strict=True):
        x = new(Evidence)
        _set_dict(x, {"doc_id": d, "start": s, "end": e, "grade": g, "quote": qt,
                      "match": _MATCH_DEFAULT if m is None else m, "hop": None})
        _set_fields_set(x, fs_default if m is None else fs_given)
        _set_extra(x, None)
        _set_private(x, None)
        out.append(x)
    return out


def _nuggets(ids: list, texts: list, vital: pa.Array, vital_given: np.ndarray, sh: Shared) -> list[Nugget]:
    if not ids:
        return []
    vit = vital.to_pylist()
    fs_given = sh.get("n", ("id", "text"), ("vital",), 1)
    fs_default = sh.get("n", ("id", "text"), ("vital",), 0)
    new = object.__new__
    out = []
    for i, t, v in zip(ids, texts, vit, strict=True):
        x = new(Nugget)
        _set_dict(x, {"id": i, "text": t, "vital": _VITAL_DEFAULT if v is None else v})
        _set_fields_set(x, fs_default if v is None else fs_given)
        _set_extra(x, None)
        _set_private(x, None)
        out.append(x)
    return out
