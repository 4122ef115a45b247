"""TREC qrels and run files: fast reading and writing, and the vectorized join into a :class:`GradeMatrix`.

qrels lines are ``qid iter docid rel``; run lines are ``qid Q0 docid rank score tag``; fields are separated by
any run of spaces or tabs. Parsing goes through pyarrow.csv. Doc ids never become Python objects: each gets
integer keys from its raw bytes (:mod:`ragassay.metrics.strkeys`), a label lookup is one probe of an
open-addressing table keyed by (query row, doc hash), and every hash match is confirmed exactly, so hash
collisions cost time, never correctness. A run already in rank order (rows grouped by query, scores
descending) is used as it is; otherwise it is re-sorted (``np.lexsort``).

Query coverage follows the labels: queries of the qrels missing from the run are scored as empty rankings
and counted; run queries absent from the qrels are dropped and counted (trec_eval ignores them too). A run
sharing no query with the qrels is an error.
"""

from __future__ import annotations

import math
import os
import re
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ragassay.errors import InputError, SchemaError
from ragassay.metrics.arrownp import from_numpy, to_numpy
from ragassay.metrics.matrix import GradeMatrix, pad_ragged
from ragassay.metrics.measures import evaluate
from ragassay.metrics.names import Metric
from ragassay.metrics.retrieval import MetricResult
from ragassay.metrics.semantics import Semantics, tie_rule
from ragassay.metrics.strkeys import StringKeys, equal_pairs, string_keys

_U64 = np.uint64
_HIGH_HALF = 1 if sys.byteorder == "little" else 0
_MAX_TABLE_BITS = 24  # at most 64 MiB of label table; beyond it slots are shared and fall back to search


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
    return to_numpy(enc.indices).astype(np.int64), enc.dictionary


def _groups(values: pa.Array, parallel: bool = True) -> tuple[np.ndarray, pa.Array, np.ndarray | None]:
    """Blocks of equal values: (block starts, distinct values, per-row codes or None).

    When every value occupies one contiguous block (query ids of a run or qrels file), block i has code i and
    no per-row codes are built; only the block heads are hashed. Otherwise the codes come from
    dictionary encoding (first-appearance order) and the starts are those of the row order.
    """
    n = len(values)
    if n < 2:
        return np.zeros(n, dtype=np.int64), values.unique(), None
    # rows where the value changes; the second half's on the worker thread
    mid = n // 2 if parallel and n >= _PARALLEL_ROWS else n - 1
    tail = _in_background(_changes, values[mid + 1 :], values[mid:-1])
    starts = np.r_[0, _changes(values[1 : mid + 1], values[:mid]) + 1, tail.result() + (mid + 1)]
    heads = values.take(from_numpy(starts))
    distinct = pc.unique(heads)
    if len(distinct) == len(starts):
        return starts, heads, None
    codes, distinct = _codes(values)
    return starts, distinct, codes


def _changes(after: pa.Array, before: pa.Array) -> np.ndarray:
    """Positions i where ``after[i] != before[i]``."""
    return to_numpy(pc.indices_nonzero(pc.not_equal(after, before))).astype(np.int64)


def _first_duplicate(group: np.ndarray, values: pa.Array, rows: np.ndarray) -> tuple[int, int] | None:
    """Among ``rows`` (original row numbers), the earliest repeat of a (group, value) pair: (first, repeat)."""
    sub = pa.table({"g": from_numpy(group), "v": values.take(from_numpy(rows)), "row": from_numpy(rows)})
    lists = sub.group_by(["g", "v"]).aggregate([("row", "list")])["row_list"].to_pylist()
    pairs = [sorted(rs)[:2] for rs in lists if len(rs) > 1]
    if not pairs:
        return None
    a, b = min(pairs, key=lambda p: p[1])
    return int(a), int(b)


def _row_bits(n_queries: int) -> int:
    """Bits for a query row in a join key (the row in the high bits, the doc hash's top bits below).

    Rows 0..n-1 need fewer bits than the all-ones value, which marks run queries absent from the qrels.
    """
    return max(1, int(n_queries).bit_length())


_PARALLEL_ROWS = 200_000  # from this many rows on, halves of a pass run on two threads
_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool): a forked child makes its own


def _in_background(fn, *args) -> Future:
    """Run ``fn`` on a worker thread (numpy and Arrow release the GIL in their array loops), or inline on a
    single-core machine or with ``RAGASSAY_THREADS=1``."""
    global _POOL
    if (os.cpu_count() or 1) < 2 or os.environ.get("RAGASSAY_THREADS") == "1":
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as exc:  # delivered by .result(), as from a worker
            done.set_exception(exc)
        return done
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragassay-trec"))
    return _POOL[1].submit(fn, *args)


@dataclass(frozen=True, eq=False)
class Qrels:
    """Relevance labels indexed for joins.

    ``query_ids`` are the distinct queries in first-appearance order (the rows of every grade matrix);
    labels are stored sorted by join key with their doc ids (``docs``), query ``row`` and ``grades``;
    ``table`` maps a slot (the top bits of a key) to the first label in it in key order, or -1.
    ``unique_keys`` is False when two labels of one query share a join key (a hash collision); joins then
    match doc ids as strings.
    """

    query_ids: pa.Array
    query_objects: np.ndarray
    docs: StringKeys
    row: np.ndarray
    grades: np.ndarray
    keys: np.ndarray
    row_bits: int
    table: np.ndarray
    table_bits: int
    unique_keys: bool
    judged: np.ndarray
    source: str = "<qrels>"
    label_cache: dict = field(default_factory=dict, repr=False)  # label-only metric terms, see GradeMatrix

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
        starts, qdict, qc = _groups(q)
        if qc is None:
            qc = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(q)]))
        nq = len(qdict)
        dk = string_keys(d)
        row_bits = _row_bits(nq)
        keys = (qc.astype(_U64) << _U64(64 - row_bits)) | (dk.hash >> _U64(row_bits))
        order = np.argsort(keys, kind="stable")
        skeys = keys[order]
        same = np.flatnonzero(skeys[1:] == skeys[:-1])
        if same.size:
            rows = np.unique(order[np.r_[same, same + 1]])
            dup = _first_duplicate(qc[rows], d, rows)
            if dup is not None:
                a, b = dup
                where = line_of(b) if line_of else f"row {b + 1}"
                first = line_of(a) if line_of else f"row {a + 1}"
                raise SchemaError(
                    f"{where}: duplicate judgment for query {q[b].as_py()!r} doc {d[b].as_py()!r} "
                    f"(first at {first}); keep one line per (query, doc)"
                )
        # each query gets a region of >= 16 slots per label on average (the slot is the top bits of the key:
        # query row, then doc hash), so a run's rows, which come query by query, probe memory in order, and
        # few probes land on another doc's slot (measured: 8 slots per label cost ~15% more lookup time)
        region_bits = max(3, (-(-len(skeys) // nq) - 1).bit_length() + 4)
        table_bits = min(row_bits + region_bits, _MAX_TABLE_BITS)
        slot = skeys >> _U64(64 - table_bits)
        first = np.r_[0, np.flatnonzero(slot[1:] != slot[:-1]) + 1]
        table = np.full(1 << table_bits, -1, dtype=np.int32)
        table[slot[first]] = first
        counts = np.bincount(qc, minlength=nq)
        by_q = np.lexsort((-g, qc))
        judged = pad_ragged(g[by_q], counts)
        judged.flags.writeable = False  # shared by every grade matrix joined against these labels
        # StringKeys.take would index with pa.array(order), which makes pyarrow import pandas (0.2 s of start-up)
        docs = StringKeys(d.take(from_numpy(order)), dk.length[order], dk.head[order], dk.hash[order])
        return cls(
            query_ids=qdict,
            query_objects=np.asarray(qdict.to_pylist(), dtype=object),
            docs=docs,
            row=qc[order],
            grades=g[order],
            keys=skeys,
            row_bits=row_bits,
            table=table,
            table_bits=table_bits,
            unique_keys=not same.size,
            judged=judged,
            source=source,
        )

    def __len__(self) -> int:
        return len(self.query_ids)

    def row_keys(self, rows: np.ndarray) -> np.ndarray:
        """The query-row part of join keys for qrels rows (-1 = a query the qrels do not have)."""
        absent = (1 << self.row_bits) - 1
        return np.where(rows >= 0, rows, absent).astype(_U64) << _U64(64 - self.row_bits)

    def lookup(self, keys: np.ndarray, docs: StringKeys) -> tuple[np.ndarray, np.ndarray]:
        """Labels of (query row, doc) pairs: (positions that have one, their label indices), exactly.

        ``keys`` holds :meth:`row_keys` of each pair's query and is completed in place with the doc hash;
        positions come back ascending.
        """
        # one temporary serves both shifts: fresh large arrays cost page faults
        tmp = np.right_shift(docs.hash, _U64(self.row_bits))
        keys |= tmp
        if not self.unique_keys:
            return self._lookup_strings(keys >> _U64(64 - self.row_bits), docs)
        shift = _U64(64 - self.table_bits)
        probe = self.table[np.right_shift(keys, shift, out=tmp)]
        pos = np.flatnonzero(probe >= 0)
        label = probe[pos].astype(np.int64)
        want = keys[pos]
        found = self.keys[label] == want
        # labels sharing a slot sit next to each other in key order: walk on through the slot
        last = len(self.keys) - 1
        todo = np.flatnonzero(~found & (label < last))
        while todo.size:
            nxt = label[todo] + 1
            nk = self.keys[nxt]
            go_on = (nk >> shift) == (want[todo] >> shift)
            todo, nxt, nk = todo[go_on], nxt[go_on], nk[go_on]
            label[todo] = nxt
            hit = nk == want[todo]
            found[todo[hit]] = True
            todo = todo[~hit & (nxt < last)]
        pos, label = pos[found], label[found]
        ok = equal_pairs(docs, pos, self.docs, label)
        return pos[ok], label[ok]

    def _lookup_strings(self, rows: np.ndarray, docs: StringKeys) -> tuple[np.ndarray, np.ndarray]:
        """The exact join on (row, doc id string), used when hashed keys are not unique among the labels."""
        valid = rows < _U64((1 << self.row_bits) - 1)
        text = pa.large_string()
        labels = pa.table(
            {"r": self.row, "d": self.docs.values.cast(text), "label": np.arange(len(self.row))}
        )
        left = pa.table(
            {
                "r": np.where(valid, rows, 0).astype(np.int64),
                "d": docs.values.cast(text),
                "pos": np.arange(len(rows)),
            }
        ).filter(pa.array(valid))
        joined = left.join(labels, keys=["r", "d"], join_type="inner")
        pos = joined["pos"].to_numpy()
        order = np.argsort(pos)
        return pos[order], joined["label"].to_numpy()[order]


# ---------------------------------------------------------------- one validation for every run reader
# `ragassay trec` (read_run, Run.from_arrays and the join), the TREC run adapter and the JSONL trace adapter
# all report a bad result with these messages, so the same bad input reads the same through every entry point.

EMPTY_RUN = "run is empty; expected 'qid Q0 docid rank score tag' lines"


def nonfinite_score_message(score: float) -> str:
    return f"score {float(score)!r} is not a finite number; every result needs a finite numeric score"


def duplicate_message(doc: str, qid: str, first_at: str, what: str = "doc") -> str:
    return (
        f"{what} {doc!r} appears twice in the ranking of query {qid!r} (also at {first_at}); "
        f"each {what} may appear once per query"
    )


def ranking_problems(qid, docid, score, where, what: str = "doc") -> list[tuple[int, str]]:
    """Row-level problems of a ranking given as Python columns, in row order: (row, message).

    A non-finite score, and a (query, doc) pair seen before (``where(row)`` names the earlier row in the
    message). ``None`` scores are allowed (rank-only lists). These are the checks :meth:`Run.from_arrays` and
    the join apply, row by row, for readers that skip and count bad records instead of stopping.
    """
    problems: list[tuple[int, str]] = []
    seen: dict[tuple[str, str], int] = {}
    for i, (q, d, sc) in enumerate(zip(qid, docid, score, strict=True)):
        if sc is not None and not math.isfinite(sc):
            problems.append((i, nonfinite_score_message(sc)))
            continue
        first = seen.setdefault((q, d), i)
        if first != i:
            problems.append((i, duplicate_message(d, q, where(first), what)))
    return problems


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
        if len(q) == 0:
            raise InputError(f"{source}: {EMPTY_RUN}")
        bad = np.flatnonzero(~np.isfinite(s))
        if bad.size:
            row = int(bad[0])
            where = line_of(row) if line_of else f"{source}: row {row + 1}"
            raise SchemaError(f"{where}: {nonfinite_score_message(s[row])}")
        return cls(q, d, s, source, line_of)

    def where(self, row: int) -> str:
        return self.line_of(row) if self.line_of else f"{self.source}: row {row + 1}"


def _rises(scores: np.ndarray, starts: np.ndarray) -> bool:
    """True when a score rises above the one before it within a block (the rows need sorting)."""
    if len(scores) < 2:
        return False
    up = scores[1:] > scores[:-1]
    up[starts[1:] - 1] = False  # the first row of a block may score anything
    return bool(up.any())


def _ties(scores: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Boolean per row i >= 1 (index i - 1): row i scores the same as row i - 1 in the same block."""
    tie = scores[1:] == scores[:-1]
    tie[starts[1:] - 1] = False
    return tie


def _rank_order(
    run: Run, scores: np.ndarray, starts: np.ndarray, codes: np.ndarray | None, ties: str
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """How to read the run in ranked order: grouped by query, score descending, ties as given or (trec_eval9,
    trec_eval10) by doc id descending.

    Returns ``(order, starts, block_code, moved)``: ``order`` maps ranked positions to rows, or is None when
    the rows already come block by block with non-increasing scores; ``starts`` and ``block_code`` give each
    query block's first ranked position and query code; ``moved`` = (positions, rows) lists the rows that tie
    breaking puts elsewhere when ``order`` is None.
    """
    n = len(scores)
    if codes is None and not _rises(scores, starts):
        order, block_code, ranked = None, np.arange(len(starts)), scores
    else:
        if codes is None:
            codes = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
        order = np.lexsort((-scores, codes))  # stable: equal scores keep the given order
        co = codes[order]
        starts = np.r_[0, np.flatnonzero(co[1:] != co[:-1]) + 1]
        block_code, ranked = co[starts], scores[order]
    if ties == "given" or n < 2:
        return order, starts, block_code, None
    tie = _ties(ranked, starts)
    first = np.flatnonzero(tie)
    if not first.size:
        return order, starts, block_code, None
    # first and first + 1 are both ascending; merged without np.union1d, whose np.unique imports numpy.ma
    both = np.sort(np.concatenate((first, first + 1)), kind="stable")
    pos = both[np.r_[True, both[1:] != both[:-1]]]
    after_tie = np.zeros(len(pos), dtype=bool)
    after_tie[pos > 0] = tie[pos[pos > 0] - 1]
    group = np.cumsum(~after_tie)  # one id per run of equal scores
    rows = pos if order is None else order[pos]
    sub = pa.table({"g": from_numpy(group), "d": run.docid.take(from_numpy(rows))})
    perm = to_numpy(pc.sort_indices(sub, sort_keys=[("g", "ascending"), ("d", "descending")]))
    if order is None:
        return None, starts, block_code, (pos, rows[perm])
    order[pos] = rows[perm]
    return order, starts, block_code, None


def _ranked_positions(rows: np.ndarray, order, moved, n: int) -> np.ndarray:
    """Ranked position of each of ``rows`` (see :func:`_rank_order`)."""
    if order is not None:
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n)
        return inverse[rows]
    if moved is None:
        return rows
    pos, moved_rows = moved
    by_row = np.argsort(moved_rows)
    moved_rows, pos = moved_rows[by_row], pos[by_row]
    i = np.minimum(np.searchsorted(moved_rows, rows), len(moved_rows) - 1)
    hit = moved_rows[i] == rows
    out = rows.copy()
    out[hit] = pos[i[hit]]
    return out


def _check_duplicates(run: Run, order: np.ndarray | None, hashes: np.ndarray, starts: np.ndarray) -> None:
    """SchemaError when a doc appears twice in one query's ranking.

    Rows are in ranked order (``order`` maps them to the run's rows; None = as given) and each query is the
    block starting at ``starts``. The top 32 hash bits are sorted within each block; equal neighbours mark
    candidate blocks, which are then checked on the doc id strings.
    """
    n, nb = len(hashes), len(starts)
    sizes = np.diff(np.r_[starts, n])
    width = int(sizes.max(initial=0))
    h32 = hashes.view(np.uint32)[_HIGH_HALF::2]  # the top 32 bits, the best mixed ones, without a copy
    if nb * width == n:
        sorted_h = np.sort(h32.reshape(nb, width), axis=1)
        cand = np.flatnonzero((sorted_h[:, 1:] == sorted_h[:, :-1]).any(axis=1))
    elif nb * width <= 4 * n:
        pad = np.uint32(0xFFFFFFFF)
        block = np.repeat(np.arange(nb), sizes)
        m = np.full((nb, width), pad)
        m[block, np.arange(n) - starts[block]] = np.minimum(h32, pad - np.uint32(1))
        sorted_h = np.sort(m, axis=1)
        cand = np.flatnonzero(((sorted_h[:, 1:] == sorted_h[:, :-1]) & (sorted_h[:, 1:] != pad)).any(axis=1))
    else:
        block = np.repeat(np.arange(nb, dtype=_U64), sizes)
        k = np.sort((block << _U64(32)) | h32)
        cand = np.unique((k[1:][k[1:] == k[:-1]] >> _U64(32)).astype(np.int64))
    if not cand.size:
        return
    rows = np.concatenate([np.arange(starts[b], starts[b] + sizes[b]) for b in cand])
    src = rows if order is None else order[rows]
    dup = _first_duplicate(np.repeat(cand, sizes[cand]), run.docid, src)
    if dup is not None:
        a, b = dup
        doc, qid = run.docid[b].as_py(), run.qid[b].as_py()
        raise SchemaError(f"{run.where(b)}: {duplicate_message(doc, qid, run.where(a))}")


_WORKER_SHARE = 0.4  # of the label lookups, given to the worker thread that also checks duplicates


def _check_then_lookup(run, order, hashes, starts, qrels: Qrels, keys, docs):
    """The worker's share of a join: the duplicate check (when ``run`` is given), then label lookups."""
    if run is not None:
        # a block holds the same rows whichever way ties are broken, so tie moves do not matter here
        _check_duplicates(run, order, hashes, starts)
    return qrels.lookup(keys, docs)


_JIT_ROWS = 200_000  # runs this long may use the compiled join (see _compiled)
_LARGE_JOINS = 0  # joins of runs that long so far in this process
_KERNELS = None  # the compiled kernels' module, once loaded


def _compiled(n_rows: int, jit: bool | None = None):
    """The compiled join kernels, or None for the numpy path (both give the same values).

    ``jit`` True/False forces the choice. None reads ``RAGASSAY_JIT``: ``1`` always, ``0`` never; unset or
    ``auto``: runs of ``_JIT_ROWS`` rows or more, once the kernels are loaded or from the second such run in
    the process on. Loading numba and the cached kernels takes about 0.6-1 s once per process, which one run
    never wins back (the compiled join saves 10-20 ms per million rows), while repeated joins in one
    process, a sweep or a notebook, do. Without numba the numpy path is used.
    """
    global _LARGE_JOINS, _KERNELS
    if jit is None:
        setting = os.environ.get("RAGASSAY_JIT", "auto")
        if setting in ("0", "1"):
            jit = setting == "1"
        elif n_rows < _JIT_ROWS:
            return None
        else:
            _LARGE_JOINS += 1
            jit = _LARGE_JOINS > 1 or _KERNELS is not None
    if not jit:
        return None
    if _KERNELS is None:
        try:
            from ragassay.metrics import _kernels
        except Exception:  # numba missing, broken, or unable to cache here: the numpy path gives the same values
            return None
        _KERNELS = _kernels
    return _KERNELS


def _join(
    qrels: Qrels, run: Run, ties: str, check_duplicates: bool, jit: bool | None = None
) -> tuple[GradeMatrix, int]:
    """The grade matrix of ``run`` against ``qrels`` and the number of run queries absent from the qrels.

    With the compiled kernels, each half of the run (on two threads) is read query block by query block:
    hash the doc ids, check them against the query's other docs, look up their labels. Without them, hashing runs on a worker thread
    while the query blocks and rank order are worked out, and the duplicate check runs there while the
    labels are looked up.
    """
    n = len(run.qid)
    ties = tie_rule(ties)
    kernels = _compiled(n, jit)
    # trec_eval 9.x (and pytrec_eval) keep scores as float; trec_eval 10.0 as double
    scores = run.score.astype(np.float32) if ties == "trec_eval9" else run.score
    pending_docs = None if kernels else _in_background(string_keys, run.docid)
    starts, run_qids, codes = _groups(run.qid, parallel=pending_docs is None)  # else the worker is hashing
    if run_qids.equals(qrels.query_ids):  # the same queries in the same order: no hash lookup needed
        qmap = np.arange(len(run_qids), dtype=np.int64)
    else:
        qmap = to_numpy(pc.index_in(run_qids, value_set=qrels.query_ids), null=-1).astype(np.int64)
    if n == 0 or not np.any(qmap >= 0):
        if pending_docs is not None:
            pending_docs.result()
        raise _no_common_query(run, run_qids[0].as_py() if len(run_qids) else "nothing", qrels)
    order, ranked_starts, block_code, moved = _rank_order(run, scores, starts, codes, ties)
    if kernels is not None:
        hit, label = _lookup_compiled(
            kernels, qrels, run, order, ranked_starts, qmap[block_code], check_duplicates
        )
        pos = hit if order is not None else _ranked_positions(hit, None, moved, n)
    else:
        hit, label = _lookup_numpy(
            qrels, run, pending_docs, starts, codes, qmap, order, ranked_starts, check_duplicates
        )
        pos = _ranked_positions(hit, order, moved, n)
    return _assemble(qrels, qmap, block_code, ranked_starts, n, pos, label, ties), int(
        np.count_nonzero(qmap < 0)
    )


def _no_common_query(run: Run, example: str, qrels: Qrels) -> InputError:
    return InputError(
        f"{run.source} shares no query id with {qrels.source} (run has e.g. {example!r}, qrels e.g. "
        f"{qrels.query_ids[0].as_py()!r}); check that the run and qrels belong to the same topics"
    )


def _string_buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (int32 or int64, one per string plus one) and the bytes of a (large_)string array."""
    bufs = values.buffers()
    off_type = np.int64 if pa.types.is_large_string(values.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=off_type, count=len(values) + 1 + values.offset)[values.offset :]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _lookup_compiled(
    kernels, qrels: Qrels, run: Run, order, ranked_starts, block_row, check_duplicates: bool
):
    """Label lookups and the duplicate check with the compiled kernel: (hit positions, label indices).

    The blocks are cut in two halves by rows; the worker thread takes the second. Positions are ranked
    positions when ``order`` is given, rows otherwise.
    """
    n = len(run.qid)
    offsets, data = _string_buffers(run.docid)
    label_offsets, label_data = _string_buffers(qrels.docs.values)
    ranked = np.zeros(0, dtype=np.int64) if order is None else order
    cut = int(np.searchsorted(ranked_starts, n // 2))
    mid = int(ranked_starts[cut]) if cut < len(ranked_starts) else n
    common = (offsets, data, qrels, label_offsets, label_data, check_duplicates)
    tail = _in_background(kernels.join_rows, ranked, ranked_starts[cut:], n, block_row[cut:], *common)
    hit, label, dup = kernels.join_rows(ranked, ranked_starts[:cut], mid, block_row[:cut], *common)
    tail_hit, tail_label, tail_dup = tail.result()
    if dup or tail_dup:  # the numpy check names the first repeated doc and its lines
        hashes = string_keys(run.docid).hash
        _check_duplicates(run, order, hashes if order is None else hashes[order], ranked_starts)
        raise SchemaError(f"{run.source}: a doc appears twice in one query's ranking")  # not reached
    return np.r_[hit, tail_hit], np.r_[label, tail_label]


def _lookup_numpy(
    qrels: Qrels, run: Run, pending_docs, starts, codes, qmap, order, ranked_starts, check_duplicates
):
    """Label lookups and the duplicate check in numpy: (hit rows, label indices)."""
    n = len(run.qid)
    code_key = qrels.row_keys(qmap)
    keys = code_key[codes] if codes is not None else np.repeat(code_key, np.diff(np.r_[starts, n]))
    docs = pending_docs.result()
    # the worker checks duplicates, then looks up the tail of the rows while this thread does the head
    split = n - int(n * _WORKER_SHARE) if check_duplicates else n // 2
    hashes = docs.hash if order is None or not check_duplicates else docs.hash[order]
    tail = _in_background(
        _check_then_lookup,
        run if check_duplicates else None,
        order,
        hashes,
        ranked_starts,
        qrels,
        keys[split:],
        docs.slice(split, n),
    )
    hit, label = qrels.lookup(keys[:split], docs.slice(0, split))
    tail_hit, tail_label = tail.result()  # raises the SchemaError of a doc ranked twice
    return np.r_[hit, tail_hit + split], np.r_[label, tail_label]


def _assemble(qrels: Qrels, qmap, block_code, ranked_starts, n: int, pos, label, ties: str) -> GradeMatrix:
    """The grade matrix from the labelled ranked positions ``pos`` and their ``label`` indices."""
    if np.any(pos[1:] < pos[:-1]):
        by_pos = np.argsort(pos, kind="stable")
        pos, label = pos[by_pos], label[by_pos]
    sizes = np.diff(np.r_[ranked_starts, n])
    block_row = qmap[block_code]
    kept = block_row >= 0
    nq = len(qrels)
    lengths = np.zeros(nq, dtype=np.int64)
    lengths[block_row[kept]] = sizes[kept]
    row_start = np.zeros(nq, dtype=np.int64)
    row_start[block_row[kept]] = ranked_starts[kept]
    row = qrels.row[label]
    return GradeMatrix(
        query_ids=qrels.query_objects,
        lengths=lengths,
        judged=qrels.judged,
        missing=lengths == 0,
        ties=ties,
        entries=(row, pos - row_start[row], qrels.grades[label]),
        label_cache=qrels.label_cache,
    )


def build_grade_matrix(
    qrels: Qrels, run: Run, ties: str = "given", check_duplicates: bool = True, jit: bool | None = None
) -> GradeMatrix:
    """Join a run with its labels into a :class:`GradeMatrix` (rows = qrels queries, in qrels order).

    ``ties`` is a :class:`~ragassay.metrics.semantics.Semantics` tie rule (``given``, ``trec_eval9``,
    ``trec_eval10``; ``trec_eval`` = ``trec_eval9``). ``jit`` chooses the compiled join (True), the numpy one (False) or by run size (None, see
    ``RAGASSAY_JIT``). Raises InputError when the run shares no query with the qrels and SchemaError on a
    doc ranked twice for one query.
    """
    return _join(qrels, run, ties, check_duplicates, jit)[0]


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


_NUMBER = re.compile(rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE)
_INTEGER_TEXT = r"^-?[0-9]{1,18}$"  # decimal, within int64
_INTEGER = re.compile(_INTEGER_TEXT.strip("^$").encode())
_COMMENT = re.compile(rb"(?m)^#[^\n]*")


def line_problem(raw: bytes, ncols: int, numeric: dict[int, type], what: str, extra_ok: bool):
    """Check one line of a TREC file: ``(fields, None)`` when usable, ``(None, message)`` when not, and
    ``(None, None)`` for a blank or ``#`` comment line.

    ``numeric`` maps a 0-based field to ``int`` or ``float``; ``extra_ok`` ignores fields after the last
    expected one (run files, as trec_eval ignores them). Every TREC reader (``read_qrels``/``read_run`` on a
    bad line, the TREC run adapter on every line) goes through here, so they accept and reject the same lines.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
            "re-save the file as UTF-8"
        )
    if "\x00" in text:
        return None, "contains NUL bytes; this looks like a binary file, not a TREC text file"
    fields = text.split()
    if not fields or fields[0].startswith("#"):
        return None, None
    if len(fields) < ncols or (len(fields) > ncols and not extra_ok):
        return None, f"expected {ncols} fields ({what}), found {len(fields)}: {text.strip()[:80]!r}"
    for col, typ in numeric.items():
        pattern = _INTEGER if typ is int else _NUMBER
        if not pattern.fullmatch(fields[col].encode()):
            return None, (
                f"field {col + 1} must be {'an integer' if typ is int else 'a number'} ({what}), "
                f"found {fields[col]!r}"
            )
    return fields[:ncols], None


def _first_bad_line(path: str, data: bytes, ncols: int, numeric: dict[int, type], what: str, extra_ok: bool):
    for i, raw in enumerate(data.split(b"\n"), start=1):
        _, problem = line_problem(raw, ncols, numeric, what, extra_ok)
        if problem:
            return SchemaError(f"{path}:{i}: {problem}")
    return SchemaError(f"{path}: could not parse as {what}; check the field separators and encoding")


def _clean(data: bytes, ncols: int, extra_ok: bool) -> bytes:
    """Single-space separators, ``#`` comment lines blanked (line numbers kept), and for run files the
    fields after the last expected one dropped."""
    data = _normalize_whitespace(data)
    if b"#" in data:
        data = _COMMENT.sub(b"", data)
    if extra_ok:
        data = re.sub(rb"(?m)^((?:[^ \n]+ ){%d}[^ \n]+) [^\n]*" % (ncols - 1), rb"\1", data)
    return data


def _read_table(
    path: str | os.PathLike, names: list[str], types: dict, what: str, numeric: dict[int, type], extra_ok: bool
):
    """Parse with pyarrow; single-space files go straight through, others (tabs, repeated spaces, comment
    lines, extra run fields) are cleaned and parsed again, and a bad line is located by :func:`line_problem`."""
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
    with open(p, "rb") as fh:
        # NUL bytes are valid UTF-8 and would parse as ids; like git, a NUL in the first 8 KiB marks a binary
        # file, which the line checks below reject with its line
        binary = b"\x00" in fh.read(8192)
    try:
        if not binary:
            table = pacsv.read_csv(p, **opts)
            # a comment line that happens to have the right fields parses; it must still be skipped
            if not pc.any(pc.starts_with(table[names[0]], "#")).as_py():
                return table, _Lines(p, None)
    except pa.ArrowInvalid:
        pass
    raw = Path(p).read_bytes()
    if not raw.strip():
        raise InputError(f"{p}: file is empty; expected '{what}' lines")
    data = _clean(raw, len(names), extra_ok)
    if not data.strip():
        raise InputError(f"{p}: file holds only '#' comment lines; expected '{what}' lines")
    if binary:
        raise _first_bad_line(p, data, len(names), numeric, what, extra_ok)
    try:
        table = pacsv.read_csv(pa.BufferReader(data), **opts)
    except pa.ArrowInvalid as exc:
        raise _first_bad_line(p, data, len(names), numeric, what, extra_ok) from exc
    return table, _Lines(p, data)


QRELS_FIELDS = "qid iter docid rel"
RUN_FIELDS = "qid Q0 docid rank score tag"


def read_qrels(path: str | os.PathLike) -> Qrels:
    """Read a TREC qrels file (``qid iter docid rel``); bad lines raise SchemaError naming file:line.

    Lines starting with ``#`` are comments. A line must have exactly four fields.
    """
    table, lines = _read_table(
        path,
        ["qid", "iter", "docid", "rel"],
        {"qid": pa.string(), "docid": pa.string(), "rel": pa.string()},
        QRELS_FIELDS,
        {3: int},
        extra_ok=False,
    )
    # Arrow's integer parser also reads hex ("0x10" -> 16), which trec_eval does not: grades are checked as
    # decimal text first, so a grade is what it reads as and every reader accepts the same lines
    if not pc.all(pc.match_substring_regex(table["rel"], _INTEGER_TEXT)).as_py():
        data = _clean(Path(path).read_bytes(), 4, extra_ok=False)
        raise _first_bad_line(str(path), data, 4, {3: int}, QRELS_FIELDS, extra_ok=False)
    grades = to_numpy(pc.cast(table["rel"], pa.int64()))
    return Qrels.from_arrays(table["qid"], table["docid"], grades, source=str(path), line_of=lines)


def read_run(path: str | os.PathLike) -> Run:
    """Read a TREC run file (``qid Q0 docid rank score tag``); bad lines raise SchemaError naming file:line.

    Lines starting with ``#`` are comments; fields after the run tag are ignored, as trec_eval does.
    """
    table, lines = _read_table(
        path,
        ["qid", "q0", "docid", "rank", "score", "tag"],
        {"qid": pa.string(), "docid": pa.string(), "score": pa.float64()},
        RUN_FIELDS,
        {4: float},
        extra_ok=True,
    )
    return Run.from_arrays(
        table["qid"], table["docid"], to_numpy(table["score"]), source=str(path), line_of=lines
    )


def read_run_lines(path: str | os.PathLike) -> tuple[list[tuple[int, list[str]]], list[tuple[int, str]]]:
    """A run file line by line for readers that skip and count bad lines: ``(rows, problems)``.

    ``rows`` are (1-based line, the six fields); ``problems`` are (line, message) from :func:`line_problem`
    and :func:`ranking_problems`, the same messages ``read_run`` raises. A missing or empty file raises
    InputError as ``read_run`` does.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such {RUN_FIELDS} file; check the path")
    raw = p.read_bytes()
    if not raw.strip():
        raise InputError(f"{p}: file is empty; expected '{RUN_FIELDS}' lines")
    rows: list[tuple[int, list[str]]] = []
    problems: list[tuple[int, str]] = []
    for n, line in enumerate(raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"), start=1):
        fields, problem = line_problem(line, 6, {4: float}, RUN_FIELDS, extra_ok=True)
        if problem:
            problems.append((n, problem))
        elif fields:
            rows.append((n, fields))
    if not rows and not problems:
        raise InputError(f"{p}: file holds only '#' comment lines; expected '{RUN_FIELDS}' lines")
    bad = ranking_problems(
        [f[0] for _, f in rows], [f[2] for _, f in rows], [float(f[4]) for _, f in rows],
        lambda i: f"{p}:{rows[i][0]}",
    )
    problems.extend((rows[i][0], msg) for i, msg in bad)
    skip = {i for i, _ in bad}
    return [r for i, r in enumerate(rows) if i not in skip], sorted(problems)


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
    jit: bool | None = None,
) -> tuple[dict[Metric, MetricResult], dict[str, int]]:
    """Score a TREC run against qrels. Returns per-metric results and coverage counts
    (``n_queries`` scored, ``n_missing`` qrels queries absent from the run, ``n_run_only`` dropped run queries).
    ``metrics`` may be spelled as ragassay, trec_eval, ir_measures or ranx spell them, each with its tool's
    meaning (:func:`ragassay.metrics.measures.evaluate`). ``jit`` as for :func:`build_grade_matrix`.
    """
    sem = semantics or Semantics.trec_eval()
    q = qrels if isinstance(qrels, Qrels) else read_qrels(qrels)
    r = run if isinstance(run, Run) else read_run(run)
    gm, n_run_only = _join(q, r, sem.ties, check_duplicates=True, jit=jit)
    coverage = {"n_queries": gm.n_queries, "n_missing": int(gm.missing.sum()), "n_run_only": n_run_only}
    return evaluate(gm, metrics, sem), coverage
