"""TREC qrels and run files: fast reading and writing, and the vectorized join into a :class:`GradeMatrix`.

qrels lines are ``qid iter docid rel``; run lines are ``qid Q0 docid rank score tag``; fields are separated by
any run of spaces or tabs. Parsing goes through pyarrow.csv; strings become integer codes by dictionary
encoding, the (query, doc) grade lookup is a merge on a combined int64 key with ``searchsorted``, and ranking
order is checked in bulk and only re-sorted (``np.lexsort``) when the file is not already in rank order.

Query coverage follows the labels: queries of the qrels missing from the run are scored as empty rankings
and counted; run queries absent from the qrels are dropped and counted (trec_eval ignores them too). A run
sharing no query with the qrels is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ragassay.errors import InputError, SchemaError
from ragassay.metrics.matrix import GradeMatrix, pad_ragged
from ragassay.metrics.names import Metric
from ragassay.metrics.retrieval import MetricResult, evaluate
from ragassay.metrics.semantics import Semantics


def _as_string_array(values, what: str) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        values = pa.array(np.asarray(values, dtype=object) if not isinstance(values, list) else values)
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = pc.cast(values, pa.string())
    if values.null_count:
        raise InputError(f"{what} contains {values.null_count} missing value(s); every row needs an id")
    return values


def _codes(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Integer codes (first-appearance order) and the distinct values."""
    enc = values.dictionary_encode()
    return enc.indices.to_numpy().astype(np.int64), enc.dictionary


def _group_codes(values: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Like :func:`_codes`, but cheap when equal values sit in contiguous blocks (query ids of a run file)."""
    n = len(values)
    if n < 2:
        return _codes(values)
    change = np.flatnonzero(~pc.equal(values[1:], values[:-1]).to_numpy(zero_copy_only=False)) + 1
    starts = np.r_[0, change]
    heads = values.take(pa.array(starts))
    head_codes, distinct = _codes(heads)
    if len(distinct) != len(starts):
        return _codes(values)
    return np.repeat(head_codes, np.diff(np.r_[starts, n])), distinct


def _string_fingerprint(values: pa.Array) -> np.ndarray:
    """A cheap 64-bit fingerprint per string from its length and its first and last 8 bytes.

    Equal strings always get equal fingerprints; different strings may collide, so callers confirm every
    candidate exactly. Reading the raw arrow buffers keeps this to a few gathers instead of hashing every byte.
    """
    off_dtype = np.int64 if pa.types.is_large_string(values.type) else np.int32
    bufs = values.buffers()
    n = len(values)
    offsets = np.frombuffer(bufs[1], dtype=off_dtype, count=n + 1 + values.offset)[values.offset :].astype(
        np.int64
    )
    raw = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    padded = np.concatenate([np.zeros(8, np.uint8), raw, np.zeros(8, np.uint8)])
    # element i of this unaligned view is the little-endian uint64 made of padded[i:i+8]
    words = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, offset=0, strides=(1,))
    start, end = offsets[:-1] + 8, offsets[1:] + 8
    length = (end - start).astype(np.uint64)
    short = length < 8
    keep = np.where(
        short, (np.uint64(1) << (np.minimum(length, 7) * np.uint64(8))) - np.uint64(1), ~np.uint64(0)
    )
    head = words[start] & keep
    tail = np.where(short, np.uint64(0), words[end - 8])
    return (
        (head * np.uint64(0x9E3779B97F4A7C15))
        ^ (tail * np.uint64(0xC2B2AE3D27D4EB4F))
        ^ (length * np.uint64(0x165667B19E3779F9))
    )


@dataclass(frozen=True, eq=False)
class Qrels:
    """Relevance labels indexed for joins: query and doc dictionaries, sorted (query, doc) keys and grades."""

    query_ids: pa.Array
    doc_ids: pa.Array
    keys: np.ndarray
    key_grades: np.ndarray
    judged: np.ndarray
    source: str = "<qrels>"

    @classmethod
    def from_arrays(cls, qid, docid, grade, source: str = "<qrels>", line_of=None) -> Qrels:
        """Index labels given as columns. Duplicate (query, doc) pairs raise a SchemaError naming the line."""
        q = _as_string_array(qid, "qrels query ids")
        d = _as_string_array(docid, "qrels doc ids")
        g = np.asarray(grade, dtype=np.float64)
        if not (len(q) == len(d) == len(g)):
            raise InputError(f"{source}: qrels columns differ in length ({len(q)}, {len(d)}, {len(g)})")
        if len(q) == 0:
            raise InputError(f"{source}: qrels are empty; add at least one 'qid 0 docid rel' line")
        if np.isnan(g).any():
            raise SchemaError(f"{source}: a relevance grade is missing or not a number")
        qc, qdict = _codes(q)
        dc, ddict = _codes(d)
        keys = qc * len(ddict) + dc
        order = np.argsort(keys, kind="stable")
        skeys = keys[order]
        dup = np.flatnonzero(skeys[1:] == skeys[:-1])
        if dup.size:
            a, b = int(order[dup[0]]), int(order[dup[0] + 1])
            where = line_of(b) if line_of else f"row {b + 1}"
            first = line_of(a) if line_of else f"row {a + 1}"
            raise SchemaError(
                f"{where}: duplicate judgment for query {q[b].as_py()!r} doc {d[b].as_py()!r} "
                f"(first at {first}); keep one line per (query, doc)"
            )
        counts = np.bincount(qc, minlength=len(qdict))
        by_q = np.lexsort((-g, qc))
        judged = pad_ragged(g[by_q], counts)
        return cls(qdict, ddict, skeys, g[order], judged, source)

    def __len__(self) -> int:
        return len(self.query_ids)


@dataclass(frozen=True, eq=False)
class Run:
    """A ranked run as columns (query id, doc id, score); ``line_of(row)`` names the source line for errors."""

    qid: pa.Array
    docid: pa.Array
    score: np.ndarray
    source: str = "<run>"
    line_of: object = None

    @classmethod
    def from_arrays(cls, qid, docid, score, source: str = "<run>", line_of=None) -> Run:
        q = _as_string_array(qid, "run query ids")
        d = _as_string_array(docid, "run doc ids")
        s = np.asarray(score, dtype=np.float64)
        if not (len(q) == len(d) == len(s)):
            raise InputError(f"{source}: run columns differ in length ({len(q)}, {len(d)}, {len(s)})")
        if np.isnan(s).any():
            row = int(np.flatnonzero(np.isnan(s))[0])
            where = line_of(row) if line_of else f"{source}: row {row + 1}"
            raise SchemaError(
                f"{where}: score is missing or not a number; every result needs a numeric score"
            )
        return cls(q, d, s, source, line_of)

    def where(self, row: int) -> str:
        return self.line_of(row) if self.line_of else f"{self.source}: row {row + 1}"


def _rank_order(
    codes: np.ndarray, n_groups: int, scores: np.ndarray, docid: pa.Array, ties: str
) -> np.ndarray:
    """Row order: grouped by query, score descending; ties kept as given or by doc id descending (trec_eval)."""
    s = scores.astype(np.float32) if ties == "trec_eval" else scores
    n = len(codes)
    same = codes[1:] == codes[:-1]
    grouped = np.count_nonzero(~same) + 1 == n_groups if n else True
    if grouped and not np.any(same & (s[1:] > s[:-1])):
        order = np.arange(n)
    else:
        order = np.lexsort((-s, codes))
    if ties != "trec_eval" or n < 2:
        return order
    so, co = s[order], codes[order]
    tie = (co[1:] == co[:-1]) & (so[1:] == so[:-1])
    if not tie.any():
        return order
    in_tie = np.zeros(n, dtype=bool)
    in_tie[1:] |= tie
    in_tie[:-1] |= tie
    pos = np.flatnonzero(in_tie)
    group = np.cumsum(np.r_[True, ~tie])[pos]
    sub = pa.table({"g": group, "d": pc.take(docid, pa.array(order[pos]))})
    perm = pc.sort_indices(sub, sort_keys=[("g", "ascending"), ("d", "descending")]).to_numpy()
    order[pos] = order[pos][perm]
    return order


def _check_duplicates(run: Run, codes: np.ndarray) -> None:
    """SchemaError when a doc appears twice in one query's ranking: fingerprints first, exact check on clashes."""
    key = _string_fingerprint(run.docid) ^ (codes.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93))
    sk = np.sort(key)
    if not np.any(sk[1:] == sk[:-1]):
        return
    idx = pa.array(key).dictionary_encode().indices.to_numpy()
    cand = np.flatnonzero(np.bincount(idx)[idx] > 1)
    sub = pa.table({"q": codes[cand], "d": run.docid.take(pa.array(cand)), "row": cand})
    groups = sub.group_by(["q", "d"]).aggregate([("row", "min"), ("row", "max"), ("row", "count")])
    dup = groups.filter(pc.greater(groups["row_count"], 1))
    if dup.num_rows:
        a, b = dup["row_min"][0].as_py(), dup["row_max"][0].as_py()
        first = int(np.min(dup["row_max"].to_numpy()))
        if first != b:
            row = int(np.flatnonzero(dup["row_max"].to_numpy() == first)[0])
            a, b = dup["row_min"][row].as_py(), first
        raise SchemaError(
            f"{run.where(b)}: doc {run.docid[b].as_py()!r} appears twice in the ranking of query "
            f"{run.qid[b].as_py()!r} (also at {run.where(a)}); each doc may appear once per query"
        )


def build_grade_matrix(
    qrels: Qrels, run: Run, ties: str = "given", check_duplicates: bool = True
) -> GradeMatrix:
    """Join a run with its labels into a :class:`GradeMatrix` (rows = qrels queries, in qrels order).

    Raises InputError when the run shares no query with the qrels and SchemaError on a doc ranked twice for
    one query.
    """
    codes, run_qids = _group_codes(run.qid)
    if check_duplicates and len(codes):
        _check_duplicates(run, codes)
    qmap = pc.index_in(run_qids, value_set=qrels.query_ids).fill_null(-1).to_numpy().astype(np.int64)
    if len(qmap) and not np.any(qmap >= 0) or len(qmap) == 0:
        raise InputError(
            f"{run.source} shares no query id with {qrels.source} (run has e.g. "
            f"{run_qids[0].as_py() if len(run_qids) else 'nothing'!r}, qrels e.g. {qrels.query_ids[0].as_py()!r}); "
            "check that the run and qrels belong to the same topics"
        )
    dcode = pc.index_in(run.docid, value_set=qrels.doc_ids).fill_null(-1).to_numpy().astype(np.int64)
    qrow = qmap[codes]
    grade = np.full(len(codes), np.nan)
    hit = np.flatnonzero((dcode >= 0) & (qrow >= 0))
    if hit.size:
        key = qrow[hit] * len(qrels.doc_ids) + dcode[hit]
        pos = np.minimum(np.searchsorted(qrels.keys, key), len(qrels.keys) - 1)
        found = qrels.keys[pos] == key
        grade[hit[found]] = qrels.key_grades[pos[found]]
    order = _rank_order(codes, len(run_qids), run.score, run.docid, ties)
    order = order[qrow[order] >= 0]
    qo = qrow[order]
    nq = len(qrels.query_ids)
    lengths = np.bincount(qo, minlength=nq).astype(np.int64)
    starts = np.r_[0, np.flatnonzero(qo[1:] != qo[:-1]) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(qo)]))
    rank = np.arange(len(qo)) - group_start
    grades = np.full((nq, int(lengths.max(initial=0))), np.nan)
    grades[qo, rank] = grade[order]
    return GradeMatrix(
        query_ids=np.asarray(qrels.query_ids.to_pylist(), dtype=object),
        grades=grades,
        lengths=lengths,
        judged=qrels.judged,
        missing=lengths == 0,
        ties=ties,
    )


# ---------------------------------------------------------------- file reading


def _normalize_whitespace(data: bytes) -> bytes:
    """Make every field separator a single space without changing the number of lines."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if b"\t" in data:
        data = data.replace(b"\t", b" ")
    while b"  " in data:
        data = data.replace(b"  ", b" ")
    if b"\n " in data or data.startswith(b" "):
        data = data.replace(b"\n ", b"\n")
        if data.startswith(b" "):
            data = data[1:]
    if b" \n" in data:
        data = data.replace(b" \n", b"\n")
    return data.rstrip(b" ")


class _Lines:
    """Maps a parsed row (blank lines skipped) back to 'file:line' — built only when an error is reported."""

    def __init__(self, path: str, data: bytes | None):
        self.path, self.data, self._map = path, data, None

    def __call__(self, row: int) -> str:
        if self._map is None:
            data = self.data if self.data is not None else Path(self.path).read_bytes().replace(b"\r", b"")
            lines = data.split(b"\n")
            self._map = [i + 1 for i, ln in enumerate(lines) if ln.strip()]
        return f"{self.path}:{self._map[row]}"


def _first_bad_line(path: str, data: bytes, ncols: int, numeric: dict[int, type], what: str) -> SchemaError:
    for i, raw in enumerate(data.decode("utf-8", errors="replace").split("\n"), start=1):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != ncols:
            return SchemaError(
                f"{path}:{i}: expected {ncols} fields ({what}), found {len(fields)}: {raw.strip()[:80]!r}"
            )
        for col, typ in numeric.items():
            try:
                v = typ(fields[col])
            except ValueError:
                return SchemaError(
                    f"{path}:{i}: field {col + 1} must be {'an integer' if typ is int else 'a number'} "
                    f"({what}), found {fields[col]!r}"
                )
            if typ is float and v != v:
                return SchemaError(f"{path}:{i}: field {col + 1} is NaN; scores must be numbers ({what})")
    return SchemaError(f"{path}: could not parse as {what}; check the field separators and encoding")


def _read_table(path: str | os.PathLike, names: list[str], types: dict, what: str, numeric: dict[int, type]):
    """Parse with pyarrow; single-space files go straight through, others are normalized and parsed again."""
    p = str(path)
    if not Path(p).is_file():
        raise InputError(f"{p}: no such {what} file; check the path")
    opts = dict(
        read_options=pacsv.ReadOptions(column_names=names),
        parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False, ignore_empty_lines=True),
        convert_options=pacsv.ConvertOptions(
            column_types=types, include_columns=list(types), null_values=[], strings_can_be_null=False
        ),
    )
    try:
        return pacsv.read_csv(p, **opts), _Lines(p, None)
    except pa.ArrowInvalid:
        pass  # tabs, repeated spaces or a bad line: normalize separators, then retry or locate the problem
    data = _normalize_whitespace(Path(p).read_bytes())
    if not data.strip():
        raise InputError(f"{p}: file is empty; expected {what} lines")
    try:
        table = pacsv.read_csv(pa.BufferReader(data), **opts)
    except pa.ArrowInvalid as exc:
        raise _first_bad_line(p, data, len(names), numeric, what) from exc
    return table, _Lines(p, data)


def read_qrels(path: str | os.PathLike) -> Qrels:
    """Read a TREC qrels file (``qid iter docid rel``); bad lines raise SchemaError naming file:line."""
    what = "qid iter docid rel"
    table, lines = _read_table(
        path,
        ["qid", "iter", "docid", "rel"],
        {"qid": pa.string(), "docid": pa.string(), "rel": pa.int64()},
        what,
        {3: int},
    )
    return Qrels.from_arrays(
        table["qid"], table["docid"], table["rel"].to_numpy(), source=str(path), line_of=lines
    )


def read_run(path: str | os.PathLike) -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``); bad lines raise SchemaError naming file:line."""
    what = "qid Q0 docid rank score tag"
    table, lines = _read_table(
        path,
        ["qid", "q0", "docid", "rank", "score", "tag"],
        {"qid": pa.string(), "docid": pa.string(), "score": pa.float64()},
        what,
        {4: float},
    )
    return Run.from_arrays(
        table["qid"], table["docid"], table["score"].to_numpy(), source=str(path), line_of=lines
    )


def write_qrels(path: str | os.PathLike, qid, docid, grade) -> None:
    """Write ``qid 0 docid rel`` lines."""
    t = pa.table(
        {
            "q": _as_string_array(qid, "query ids"),
            "i": pa.array(np.zeros(len(grade), dtype=np.int64)),
            "d": _as_string_array(docid, "doc ids"),
            "r": pa.array(np.asarray(grade, dtype=np.int64)),
        }
    )
    _write(path, t)


def write_run(path: str | os.PathLike, qid, docid, score, tag: str = "ragassay") -> None:
    """Write ``qid Q0 docid rank score tag`` lines; rank is 1-based in the order given within each query."""
    q = _as_string_array(qid, "query ids")
    codes, _ = _codes(q)
    n = len(codes)
    order = np.argsort(codes, kind="stable")
    co = codes[order]
    starts = np.r_[0, np.flatnonzero(co[1:] != co[:-1]) + 1] if n else np.zeros(0, dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n])) + 1
    t = pa.table(
        {
            "q": q,
            "z": pa.array(["Q0"] * n),
            "d": _as_string_array(docid, "doc ids"),
            "k": pa.array(rank),
            "s": pa.array(np.asarray(score, dtype=np.float64)),
            "t": pa.array([tag] * n),
        }
    )
    _write(path, t)


def _write(path, table: pa.Table) -> None:
    opts = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    pacsv.write_csv(table, str(path), write_options=opts)


def evaluate_trec(
    qrels: Qrels | str | os.PathLike,
    run: Run | str | os.PathLike,
    metrics,
    semantics: Semantics | None = None,
) -> tuple[dict[Metric, MetricResult], dict[str, int]]:
    """Score a TREC run against qrels. Returns per-metric results and coverage counts
    (``n_queries`` scored, ``n_missing`` qrels queries absent from the run, ``n_run_only`` dropped run queries).
    """
    sem = semantics or Semantics.trec_eval()
    q = qrels if isinstance(qrels, Qrels) else read_qrels(qrels)
    r = run if isinstance(run, Run) else read_run(run)
    gm = build_grade_matrix(q, r, ties=sem.ties)
    run_qids = pc.unique(r.qid)
    n_run_only = int(len(run_qids) - pc.sum(pc.is_in(run_qids, value_set=q.query_ids)).as_py())
    coverage = {"n_queries": gm.n_queries, "n_missing": int(gm.missing.sum()), "n_run_only": n_run_only}
    return evaluate(gm, metrics, sem), coverage
